"""A real dask-gateway-server on loopback: the gateway's own workers and external workers.

External workers are started as batch jobs start them (``dask worker tls://PROXY
--scheduler-sni daskgateway-NAME --no-nanny ...``) and join through the gateway's TCP proxy.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import psutil
import pytest
from dask_gateway import BasicAuth, Gateway, GatewayClusterError
from distributed import get_worker

from hybrid.gateway import scheduler_sni
from hybrid.gateway_server import PRELOAD_MODULE
from hybrid.gateway_server.backend import NO_GATEWAY_WORKERS
from hybrid.gateway_server.dev import DevGateway
from hybrid.gateway_server.scheduler import LIMITS_METADATA_KEY, is_gateway_worker
from hybrid.gateway_server.settings import DEFAULT_SCHEDULER_IMAGE
from tests.gateway.helpers import (
    gateway_client,
    heartbeats,
    scheduler_log,
    wait_for,
    write_tls_files,
)
from tests.scheduler_workers import scheduler_workers, worker_names

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.timeout(120),
    # dask_gateway's Gateway.__del__ closes again a gateway already closed: noise, not a fault
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]

#: Heartbeats to watch external workers survive (the gateway also retires 3 s after a join).
HEARTBEATS_TO_SURVIVE = 3
MIN_SECONDS_TO_SURVIVE = 5
#: Seconds a scheduler is held up, as a busy machine can (more than the stock two periods).
STALL_SECONDS = 5


def _scheduler_process(dev: DevGateway, cluster_name: str) -> psutil.Process:
    """The scheduler process of a cluster: a child of the server working in its directory."""
    for child in psutil.Process(dev.pid).children():
        try:
            if child.cwd().endswith(cluster_name):
                return child
        except psutil.Error:
            continue
    raise AssertionError(f"no scheduler process for cluster {cluster_name}")


def _wait_through_heartbeats(dev: DevGateway, cluster_name: str) -> list[dict[str, int]]:
    """Wait for HEARTBEATS_TO_SURVIVE new heartbeats (and MIN_SECONDS_TO_SURVIVE); return them."""
    before = len(heartbeats(dev.log_text(), cluster_name))
    started = time.monotonic()
    wait_for(lambda: len(heartbeats(dev.log_text(), cluster_name)) >= before + HEARTBEATS_TO_SURVIVE
             and time.monotonic() - started >= MIN_SECONDS_TO_SURVIVE,
             timeout=60, message=f"{HEARTBEATS_TO_SURVIVE} gateway heartbeats")
    return heartbeats(dev.log_text(), cluster_name)[before:]


def _registered(external_workers, *names: str) -> bool:
    return all("Registered to:" in external_workers.log(name) for name in names)


def _gateway_processes(dev: DevGateway, kind: str) -> list[psutil.Process]:
    """The server's children that run ``dask <kind>`` (scheduler or worker)."""
    found = []
    for child in psutil.Process(dev.pid).children():
        try:
            command = child.cmdline()
        except psutil.Error:
            continue
        if command[1:4] == ["-m", "dask", kind]:
            found.append(child)
    return found


