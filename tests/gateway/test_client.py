"""HTCGateway end to end: a REAL dev gateway, REAL HTCondor and Slurm jobs as workers.

The gateway starts only the scheduler; ``scale``/``adapt`` submit batch jobs whose workers
join through the gateway's TCP proxy (TLS, SNI ``daskgateway-<cluster>``). Job counts are
asked of HTCondor and Slurm themselves, not of hybrid's bookkeeping. A second process
connects by name and shuts the cluster down.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dask
import pytest

from hybrid.annotator import HybridClient
from hybrid.batch import get_system
from hybrid.batch.base import worker_name_suffix
from hybrid.errors import ConfigurationError
from hybrid.gateway.client import (
    METADATA_KEY,
    HTCClusterReport,
    HTCGateway,
    HTCGatewayCluster,
    job_environment,
)
from hybrid.gateway_server.dev import DevGateway
from tests.batch.test_real_pools import condor_jobs, slurm_jobs
from tests.gateway._client_tasks import (
    dialed_scheduler_address,
    environment_value,
    square,
    square_and_worker,
)
from tests.gateway.helpers import heartbeats, wait_for
from tests.scheduler_workers import worker_names

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]

#: Gateway heartbeats (1 s each in the test gateways) the batch workers must survive.
HEARTBEATS_TO_SURVIVE = 3

#: The second process: connects by name, reports what it found, shuts the cluster down.
SECOND_PROCESS = r"""
import json, os, sys
from dask_gateway import BasicAuth
from hybrid.gateway.client import HTCGateway

gateway = HTCGateway(address=os.environ["HYBRID_T_GATEWAY"],
                     proxy_address=os.environ["HYBRID_T_PROXY"],
                     auth=BasicAuth(os.environ["HYBRID_T_USER"], os.environ["HYBRID_T_PASSWORD"]))
name = sys.argv[1]
listed = [report.name for report in gateway.list_clusters()]
cluster = gateway.connect(name)
found = {"listed": listed, "type": type(cluster).__name__, "pools": sorted(cluster.pools),
         "jobs": sorted(status.job_id for status in cluster.jobs()),
         "tracked": sorted(cluster.pools["htcondor"].active()),
         "workers": sorted(cluster.connected_workers())}
cluster.shutdown()
found["listed_after"] = [report.name for report in gateway.list_clusters()]
gateway.close()
print(json.dumps(found))
"""


def _clean_up(gateway: HTCGateway, names: list[str], systems: tuple[str, ...]) -> None:
    """Whatever a failed test left: the clusters' jobs (by tag), then the clusters."""
    for name in names:
        for system in systems:
            try:
                get_system(system).remove_cluster(name)
            except Exception as error:  # keep cleaning
                print(f"cleanup: {system} jobs of {name}: {error}", file=sys.stderr)
        try:
            if name in {report.name for report in gateway.list_clusters()}:
                gateway.stop_cluster(name)
        except Exception as error:
            print(f"cleanup: stopping {name}: {error}", file=sys.stderr)


def _files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


def _wait_through_heartbeats(dev: DevGateway, name: str) -> list[dict[str, int]]:
    before = len(heartbeats(dev.log_text(), name))
    started = time.monotonic()
    wait_for(lambda: len(heartbeats(dev.log_text(), name)) >= before + HEARTBEATS_TO_SURVIVE
             and time.monotonic() - started >= HEARTBEATS_TO_SURVIVE,
             timeout=60, message=f"{HEARTBEATS_TO_SURVIVE} gateway heartbeats")
    return heartbeats(dev.log_text(), name)[before:]


