"""P6: one reconcile poll of many tracked jobs, with the history lookup, and name matching.

A :class:`hybrid.HybridCluster` submits ``jobs`` jobs that never run (one submission), one of
them is removed behind hybrid's back and waited out of the queue, and then:

- ``poll (history)``: ``PoolManager.refresh`` of every tracked job: the queue query, then the
  history lookup of the job that left (it leaves tracking);
- ``poll``: the next ``refresh``, every job still in the queue;
- ``match 1000 workers``: ``PoolManager.pool_workers`` mapping 1000 worker names to tracked
  job ids (what ``wait_for_workers`` does every 0.1 s).

dask-jobqueue has no counterpart (it does not ask the batch system about its jobs).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import uuid

import dask

from benchmarks import realpools
from benchmarks.harness import Results, log, repeat
from benchmarks.submit import HOLD


def _remove_behind_our_back(system: str, job_id: str) -> None:
    if system == "htcondor":
        import htcondor2

        htcondor2.Schedd().act(htcondor2.JobAction.Remove, [job_id], reason="benchmark")
        query = f"ClusterId == {job_id.split('.')[0]} && ProcId == {job_id.split('.')[1]}"
        deadline = time.monotonic() + 120
        while realpools.condor_in_queue(query) and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    if system == "sge":
        subprocess.run(["qdel", job_id], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 120
        while realpools.sge_task_listed(job_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    subprocess.run(["scancel", job_id], check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "--noheader", "--array", f"--jobs={job_id}",
                              "--format=%T"], capture_output=True, text=True).stdout
        if not out.strip() or out.split()[0] in realpools.SLURM_ENDED:
            return
        time.sleep(0.1)


def run(results: Results, systems: list[str], jobs: int, repeats: int) -> None:
    """Each available system: submit ``jobs``, time the polls ``repeats`` times, close."""
    for system in systems:
        problem = realpools.problem(system)
        if problem:
            results.skip(f"reconcile ({system})", problem)
            continue
        with tempfile.TemporaryDirectory(prefix="hybrid-bench-") as staging, \
                dask.config.set({"hybrid.batch.staging-directory": staging,
                                 "hybrid.scheduler.host": "127.0.0.1",
                                 # no background reconcile (it would refill the pool), and
                                 # the jobs removed behind hybrid's back are no reason to quit
                                 "hybrid.batch.poll-interval": "1h",
                                 "hybrid.batch.max-failures": 1000}):
            measure_system(results, system, jobs, repeats)


def measure_system(results: Results, system: str, jobs: int, repeats: int) -> None:
    """Submit ``jobs`` that never run, time the polls and the matching, close."""
    from hybrid import HybridCluster

    config = f"{jobs} jobs"
    cluster = HybridCluster(name=f"bench-{uuid.uuid4().hex[:8]}", dashboard_address=None)
    try:
        pool = cluster.add_pool("w", system=system, cores=1, walltime="00:30",
                                job_extra_directives=[HOLD[system]])
        log(f"reconcile: submitting {jobs} jobs to {system}")
        cluster.scale(jobs)
        manager = cluster.manager
        assert manager is not None
        live = {f"tcp://127.0.0.1:{20000 + i}": {"name": f"{pool.job.name_prefix}-{j}"}
                for i, j in enumerate(list(pool.jobs)[:1000])}

        def refresh() -> float:
            start = time.perf_counter()
            cluster.sync(manager.refresh, pool)
            return time.perf_counter() - start

        def match() -> float:
            start = time.perf_counter()
            found = cluster.sync(manager.pool_workers, pool, live)
            elapsed = time.perf_counter() - start
            assert len(found) == len(live), "worker names did not match their jobs"
            return elapsed

        for repetition in range(repeats):
            log(f"reconcile ({system}): repetition {repetition + 1} of {repeats}")
            victim = list(pool.jobs)[-1]
            _remove_behind_our_back(system, victim)
            before = len(pool.jobs)
            repeat(results.measure("reconcile", system, config, "poll (history)"), refresh)
            if victim in pool.jobs or len(pool.jobs) != before - 1:
                raise AssertionError(f"the job that left ({victim}) is still tracked")
            repeat(results.measure("reconcile", system, config, "poll"), refresh)
            repeat(results.measure("reconcile", system, config, "match 1000 workers"), match)
        pool.target = 0
    finally:
        start = time.perf_counter()
        cluster.close()
        results.measure("reconcile", system, config, "close").samples.append(
            time.perf_counter() - start)
