"""``hybrid demo``: GPU-style simulations and CPU box packing on local GPU and CPU pools.

It runs the same mixed workload twice on one local cluster, with the resource annotator on
and off, and reports where each kind of task ran and how long it took.
"""

from __future__ import annotations

import math
import os
import random
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from distributed import as_completed, get_worker
from tqdm import tqdm

from hybrid.annotator import gpu_task
from hybrid.backends.local import DaskLocalCluster, NoGPUWarning
from hybrid.resources import ComputeResources


@gpu_task
def simulate(seed: int, steps: int = 20_000) -> dict[str, Any]:
    """A GPU-style task: a Langevin-like random walk of one particle in a harmonic well."""
    start = time.perf_counter()
    rng = random.Random(seed)
    x = v = energy = 0.0
    for _ in range(steps):
        v = 0.9 * v - 0.01 * x + 0.05 * rng.gauss(0.0, 1.0)
        x += v
        energy += 0.5 * x * x
    return _where(start, energy=energy / steps)


def pack_box(seed: int, molecules: int = 120, box: float = 10.0, radius: float = 0.6) -> dict:
    """A CPU task: place non-overlapping spheres in a cubic box by random sequential addition."""
    start = time.perf_counter()
    rng = random.Random(seed)
    placed: list[tuple[float, float, float]] = []
    tries = 0
    limit = (2 * radius) ** 2
    while len(placed) < molecules and tries < 200_000:
        tries += 1
        p = tuple(rng.uniform(radius, box - radius) for _ in range(3))
        if all(math.dist(p, q) ** 2 >= limit for q in placed):
            placed.append(p)
    return _where(start, placed=len(placed))


def _where(start: float, **result: Any) -> dict[str, Any]:
    worker = get_worker()
    return {
        "worker": worker.name,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "seconds": time.perf_counter() - start,
        **result,
    }


@dataclass
class RunReport:
    """Where each kind of task ran, and for how long, in one run of the workload."""

    annotated: bool
    wall_seconds: float = 0.0
    workers: dict[str, Counter] = field(default_factory=lambda: {"simulation": Counter(),
                                                                 "packing": Counter()})
    task_seconds: dict[str, float] = field(default_factory=lambda: {"simulation": 0.0,
                                                                    "packing": 0.0})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "annotated": self.annotated,
            "wall_seconds": round(self.wall_seconds, 3),
            "workers": {kind: dict(counts) for kind, counts in self.workers.items()},
            "task_seconds": {k: round(v, 3) for k, v in self.task_seconds.items()},
        }


def run_workload(backend: DaskLocalCluster, simulations: int, packings: int, annotated: bool,
                 progress: bool = True) -> RunReport:
    """Submit the mixed workload through ``backend`` and collect a :class:`RunReport`."""
    report = RunReport(annotated=annotated)
    backend.client.annotator.enabled = annotated
    start = time.perf_counter()
    futures = {}
    for i in range(simulations):
        futures[backend.submit_task(simulate, i)] = "simulation"
    for i in range(packings):
        futures[backend.submit_task(pack_box, i)] = "packing"
    label = "annotated" if annotated else "not annotated"
    with tqdm(total=len(futures), desc=f"demo ({label})", unit="task", disable=not progress,
              leave=False) as bar:
        for future in as_completed(futures, loop=backend.client.loop):
            result = future.result()
            kind = futures[future]
            report.workers[kind][result["worker"]] += 1
            report.task_seconds[kind] += result["seconds"]
            bar.update(1)
    report.wall_seconds = time.perf_counter() - start
    return report


def format_report(report: RunReport) -> str:
    """Human-readable lines for one run."""
    title = "annotation ON " if report.annotated else "annotation OFF"
    lines = [f"{title}  (wall time {report.wall_seconds:.2f} s)"]
    for kind, counts in report.workers.items():
        where = ", ".join(f"{w}: {n}" for w, n in sorted(counts.items()))
        n = sum(counts.values())
        mean = report.task_seconds[kind] / n if n else 0.0
        lines.append(f"  {kind:<10} {n:>3} tasks, {mean:.3f} s each, ran on {where}")
    return "\n".join(lines)


def run_demo(gpu_workers: int = 2, cpu_workers: int = 2, simulations: int = 12,
             packings: int = 12, progress: bool = True) -> list[RunReport]:
    """Start the local pools, run the workload with annotation on and off, stop everything."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGPUWarning)
        backend = DaskLocalCluster(
            number_of_workers=gpu_workers,
            resources_per_worker=ComputeResources(number_of_threads=1, number_of_gpus=1),
            pools={"cpu": (cpu_workers, ComputeResources(number_of_threads=1))},
            # workers racing the scheduler's shutdown log harmless connection errors; task
            # failures still reach the demo through their futures
            silence_logs="critical",
        )
        with backend:
            backend.client.wait_for_workers(gpu_workers + cpu_workers, timeout=120)
            return [
                run_workload(backend, simulations, packings, annotated, progress)
                for annotated in (True, False)
            ]
