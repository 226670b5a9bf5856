"""Load on the REAL HTCondor pool (and the REAL Slurm): 1000 workers' jobs submitted and
removed, three rounds, none leaked.

The jobs can never start (HTCondor: ``requirements = False``; Slurm: ``--begin`` an hour
later), so none of them connects anywhere; they are real jobs in the real queue all the same,
tracked by the pool manager. Each round asserts that the batch system lists exactly the 1000
jobs the pool tracks, that reconcile periods over 1000 tracked jobs resubmit nothing, and
that after ``scale(0)`` the batch system lists none of them (HTCondor: in ANY state).
docs/reliability.md ("Load") lists the bounds asserted here. How long a submission takes
is printed, not asserted: its speed is a benchmark's (``python -m benchmarks --only
submit``), side by side with dask-jobqueue's, since a timed assertion fails on a busy
machine (12.7 s against a bound of 12 s, once, with two other test workers on 2 cores).
"""

from __future__ import annotations

import os
import time

import dask
import htcondor2
import pytest

from hybrid import HybridCluster
from hybrid.batch import JobState
from tests.batch.test_real_pools import wait_for
from tests.reliability.test_faults import POLL, REAL, RealSystem, Reconciles, bring_up

pytestmark = pytest.mark.timeout(600)

real_fixture = pytest.fixture(params=REAL, name="real")(bring_up)

JOBS = 1000
ROUNDS = 3
#: Seconds from ``scale(0)`` until the batch system lists none of the 1000.
REMOVE_BOUND = 30.0


def condor_queue(cluster: str) -> dict[str, tuple[int, int]]:
    """Every job of ``cluster`` in the schedd's queue, in ANY state (removed and completed
    ones too): id -> (JobStatus, NumJobStarts)."""
    ads = htcondor2.Schedd().query(constraint=f'HybridCluster == "{cluster}"',
                                   projection=["ClusterId", "ProcId", "JobStatus",
                                               "NumJobStarts"])
    return {f"{ad['ClusterId']}.{ad['ProcId']}": (int(ad["JobStatus"]),
                                                  int(ad.get("NumJobStarts", 0) or 0))
            for ad in ads}


def listed(real: RealSystem, cluster: str) -> list[str]:
    """The cluster's jobs the batch system lists (HTCondor: in any state)."""
    if real.name == "htcondor":
        return sorted(condor_queue(cluster))
    return sorted(real.live(cluster))


def test_1000_jobs_submitted_and_removed_in_rounds_and_none_leaks(real: RealSystem,
                                                                   staging) -> None:
    timings = []
    with dask.config.set({"hybrid.batch.poll-interval": f"{POLL}s"}), HybridCluster(
            name=f"load{os.getpid()}{real.name[:2]}") as cluster:
        reconciles = Reconciles(cluster.manager)
        pool = cluster.add_pool("idle", real.name, nanny=False, death_timeout=10,
                                walltime="00:05", job_extra_directives=[real.never_starts])
        for round_ in range(1, ROUNDS + 1):
            started = time.monotonic()
            cluster.scale(JOBS)
            submitted = time.monotonic() - started
            ids = pool.active()
            # one transaction: one HTCondor cluster, one Slurm array
            assert len(ids) == JOBS and len({j.split(".")[0].split("_")[0] for j in ids}) == 1
            assert listed(real, cluster.name) == sorted(ids) == sorted(real.live(cluster.name))
            reconciles.wait(2)  # periods that refresh 1000 tracked jobs resubmit nothing
            assert pool.submit_calls == round_ and len(pool.active()) == JOBS
            assert {s.state for s in pool.jobs.values()} == {JobState.pending}  # none ran
            if real.name == "htcondor":
                assert {n for _, n in condor_queue(cluster.name).values()} == {0}

            started = time.monotonic()
            cluster.scale(0)
            wait_for(lambda: listed(real, cluster.name) == [], REMOVE_BOUND,
                     f"round {round_}: the batch system to list none of the {JOBS} jobs")
            removed = time.monotonic() - started
            timings.append((submitted, removed))
            assert pool.remove_calls == round_
        assert cluster.connected_workers() == []
        assert pool.failures == 0 and pool.failed is None
    assert listed(real, cluster.name) == []
    assert not any(staging.glob(f"{cluster.name}-*"))
    print(f"\n{real.name}: " + "; ".join(
        f"round {i}: scale({JOBS}) {s:.1f} s, scale(0) to none listed {r:.1f} s"
        for i, (s, r) in enumerate(timings, 1)))
