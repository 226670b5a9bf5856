"""Feeding the GPU first: the annotator's priorities, checked on a REAL local scheduler.

One CPU worker with one thread makes the order visible: it runs one task at a time, highest
priority first. Unrelated CPU work is computed first; the packing a GPU task waits for,
computed right after, must still run before it (and not with
``hybrid.annotator.feed-priority: 0``).
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Iterator

import cloudpickle
import dask
import pytest
from dask import delayed

from hybrid.annotator import ResourceAnnotator, feed_priority
from hybrid.backends import DaskLocalCluster, NoGPUWarning
from hybrid.errors import ConfigurationError
from hybrid.resources import ComputeResources
from tests.foundation._tasks import gpu_window, pickle_by_value

pickle_by_value()
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers never import tests


def started(i: int, sleep: float = 0.05) -> float:
    """A CPU task: when it started (the workers run one at a time)."""
    began = time.time()
    time.sleep(sleep)
    return began


def pack_started(i: int) -> float:
    """The packing a GPU task waits for: when it started."""
    return started(i)


@pytest.fixture(scope="module")
def one_cpu_thread() -> Iterator[DaskLocalCluster]:
    """One GPU worker and one CPU worker of one thread."""
    backend = DaskLocalCluster(
        number_of_workers=1, resources_per_worker=ComputeResources(number_of_gpus=1),
        pools={"cpu": (1, ComputeResources(number_of_threads=1))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGPUWarning)
        backend.start()
    try:
        backend.client.wait_for_workers(2, timeout=60)
        yield backend
    finally:
        backend.stop()


def _graph(fillers: int = 12):
    """Unrelated CPU tasks built first, then a packing and the GPU task that waits for it."""
    other = [delayed(started, pure=False)(i) for i in range(fillers)]
    box = delayed(pack_started, pure=False)(0)
    run = delayed(gpu_window, pure=False)(box, 0.01)
    return other, box, run


def _order(backend: DaskLocalCluster) -> tuple[float, list[float]]:
    """Unrelated CPU work computed first, the GPU pipeline right after (a later graph
    generation: without priorities it waits for the earlier work)."""
    other, box, run = _graph()
    first = backend.client.compute(other, fifo_timeout=0)
    then = backend.client.compute([box, run], fifo_timeout=0)
    others = backend.client.gather(first, errors="raise")
    packed, _ = backend.client.gather(then, errors="raise")
    return packed, others


def test_the_packing_a_gpu_task_waits_for_runs_before_other_cpu_work(one_cpu_thread):
    packed, others = _order(one_cpu_thread)
    # one CPU thread: at most the task it was already running when the graph arrived
    assert sum(t < packed for t in others) <= 1, (packed, sorted(others))


def test_without_feed_priority_the_graph_order_decides(one_cpu_thread):
    with dask.config.set({"hybrid.annotator.feed-priority": 0}):
        packed, others = _order(one_cpu_thread)
    assert sum(t < packed for t in others) >= len(others) // 2, (packed, sorted(others))


def test_priorities_are_set_from_the_graph_and_keep_the_callers():
    annotator = ResourceAnnotator(client=None, enabled=True)  # type: ignore[arg-type]
    other, box, run = _graph(2)
    with dask.annotate(priority=7):
        pinned = delayed(started, pure=False)(99)
    annotated = annotator.annotate_collections([*other, run, pinned], priority=5)
    by_key = {}
    for collection in annotated:
        (layer,) = collection.__dask_graph__().layers.values()  # one layer, keys annotated
        for key in layer:
            by_key[key] = layer.annotations.get("priority", lambda k: None)(key)
    assert by_key[box.key] == 6 and by_key[run.key] == 6  # the caller's 5, plus 1
    assert [by_key[o.key] for o in other] == [None, None]  # the caller's priority applies
    assert by_key[pinned.key] == 7  # a task's own priority annotation is kept


def test_a_bad_feed_priority_is_a_configuration_error():
    for bad in (-1, 1.5, "high", True):
        with dask.config.set({"hybrid.annotator.feed-priority": bad}):
            with pytest.raises(ConfigurationError, match="feed-priority"):
                feed_priority()


def test_a_chain_of_delayed_tasks_computes_with_its_annotations(one_cpu_thread):
    """A GPU task after two CPU tasks (its graph used to lose the CPU tasks: "lost
    dependencies"), shared by two collections computed together."""
    box = delayed(pack_started, pure=False)(1)
    prepared = delayed(started, pure=False)(box)
    runs = [delayed(gpu_window, pure=False)(prepared, 0.01) for _ in range(2)]
    client = one_cpu_thread.client
    futures = client.compute([*runs, box])
    assert len(client.gather(futures, errors="raise")) == 3
    restrictions = client.run_on_scheduler(
        lambda dask_scheduler, keys: [dask_scheduler.tasks[k].resource_restrictions
                                      for k in keys], keys=[runs[0].key, box.key])
    assert restrictions == [{"GPU": 0.5}, {"notGPU": 1}]
