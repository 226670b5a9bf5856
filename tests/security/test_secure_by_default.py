"""Issue 25: with defaults, nobody without a cluster's credentials runs code through it.

Each cluster kind starts with its defaults (the suite pins schedulers to loopback; the
packaged every-interface default runs in tests/security/test_network_namespace.py, in a
network namespace of its own). A separate process without credentials
(tests/security/outsider.py) then tries what anyone would, and every attempt must be
refused; the owner's client works, and so does a second process of the owner
(tests/security/owner.py), with the credentials stored for it. A plain-TCP cluster, asked
for, is the control: there the same outsider runs code, so the outsider can tell.
"""

from __future__ import annotations

import json
import operator
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dask
import pytest

from hybrid import HybridCluster
from hybrid.admin.doctor import check_scheduler_access, check_scheduler_exposure
from hybrid.backends import DaskLocalCluster, DaskPBSBackend, DaskSLURMBackend
from hybrid.batch import get_system
from hybrid.checks import Status
from hybrid.errors import ConfigurationError
from hybrid.resources import ComputeResources, QueueWorkerResources
from hybrid.security import (
    InsecureClusterWarning,
    find_credentials,
    stale_credentials,
    store_credentials,
    warn_if_open,
)
from tests.batch.doubles import batch_double
from tests.scheduler_workers import scheduler_workers

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
HYBRID = str(Path(sys.executable).with_name("hybrid"))