def test_a_cluster_without_a_batch_pool_scales_like_a_stock_gateway_cluster(
        dev_gateway, gateway, external_workers, tmp_path):
    options = gateway.cluster_options()
    assert options.image == DEFAULT_SCHEDULER_IMAGE
    with pytest.raises(ValueError, match="not a valid option"):
        options.image = "docker.io/someone/else:latest"  # the choice the server offered
    cluster = gateway.new_cluster(image=DEFAULT_SCHEDULER_IMAGE)
    command = _scheduler_process(dev_gateway, cluster.name).cmdline()
    ours = command.index(PRELOAD_MODULE)
    assert command[ours - 1] == "--preload" and "dask_gateway.scheduler_preload" in command
    assert command[1:4] == ["-m", "dask", "scheduler"]
    client = cluster.get_client()
    assert worker_names(client) == set()  # a new cluster has its scheduler only
    cert, key = write_tls_files(cluster.security, tmp_path / "tls")
    external_workers.start(dev_gateway.worker_scheduler_address, cluster.name, cert, key,
                           "ext-0")
    wait_for(lambda: worker_names(client) == {"ext-0"}, timeout=60, message="ext-0 joined")

    cluster.scale(2)  # the gateway's own workers, as on a stock gateway
    wait_for(lambda: len(worker_names(client)) == 3, timeout=60, message="two gateway workers")
    own = worker_names(client) - {"ext-0"}
    assert all(is_gateway_worker(name) for name in own)
    assert len(_gateway_processes(dev_gateway, "worker")) == 2
    ran_on = set(client.gather(client.map(lambda i: get_worker().name, range(40), pure=False)))
    assert ran_on <= own | {"ext-0"} and ran_on & own

    cluster.scale(0)  # the gateway retires its own workers, never the external one
    wait_for(lambda: worker_names(client) == {"ext-0"}, timeout=60,
             message="the gateway's workers retired")
    _wait_through_heartbeats(dev_gateway, cluster.name)
    assert worker_names(client) == {"ext-0"}
    assert "scheduler-remove-worker" not in external_workers.log("ext-0")
    client.close()

    # shutdown leaves no cluster, no scheduler and no cluster directory
    scheduler = _scheduler_process(dev_gateway, cluster.name)
    cluster.shutdown()
    assert cluster.name not in {c.name for c in gateway.list_clusters()}
    wait_for(lambda: not scheduler.is_running(), timeout=30, message="scheduler exit")
    wait_for(lambda: not (dev_gateway.state_dir / "clusters" / cluster.name).exists(),
             timeout=10, message="cluster directory removed")


def test_worker_options_size_the_gateways_workers(gateway):
    options = gateway.cluster_options()
    assert (options.worker_cores, options.worker_memory) == (1, 2.0)
    cluster = gateway.new_cluster(worker_cores=2, worker_memory=0.5)
    client = cluster.get_client()
    assert client.get_metadata(LIMITS_METADATA_KEY) == {
        "max_workers": None, "max_cores": None, "max_memory": None}
    cluster.scale(1)
    wait_for(lambda: scheduler_workers(client), timeout=60, message="a worker")
    (worker,) = scheduler_workers(client).values()
    assert (worker["nthreads"], worker["memory_limit"]) == (2, 2**29)
    client.close()
    cluster.shutdown()


def test_a_gateway_that_starts_no_workers_refuses_to_scale_and_says_why(start_gateway):
    dev = start_gateway(gateway_workers=False)
    assert 'new_cluster(pool="local")' in dev.banner()
    assert "starts no workers itself" in dev.banner()
    with gateway_client(dev) as gateway:
        cluster = gateway.new_cluster()
        with pytest.raises(GatewayClusterError, match="starts no workers itself") as refused:
            cluster.scale(2)
        assert NO_GATEWAY_WORKERS in str(refused.value)
        with pytest.raises(GatewayClusterError, match="starts no workers itself"):
            cluster.adapt(minimum=1, maximum=2)
        cluster.scale(0)  # asks for no worker: fine
        assert _gateway_processes(dev, "worker") == []
        cluster.shutdown()


def test_external_workers_join_through_the_proxy_and_stay(dev_gateway, gateway,
                                                          external_workers, tmp_path):
    cluster = gateway.new_cluster()
    cert, key = write_tls_files(cluster.security, tmp_path / "tls")
    assert (cert.stat().st_mode & 0o777, key.stat().st_mode & 0o777) == (0o600, 0o600)
    client = cluster.get_client()
    names = {"ext-0", "ext-1"}
    for name in sorted(names):
        external_workers.start(dev_gateway.worker_scheduler_address, cluster.name, cert, key,
                               name)
    wait_for(lambda: worker_names(client) == names, timeout=60, message="both workers joined")
    ran_on = set(client.gather(client.map(lambda i: get_worker().name, range(40), pure=False)))
    assert ran_on <= names and ran_on

    seen = _wait_through_heartbeats(dev_gateway, cluster.name)
    assert worker_names(client) == names
    # the gateway was never told about them: nothing for it to retire
    assert all(beat["active"] == 0 for beat in seen), seen
    assert client.submit(sum, [1, 2, 3], pure=False).result() == 6
    for name in names:
        assert "scheduler-remove-worker" not in external_workers.log(name)
    client.close()
    cluster.shutdown()


