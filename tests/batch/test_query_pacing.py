"""How often a pool asks its batch system (hybrid.manager.pacing): every
``hybrid.batch.poll-interval`` while its jobs change, less often the longer nothing does (a
quarter of the quiet time), at most ``hybrid.batch.poll-interval-max`` apart; back to the base
at once when a worker leaves or joins, or jobs are submitted or removed.

Before it, every pool asked every 2 s for as long as it lived (an adaptive pool's step and a
wait for workers each asked again), which is what sites ask tools not to do to slurmctld.
The local pool's test counts the real queries of a real pool; the Slurm test shows a change
only the batch system sees (a waiting job removed from outside) found within the bound.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time

import dask
import pytest

from hybrid import HybridCluster
from hybrid.manager.pacing import QUIET_SHARE, QueryPacing, intervals
from tests.batch.test_real_pools import slurm_jobs, wait_for

pytestmark = pytest.mark.timeout(240)


def counted_queries(pool) -> list[float]:
    """Make the pool's REAL batch-system queries note when each was made (monotonic)."""
    made: list[float] = []
    lock = threading.Lock()
    query = pool.system.query

    def noted(*args, **kwargs):
        with lock:
            made.append(time.monotonic())
        return query(*args, **kwargs)

    pool.system.query = noted
    return made


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


# --------------------------------------------------------------------------- the rule
def test_the_interval_is_the_base_while_jobs_change_then_a_quarter_of_the_quiet_time():
    with dask.config.set({"hybrid.batch.poll-interval": "2s",
                          "hybrid.batch.poll-interval-max": "1 minute"}):
        assert intervals() == (2.0, 60.0)
        pacing = QueryPacing()
        assert pacing.interval(1000.0) == 2.0 and pacing.due(1000.0)  # nothing known yet
        pacing.changed_at = pacing.asked_at = 1000.0
        assert not pacing.due(1001.9) and pacing.due(1002.0)  # the base, just after a change
        assert pacing.interval(1008.0) == 2.0  # (a quarter of 8 s quiet: still the base)
        assert pacing.interval(1040.0) == pytest.approx(40 * QUIET_SHARE) == 10.0
        pacing.asked_at = 1035.0  # asked 5 s ago, quiet for 40 s: not yet (10 s apart)
        assert not pacing.due(1040.0) and pacing.due(1050.0)  # (15 s >= a quarter of 50 s)
        assert pacing.interval(1000.0 + 3600) == 60.0  # an hour quiet: once a minute
        pacing.changed_at = 1040.0  # something happened: the base again at once
        assert pacing.interval(1041.0) == 2.0 and pacing.due(1041.0)


def test_the_longest_interval_is_never_shorter_than_the_base():
    with dask.config.set({"hybrid.batch.poll-interval": "30s",
                          "hybrid.batch.poll-interval-max": "10s"}):
        assert intervals() == (30.0, 30.0)


def test_the_longest_interval_is_checked_when_a_pool_is_added(staging):
    from hybrid.errors import ConfigurationError

    with dask.config.set({"hybrid.batch.poll-interval-max": "soon"}), \
            HybridCluster(dashboard_address=None) as cluster:
        with pytest.raises(ConfigurationError) as error:
            cluster.add_pool("cpu", "local")
    assert error.value.field == "hybrid.batch.poll-interval-max"


# --------------------------------------------------------------------------- a real pool
def _kill(pool, job_id: str) -> None:
    """SIGKILL a local job's process group from outside hybrid, as an OOM killer would."""
    os.killpg(pool.system._procs[job_id].pid, signal.SIGKILL)