def _second_process(dev: DevGateway, name: str, staging: Path) -> dict[str, Any]:
    env = {**os.environ, "HYBRID_T_GATEWAY": dev.address, "HYBRID_T_PROXY": dev.proxy_address,
           "HYBRID_T_USER": dev.username, "HYBRID_T_PASSWORD": dev.password,
           "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging)}
    result = subprocess.run([sys.executable, "-c", SECOND_PROCESS, name], env=env,
                            capture_output=True, text=True, timeout=150,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.htcondor
def test_htcondor_workers_join_through_the_proxy_and_another_process_shuts_down(
        htcondor_pool, dev_gateway, htc_gateway, staging, tmp_path) -> None:
    pwned = tmp_path / "pwned"
    secret = f"it's \"quoted\" $(touch {pwned}) `touch {pwned}`; rm -rf x\nsecond line"
    names: list[str] = []
    try:
        cluster = htc_gateway.new_cluster(pool="htcondor", worker_memory=0.5,
                                          env={"HYBRID_T_VALUE": secret})
        name = cluster.name
        names.append(name)
        assert isinstance(cluster, HTCGatewayCluster)
        assert cluster.dashboard_link == f"{dev_gateway.address}/clusters/{name}/status"
        assert condor_jobs(name) == []  # nothing before scale

        cluster.scale(3)
        ids = sorted(condor_jobs(name))  # asked of HTCondor itself
        assert len(ids) == 3 and len({job_id.split(".")[0] for job_id in ids}) == 1
        expected = {f"{name}-htcondor-{worker_name_suffix(job_id)}" for job_id in ids}
        cluster.wait_for_workers(3, timeout=150, progress=False)
        client = cluster.get_client(set_as_default=False)
        assert isinstance(client, HybridClient)
        assert worker_names(client) == expected

        # the workers dialed the gateway's TCP proxy with TLS, not the scheduler itself
        dialed = set(client.run(dialed_scheduler_address).values())
        assert dialed == {dev_gateway.worker_scheduler_address}
        assert client.scheduler_info()["address"] not in dialed
        wrapper = next(staging.rglob("worker.sh")).read_text()
        assert f"{dev_gateway.worker_scheduler_address} " in wrapper
        assert f"--scheduler-sni daskgateway-{name} --no-nanny" in wrapper

        results = client.gather(client.map(square_and_worker, range(30)))
        assert [value for value, _ in results] == [x * x for x in range(30)]
        assert {worker for _, worker in results} <= expected
        assert set(client.run(environment_value, "HYBRID_T_VALUE").values()) == {secret}
        assert not pwned.exists()

        # the gateway API credential is in no job file; the key is private
        password = dev_gateway.password.encode()
        staged = _files_under(staging)
        assert {path.name for path in staged} >= {"worker.sh", "ca.pem", "cert.pem", "key.pem"}
        for path in staged:
            assert password not in path.read_bytes(), path
        assert dev_gateway.password not in cluster.job_script()
        assert dev_gateway.password not in json.dumps(client.get_metadata(METADATA_KEY))
        for path in staged:
            if path.suffix == ".pem":
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        for directory in {path.parent for path in staged}:
            assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory

        # the gateway's heartbeats leave the batch workers alone
        beats = _wait_through_heartbeats(dev_gateway, name)
        assert all(beat["active"] == 0 for beat in beats), beats
        assert worker_names(client) == expected
        assert client.submit(square, 12, pure=False).result() == 144

        cluster.scale(1)
        wait_for(lambda: len(condor_jobs(name)) == 1, timeout=60, message="one job left")
        kept = condor_jobs(name)
        assert kept[0] in ids
        kept_worker = f"{name}-htcondor-{worker_name_suffix(kept[0])}"
        wait_for(lambda: worker_names(client) == {kept_worker}, timeout=60,
                 message="only the kept job's worker")
        client.close()

        # disconnect only: the cluster and its job stay
        cluster.close(shutdown=False)
        reports = htc_gateway.list_clusters()
        assert all(isinstance(report, HTCClusterReport) for report in reports)
        assert name in {report.name for report in reports}
        assert condor_jobs(name) == kept

        found = _second_process(dev_gateway, name, staging)
        assert found["type"] == "HTCGatewayCluster" and found["pools"] == ["htcondor"]
        assert name in found["listed"]
        assert found["jobs"] == kept and found["tracked"] == kept
        assert found["workers"] == [kept_worker]
        assert name not in found["listed_after"]
        assert condor_jobs(name) == []
        assert name not in {report.name for report in htc_gateway.list_clusters()}
        assert not any(staging.glob(f"{name}-*"))
    finally:
        _clean_up(htc_gateway, names, ("htcondor",))


@pytest.mark.slurm
def test_slurm_close_keeps_the_jobs_a_later_connect_scales_down_and_shuts_down(
        slurm_cluster, htc_gateway, staging) -> None:
    names: list[str] = []
    try:
        cluster = htc_gateway.new_cluster(pool="slurm", worker_memory=0.25,
                                          worker_walltime="00:15")
        name = cluster.name
        names.append(name)
        assert "#SBATCH --time=00:15:00" in cluster.job_script()
        cluster.scale(2)
        ids = sorted(slurm_jobs(name))
        assert len(ids) == 2
        cluster.wait_for_workers(2, timeout=90, progress=False)
        with cluster.get_client(set_as_default=False) as client:
            assert client.gather(client.map(square, range(10))) == [x * x for x in range(10)]

        cluster.close(shutdown=False)
        assert sorted(slurm_jobs(name)) == ids
        assert name in {report.name for report in htc_gateway.list_clusters()}

        again = htc_gateway.connect(name)
        assert sorted(status.job_id for status in again.jobs()) == ids
        assert again.pools["slurm"].spec.walltime == "00:15"
        wait_for(lambda: len(again.connected_workers()) == 2, timeout=30,
                 message="both workers seen from the new connection")
        again.scale(1)
        wait_for(lambda: len(slurm_jobs(name)) == 1, timeout=60, message="one job left")
        assert slurm_jobs(name)[0] in ids
        again.shutdown()
        assert slurm_jobs(name) == []
        assert name not in {report.name for report in htc_gateway.list_clusters()}
        assert not any(staging.glob(f"{name}-*"))
    finally:
        _clean_up(htc_gateway, names, ("slurm",))


@pytest.mark.htcondor
def test_bad_inputs_are_refused_before_anything_is_created(
        htcondor_pool, dev_gateway, htc_gateway, staging, monkeypatch) -> None:
    clusters_before = {report.name for report in htc_gateway.list_clusters()}
    jobs_before = {status.job_id for status in get_system("htcondor").query()}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"container_image": "/images/w.sif", "pixi_project": "/p/pixi.toml"}, "pixi_project"),
        ({"conda_env": "analysis", "container_image": "/images/w.sif"}, "conda_env"),
        ({"pixi_env": "gpu"}, "pixi_env"),
        ({"pixi_project": "relative/pixi.toml"}, "pixi_project"),
        ({"pixi_project": "/no/such/project"}, "pixi_project"),  # not there: refused
        ({"worker_cores": -1}, "worker_cores"),
        ({"worker_gpus": -1}, "worker_gpus"),
        ({"worker_memory": -2}, "worker_memory"),
        ({"worker_memory": "lots"}, "worker_memory"),
        ({"pool": "torque"}, "pool"),
        ({"env": {"1BAD": 1}}, "env['1BAD']"),
        ({"env": ["X=1"]}, "env"),
        ({"pools": {"gpu": {"system": "htcondor", "cores": 0}}}, "pools['gpu'].cores"),
        ({"pools": {"gpu": {"system": "htcondor", "color": "red"}}}, "pools['gpu'].color"),
        ({"pools": {"gpu": {"system": "htcondor"}}, "worker_cores": 2}, "worker_cores"),
    ]
    # the site's batch system comes from configuration (hybrid.gateway.pool)
    with dask.config.set({"hybrid.gateway.pool": "htcondor"}):
        for kwargs, field in cases:
            with pytest.raises(ConfigurationError) as caught:
                htc_gateway.new_cluster(**kwargs)
            assert caught.value.field == field, (kwargs, str(caught.value))
            assert dev_gateway.password not in str(caught.value)

        # options the gateway decides on are answered as the stock client answers them
        with pytest.raises(ValueError, match="no_such_option"):
            htc_gateway.new_cluster(no_such_option=1)
        with pytest.raises(TypeError, match="cluster_options"):
            htc_gateway.new_cluster(cluster_options=10)

    # a variable the facility requires: missing everywhere, refused
    monkeypatch.delenv("HYBRID_T_ACCOUNT", raising=False)
    with dask.config.set({"hybrid.gateway.required-env": ["HYBRID_T_ACCOUNT"]}):
        with pytest.raises(ConfigurationError) as caught:
            htc_gateway.new_cluster(pool="htcondor")
        assert caught.value.field == "env['HYBRID_T_ACCOUNT']"
        assert "hybrid.gateway.required-env" in str(caught.value)
        # in this process's environment: it goes into every job
        monkeypatch.setenv("HYBRID_T_ACCOUNT", "project 42")
        assert job_environment({"OTHER": "1"}) == {"OTHER": "1",
                                                   "HYBRID_T_ACCOUNT": "project 42"}

    assert {report.name for report in htc_gateway.list_clusters()} == clusters_before
    assert {status.job_id for status in get_system("htcondor").query()} == jobs_before
    assert not staging.exists() or not any(staging.iterdir())