@pytest.mark.parametrize(("preload", "kept"), [("inline", True), ("none", False)])
def test_the_preload_is_what_keeps_external_workers(start_gateway, external_workers, tmp_path,
                                                    preload, kept):
    """``none`` is the stock gateway (the control): it retires the external workers."""
    dev = start_gateway(preload=preload)
    with gateway_client(dev) as gateway:
        cluster = gateway.new_cluster()
        command = _scheduler_process(dev, cluster.name).cmdline()
        assert PRELOAD_MODULE not in command  # not by module name in either case
        assert any("def dask_setup" in arg for arg in command) is (preload == "inline")
        cert, key = write_tls_files(cluster.security, tmp_path / "tls")
        client = cluster.get_client()
        for name in ("ext-0", "ext-1"):
            external_workers.start(dev.worker_scheduler_address, cluster.name, cert, key, name)
        wait_for(lambda: _registered(external_workers, "ext-0", "ext-1"), timeout=60,
                 message="both workers registered")
        _wait_through_heartbeats(dev, cluster.name)
        names = worker_names(client)
        removed = ["scheduler-remove-worker" in external_workers.log(n) for n in ("ext-0", "ext-1")]
        client.close()
        cluster.shutdown()
    if kept:
        assert names == {"ext-0", "ext-1"} and removed == [False, False]
    else:
        assert names == set() and removed == [True, True]


@pytest.mark.parametrize(("limit", "published", "sizes", "words"), [
    ({"cluster_max_workers": 1}, {"max_workers": 1, "max_cores": None, "max_memory": None},
     [{}, {}], "cluster_max_workers = 1 (the cluster would have 2 workers)"),
    ({"cluster_max_cores": 3}, {"max_workers": 2, "max_cores": 2.0, "max_memory": None},
     [{"nthreads": 2}, {"nthreads": 1}], "cluster_max_cores = 2 for the workers"),
    # dask-gateway derives max_workers from its worker size: (3 - 2) GiB / 512 MiB
    ({"cluster_max_memory": "3 GiB", "worker_memory": "512 MiB"},
     {"max_workers": 2, "max_cores": None, "max_memory": 2**30},
     [{"memory_limit": "600MiB"}, {"memory_limit": "600MiB"}],
     "cluster_max_memory = 1073741824 bytes for the workers"),
])
def test_external_workers_beyond_the_admins_limits_are_refused(
        start_gateway, external_workers, tmp_path, limit, published, sizes, words):
    """The admin's cluster limits apply to batch workers; clients find them published."""
    dev = start_gateway(**limit)
    with gateway_client(dev) as gateway:
        cluster = gateway.new_cluster()
        client = cluster.get_client()
        assert client.get_metadata(LIMITS_METADATA_KEY) == published
        cert, key = write_tls_files(cluster.security, tmp_path / "tls")
        address = dev.worker_scheduler_address
        external_workers.start(address, cluster.name, cert, key, "ext-0", **sizes[0])
        wait_for(lambda: worker_names(client) == {"ext-0"}, timeout=60, message="ext-0 joined")
        refused = external_workers.start(address, cluster.name, cert, key, "ext-1", **sizes[1])
        wait_for(lambda: refused.poll() is not None, timeout=60, message="ext-1 refused")
        log = scheduler_log(dev.state_dir, cluster.name)
        _wait_through_heartbeats(dev, cluster.name)
        names = worker_names(client)
        client.close()
        cluster.shutdown()
    assert names == {"ext-0"}
    assert refused.returncode != 0
    assert f"hybrid: this cluster refuses the worker: it would exceed {words}" in (
        external_workers.log("ext-1"))
    assert "Refusing external worker ext-1 " in log and words in log


