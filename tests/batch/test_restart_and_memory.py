"""What running without a nanny (hybrid's default) costs, and what it does not (issue 20).

``client.restart()`` and ``client.restart_workers()`` work on every pool kind: the local
pool, the REAL HTCondor pool, Slurm and Grid Engine, and the executing PBS and LSF TEST DOUBLES
(tests/batch/doubles; Kubernetes: tests/kubernetes/test_k8s_restart.py). Without a nanny a
restarted worker's job ends and the pool replaces it; with a nanny the worker restarts inside
its job.

A worker over its memory limit: with a nanny, the nanny kills and restarts it (in its job);
without one, the job script does what the nanny would (hybrid/worker.py ``memory_watch``),
and the pool replaces the job. Either way the task that outgrew the limit fails with
``KilledWorker`` (after ``distributed.scheduler.allowed-failures`` retries, 0 here) and the
cluster is back at its target.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import dask
import pytest
from distributed.scheduler import KilledWorker

from hybrid import HybridCluster
from hybrid.quiet_logs import RestartsExplained
from tests.batch._restart import (
    REFILL,
    active_jobs,
    check_restarts,
    worker_addresses,
    worker_processes,
)
from tests.batch._tasks import hog, square
from tests.batch.doubles import batch_double
from tests.batch.test_real_pools import wait_for

pytestmark = pytest.mark.timeout(600)

QUICK = {"hybrid.batch.poll-interval": "0.5s"}


@pytest.fixture
def doubles(tmp_path, monkeypatch) -> Iterator[None]:
    """The PBS and LSF test doubles on PATH; every process they started is gone after."""
    states = []
    for kind in ("pbs", "lsf"):
        directory = os.path.join(os.path.dirname(batch_double.__file__), kind)
        state = tmp_path / f"{kind}-double-state"
        states.append(state)
        monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv(f"HYBRID_{kind.upper()}_DOUBLE_STATE", str(state))
    monkeypatch.setenv("HYBRID_DOUBLE_PYTHON", sys.executable)
    yield
    for state in states:
        store = batch_double.StateStore(state)
        for pid in batch_double.job_pids(store):
            if batch_double.process_alive(pid):
                os.killpg(pid, signal.SIGKILL)


def use_pool(kind: str, request) -> None:
    """The real pool of ``kind``, or the PBS and LSF doubles: only for those, as their
    ``qsub``/``qstat`` on PATH would stand in for Grid Engine's own."""
    if kind in ("pbs", "lsf"):
        request.getfixturevalue("doubles")
    elif kind in ("slurm", "htcondor", "sge"):
        request.getfixturevalue({"slurm": "slurm_cluster", "htcondor": "htcondor_pool",
                                 "sge": "sge_cell"}[kind])


def options(kind: str) -> dict:
    """Pool options a job of ``kind`` needs here."""
    if kind in ("slurm", "pbs", "lsf", "sge"):
        return {"walltime": "00:15"}
    return {}


@pytest.mark.parametrize("kind", [
    "local", "pbs", "lsf",
    pytest.param("slurm", marks=pytest.mark.slurm),
    pytest.param("htcondor", marks=pytest.mark.htcondor),
    pytest.param("sge", marks=pytest.mark.sge),
])
def test_restart_without_a_nanny_refills_the_pool(kind, request, staging) -> None:
    use_pool(kind, request)
    with dask.config.set(QUICK), HybridCluster() as cluster:
        cluster.add_pool("w", kind, nanny=False, **options(kind))
        check_restarts(cluster, "w", nanny=False)
    assert active_jobs(cluster, "w") == set()


@pytest.mark.parametrize("kind", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_restart_with_a_nanny_restarts_inside_the_jobs(kind, request, staging) -> None:
    if kind == "slurm":
        request.getfixturevalue("slurm_cluster")
    with dask.config.set(QUICK), HybridCluster() as cluster:
        cluster.add_pool("w", kind, nanny=True, **options(kind))
        check_restarts(cluster, "w", nanny=True)
    assert active_jobs(cluster, "w") == set()


@pytest.mark.parametrize("nanny", [False, True], ids=["no-nanny", "nanny"])
@pytest.mark.parametrize("kind", ["local", "lsf", pytest.param("slurm", marks=pytest.mark.slurm),
                                  pytest.param("sge", marks=pytest.mark.sge)])
def test_a_worker_over_its_memory_limit_is_killed_and_replaced(kind, nanny, request,
                                                               staging) -> None:
    """(The LSF double runs job scripts with /bin/sh, as some sites do: the watch is POSIX.)"""
    use_pool(kind, request)
    settings = {**QUICK, "distributed.scheduler.allowed-failures": 0}
    with dask.config.set(settings), HybridCluster() as cluster:
        cluster.add_pool("w", kind, nanny=nanny, memory="400 MiB", **options(kind))
        pool = cluster.pools["w"]
        cluster.scale(2)
        cluster.wait_for_workers(2, timeout=REFILL, progress=False)
        with cluster.get_client() as client:
            jobs, before = active_jobs(cluster, "w"), worker_processes(client)
            submits = pool.submit_calls
            future = client.submit(hog, 900, pure=False)
            with pytest.raises(KilledWorker):
                future.result(timeout=REFILL)
            # the cluster is back at its target, and works
            cluster.wait_for_workers(2, timeout=REFILL, progress=False)
            wait_for(lambda: len(worker_addresses(client)) == 2, 60, "two workers")
            assert len(worker_processes(client) - before) == 1  # one worker replaced
            assert client.submit(square, 5).result() == 25
            if nanny:  # the nanny restarted its worker inside the job
                assert active_jobs(cluster, "w") == jobs and pool.submit_calls == submits
            else:  # the job script killed the worker; the job ended, the pool replaced it
                wait_for(lambda: len(active_jobs(cluster, "w")) == 2, 60, "two jobs")
                assert len(active_jobs(cluster, "w") & jobs) == 1
                assert pool.submit_calls == submits + 1
                ended = [s for s in pool.ended if s.job_id in jobs]
                assert len(ended) == 1
                log = pool.system.log_path(pool.staging.path, ended[0].job_id)
                wait_for(lambda: "killing it, as a nanny would" in log.read_text(), 30,
                         "the job script's word in the job's log")
        assert pool.failures == 0 and pool.failed is None
    assert active_jobs(cluster, "w") == set()


def test_a_restart_of_workers_without_a_nanny_is_explained_not_warned(staging, capfd) -> None:
    """The scheduler warned "Workers [...] do not use a nanny and will be terminated without
    restarting them" on every ``client.restart()``, though the pool replaces them (a report
    of a first-time user): this cluster's line is now an INFO line that says so."""
    import logging

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep(level=logging.DEBUG)
    logger = logging.getLogger("distributed.scheduler")
    logger.addHandler(keep)
    try:
        with dask.config.set(QUICK), HybridCluster() as cluster:
            cluster.add_pool("w", "local", nanny=False)
            cluster.scale(1)
            cluster.wait_for_workers(1, timeout=REFILL, progress=False)
            capfd.readouterr()
            with cluster.get_client() as client:
                client.restart(timeout=REFILL)
            err = capfd.readouterr().err
    finally:
        logger.removeHandler(keep)
    assert "will be terminated without restarting them" not in err, err
    lines = [r for r in seen if "without a nanny" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in lines] == [
        ("INFO", "Restarting 1 worker(s) without a nanny: they end, and their pools submit "
                 "new jobs in their place")]
    # its filter went with the cluster: another scheduler's warning stays a warning
    assert RestartsExplained.__name__ not in {type(f).__name__ for f in logger.filters}