def test_env_of_a_jupyterhub_session_works_and_keeps_credentials_out_of_jobs(
        dev_gateway, htc_gateway, staging, monkeypatch) -> None:
    """Seed 001's ``env=dict(os.environ)`` in a JupyterHub: the token stays out of the jobs,
    with one warning naming it; the session's shell noise is not exported."""
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-token-value-123")
    monkeypatch.setenv("HYBRID_T_PLAIN", "kept")
    monkeypatch.setenv("HYBRID_T_HAS_PASSWORD", f"x{dev_gateway.password}x")
    monkeypatch.setenv("OLDPWD", "/somewhere")
    with pytest.warns(UserWarning, match="JUPYTERHUB_API_TOKEN") as warned:
        cluster = htc_gateway.new_cluster(pool="local", env=dict(os.environ))
    try:
        [warning] = [w for w in warned if "credentials" in str(w.message)]
        assert warning.filename == __file__  # it points at the caller's line
        assert "HYBRID_T_HAS_PASSWORD" in str(warning.message)
        script = cluster.job_script()
        assert "export HYBRID_T_PLAIN=kept" in script
        for absent in ("JUPYTERHUB_API_TOKEN", "hub-token-value-123", dev_gateway.password,
                       "OLDPWD", "export PWD="):
            assert absent not in script, absent
    finally:
        cluster.shutdown()