def test_a_quiet_pool_asks_less_often_and_a_worker_that_leaves_brings_the_base_back(
        staging) -> None:
    base, longest = 0.1, 2.0
    with dask.config.set({"hybrid.batch.poll-interval": f"{base}s",
                          "hybrid.batch.poll-interval-max": f"{longest}s"}), \
            HybridCluster(dashboard_address=None) as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False)
        made = counted_queries(pool)
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=60, progress=False)
        (job,) = pool.active()
        passes = cluster.manager.passes
        # quiet: the queries spread out until they are the longest interval apart (with a
        # query every pass, as before, they never would)
        wait_for(lambda: any(g >= 0.9 * longest for g in gaps(made)), 60,
                 "two queries the longest interval apart")
        quiet_passes, quiet_queries = cluster.manager.passes - passes, len(made)
        assert quiet_queries < quiet_passes / 3, (quiet_queries, quiet_passes)
        # the worker's job is killed: its worker leaves, the next pass asks at once (not
        # the longest interval later), finds the job gone and replaces it
        asked = len(made)
        killed = time.monotonic()
        _kill(pool, job)
        wait_for(lambda: len(made) > asked, 30, "a query after the worker left")
        assert made[asked] - killed < 0.75 * longest, made[asked] - killed
        wait_for(lambda: job not in pool.jobs and len(pool.active()) == 1, 30,
                 "the killed job replaced")
        cluster.wait_for_workers(1, timeout=60, progress=False)
        # quiet again, then a scale-down: a removal is a change, so the pool asks at the
        # base until the job has left, not the longest interval later
        asked = len(made)
        wait_for(lambda: any(g >= 0.9 * longest for g in gaps(made[asked:])), 60,
                 "two queries the longest interval apart again")
        cluster.scale(0)
        scaled = time.monotonic()
        wait_for(lambda: not pool.jobs, 30, "the removed job to leave")
        assert time.monotonic() - scaled < 0.75 * longest + 1.0


def test_an_adaptive_pool_s_steps_ask_as_the_pacing_allows(staging) -> None:
    """An adaptive pool's step asked the batch system at every step (every 2 s by default)
    on top of the reconcile: now its steps follow the pool's pacing too."""
    with dask.config.set({"hybrid.batch.poll-interval": "0.1s",
                          "hybrid.batch.poll-interval-max": "2s"}), \
            HybridCluster(dashboard_address=None) as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False)
        made = counted_queries(pool)
        cluster.adapt(minimum=1, maximum=1, interval="0.1s")
        cluster.wait_for_workers(1, timeout=60, progress=False)
        steps, asked = pool.adaptive.steps, len(made)
        wait_for(lambda: any(g >= 1.8 for g in gaps(made[asked:])), 60,
                 "two queries the longest interval apart")
        assert len(made) - asked < (pool.adaptive.steps - steps) / 3


# --------------------------------------------------------------------------- real Slurm
@pytest.mark.slurm
def test_a_waiting_job_removed_from_outside_is_seen_within_a_quarter_of_the_quiet_time(
        slurm_cluster, staging) -> None:
    """The change a worker cannot announce: a job that waits (it never starts) is removed
    with ``scancel`` after the pool was quiet for a while. The pool has spread its squeue
    calls out by then, and still sees the job gone within the interval then in force."""
    import subprocess

    base, longest = 0.5, 4.0
    with dask.config.set({"hybrid.batch.poll-interval": f"{base}s",
                          "hybrid.batch.poll-interval-max": f"{longest}s"}), \
            HybridCluster(name=f"pace-{os.getpid()}", dashboard_address=None) as cluster:
        pool = cluster.add_pool("wait", "slurm", nanny=False, walltime="00:10",
                                job_extra_directives=["--begin=now+1hour"])
        made = counted_queries(pool)
        cluster.scale(2)
        wait_for(lambda: len(slurm_jobs(cluster.name)) == 2, 60, "two waiting jobs")
        wait_for(lambda: any(g >= 0.9 * longest for g in gaps(made)), 90,
                 "squeue calls the longest interval apart")
        victim = sorted(pool.active())[0]
        asked = len(made)
        removed = time.monotonic()
        subprocess.run(["scancel", victim], check=True, timeout=60)
        wait_for(lambda: victim not in pool.jobs, 60, "the pool to see the job gone")
        seen = time.monotonic() - removed
        # one interval (at most the longest) and the query itself, on a busy machine
        assert seen < longest + 3.0, seen
        assert len(made) - asked <= 4  # it was not found by asking at every pass
        assert victim not in slurm_jobs(cluster.name)
    wait_for(lambda: slurm_jobs(cluster.name) == [], 60, "the close to remove the rest")

