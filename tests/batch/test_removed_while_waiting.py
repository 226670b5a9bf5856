"""A job removed from outside while it waits in the queue (``scancel``, ``qdel``,
``condor_rm`` of a pending job: a user making room, an admin, a site's policy) never ran:
it is no failure. The pool replaces it, as it replaces a running job removed from outside,
says so with a warning, and does not give up, however many such removals come.

Before, each such removal counted toward ``hybrid.batch.max-failures``: three and the pool
gave up, removed its other pending jobs and failed its waiting tasks. Where the batch system
keeps no record of a job removed while it waited (Grid Engine's accounting; Slurm 22.05's
``squeue --json`` for an array task), the pool waits a grace period for a record (a job that
started and failed between two looks has one) before it decides.

The real Slurm, Grid Engine and HTCondor pools; each job waits for a begin time.
"""

from __future__ import annotations

import logging
import time

import dask
import pytest

from hybrid import HybridCluster
from hybrid.manager import watching
from tests.batch._restart import active_jobs
from tests.batch.test_real_pools import wait_for
from tests.batch.test_restart_and_memory import QUICK, options, use_pool

pytestmark = pytest.mark.timeout(400)

REMOVALS = 3  # hybrid.batch.max-failures: as many as made a pool give up


def waiting(kind: str) -> list[str]:
    """A directive that keeps the job waiting for an hour (a begin time)."""
    later = int(time.time()) + 3600
    return {"slurm": ["--begin=now+1hour"],
            "sge": [f"-a {time.strftime('%Y%m%d%H%M', time.localtime(later))}"],
            "htcondor": [f"+HybridCIStartAfter = {later}"]}[kind]


@pytest.mark.parametrize("kind", [
    pytest.param("slurm", marks=pytest.mark.slurm),
    pytest.param("sge", marks=pytest.mark.sge),
    pytest.param("htcondor", marks=pytest.mark.htcondor),
])
def test_waiting_jobs_removed_from_outside_are_replaced_and_no_failure(
        kind, request, staging, caplog, monkeypatch) -> None:
    use_pool(kind, request)
    monkeypatch.setattr(watching, "VANISHED_GRACE", 3.0)  # (no record ever comes here)
    caplog.set_level(logging.WARNING, logger="hybrid")
    with dask.config.set(QUICK), HybridCluster() as cluster:
        pool = cluster.add_pool("w", kind, nanny=False, job_extra_directives=waiting(kind),
                                **options(kind))
        cluster.scale(2)
        wait_for(lambda: len(active_jobs(cluster, "w")) == 2, 60, "two jobs in the queue")
        removed: list[str] = []
        for _ in range(REMOVALS):
            queued = sorted(active_jobs(cluster, "w") - set(removed))
            victim = queued[-1]
            pool.system.remove([victim])  # as the batch system's own tool from outside
            removed.append(victim)
            wait_for(lambda: len(active_jobs(cluster, "w") - set(removed)) == 2, 120,
                     f"the pool to replace {victim}")

        def said() -> list[str]:
            return [r.getMessage() for r in caplog.records
                    if "was removed while it waited in the queue" in r.getMessage()]

        wait_for(lambda: len(said()) == REMOVALS, 120, "a warning for each removal")
        assert all("no failure" in line for line in said()), said()
        assert pool.failed is None and pool.failures == 0, pool.failed
        assert pool.removed_waiting == REMOVALS
        # (a job shows in the queue before its submission returns: HTCondor spools its files
        # after; the count follows then)
        wait_for(lambda: pool.submit_calls == 1 + REMOVALS, 60,
                 f"{REMOVALS} replacements counted (submit_calls {pool.submit_calls})")
        # the views show them removed, not "finished" (pool.ended feeds the Pools page)
        ended = {s.job_id: s for s in pool.ended}
        assert {ended[j].state.value for j in removed} == {"removed"}, [ended[j] for j in removed]
        assert not [r for r in caplog.records if "gives up" in r.getMessage()]


@pytest.mark.sge
def test_an_adaptive_pool_replaces_a_vanished_job_only_once_it_is_decided(
        request, staging, monkeypatch) -> None:
    """As a fixed target does: a pending job gone without a record (Grid Engine's ``qdel``)
    may have started and failed between two looks, and a replacement before its record had
    time would resubmit a failing job faster than its failures are counted. Adaptivity
    replaced it at its next step."""
    use_pool("sge", request)
    monkeypatch.setattr(watching, "VANISHED_GRACE", 6.0)
    decided: list[tuple[int, int]] = []  # (submissions, adaptive steps) when it was decided

    class Decision(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "was removed while it waited in the queue" in record.getMessage():
                decided.append((pool.submit_calls, adaptive.steps))

    handler = Decision(logging.WARNING)
    logging.getLogger("hybrid").addHandler(handler)
    try:
        with dask.config.set(QUICK), HybridCluster() as cluster:
            pool = cluster.add_pool("w", "sge", nanny=False, job_extra_directives=waiting("sge"),
                                    **options("sge"))
            adaptive = cluster.adapt(pool="w", minimum=1, maximum=1, interval="0.5s")
            wait_for(lambda: len(active_jobs(cluster, "w")) == 1 and pool.submit_calls == 1,
                     60, "one job in the queue")
            steps = adaptive.steps
            pool.system.remove(sorted(active_jobs(cluster, "w")))  # qdel, from outside
            wait_for(lambda: decided, 120, "the pool to decide on the removed job")
            submissions, steps_then = decided[0]
            assert steps_then >= steps + 3, (steps, steps_then)  # it stepped meanwhile
            assert submissions == 1  # and submitted nothing for the undecided job
            wait_for(lambda: pool.submit_calls == 2, 60, "the replacement, once decided")
            assert pool.failures == 0 and pool.failed is None
    finally:
        logging.getLogger("hybrid").removeHandler(handler)
