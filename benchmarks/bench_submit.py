"""Submit n workers in ONE transaction vs n single submits, on the real CI batch systems.

Run after ci/htcondor/up.sh and ci/slurm/up.sh (as root), with their env.sh sourced:

    python benchmarks/bench_submit.py [--workers 20] [--repeats 3]

Prints, per system, the median seconds of each way and the ratio against the anchor (n single
submits, what a naive loop does), measured side by side in this one process. The jobs are
removed right after each submit; none is left behind.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import dask

from hybrid.batch import BatchPool, JobSpec, get_system
from hybrid.worker import WorkerOptions


def _pool(system: str, tag: str) -> BatchPool:
    # an unreachable scheduler and a short death timeout: workers exit on their own
    worker = WorkerOptions(scheduler_address="tcp://127.0.0.1:9", nanny=False, death_timeout=5)
    spec = JobSpec(cluster=tag, pool="bench", worker=worker, walltime="00:05")
    return BatchPool(get_system(system), spec)


def one_transaction(system: str, n: int, tag: str) -> float:
    pool = _pool(system, tag)
    start = time.perf_counter()
    pool.submit(n)
    elapsed = time.perf_counter() - start
    pool.close()
    return elapsed


def single_submits(system: str, n: int, tag: str) -> float:
    pool = _pool(system, tag)
    start = time.perf_counter()
    for _ in range(n):
        pool.submit(1)
    elapsed = time.perf_counter() - start
    pool.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=["htcondor", "slurm"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as staging, dask.config.set(
            {"hybrid.batch.staging-directory": staging}):
        for system in args.systems:
            anchor, ours = [], []
            for i in range(args.repeats):  # interleaved, so both see the same machine load
                anchor.append(single_submits(system, args.workers, f"bench-a{i}"))
                ours.append(one_transaction(system, args.workers, f"bench-o{i}"))
            a, o = statistics.median(anchor), statistics.median(ours)
            print(f"{system}: {args.workers} workers: one transaction {o:.3f} s, "
                  f"{args.workers} single submits (anchor) {a:.3f} s, ratio {o / a:.3f} "
                  f"(median of {args.repeats})")


if __name__ == "__main__":
    main()