def test_wrong_certificate_and_wrong_sni_are_refused(dev_gateway, gateway, external_workers,
                                                     tmp_path):
    from dask_gateway_server.tls import new_keypair

    cluster = gateway.new_cluster()
    cert, key = write_tls_files(cluster.security, tmp_path / "right")
    # a real certificate for the very same SNI, but not the cluster's own
    other_cert, other_key = new_keypair(scheduler_sni(cluster.name))
    bad_cert, bad_key = write_tls_files(SimpleNamespace(tls_cert=other_cert, tls_key=other_key),
                                        tmp_path / "wrong")
    client = cluster.get_client()
    address = dev_gateway.worker_scheduler_address
    refused = {
        "wrong-cert": external_workers.start(address, cluster.name, bad_cert, bad_key,
                                             "wrong-cert", death_timeout=5),
        "wrong-sni": external_workers.start(address, cluster.name, cert, key, "wrong-sni",
                                            sni=scheduler_sni(uuid.uuid4().hex), death_timeout=5),
    }
    external_workers.start(address, cluster.name, cert, key, "right")
    seen: set[str] = set()

    def refused_ones_ended() -> bool:
        seen.update(worker_names(client))
        return all(p.poll() is not None for p in refused.values())

    wait_for(refused_ones_ended, timeout=45, interval=0.3, message="refused workers exiting")
    seen.update(worker_names(client))
    assert "right" in seen  # the same setup with the right certificate and SNI joins
    assert seen.isdisjoint(refused)
    for name, process in refused.items():
        assert process.returncode != 0, external_workers.log(name)
        assert "Registered to:" not in external_workers.log(name)
    client.close()
    cluster.shutdown()


def test_lifetime_limits_on_a_real_gateway(start_gateway):
    dev = start_gateway(client_timeout=2, max_lifetime=6)
    with gateway_client(dev) as gateway:
        orphan = gateway.new_cluster(shutdown_on_close=False)
        attended = gateway.new_cluster(shutdown_on_close=False)
        client = attended.get_client()
        started = time.monotonic()

        def running() -> set[str]:
            return {c.name for c in gateway.list_clusters()}

        wait_for(lambda: orphan.name not in running(), timeout=20,
                 message="the cluster without client culled")
        assert attended.name in running()
        wait_for(lambda: attended.name not in running(), timeout=25,
                 message="the cluster culled at its maximum lifetime")
        lived = time.monotonic() - started
        client.close()
    assert lived >= 6 - 4  # the cluster started a few seconds before `started`


def test_dev_gateway_state_is_private_and_the_password_is_checked(dev_gateway):
    for name in ("hybrid-gateway.yaml", "password", "db-key", "gateway.log",
                 "gateway.sqlite"):
        assert (dev_gateway.state_dir / name).stat().st_mode & 0o077 == 0, name
    assert dev_gateway.state_dir.stat().st_mode & 0o077 == 0
    assert dev_gateway.password not in dev_gateway.settings_path.read_text()
    assert dev_gateway.password not in dev_gateway.log_text()
    assert "password" not in repr(dev_gateway)
    wrong = Gateway(address=dev_gateway.address, proxy_address=dev_gateway.proxy_address,
                    auth=BasicAuth(dev_gateway.username, dev_gateway.password + "x"))
    with pytest.raises(Exception, match=r"401|[Uu]nauthorized"):
        wrong.list_clusters()
    wrong.close()
    right = dev_gateway.gateway()
    assert isinstance(right.list_clusters(), list)
    right.close()


def test_a_scheduler_stalled_by_a_busy_machine_keeps_its_cluster(dev_gateway, gateway):
    """The test gateways beat every second, yet a scheduler held up a few seconds (a busy CI
    machine) keeps its cluster: the stock timeout (two periods) culled one mid-test once."""
    cluster = gateway.new_cluster()
    scheduler = _scheduler_process(dev_gateway, cluster.name)
    scheduler.suspend()
    try:
        stalled_until = time.monotonic() + STALL_SECONDS
        while time.monotonic() < stalled_until:  # the stall is the stimulus, not a wait
            time.sleep(0.2)
            assert cluster.name in {c.name for c in gateway.list_clusters()}, (
                f"the gateway stopped cluster {cluster.name} while its scheduler stalled:\n"
                f"{dev_gateway.log_text()[-3000:]}")
    finally:
        scheduler.resume()
    with cluster.get_client(set_as_default=False) as client:
        assert client.scheduler_info()["type"] == "Scheduler"
    cluster.shutdown()