PIXI_DOUBLE = """#!/bin/sh
# pixi_double: a TEST DOUBLE of pixi (not installed here). It records its arguments, one a
# line, then runs the command after --executable, as `pixi run --executable` does.
: > "$HYBRID_T_PIXI_ARGS"
for argument in "$@"; do printf '%s\\n' "$argument" >> "$HYBRID_T_PIXI_ARGS"; done
while [ "$#" -gt 0 ] && [ "$1" != "--executable" ]; do shift; done
shift
exec "$@"
"""


def test_worker_environments_are_quoted_and_recorded_for_connect(
        htc_gateway, staging, tmp_path) -> None:
    """pixi/conda/apptainer launchers; the pixi one runs for real through ``pixi_double``."""
    double_dir = tmp_path / "pixi_double"
    double_dir.mkdir()
    (double_dir / "pixi").write_text(PIXI_DOUBLE)
    (double_dir / "pixi").chmod(0o700)
    recorded = tmp_path / "pixi-args.txt"
    project = "/opt/my proj's/pixi.toml"
    path = os.pathsep.join([str(double_dir), str(Path(sys.executable).parent),
                            os.environ.get("PATH", "")])
    names: list[str] = []
    made: list[HTCGatewayCluster] = []
    # the paths exist only on the batch nodes: not checked here
    checks = dask.config.set({"hybrid.worker.check-paths": False})
    checks.__enter__()
    try:
        cluster = htc_gateway.new_cluster(pools={
            "pixi": {"system": "local", "pixi_project": project, "pixi_env": "gpu-env",
                     "env": {"PATH": path, "HYBRID_T_PIXI_ARGS": str(recorded)}},
            "conda": {"system": "slurm", "conda_env": "/opt/envs/ana lysis"},
            "apptainer": {"system": "slurm", "container_image": "/images/dask worker.sif",
                          "container_binds": ["/data"]},
        }, env={"HYBRID_T_SHARED": "yes"})
        names.append(cluster.name)
        made.append(cluster)
        scripts = {pool: cluster.job_script(pool) for pool in ("pixi", "conda", "apptainer")}
        worker = "-m distributed.cli.dask_worker "
        assert ("\npixi run --manifest-path '/opt/my proj'\"'\"'s/pixi.toml' --environment "
                f"gpu-env --executable python {worker}") in scripts["pixi"]
        assert ("\nconda run --no-capture-output -p '/opt/envs/ana lysis' python "
                f"{worker}") in scripts["conda"]
        assert ("\napptainer exec --bind /data '/images/dask worker.sif' python "
                f"{worker}") in scripts["apptainer"]
        for pool, script in scripts.items():
            assert "export HYBRID_T_SHARED=" in script, pool
            syntax = subprocess.run(["bash", "-n"], input=script, text=True,
                                    capture_output=True)
            assert syntax.returncode == 0, (pool, syntax.stderr)

        # the pixi pool for real, started by adaptivity: a local job runs `pixi run ...
        # python -m dask worker`, and is removed again once the work is done
        adaptive = cluster.adapt(minimum=0, maximum=1, pool="pixi", interval="0.5s",
                                 wait_count=2)
        with cluster.get_client(set_as_default=False) as client:
            assert client.gather(client.map(square, range(5))) == [x * x for x in range(5)]
        arguments = recorded.read_text().splitlines()
        assert arguments[:8] == ["run", "--manifest-path", project, "--environment", "gpu-env",
                                 "--executable", "python", "-m"]
        assert cluster.pools["pixi"].submit_calls == 1
        wait_for(lambda: cluster.jobs("pixi") == [], timeout=30,
                 message="adaptivity to remove the idle job")
        assert adaptive.errors == []
        assert cluster.pools["conda"].submit_calls == 0  # no demand, no job

        # another connection rebuilds the very same pools from the scheduler's metadata
        again = htc_gateway.connect(cluster.name)
        assert {n: p.spec for n, p in again.pools.items()} == {
            n: p.spec for n, p in cluster.pools.items()}
        assert again.job_script("apptainer") == scripts["apptainer"]
        again.close()  # connected views default to shutdown_on_close=False
        assert cluster.name in {report.name for report in htc_gateway.list_clusters()}

        cluster.close()  # new_cluster's default: shutdown_on_close=True
        assert cluster.name not in {report.name for report in htc_gateway.list_clusters()}
        assert cluster.status == "closed"
        assert not any(staging.glob(f"{cluster.name}-*"))
    finally:
        checks.__exit__(None, None, None)
        for leftover in made:  # local worker processes end with their cluster's shutdown
            if leftover.status != "closed":
                leftover.shutdown()
        _clean_up(htc_gateway, names, ())


