"""Rendering speed: job scripts per second for each system, against the shell-quoting anchor.

    python benchmarks/bench_render.py [--jobs 2000] [--repeats 5]

The anchor is the cheapest thing every rendering must do anyway: quoting the worker command
for the shell. The ratio says how much the whole template (directives, environment, worker
body) costs on top of it. Medians of interleaved repeats, in one process.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from hybrid.batch import JobSpec, get_system
from hybrid.templates import shell_join
from hybrid.worker import WorkerOptions

STAGING = Path("/tmp/hybrid-bench-staging")


def spec() -> JobSpec:
    worker = WorkerOptions(scheduler_address="tcp://10.0.0.1:8786", nthreads=4,
                           memory_limit=8 * 2**30, resources={"GPU": 1, "notGPU": 0})
    return JobSpec(cluster="bench", pool="gpu", worker=worker, cores=4, memory=8 * 2**30,
                   gpus=1, walltime="02:00", env={f"VAR{i}": f"value {i} $x" for i in range(10)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    job = spec()
    argv = job.worker.argv()
    for name in ("htcondor", "slurm", "pbs", "lsf"):
        system = get_system(name)
        system.render(job, STAGING, 4)  # warm the template cache
        anchor, ours = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(args.jobs):
                shell_join(argv)
            anchor.append(time.perf_counter() - start)
            start = time.perf_counter()
            for _ in range(args.jobs):
                system.render(job, STAGING, 4)
            ours.append(time.perf_counter() - start)
        a, o = statistics.median(anchor), statistics.median(ours)
        print(f"{name}: {args.jobs / o:,.0f} scripts/s ({o / args.jobs * 1e6:.0f} us each); "
              f"ratio to quoting the command alone {o / a:.1f} (median of {args.repeats})")


if __name__ == "__main__":
    main()
