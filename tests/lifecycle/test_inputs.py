"""Missing optional packages and bad input get one clear line (issue 23).

A package "not installed" is hidden from a fresh ``hybrid`` process the way Python itself
blocks an import (``sys.modules[name] = None`` in a ``sitecustomize``: ``import`` then fails
with ``ModuleNotFoundError``); nothing of hybrid is replaced.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.timeout(180),
    # dask_gateway's Gateway.__del__ closes again a gateway already closed: noise, not a fault
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]

REPO = Path(__file__).resolve().parents[2]
HYBRID = str(Path(sys.executable).with_name("hybrid"))


def _hybrid(args: list[str], tmp_path: Path, hide: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    paths = [str(REPO)]
    if hide is not None:
        blocker = tmp_path / f"without-{hide}"
        blocker.mkdir(exist_ok=True)
        (blocker / "sitecustomize.py").write_text(
            f"import sys\nsys.modules[{hide!r}] = None  # as if it were not installed\n")
        paths.insert(0, str(blocker))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    environment.update({"PYTHONPATH": os.pathsep.join(paths), **(env or {})})
    return subprocess.run([HYBRID, *args], capture_output=True, text=True, timeout=120,
                          env=environment, cwd=tmp_path)


@pytest.mark.parametrize("args", [["status"], ["cancel", "--cluster", "x"],
                                  ["gc", "--dry-run"], ["render"]],
                         ids=["status", "cancel", "gc", "render"])
def test_a_missing_kubernetes_package_is_one_line_naming_the_extra(args, tmp_path) -> None:
    result = _hybrid([args[0], "--system", "kubernetes", *args[1:]], tmp_path,
                     hide="kubernetes")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "Error: the kubernetes system needs the Python package 'kubernetes', which is not "
        "installed here: pip install 'hybrid[kubernetes]'"], result.stderr


@pytest.mark.parametrize(("system", "hide", "extra"), [("kubernetes", "kubernetes",
                                                        "kubernetes"),
                                                       ("htcondor", "htcondor2", "htcondor")])
def test_doctor_reports_a_missing_extra_as_one_failed_check(system, hide, extra,
                                                            tmp_path) -> None:
    result = _hybrid(["doctor", "--system", system], tmp_path, hide=hide)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("[FAIL]")]
    assert len(failed) == 1 and "batch system" in failed[0], result.stdout
    assert f"pip install 'hybrid[{extra}]'" in result.stdout


# ------------------------------------------------------------------ values given in Python
@pytest.mark.parametrize(("memory", "says"), [
    ("GiB", "a number, then its unit"),  # was taken as 1 GiB
    ("4G", 'Did you mean "4 GiB"'),      # pint reads G as gauss
    ("4g", 'Did you mean "4 GiB"'),      # and g as grams
    ("16gb", 'Did you mean "16 GiB"'),
])
def test_a_memory_without_a_number_or_with_a_short_unit_says_what_would_do(memory,
                                                                           says) -> None:
    from hybrid.errors import ConfigurationError
    from hybrid.pools import PoolSpec

    with pytest.raises(ConfigurationError) as caught:
        PoolSpec.build("cpu", "slurm", memory=memory)
    assert caught.value.field == "add_pool('cpu').memory"
    assert says in str(caught.value)


def test_overlapping_worker_and_nanny_port_ranges_are_refused() -> None:
    from hybrid.errors import ConfigurationError
    from hybrid.pools import PoolSpec

    with pytest.raises(ConfigurationError) as caught:
        PoolSpec.build("cpu", "slurm", nanny=True, worker_port="10000:10010",
                       nanny_port="10005:10020")
    assert caught.value.field == "add_pool('cpu').nanny_port"
    assert "nanny_port='10011:10026'" in str(caught.value)  # what would do
    # without a nanny its ports are not used; beside each other they are fine
    PoolSpec.build("cpu", "slurm", nanny=False, worker_port="10000:10010",
                   nanny_port="10005:10020")
    PoolSpec.build("cpu", "slurm", nanny=True, worker_port="10000:10010",
                   nanny_port="10011:10020")


def test_a_misspelt_pool_option_gets_a_did_you_mean() -> None:
    from hybrid.errors import ConfigurationError
    from hybrid.pools import PoolSpec

    with pytest.raises(ConfigurationError, match=r"Did you mean memory\?"):
        PoolSpec.build("cpu", "slurm", memroy="4 GiB")
    with pytest.raises(ConfigurationError, match=r"Did you mean job_extra_directives\?"):
        PoolSpec.build("cpu", "slurm", job_extra_directive=["--exclusive"])


def test_a_wrong_gateway_address_is_one_clear_error() -> None:
    from hybrid import HTCGateway
    from hybrid.errors import ConfigurationError, GatewayUnreachable
    from tests.admin.conftest import free_port

    with pytest.raises(ConfigurationError, match="http"):
        HTCGateway(address="127.0.0.1:8000")  # no scheme: aiohttp refused it at first use
    gateway = HTCGateway(address=f"http://127.0.0.1:{free_port()}")  # nothing listens
    try:
        with pytest.raises(GatewayUnreachable) as caught:
            gateway.list_clusters()
    finally:
        gateway.close()
    assert "cannot reach the dask-gateway server at http://127.0.0.1:" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "aiohttp" not in str(caught.value)


@pytest.mark.gateway
def test_connecting_to_an_empty_or_malformed_cluster_name_is_refused(lifecycle_gateway) -> None:
    from hybrid import HTCGateway
    from hybrid.errors import ConfigurationError

    gateway = lifecycle_gateway.gateway(HTCGateway)
    try:
        for name in ("", "a/b", None):
            with pytest.raises(ConfigurationError) as caught:  # was KeyError: 'start_time'
                gateway.connect(name)
            assert caught.value.field == "cluster_name"
        with pytest.raises(ValueError, match="not found"):  # as the stock client says it
            gateway.connect("0123456789abcdef")
    finally:
        gateway.close()


# ------------------------------------------------------------------ on the command line
def test_admin_ports_with_a_contact_address_out_of_range_is_one_line(tmp_path) -> None:
    result = _hybrid(["admin", "ports"], tmp_path,
                     env={"DASK_HYBRID__WORKER__CONTACT_ADDRESS": "tls://1.2.3.4:99999"})
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert errors == [
        "Error: hybrid.worker.contact-address = 'tls://1.2.3.4:99999' is not valid: expected "
        "an address with a port (1-65535), like tls://203.0.113.5:10000."], result.stderr


def test_render_refuses_tls_files_that_do_not_exist(tmp_path) -> None:
    result = _hybrid(["render", "--system", "slurm", "--scheduler", "tls://127.0.0.1:8786",
                      "--tls-ca", str(tmp_path / "no-ca.pem"), "--tls-cert",
                      str(tmp_path / "no-cert.pem"), "--tls-key", str(tmp_path / "no-key.pem")],
                     tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Invalid value for '--tls-ca'" in result.stderr and "does not exist" in result.stderr


def test_help_offers_nothing_only_python_can_pass(tmp_path) -> None:
    for command in ("render", "submit"):
        result = _hybrid([command, "--help"], tmp_path)
        assert result.returncode == 0
        assert "unit." not in result.stdout and "time quantity" not in result.stdout


@pytest.mark.htcondor
def test_an_htcondor_walltime_bounds_the_job_as_htcondor_reads_it(htcondor_pool, tmp_path,
                                                                  staging) -> None:
    """``--walltime`` was shown and dropped: ``periodic_remove`` only knew the lease."""
    import htcondor2

    from hybrid.batch import Staging, WorkerJob, get_system
    from hybrid.pools import PoolSpec
    from hybrid.worker import Connection

    system = get_system("htcondor")
    spec = PoolSpec.build("cpu", "htcondor", walltime="01:30", lease="2h")
    job = WorkerJob(f"wall{os.getpid()}", spec, Connection("tcp://127.0.0.1:9"))
    place = Staging.create(job)
    try:
        text = system.render(job, place.path)
        submit = htcondor2.Submit(text.replace("queue 1", "hold = true\n"))
        result = htcondor2.Schedd().submit(submit, count=1)  # held: it never runs
        try:
            [ad] = htcondor2.Schedd().query(f"ClusterId == {result.cluster()}",
                                            projection=["PeriodicRemove"])
        finally:
            htcondor2.Schedd().act(htcondor2.JobAction.Remove,
                                   f"ClusterId == {result.cluster()}")
    finally:
        place.remove()
    expression = str(ad["PeriodicRemove"])
    assert "7200" in expression and "5400" in expression, expression  # lease and wall time
    assert "JobCurrentStartDate" in expression


def test_the_slurm_page_names_the_export_flag_the_jobs_have(tmp_path) -> None:
    """The page said ``--export=NONE`` while every job script has ``--export=NIL``."""
    import re

    page = (REPO / "docs" / "batch" / "slurm.md").read_text()
    [said] = re.findall(r"start with `(--export=[A-Z]+)`", page)
    result = _hybrid(["render", "--system", "slurm"], tmp_path)
    assert result.returncode == 0, result.stderr
    flags = re.findall(r"^#SBATCH (--export=\S+)$", result.stdout, flags=re.M)
    assert flags == [said], (flags, said)


@pytest.mark.parametrize(("variable", "value", "key"), [
    ("DASK_HYBRID__BATCH__SLURM__WALLTIME", "90", "hybrid.batch.slurm.walltime"),
    ("DASK_HYBRID__BATCH__SLURM__QUEUE", "a b", "hybrid.batch.slurm.queue"),
])
def test_render_names_the_setting_a_bad_value_came_from(tmp_path, variable, value,
                                                        key) -> None:
    """``hybrid render`` blamed ``--walltime``, an option nobody passed (a report)."""
    result = _hybrid(["render", "--system", "slurm"], tmp_path, env={variable: value})
    assert result.returncode != 0
    assert key in result.stderr, result.stderr
    assert "--walltime" not in result.stderr and "--queue" not in result.stderr
    # given on the command line, the option is what is named
    result = _hybrid(["render", "--system", "slurm", "--walltime", "90"], tmp_path)
    assert "--walltime" in result.stderr, result.stderr