def test_connect_to_a_cluster_made_without_hybrid_then_add_a_pool(htc_gateway, staging) -> None:
    # Gateway.submit (dask_gateway's own): a cluster without pool settings on its scheduler
    name = htc_gateway.submit()
    try:
        view = htc_gateway.connect(name)
        assert view.pools == {}  # a stock cluster: scale() would ask the gateway's workers
        view.add_pool("cpu", "slurm", cores=2, memory="1 GiB", walltime="00:20")
        assert "#SBATCH --cpus-per-task=2" in view.job_script()
        [report] = [r for r in htc_gateway.list_clusters() if r.name == name]
        other = report.connect()  # another view reads the pool back from the scheduler
        assert sorted(other.pools) == ["cpu"]
        assert other.pools["cpu"].spec == view.pools["cpu"].spec
        assert other.worker_scheduler_address == htc_gateway.worker_scheduler_address
        other.close()
        view.close(shutdown=False)
        assert name in {r.name for r in htc_gateway.list_clusters()}
    finally:
        _clean_up(htc_gateway, [name], ())
    assert name not in {r.name for r in htc_gateway.list_clusters()}


def test_each_kind_of_scheduler_metadata_has_its_own_key() -> None:
    """The pools' specs (read back by connect), the admin's limits, the dashboard's
    snapshot, the clients' heartbeats and the word that a client closes the cluster live
    under different keys: sharing one made connect() read the snapshot as pools "written by
    another version of hybrid"."""
    from hybrid.dashboard import POOLS_METADATA_KEY
    from hybrid.gateway.options import HEARTBEAT_KEY, LIMITS_KEY, METADATA_KEY
    from hybrid.gateway_server.scheduler import CLIENT_HEARTBEAT_KEY, LIMITS_METADATA_KEY
    from hybrid.scheduler_probe import CLOSING_KEY

    assert LIMITS_KEY == LIMITS_METADATA_KEY and HEARTBEAT_KEY == CLIENT_HEARTBEAT_KEY
    keys = {METADATA_KEY, LIMITS_KEY, POOLS_METADATA_KEY, HEARTBEAT_KEY, CLOSING_KEY}
    assert len(keys) == 5


