"""P4: the annotator's cost, tasks per second with annotations vs the same graph without.

One :class:`hybrid.HybridCluster` with a local pool of CPU workers (what ``hybrid demo``
uses), one :class:`hybrid.HybridClient` whose annotator is switched on and off between
interleaved repetitions. Two graphs, each of ``tasks`` tiny tasks:

- ``map``: ``client.map(inc, range(tasks))`` then ``client.gather`` (each call annotated);
- ``delayed``: a ``dask.delayed`` sum over ``tasks`` increments, ``client.compute``'d (the
  annotator rewrites the graph into resource layers).
"""

from __future__ import annotations

import tempfile
import time
import uuid

import dask

from benchmarks.harness import Results, log, repeat, rotated


def inc(x: int) -> int:
    """The tiny task."""
    return x + 1


def add_all(*values: int) -> int:
    """Sum the increments."""
    return sum(values)


def _map(client, tasks: int) -> float:
    start = time.perf_counter()
    futures = client.map(inc, range(tasks), pure=False)
    client.gather(futures)
    elapsed = time.perf_counter() - start
    del futures
    return tasks / elapsed


def _delayed(client, tasks: int) -> float:
    parts = [dask.delayed(inc, pure=False)(i) for i in range(tasks)]
    total = dask.delayed(add_all, pure=False)(*parts)
    start = time.perf_counter()
    client.compute(total).result()
    return (tasks + 1) / (time.perf_counter() - start)


def run(results: Results, tasks: int, repeats: int, workers: int = 2) -> None:
    """Both graphs, annotated and not, ``repeats`` times, interleaved."""
    from hybrid import HybridClient, HybridCluster

    with tempfile.TemporaryDirectory(prefix="hybrid-bench-") as staging, dask.config.set(
            {"hybrid.batch.staging-directory": staging, "hybrid.scheduler.host": "127.0.0.1"}):
        with HybridCluster(name=f"bench-{uuid.uuid4().hex[:8]}",
                           dashboard_address=None) as cluster:
            cluster.add_pool("cpu", system="local", cores=1)
            cluster.scale(workers)
            with HybridClient(cluster.scheduler_address, security=cluster.security,
                              set_as_default=False) as client:
                client.wait_for_workers(workers, timeout=120)
                _map(client, min(tasks, 200))  # warm up: imports, connections
                for repetition in range(repeats):
                    log(f"annotation: repetition {repetition + 1} of {repeats}")
                    for graph, function in (("map", _map), ("delayed", _delayed)):
                        for annotated in rotated([True, False], repetition):
                            variant = "annotated" if annotated else "not annotated"
                            measure = results.measure("annotation", "local",
                                                      f"{graph}, {tasks} tasks", variant,
                                                      unit="tasks/s")

                            def once(on: bool = annotated, f=function) -> float:
                                client.annotator.enabled = on
                                return f(client, tasks)

                            repeat(measure, once)