# --------------------------------------------------------------------------- helpers
def _environment(credentials: Path | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if credentials is not None:
        env["DASK_HYBRID__SCHEDULER__CREDENTIALS_DIRECTORY"] = str(credentials)
    return env


def outsider(address: str, tmp_path: Path) -> dict[str, str]:
    """What a process without credentials (an empty credentials directory, another home)
    gets from the scheduler at ``address``."""
    home = tmp_path / "outsider-home"
    home.mkdir(mode=0o700, exist_ok=True)
    env = {**_environment(home / "credentials"), "HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "tests.security.outsider", address],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_refused(attempts: dict[str, str]) -> None:
    assert len(attempts) >= 4, attempts
    ran = {label: what for label, what in attempts.items() if not what.startswith("refused")}
    assert not ran, f"an outsider got in: {ran}"


def owner_process(address: str, credentials: Path, attach: bool = False) -> dict:
    """A second process of the owner (the same credentials directory)."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.security.owner", address, *(["attach"] if attach else [])],
        cwd=REPO, env=_environment(credentials), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def dashboard_served(link: str, ca: str | None) -> int:
    """The HTTP status of the dashboard page, its certificate checked against ``ca``."""
    context = None
    if link.startswith("https://"):
        context = ssl.create_default_context(cafile=ca)
        context.check_hostname = False  # the cluster's certificate names no host
    with urllib.request.urlopen(link, context=context, timeout=20) as response:
        return response.status


# --------------------------------------------------------------------------- the kinds
def test_hybrid_cluster_with_defaults_refuses_outsiders(staging, credentials_directory,
                                                         tmp_path) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", ComputeResources(number_of_threads=1), nanny=False)
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=120, progress=False)
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        stored = find_credentials(name=cluster.name)
        assert stored is not None and stored.scheduler_address == address
        files = stored.files
        for path in (stored.directory, *map(Path, (files.ca, files.cert, files.key))):
            assert path.stat().st_mode & 0o077 == 0, path  # only the owner reads them
        # the worker's own copies, staged for its job, are 0600 too
        staged = [p for p in staging.rglob("*.pem")]
        assert staged and all(p.stat().st_mode & 0o077 == 0 for p in staged)
        logs = list(staging.rglob("*.log"))  # what its worker logs: the owner's only (0644)
        assert logs and all(p.stat().st_mode & 0o077 == 0 for p in logs), logs

        assert_refused(outsider(address, tmp_path))
        with cluster.get_client() as client:  # the owner's client carries the certificate
            assert client.submit(operator.add, 1, 2).result(timeout=60) == 3
        second = owner_process(address, credentials_directory, attach=True)
        assert second["scheduler_pid"] == os.getpid() and second["task"] == 42
        assert second["attached_task"] == 42
        assert second["workers"] == cluster.connected_workers()
        link = cluster.dashboard_link
        assert link.startswith("https://127.0.0.1:")  # loopback, over TLS
        assert second["dashboard_link"] == link
        assert dashboard_served(link, stored.files.ca) == 200

        # `hybrid status` from another process asks the scheduler with the stored files
        status = subprocess.run([HYBRID, "status", "--system", "local", "--cluster",
                                 cluster.name], env=_environment(credentials_directory),
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr
        assert f"scheduler {address}, 1 worker(s) connected" in status.stdout, status.stdout
        # `hybrid submit --cluster NAME` adds a worker with the stored address and files
        submit = subprocess.run(
            [HYBRID, "submit", "--system", "local", "--cluster", cluster.name, "--pool", "cpu",
             "--cores", "1", "--no-nanny", "--json"],
            env={**_environment(credentials_directory),
                 "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging)},
            capture_output=True, text=True, timeout=120)
        assert submit.returncode == 0, submit.stderr
        submitted = json.loads(submit.stdout)["job_ids"]
        assert len(submitted) == 1
        with cluster.get_client() as client:
            deadline = time.monotonic() + 120
            while len(scheduler_workers(client)) < 2:
                logs = {p.name: p.read_text()[-2000:] for p in staging.rglob("*.log")}
                assert time.monotonic() < deadline, f"the submitted worker did not join: {logs}"
                time.sleep(0.2)
        assert_refused(outsider(address, tmp_path))  # still nobody else
    assert find_credentials(name=cluster.name) is None  # removed with the cluster
    # closing removed every job of the cluster, the one `hybrid submit` added too
    local = get_system("local")
    deadline = time.monotonic() + 60
    while any(j.state.active for j in local.query(job_ids=submitted)):
        assert time.monotonic() < deadline, "the submitted worker outlived its cluster"
        time.sleep(0.2)


@pytest.mark.parametrize("system", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_workers_of_a_scheduler_on_loopback_listen_on_loopback_only(
        request, staging, credentials_directory, system) -> None:
    """A worker job whose scheduler is on loopback runs on the scheduler's machine: it
    listens there alone (its comm and its HTTP server), not on every interface of a node
    that others share, as ``dask worker`` does by default (a Slurm job's worker listened on
    every IPv4 and IPv6 address of the machine)."""
    import psutil

    if system == "slurm":
        request.getfixturevalue("slurm_cluster")
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", system, ComputeResources(number_of_threads=1), nanny=False,
                         **({"memory": "512 MiB", "walltime": "00:10"}
                            if system == "slurm" else {}))
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=180, progress=False)
        with cluster.get_client() as client:
            ((address, pid),) = client.run(os.getpid).items()
        assert address.startswith("tls://127.0.0.1:")
        worker = psutil.Process(pid)
        sockets = getattr(worker, "net_connections", None) or worker.connections
        listening = [c.laddr for c in sockets(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert len(listening) >= 2, listening  # (the comm and the HTTP server)
        assert {laddr.ip for laddr in listening} == {"127.0.0.1"}, listening


@pytest.mark.parametrize("scheduler, extra, expected", [
    ("tcp://127.0.0.1:8786", [], ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]),
    ("tcp://localhost:8786", [], ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]),
    ("tcp://[::1]:8786", [], ["--host", "::1", "--dashboard-address", "[::1]:0"]),
    ("tcp://gateway.example.org:443", [], []),
    ("tcp://10.0.0.7:8786", [], []),
    ("tcp://127.0.0.1:8786", ["--host", "127.0.0.2"],
     ["--dashboard-address", "127.0.0.1:0"]),
    ("tcp://127.0.0.1:8786", ["--interface=lo"], ["--dashboard-address", "127.0.0.1:0"]),
    ("tcp://127.0.0.1:8786", ["--listen-address", "tcp://127.0.0.1:4000"],
     ["--dashboard-address", "127.0.0.1:0"]),
    ("tcp://127.0.0.1:8786", ["--dashboard-address", ":8788"], ["--host", "127.0.0.1"]),
])
def test_where_a_worker_listens_follows_its_schedulers_address(scheduler, extra,
                                                              expected) -> None:
    """Loopback scheduler: the worker and its HTTP server listen on loopback; anything
    else: hybrid adds nothing (``dask worker``'s default); where the user's
    ``worker_extra_args`` say where one of them listens, that one is theirs."""
    from hybrid.pools import PoolSpec
    from hybrid.worker import Connection, worker_command

    spec = PoolSpec.build("cpu", "local", nanny=False, worker_extra_args=extra)
    words = list(worker_command(spec, Connection(scheduler), None).arguments)
    assert words[len(words) - len(extra):] == extra  # (the user's come last, as given)
    ours = words[:len(words) - len(extra)]
    added = [word for flag in ("--host", "--dashboard-address") if flag in ours
             for word in (flag, ours[ours.index(flag) + 1])]
    assert added == expected, words


def test_plain_tcp_when_asked_is_open_to_anyone(staging, tmp_path, recwarn) -> None:
    """The control: plain TCP, asked for, on loopback (no warning there) lets the very same
    outsider run code. This is why TLS is the default."""
    with HybridCluster(security=False) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        attempts = outsider(cluster.scheduler_address, tmp_path)
    assert attempts["Client(address)"].startswith("RAN CODE"), attempts
    assert not [w for w in recwarn.list if issubclass(w.category, InsecureClusterWarning)]


def test_the_warning_names_the_open_address() -> None:
    with pytest.warns(InsecureClusterWarning, match=r"every interface: anyone who can reach "
                      r"tcp://192\.0\.2\.7:8786 runs code as you .*security=False"):
        warn_if_open("HybridCluster 'x'", "tcp://192.0.2.7:8786", "", "security=False")
    with pytest.warns(InsecureClusterWarning, match="on 192.0.2.7"):
        warn_if_open("it", "tcp://192.0.2.7:1", "192.0.2.7", "hybrid.scheduler.tls: false")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for loopback in ("127.0.0.1", "localhost", "::1"):
            warn_if_open("it", "tcp://127.0.0.1:1", loopback, "security=False")


def test_local_backend_with_defaults_refuses_outsiders(credentials_directory,
                                                        tmp_path) -> None:
    with DaskLocalCluster(number_of_workers=1) as backend:
        backend.client.wait_for_workers(1, timeout=60)
        address = backend.cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        assert_refused(outsider(address, tmp_path))
        assert backend.submit_task(operator.add, 2, 3).result(timeout=60) == 5
        second = owner_process(address, credentials_directory)
        assert second["task"] == 42
        link = backend.cluster.dashboard_link
        assert link.startswith("https://127.0.0.1:")
        assert dashboard_served(link, find_credentials(address=address).files.ca) == 200
    assert find_credentials(address=address) is None


def test_local_backend_plain_when_asked(tmp_path) -> None:
    with DaskLocalCluster(number_of_workers=1, security=False, dashboard_address=None) as b:
        assert b.submit_task(operator.add, 2, 3).result(timeout=60) == 5
        address = b.cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:") and b.cluster.dashboard_link == ""
        assert find_credentials(address=address) is None


def _batch_backend_checks(backend, credentials_directory: Path, tmp_path: Path) -> None:
    address = backend.cluster.scheduler_address
    assert address.startswith("tls://")
    assert "--tls-ca-file" in backend.job_script()
    # a worker joined, by TLS
    assert backend.submit_task(operator.add, 1, 1).result(timeout=150) == 2
    assert_refused(outsider(address, tmp_path))
    second = owner_process(address, credentials_directory, attach=True)
    assert second["task"] == second["attached_task"] == 42 and len(second["workers"]) == 1


def test_evaluator_batch_backend_with_defaults_refuses_outsiders(
        monkeypatch, staging, credentials_directory, tmp_path) -> None:
    """DaskPBSBackend on the PBS TEST DOUBLE (tests/batch/doubles): PBS cannot run here, the
    double really runs the job script, whose worker joins with the staged TLS files."""
    doubles = os.path.join(os.path.dirname(batch_double.__file__), "pbs")
    state = tmp_path / "pbs-double-state"
    monkeypatch.setenv("PATH", f"{doubles}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HYBRID_DOUBLE_PYTHON", sys.executable)
    monkeypatch.setenv("HYBRID_PBS_DOUBLE_STATE", str(state))
    try:
        backend = DaskPBSBackend(resources_per_worker=QueueWorkerResources(
            wallclock_time_limit="00:10"), disable_nanny_process=True)
        assert "tls://scheduler.not-started" in backend.job_script()
        with backend:
            _batch_backend_checks(backend, credentials_directory, tmp_path)
    finally:
        store = batch_double.StateStore(state)
        for pid in batch_double.job_pids(store):
            if batch_double.process_alive(pid):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.slurm
def test_slurm_backend_with_defaults_refuses_outsiders(slurm_cluster, staging,
                                                        credentials_directory,
                                                        tmp_path) -> None:
    resources = QueueWorkerResources(per_thread_memory_limit="512 MiB",
                                     wallclock_time_limit="00:10")
    with DaskSLURMBackend(resources_per_worker=resources, disable_nanny_process=True) as b:
        _batch_backend_checks(b, credentials_directory, tmp_path)


def test_kubernetes_backend_with_defaults_refuses_outsiders(staging, credentials_directory,
                                                             tmp_path) -> None:
    """DaskKubernetesBackend against the Kubernetes API server DOUBLE (tests/kubernetes),
    whose kubelet really runs the pod's command with the cluster's Secret mounted."""
    from hybrid.backends.kubernetes import (
        DaskKubernetesBackend,
        DaskKubernetesExistingBackend,
    )
    from hybrid.kubernetes import KubernetesEmptyDirVolume
    from tests.kubernetes.conftest import TOKEN, cpu_resources, double_nodes
    from tests.kubernetes.kube_api_double import KubeAPIServerDouble

    scratch = [KubernetesEmptyDirVolume("scratch", "/scratch")]  # evaluator requires volumes
    kube = KubeAPIServerDouble(tmp_path / "kube", nodes=double_nodes(), token=TOKEN).start()
    try:
        with dask.config.set({"hybrid.batch.poll-interval": "0.3s"}), DaskKubernetesBackend(
                cluster_name="secure", gpu_resources_per_worker=None,
                cpu_resources_per_worker=cpu_resources(minimum=1, maximum=1),
                api_client=kube.api_client(), disable_nanny_process=True,
                volumes=scratch) as backend:
            address = backend.cluster.scheduler_address
            assert address.startswith("tls://127.0.0.1:")
            assert backend.submit_task(operator.add, 1, 1).result(timeout=120) == 2  # a pod, by TLS
            assert_refused(outsider(address, tmp_path))
            second = owner_process(address, credentials_directory)
            assert second["task"] == 42
            with DaskKubernetesExistingBackend(
                    cluster_name="secure", gpu_resources_per_worker=None,
                    cpu_resources_per_worker=cpu_resources(minimum=1, maximum=1),
                    api_client=kube.api_client(), volumes=scratch) as existing:
                assert existing.submit_task(operator.add, 2, 2).result(timeout=60) == 4
    finally:
        kube.stop()


# --------------------------------------------------------------------------- the store
def test_credentials_another_user_could_touch_are_refused(tmp_path) -> None:
    root = tmp_path / "clusters"
    with dask.config.set({"hybrid.scheduler.credentials-directory": str(root)}):
        store_credentials("mine", None)
        assert root.stat().st_mode & 0o777 == 0o700
        root.chmod(0o755)
        with pytest.raises(ConfigurationError) as error:
            find_credentials(address="tls://127.0.0.1:1")
        assert error.value.field == "hybrid.scheduler.credentials-directory"
        assert f"chmod 700 {root}" in str(error.value)
        # and connecting to a tls:// cluster with none stored says what to do
        with pytest.raises(ConfigurationError, match="none of yours is stored"):
            root.chmod(0o700)
            HybridCluster(scheduler_address="tls://127.0.0.1:1")


def test_gc_removes_the_credentials_of_a_cluster_whose_process_died(tmp_path) -> None:
    root = tmp_path / "clusters"
    dead = subprocess.Popen(["true"])
    dead.wait()
    with dask.config.set({"hybrid.scheduler.credentials-directory": str(root)}):
        stored = store_credentials("crashed", None).record(
            pid=dead.pid, scheduler_address="tls://127.0.0.1:1")
    result = subprocess.run([HYBRID, "gc", "--system", "local", "--json"],
                            env=_environment(root), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["credentials"] == [str(stored.directory)]
    assert not stored.directory.exists()


def test_gc_leaves_credentials_that_a_starting_cluster_is_still_writing(tmp_path) -> None:
    """store_credentials makes the directory, writes the TLS files, then the record: a
    ``hybrid gc`` in between (another script of the user, a cron job) took the directory for
    a broken one and removed it under the starting cluster. Only a record-less directory
    that nobody has touched for a while is stale."""
    root = tmp_path / "clusters"
    with dask.config.set({"hybrid.scheduler.credentials-directory": str(root)}):
        store_credentials("other", None)  # (the root, 0700, as a first cluster makes it)
        starting = root / "starting"
        starting.mkdir(mode=0o700)
        (starting / "ca.pem").write_text("half written")  # (no record yet)
        broken = root / "broken"
        broken.mkdir(mode=0o700)
        an_hour_ago = time.time() - 3600
        os.utime(broken, (an_hour_ago, an_hour_ago))
        gone = stale_credentials(lambda address: False)
    assert [c.name for c in gone] == ["broken"]  # ("other": this live process's)
    assert starting.is_dir() and (starting / "ca.pem").exists()
    assert not broken.exists()


def test_a_second_start_of_the_same_name_is_refused_while_the_first_writes(tmp_path) -> None:
    """A cluster of that name is starting in another process (its directory holds files, no
    record yet): the second start is refused with the field and the fix, and leaves the
    first one's files alone (it removed them); a record-less directory untouched for
    longer than the grace is a broken start's and is replaced."""
    root = tmp_path / "clusters"
    with dask.config.set({"hybrid.scheduler.credentials-directory": str(root)}):
        store_credentials("first", None)
        starting = root / "twin"
        starting.mkdir(mode=0o700)
        (starting / "ca.pem").write_text("being written")
        with pytest.raises(ConfigurationError) as error:
            store_credentials("twin", None)
        assert error.value.field == "HybridCluster.name"
        assert "another process is starting a cluster of that name" in str(error.value)
        assert (starting / "ca.pem").read_text() == "being written"
        an_hour_ago = time.time() - 3600
        for path in (starting, starting / "ca.pem"):
            os.utime(path, (an_hour_ago, an_hour_ago))
        replaced = store_credentials("twin", None)
        assert replaced.pid == os.getpid() and not (starting / "ca.pem").exists()


# --------------------------------------------------------------------------- doctor
def test_doctor_reports_plain_tcp_beyond_loopback(staging) -> None:
    assert check_scheduler_exposure().status is Status.ok
    with dask.config.set({"hybrid.scheduler.tls": False, "hybrid.scheduler.host": ""}):
        result = check_scheduler_exposure()
        assert result.status is Status.fail and "plain TCP on every interface" in result.message
    with dask.config.set({"hybrid.scheduler.tls": False}):  # the suite's loopback pin
        assert check_scheduler_exposure().status is Status.warn
    with dask.config.set({"hybrid.scheduler.dashboard-address": ":8787"}):
        assert check_scheduler_exposure().status is Status.warn
    with HybridCluster(security=False, dashboard_address=None) as plain:
        open_one = check_scheduler_access(plain.scheduler_address, timeout=5)
    assert open_one.status is Status.fail and "answered a client without" in open_one.message
    with HybridCluster(dashboard_address=None) as secure:
        closed = check_scheduler_access(secure.scheduler_address, timeout=5)
    assert closed.status is Status.ok, closed


def test_the_cluster_s_objects_show_no_private_key(staging, credentials_directory) -> None:
    """``repr(pool.job)`` (a notebook cell's output, saved in the .ipynb; a traceback's
    locals) printed the cluster's private key: the TLS material rides in-memory as PEM
    text, which distributed's own ``Security`` repr hides."""
    with HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=120, progress=False)
        job = cluster.manager.pools["cpu"].job
        shown = " ".join(map(repr, (pool, job, job.connection, job.connection.tls)))
        assert "PRIVATE KEY" not in shown and "BEGIN" not in shown, shown
        assert "<PEM text>" in repr(job.connection.tls)  # (said, not hidden silently)