def test_an_order_of_preference_on_a_gateway_cluster(htc_gateway, staging) -> None:
    """``prefer`` on a gateway cluster's batch pools, as on a HybridCluster: a bad order is
    refused naming the field, with nothing submitted; the demand beyond the preferred pool's
    maximum goes to the next pool, and both shrink back when the work is done."""
    from tests.batch._tasks import recorded_work, runs_per_key

    cluster = htc_gateway.new_cluster(pool="local")
    try:
        cluster.add_pool("fast", "local", nanny=False)
        with pytest.raises(ConfigurationError, match="a pool of this cluster") as caught:
            cluster.prefer(["local", "nowhere"])
        assert caught.value.field == "prefer.order"
        assert cluster.jobs() == [] and cluster.pools["local"].submit_calls == 0
        assert not staging.exists() or not any(staging.iterdir())  # nothing was staged
        cluster.prefer(["local", "fast"], fallback_after="1 hour")
        read_on, status = [], cluster._pools.status  # read on the loop: never half a refresh
        cluster._pools.status = lambda: read_on.append(threading.get_ident()) or status()
        assert cluster.pool_status()["local"].fallback == "fast"
        assert read_on and read_on[0] != threading.get_ident()
        del cluster._pools.status
        cluster.adapt(pool="local", minimum=0, maximum=1, interval="0.3s", wait_count=2)
        cluster.adapt(pool="fast", minimum=0, maximum=3, interval="0.3s", wait_count=2)
        with cluster.get_client(set_as_default=False) as client:
            # three tasks of 20 s (a task's own client cannot reach a gateway scheduler, so
            # no Event holds them): three jobs, one in the preferred pool
            futures = client.map(recorded_work, range(3), [20.0] * 3, pure=False)
            wait_for(lambda: len(runs_per_key(client)) == 3, timeout=120,
                     message="the three tasks to start")
            pools = cluster.pools
            assert (len(pools["local"].active()), len(pools["fast"].active())) == (1, 2)
            assert sorted(client.gather(futures)) == [0, 1, 2]
            del futures
            wait_for(lambda: not pools["local"].active() and not pools["fast"].active(),
                     timeout=90, message="both pools to shrink back to nothing")
            assert pools["local"].submit_calls == 1 and pools["fast"].submit_calls == 1
    finally:
        cluster.shutdown()


def test_a_cluster_the_gateway_stopped_submits_nothing_and_says_so(
        dev_gateway, htc_gateway, staging) -> None:
    """The gateway stops a batch-pool cluster (an admin's ``stop_cluster``, its idle
    timeout): ``scale`` and ``adapt`` then raise dask-gateway's own ``GatewayClusterError``
    (as the stock cluster's ``scale`` does) and no job goes out for a scheduler that is
    gone; ``close`` removes the job it had. A call on a closed cluster object is a
    ``GatewayClusterError`` too, for code that catches the stock one."""
    from dask_gateway import GatewayClusterError

    from hybrid.errors import ClusterClosed
    from tests.gateway.helpers import wait_for

    cluster = htc_gateway.new_cluster(pool="local")
    try:
        cluster.scale(1, wait=True, timeout=120)
        assert len(cluster.jobs()) == 1
        admin = dev_gateway.gateway()
        try:
            admin.stop_cluster(cluster.name)
            wait_for(lambda: cluster.name not in {r.name for r in admin.list_clusters()}, 60,
                     message="the gateway to stop the cluster")
        finally:
            admin.close()
        with pytest.raises(GatewayClusterError, match=f"{cluster.name}.*not running"):
            cluster.scale(2)
        with pytest.raises(GatewayClusterError, match="nothing was submitted"):
            cluster.adapt(minimum=1, maximum=2)
        assert cluster.pools["local"].submit_calls == 1
        assert cluster.pools["local"].adaptive is None
    finally:
        cluster.close()
    assert [s for s in get_system("local").query(cluster=cluster.name)
            if s.state.active] == []  # the job it had is removed
    with pytest.raises(ClusterClosed) as caught:
        cluster.scale(1)
    assert isinstance(caught.value, GatewayClusterError)
