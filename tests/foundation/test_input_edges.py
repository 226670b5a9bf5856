"""Values at the edges of what users write (audit of 2026-11-29, /tmp/audit-config): each is
validated once, where it enters, as the configuration key of the same value is; a bad one is
one ConfigurationError naming the field and the fix, raised before anything starts."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import dask
import numpy as np
import psutil
import pytest

from hybrid import HybridCluster, config
from hybrid.annotator import HybridClient, ResourceAnnotator
from hybrid.batch import WorkerJob, get_system
from hybrid.errors import ConfigurationError
from hybrid.pools import PoolSpec
from hybrid.resources import ComputeResources, QueueWorkerResources
from hybrid.units import duration_seconds, parse_walltime
from hybrid.worker import Connection

pytestmark = pytest.mark.timeout(120)


def _listening() -> list[tuple[str, int]]:
    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN]


def _threads() -> set[str]:
    import threading

    return {t.name for t in threading.enumerate()}


# --------------------------------------------------------------------------- 1. dashboard
@pytest.mark.parametrize("port", [lambda p: p, str], ids=["int", "str"])
def test_a_bare_dashboard_port_listens_on_the_scheduler_host_only(port) -> None:
    from distributed.utils import open_port

    free = open_port("127.0.0.1")
    with HybridCluster(name="dash-bare", dashboard_address=port(free)) as cluster:
        assert ("127.0.0.1", free) in _listening()
        assert ("0.0.0.0", free) not in _listening()
        assert cluster.dashboard_link.startswith(f"https://127.0.0.1:{free}/")


@pytest.mark.parametrize("value", ["nope", "127.0.0.1:notaport", "127.0.0.1:99999", "my host:1",
                                   [1], 99999, -1, 1.5])
def test_a_bad_dashboard_address_is_refused_before_anything_starts(value) -> None:
    before = _threads()
    with pytest.raises(ConfigurationError) as caught:
        HybridCluster(name="dash-bad", dashboard_address=value)
    error = caught.value
    assert error.field == "HybridCluster.dashboard_address"
    assert '"HOST:PORT"' in str(error) and error.__cause__ is None
    assert _threads() <= before  # no loop, no scheduler was started


def test_dashboard_listen_reads_a_bare_port_as_one_on_the_scheduler_host() -> None:
    from hybrid.security import dashboard_listen

    assert dashboard_listen(18788) == (":18788", True)
    assert dashboard_listen("18788") == dashboard_listen(np.int64(18788)) == (":18788", True)
    assert dashboard_listen(" :18788") == (":18788", True)
    assert dashboard_listen("127.0.0.1:18788") == ("127.0.0.1:18788", True)
    assert dashboard_listen(None) == ("127.0.0.1:0", False)


# --------------------------------------------------------------------------- 2. booleans
@pytest.mark.parametrize("value", ["false", "False", "no", 0, 1, "yes", np.bool_(True)])
def test_annotate_resources_is_a_real_boolean(value) -> None:
    before = _threads()
    with pytest.raises(ConfigurationError) as caught:
        HybridCluster(name="annotate-text", annotate_resources=value)
    assert caught.value.field == "HybridCluster.annotate_resources"
    assert "True or False" in str(caught.value)
    assert _threads() <= before
    with pytest.raises(ConfigurationError) as caught:
        HybridClient("tcp://127.0.0.1:9", annotate_resources=value, timeout="1s")
    assert caught.value.field == "HybridClient.annotate_resources"
    with pytest.raises(ConfigurationError) as caught:
        ResourceAnnotator(None, value)
    assert caught.value.field == "ResourceAnnotator.enabled"


def test_the_configured_annotate_default_refuses_text_as_the_argument_does() -> None:
    with dask.config.set({"hybrid.annotator.enabled": "false"}), \
            pytest.raises(ConfigurationError, match=r"hybrid\.annotator\.enabled"):
        ResourceAnnotator(None)
    assert ResourceAnnotator(None, False).enabled is False
    assert ResourceAnnotator(None, True).enabled is True


def _pack(x):
    return x


@pytest.mark.parametrize("value", ["False", "no", 1, 0, "yes"])
def test_gpu_task_keyword_is_a_real_boolean(value) -> None:
    annotator = ResourceAnnotator(None, True)
    with pytest.raises(ConfigurationError) as caught:
        annotator.resources_for(_pack, value)
    assert caught.value.field == "gpu_task"
    assert "True or False" in str(caught.value)
    assert annotator.resources_for(_pack, None) == {"notGPU": 1}
    assert annotator.resources_for(_pack, False) == {"notGPU": 1}
    assert set(annotator.resources_for(_pack, True)) == {"GPU"}


# --------------------------------------------------------------------------- 3. numeric words
def test_a_numeric_account_or_queue_is_taken_as_its_decimal_string() -> None:
    spec = PoolSpec.build("cpu", "slurm", account=12345, queue=7)
    assert (spec.account, spec.queue) == ("12345", "7")
    assert PoolSpec.build("cpu", "slurm", account=np.int64(42)).account == "42"
    with dask.config.set({"hybrid.batch.slurm.account": 12345}):
        assert PoolSpec.build("cpu", "slurm").account == "12345"
    for bad in (True, -5, 1.5):
        with pytest.raises(ConfigurationError) as caught:
            PoolSpec.build("cpu", "slurm", account=bad)
        assert caught.value.field == "add_pool('cpu').account"


def test_a_numeric_account_from_yaml_and_the_environment_reaches_the_job(tmp_path) -> None:
    (tmp_path / "site.yaml").write_text("hybrid:\n  batch:\n    slurm:\n      account: 12345\n")
    code = ("from hybrid.pools import PoolSpec; import sys; "
            "sys.stdout.write(PoolSpec.build('cpu', 'slurm').account)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    for extra in ({"DASK_CONFIG": str(tmp_path)},
                  {"DASK_CONFIG": str(tmp_path / "none"),
                   "DASK_HYBRID__BATCH__SLURM__ACCOUNT": "12345"}):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                env={**env, **extra}, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "12345"


# --------------------------------------------------------------------------- 4. YAML 12:00
def test_an_unquoted_yaml_walltime_is_refused_with_the_hint_to_quote_it() -> None:
    import yaml

    read = yaml.safe_load("walltime: 12:00")["walltime"]
    assert read == 720  # YAML 1.1 reads an unquoted HH:MM as a base-60 number
    with dask.config.set({"hybrid.batch.slurm.walltime": read}), \
            pytest.raises(ConfigurationError) as caught:
        PoolSpec.build("cpu", "slurm")
    error = caught.value
    assert error.field == "hybrid.batch.slurm.walltime"
    assert "quote" in str(error) and "YAML" in str(error)
    with pytest.raises(ConfigurationError, match="quote"):
        parse_walltime(720, "walltime")
    with pytest.raises(ConfigurationError, match="quote"):
        QueueWorkerResources(wallclock_time_limit=720)


def test_the_configuration_page_says_to_quote_hh_mm_in_yaml() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    assert "12:00" in page and "720" in page and "quote" in page.lower()


# --------------------------------------------------------------------------- 5. timedelta
def test_a_timedelta_is_a_duration_everywhere_a_duration_is_taken() -> None:
    hour = datetime.timedelta(hours=1)
    assert duration_seconds(hour) == 3600
    assert parse_walltime(datetime.timedelta(minutes=90), "walltime") == "01:30"
    spec = PoolSpec.build("cpu", "slurm", lease=hour, death_timeout=datetime.timedelta(
        seconds=90), walltime=datetime.timedelta(minutes=30))
    assert (spec.lease, spec.death_timeout, spec.walltime) == (3600, 90, "00:30")
    with dask.config.set({"hybrid.batch.lease": datetime.timedelta(hours=12),
                          "hybrid.batch.poll-interval": datetime.timedelta(seconds=5)}):
        from dask.utils import parse_timedelta

        assert parse_timedelta(config.get("batch.lease")) == 43200
        assert parse_timedelta(config.get("batch.poll-interval")) == 5
    for bad in (datetime.timedelta(0), datetime.timedelta(seconds=-5)):
        with pytest.raises(ConfigurationError):
            PoolSpec.build("cpu", "slurm", lease=bad)


def test_wait_for_workers_takes_a_timedelta() -> None:
    with HybridCluster(name="td-wait", dashboard_address=None) as cluster:
        cluster.add_pool("cpu", "local", ComputeResources(number_of_threads=1), nanny=False)
        cluster.scale(1, pool="cpu")
        cluster.wait_for_workers(1, timeout=datetime.timedelta(seconds=90))


# --------------------------------------------------------------------------- 6. lease
def test_a_walltime_longer_than_the_lease_stretches_it_or_is_refused_naming_both() -> None:
    """A walltime longer than the configured lease stretches it (a 48 h job is not removed
    by a 24 h lease before its walltime: HTCondor's periodic_remove did); a lease given for
    the pool itself is kept, and a longer walltime is refused naming both."""
    for system in ("slurm", "htcondor", "local"):
        assert PoolSpec.build("long", system, walltime="48h").lease == 48 * 3600
        with pytest.raises(ConfigurationError) as caught:
            PoolSpec.build("long", system, walltime="48h", lease="24h")
        error = caught.value
        assert error.field == "add_pool('long').walltime"
        assert "lease" in error.accepted and "24:00" in str(error)
        assert "lease='48h'" in error.fix and "hybrid.batch.lease" in error.fix
    assert PoolSpec.build("long", "slurm", walltime="48h", lease="48h").walltime == "48:00"
    ok = PoolSpec.build("ok", "slurm", walltime="24h")
    assert (ok.walltime, ok.lease) == ("24:00", 86400)
    with dask.config.set({"hybrid.batch.lease": "2h"}):
        assert PoolSpec.build("long", "slurm", walltime="3h").lease == 3 * 3600
        assert PoolSpec.build("short", "slurm", walltime="1h").lease == 2 * 3600
    text = get_system("htcondor").render(
        WorkerJob("c", PoolSpec.build("long", "htcondor", walltime="48h"),
                  Connection("tcp://127.0.0.1:8786")), Path("/tmp/x"), 1)
    assert "(time() - QDate) > 172800" in text


# --------------------------------------------------------------------------- 7. credentials
def test_a_relative_credentials_directory_is_refused_before_anything_starts(tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _threads()
    with dask.config.set({"hybrid.scheduler.credentials-directory": "my-creds"}), \
            pytest.raises(ConfigurationError) as caught:
        HybridCluster(name="relcreds")
    error = caught.value
    assert error.field == "hybrid.scheduler.credentials-directory"
    assert "absolute" in str(error) and error.fix
    assert list(tmp_path.iterdir()) == []
    assert _threads() <= before
    with dask.config.set({"hybrid.scheduler.credentials-directory": "~/creds"}):
        from hybrid.security import credentials_root

        assert credentials_root() == Path.home() / "creds"


# --------------------------------------------------------------------------- 8. numpy counts
def test_numpy_integers_are_counts() -> None:
    assert ComputeResources(number_of_threads=np.int64(2)).number_of_threads == 2
    assert QueueWorkerResources(number_of_gpus=np.int32(1)).number_of_gpus == 1
    spec = PoolSpec.build("cpu", "slurm", cores=np.int64(4), processes=np.uint8(2), nanny=True)
    assert (spec.cores, spec.processes) == (4, 2)
    assert type(spec.cores) is int
    for bad in (True, np.bool_(True), np.int64(0), 2.5):
        with pytest.raises(ConfigurationError):
            PoolSpec.build("cpu", "slurm", cores=bad)


# --------------------------------------------------------------------------- 9. memory split
def test_memory_that_rounds_to_nothing_per_process_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        PoolSpec.build("r", "slurm", cores=4, processes=4, memory="3 B", nanny=True)
    error = caught.value
    assert error.field == "add_pool('r').memory"
    assert "4 processes" in str(error) and error.fix
    spec = PoolSpec.build("r", "slurm", cores=4, processes=4, memory="4 B", nanny=True)
    assert spec.memory_per_worker == 1


def test_an_unquoted_yaml_lease_is_read_as_the_page_says(tmp_path) -> None:
    """``lease: 24:00`` in YAML is 1440 seconds (a bare number of seconds is a lease), as
    the configuration page warns: a pool without a walltime takes it as it is."""
    (tmp_path / "site.yaml").write_text("hybrid:\n  batch:\n    lease: 24:00\n")
    code = "from hybrid.pools import PoolSpec; print(PoolSpec.build('cpu', 'slurm').lease)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**env, "DASK_CONFIG": str(tmp_path)}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1440"


# --------------------------------------------------------------------------- staging root
@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o775, True), (0o1777, False),
                                           (0o755, False), (0o700, False)])
def test_a_staging_root_others_may_write_to_needs_the_sticky_bit(tmp_path, mode,
                                                                 refused) -> None:
    """On a shared submit node another user who can write to the staging root could move a
    pool's directory away and put their own in its place (and be handed the TLS key): such
    a root is refused when the pool is added, unless it has the sticky bit (as /tmp)."""
    root = tmp_path / "jobs"
    root.mkdir()
    root.chmod(mode)
    with dask.config.set({"hybrid.batch.staging-directory": str(root)}):
        if refused:
            with pytest.raises(ConfigurationError) as caught:
                PoolSpec.build("cpu", "local")
            assert caught.value.field == "hybrid.batch.staging-directory"
            assert "sticky" in str(caught.value) and f"chmod go-w {root}" in caught.value.fix
        else:
            assert PoolSpec.build("cpu", "local").system == "local"
    assert list(root.iterdir()) == []


def test_a_staging_root_of_another_user_is_refused(tmp_path, monkeypatch) -> None:
    root = tmp_path / "jobs"
    root.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(root, 12345, 12345)  # another user's
    else:  # (a contributor cannot chown: the directory is theirs, they appear as another)
        owner = root.stat().st_uid
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with dask.config.set({"hybrid.batch.staging-directory": str(root)}), \
            pytest.raises(ConfigurationError, match="owned by you") as caught:
        PoolSpec.build("cpu", "local")
    assert caught.value.field == "hybrid.batch.staging-directory"
