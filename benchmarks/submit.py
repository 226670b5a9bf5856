"""P2: n workers submitted, ``scale(n)`` in one transaction vs dask-jobqueue's per-job submits.

``hybrid``: ``HybridCluster.scale(n)`` on a pool whose jobs never run (held, or matching no
machine), timed until it returns: rendering, staging and the one submission. Its ``close``
is recorded beside it (removing the n jobs, confirmed with the batch system). On HTCondor its
files are spooled (the default off a shared filesystem); ``hybrid shared fs`` submits them to
be read in place (``job_files: shared``), run by the pool's job user from the pool's shared
filesystem (:func:`benchmarks.realpools.run_as_pool_user`), and ``hybrid transfer`` from there
too with ``job_files: transfer`` (not spooled: the local schedd transfers them to each job).

``dask-jobqueue``: what its ``scale(n)`` does to submit: one job script per worker, written
to a file and handed to ``condor_submit``/``sbatch``/``qsub``, all n at once on the event
loop (as its ``SpecCluster`` starts them), timed until every submit command has answered. Its
jobs never run either, and removed by the benchmark afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import dask

from benchmarks import realpools
from benchmarks.harness import Results, log, repeat, rotated

#: A directive that keeps the jobs from ever running (spooled HTCondor jobs cannot be held).
HOLD = {"htcondor": "requirements = false", "slurm": "--hold", "sge": "-h"}


def hybrid_once(system: str, n: int, staging: Path,
                settings: dict[str, Any] | None = None) -> dict[str, float]:
    """scale(n) of held jobs, then close()."""
    from hybrid import HybridCluster

    with dask.config.set({"hybrid.batch.staging-directory": str(staging),
                          "hybrid.scheduler.host": "127.0.0.1", **(settings or {})}):
        cluster = HybridCluster(name=f"bench-{uuid.uuid4().hex[:8]}", dashboard_address=None)
        try:
            cluster.add_pool("w", system=system, cores=1, memory="1 GiB", walltime="00:30",
                             job_extra_directives=[HOLD[system]])
            start = time.perf_counter()
            cluster.scale(n)
            submitted = time.perf_counter() - start
        finally:
            closing = time.perf_counter()
            cluster.close()
            closed = time.perf_counter() - closing
    return {"value": submitted, "close": closed}


def jobqueue_once(system: str, n: int, staging: Path) -> float:
    """dask-jobqueue's submit path for n workers, all at once; the jobs are removed after."""
    marker = f"bench{uuid.uuid4().hex[:8]}"
    job_cls, options = _jobqueue_job(system, marker, staging)

    async def submit_all() -> float:
        jobs = [job_cls(scheduler="tcp://127.0.0.1:9", name=f"{marker}-{i}", **options)
                for i in range(n)]

        async def submit(job: Any) -> None:
            with job.job_file() as script:
                job.job_id = job._job_id_from_submit_output(await job._submit_job(script))

        start = time.perf_counter()
        await asyncio.gather(*(submit(job) for job in jobs))
        return time.perf_counter() - start

    try:
        return asyncio.run(submit_all())
    finally:
        realpools.remove_named(system, marker)


def _jobqueue_job(system: str, marker: str, staging: Path) -> tuple[type, dict[str, Any]]:
    common = {"cores": 1, "memory": "1GiB", "python": sys.executable,
              "local_directory": str(staging)}
    if system == "htcondor":
        from dask_jobqueue.htcondor import HTCondorJob

        return HTCondorJob, {**common, "disk": "1GiB", "job_extra_directives": {
            "My.BenchMarker": f'"{marker}"', "requirements": "false"}}
    if system == "sge":
        from dask_jobqueue.sge import SGEJob

        return SGEJob, {**common, "queue": os.environ.get("HYBRID_CI_SGE_QUEUE", "hybrid.q"),
                        "walltime": "00:30:00", "job_name": marker,
                        "resource_spec": "mem_free=1G",
                        "job_extra_directives": ["-o /dev/null", "-h"]}
    from dask_jobqueue.slurm import SLURMJob

    return SLURMJob, {**common, "queue": os.environ.get("HYBRID_CI_SLURM_PARTITION", "debug"),
                      "walltime": "00:30:00", "job_name": marker,
                      "job_extra_directives": ["--output=/dev/null", "--hold"]}


#: HTCondor variants run by the pool's job user (its options of :mod:`benchmarks._pool_user`).
POOL_USER = {"hybrid shared fs": [], "hybrid transfer": ["transfer"]}


def run(results: Results, systems: list[str], n: int, repeats: int) -> None:
    """Both ways on every available system, ``repeats`` times, interleaved."""
    available = []
    for system in systems:
        problem = realpools.problem(system)
        if problem:
            results.skip(f"submit ({system})", problem)
        else:
            available.append(system)
    variants = ["hybrid", *POOL_USER, "dask-jobqueue"]
    if problem := realpools.jobqueue_problem():
        results.skip("submit (dask-jobqueue)", problem)
        variants.remove("dask-jobqueue")
    if "htcondor" in available and (problem := realpools.shared_problem()):
        for variant in POOL_USER:
            results.skip(f"submit ({variant})", problem)
            variants.remove(variant)
    if not available:
        return
    runners = {"hybrid": hybrid_once, "dask-jobqueue": jobqueue_once,
               **{variant: lambda s, k, d, o=options: realpools.run_as_pool_user(
                   "submit", k, timeout=600, options=o)
                  for variant, options in POOL_USER.items()}}
    with tempfile.TemporaryDirectory(prefix="hybrid-bench-") as tmp, \
            realpools.condor_tools() if "htcondor" in available else _Nothing():
        for repetition in range(repeats):
            log(f"submit: repetition {repetition + 1} of {repeats}")
            for system in available:
                kinds = [v for v in variants if system == "htcondor" or v not in POOL_USER]
                for variant in rotated(kinds, repetition):
                    measure = results.measure("submit", system, f"n={n}", variant)
                    repeat(measure, lambda v=variant, s=system: runners[v](s, n, Path(tmp)))


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
