"""The resource annotator, on a REAL local distributed cluster with GPU and CPU workers.

One cluster (two GPU workers, two CPU workers) serves the routing tests of this module; a
second one (one GPU worker with two threads) shows GPU sharing by fraction. On machines
without a GPU the GPU pool still advertises ``GPU=1 notGPU=0``: routing is the same.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import dask
import dask.array as da
import numpy as np
import pytest
from dask import delayed
from distributed import Client, futures_of

from hybrid import HybridClient, gpu_task, gpu_tasks
from hybrid.annotator import (
    ResourceAnnotator,
    is_gpu_task,
    resources_argument,
    task_resources,
    worker_resources,
)
from hybrid.backends import DaskLocalCluster, NoGPUWarning
from hybrid.errors import ConfigurationError
from hybrid.resources import ComputeResources
from tests.foundation._tasks import (
    WORKER_NAMES,
    block_worker,
    collect,
    gpu_window,
    pack,
    pickle_by_value,
    simulate,
    undecorated_gpu_work,
)
from tests.scheduler_workers import scheduler_workers

GPU_WORKERS = {"gpu-0", "gpu-1"}
CPU_WORKERS = {"cpu-0", "cpu-1"}

pickle_by_value()


# ---------------------------------------------------------------- fixtures


def _start(backend: DaskLocalCluster, workers: int) -> DaskLocalCluster:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGPUWarning)  # this machine may have no GPU
        backend.start()
    backend.client.wait_for_workers(workers, timeout=60)
    return backend


@pytest.fixture(scope="module")
def hybrid_local() -> Iterator[DaskLocalCluster]:
    """Two GPU workers (GPU=1 notGPU=0) and two CPU workers (GPU=0 notGPU=1), 1 thread each."""
    backend = DaskLocalCluster(
        number_of_workers=2,
        resources_per_worker=ComputeResources(number_of_gpus=1),
        pools={"cpu": (2, ComputeResources(number_of_threads=1))},
    )
    try:
        yield _start(backend, 4)
    finally:
        backend.stop()


@pytest.fixture(scope="module")
def one_gpu_two_threads() -> Iterator[DaskLocalCluster]:
    """One GPU worker with one GPU and two threads."""
    backend = DaskLocalCluster(
        number_of_workers=1,
        resources_per_worker=ComputeResources(number_of_threads=2, number_of_gpus=1),
    )
    try:
        yield _start(backend, 1)
    finally:
        backend.stop()


def _restrictions(client: Client, keys: list) -> list:
    """The resource restrictions the scheduler holds for ``keys``."""

    def read(dask_scheduler, keys):
        return [dask_scheduler.tasks[k].resource_restrictions for k in keys]

    return client.run_on_scheduler(read, keys=keys)


def _who_has(client: Client, keys: list) -> dict[str, set[str]]:
    """Key -> names of the workers holding its result."""
    names = {a: w["name"] for a, w in scheduler_workers(client).items()}
    return {k: {names[a] for a in addresses} for k, addresses in client.who_has(keys).items()}


# ---------------------------------------------------------------- marking and resources


def test_gpu_task_marks_without_changing_the_function():
    def function(x):
        return x + 1

    assert not is_gpu_task(function)
    assert gpu_task(function) is function
    assert is_gpu_task(function)
    assert function(1) == 2
    assert is_gpu_task(simulate)
    assert not is_gpu_task(pack)


def test_gpu_task_refuses_what_it_cannot_mark():
    with pytest.raises(ConfigurationError, match="a callable to mark as a GPU task"):
        gpu_task(42)


def test_gpu_task_under_dask_delayed_gives_a_configuration_error():
    """``@gpu_task`` must sit below ``@dask.delayed``; the other order is refused clearly."""
    with pytest.raises(ConfigurationError) as caught:
        gpu_task(delayed(pack))
    assert "gpu_task" in str(caught.value)


def test_task_resources_follow_the_configured_fraction():
    assert task_resources(True) == {"GPU": 0.5}
    assert task_resources(False) == {"notGPU": 1}
    with dask.config.set({"hybrid.annotator.gpu-fraction": 0.25}):
        assert task_resources(True) == {"GPU": 0.25}
    assert task_resources(True, fraction=1.0) == {"GPU": 1.0}


@pytest.mark.parametrize("fraction", [0, -0.5, 1.5, "half", True])
def test_bad_fraction_is_a_configuration_error(fraction):
    with pytest.raises(ConfigurationError) as caught:
        task_resources(True, fraction=fraction)
    assert caught.value.field == "gpu_fraction"  # the argument, as the caller named it
    assert "a number in (0, 1]" in str(caught.value)
    with dask.config.set({"hybrid.annotator.gpu-fraction": fraction}), pytest.raises(
            ConfigurationError) as caught:
        task_resources(True)
    assert caught.value.field == "hybrid.annotator.gpu-fraction"  # the configuration key


def test_bad_fraction_fails_before_a_client_connects():
    started = time.monotonic()
    with pytest.raises(ConfigurationError):
        HybridClient("tcp://127.0.0.1:9", gpu_fraction=2.0, timeout="20s")
    assert time.monotonic() - started < 5  # no connection attempt


def test_worker_resources():
    assert worker_resources(number_of_gpus=1, number_of_threads=4) == {"GPU": 1, "notGPU": 0}
    assert worker_resources(number_of_gpus=2, number_of_threads=1) == {"GPU": 2, "notGPU": 0}
    assert worker_resources(number_of_gpus=0, number_of_threads=2) == {"GPU": 0, "notGPU": 2}
    assert resources_argument(worker_resources(0, 2)) == "GPU=0 notGPU=2"
    # a GPU worker of a cluster without CPU workers takes CPU tasks on its threads as well
    assert worker_resources(1, 4, serves_cpu_tasks=True) == {"GPU": 1, "notGPU": 4}
    assert worker_resources(0, 2, serves_cpu_tasks=True) == {"GPU": 0, "notGPU": 2}


def test_gpu_tasks_context_is_a_dask_annotation():
    assert "resources" not in dask.get_annotations()
    with gpu_tasks():
        assert dask.get_annotations()["resources"] == {"GPU": 0.5}
    with gpu_tasks(fraction=1.0):
        assert dask.get_annotations()["resources"] == {"GPU": 1.0}
    assert "resources" not in dask.get_annotations()


def test_annotator_settings_come_from_config_unless_given():
    assert ResourceAnnotator(None).enabled is True
    assert ResourceAnnotator(None).fraction == 0.5
    with dask.config.set({"hybrid.annotator.enabled": False,
                          "hybrid.annotator.gpu-fraction": 0.2}):
        annotator = ResourceAnnotator(None)
        assert (annotator.enabled, annotator.fraction) == (False, 0.2)
        assert annotator.resources_for(simulate) is None
        annotator = ResourceAnnotator(None, enabled=True, fraction=0.75)
        assert annotator.resources_for(simulate) == {"GPU": 0.75}
        assert annotator.resources_for(pack) == {"notGPU": 1}
        assert annotator.resources_for(pack, gpu=True) == {"GPU": 0.75}
        assert annotator.resources_for(simulate, gpu=False) == {"notGPU": 1}


# ---------------------------------------------------------------- the real cluster


def test_workers_advertise_gpu_or_not_gpu(hybrid_local):
    workers = scheduler_workers(hybrid_local.client).values()
    advertised = {w["name"]: w["resources"] for w in workers}
    assert advertised == {
        "gpu-0": {"GPU": 1, "notGPU": 0},
        "gpu-1": {"GPU": 1, "notGPU": 0},
        "cpu-0": {"GPU": 0, "notGPU": 1},
        "cpu-1": {"GPU": 0, "notGPU": 1},
    }


def test_client_submit_routes_every_task(hybrid_local):
    client = hybrid_local.client
    gpu = [client.submit(simulate, i, pure=False) for i in range(8)]
    cpu = [client.submit(pack, i, pure=False) for i in range(8)]
    assert set(client.gather(gpu)) <= GPU_WORKERS
    assert set(client.gather(cpu)) <= CPU_WORKERS
    keys = [f.key for f in gpu + cpu]
    assert _restrictions(client, keys) == [{"GPU": 0.5}] * 8 + [{"notGPU": 1}] * 8


def test_client_map_routes_every_task(hybrid_local):
    client = hybrid_local.client
    gpu = client.map(simulate, range(8), pure=False)
    cpu = client.map(pack, range(8), pure=False)
    forced = client.map(undecorated_gpu_work, range(4), gpu_task=True, pure=False)
    assert set(client.gather(gpu)) <= GPU_WORKERS
    assert set(client.gather(cpu)) <= CPU_WORKERS
    assert set(client.gather(forced)) <= GPU_WORKERS


def test_explicit_resources_are_left_alone(hybrid_local):
    future = hybrid_local.client.submit(pack, 0, resources={"GPU": 1}, pure=False)
    assert future.result() in GPU_WORKERS  # held: the scheduler keeps the task
    assert _restrictions(hybrid_local.client, [future.key]) == [{"GPU": 1}]


def test_backend_submit_task_routes_every_task(hybrid_local):
    gpu = [hybrid_local.submit_task(simulate, i) for i in range(6)]
    cpu = [hybrid_local.submit_task(pack, i) for i in range(6)]
    forced = [hybrid_local.submit_task(undecorated_gpu_work, i, gpu_task=True) for i in range(6)]
    demoted = [hybrid_local.submit_task(simulate, i, gpu_task=False) for i in range(4)]
    client = hybrid_local.client
    assert set(client.gather(gpu)) <= GPU_WORKERS
    assert set(client.gather(cpu)) <= CPU_WORKERS
    assert set(client.gather(forced)) <= GPU_WORKERS
    assert set(client.gather(demoted)) <= CPU_WORKERS


def test_delayed_graph_of_decorated_functions_is_routed(hybrid_local):
    client = hybrid_local.client
    gpu = [delayed(simulate)(i, sleep=0.01, dask_key_name=f"graph-sim-{i}") for i in range(6)]
    cpu = [delayed(pack)(i, dask_key_name=f"graph-pack-{i}") for i in range(6)]
    total = delayed(collect)(delayed(collect)(*gpu), delayed(collect)(*cpu))
    gpu_names, cpu_names = client.compute(total).result()
    assert set(gpu_names) <= GPU_WORKERS
    assert set(cpu_names) <= CPU_WORKERS


def test_delayed_graph_persist_is_routed(hybrid_local):
    client = hybrid_local.client
    gpu = [delayed(simulate)(i, dask_key_name=f"persist-sim-{i}") for i in range(4)]
    cpu = [delayed(pack)(i, dask_key_name=f"persist-pack-{i}") for i in range(4)]
    persisted = client.persist([*gpu, *cpu])
    client.gather(futures_of(persisted))
    keys = [p.key for p in persisted]
    assert _restrictions(client, keys) == [{"GPU": 0.5}] * 4 + [{"notGPU": 1}] * 4
    names = client.gather(client.compute(persisted))
    assert set(names[:4]) <= GPU_WORKERS
    assert set(names[4:]) <= CPU_WORKERS


def test_gpu_tasks_context_routes_undecorated_functions_in_a_delayed_graph(hybrid_local):
    with gpu_tasks():
        inside = [delayed(pack)(i, dask_key_name=f"ctx-gpu-{i}") for i in range(6)]
    outside = [delayed(pack)(i, dask_key_name=f"ctx-cpu-{i}") for i in range(6)]
    total = delayed(collect)(delayed(collect)(*inside), delayed(collect)(*outside))
    inside_names, outside_names = hybrid_local.client.compute(total).result()
    assert set(inside_names) <= GPU_WORKERS
    assert set(outside_names) <= CPU_WORKERS


def test_gpu_tasks_context_marks_array_tasks(hybrid_local):
    """Array tasks built in ``gpu_tasks()`` run on GPU workers when the graph is not optimized.

    (dask's array optimization fuses blockwise layers and drops their annotations.)
    """
    client = hybrid_local.client
    blocks = da.zeros((12,), chunks=2)
    with gpu_tasks():
        on_gpu = blocks.map_blocks(block_worker, dtype=int)
    persisted = client.persist(on_gpu, optimize_graph=False)
    futures = futures_of(persisted)
    client.gather(futures)
    keys = [f.key for f in futures]
    assert len(keys) == 6
    assert _restrictions(client, keys) == [{"GPU": 0.5}] * 6
    for holders in _who_has(client, keys).values():
        assert holders <= GPU_WORKERS
    values = client.compute(persisted).result()
    assert {WORKER_NAMES[i] for i in np.unique(values)} <= GPU_WORKERS


def test_per_client_fraction(hybrid_local):
    with HybridClient(hybrid_local.cluster, gpu_fraction=0.25, set_as_default=False) as client:
        future = client.submit(simulate, 0, pure=False)
        assert future.result() in GPU_WORKERS
        assert _restrictions(client, [future.key]) == [{"GPU": 0.25}]
    with dask.config.set({"hybrid.annotator.gpu-fraction": 1.0}), HybridClient(
            hybrid_local.cluster, set_as_default=False) as client:
        future = client.submit(simulate, 0, pure=False)
        assert future.result() in GPU_WORKERS
        assert _restrictions(client, [future.key]) == [{"GPU": 1.0}]


def test_without_annotation_both_kinds_spread_over_all_workers(hybrid_local):
    with HybridClient(hybrid_local.cluster, annotate_resources=False,
                      set_as_default=False) as client:
        assert client.annotator.enabled is False
        futures = []
        for i in range(8):
            futures.append(("simulation", client.submit(simulate, i, sleep=0.2, pure=False)))
            futures.append(("packing", client.submit(pack, i, sleep=0.2, pure=False)))
        ran_on: dict[str, set[str]] = {"simulation": set(), "packing": set()}
        for kind, future in futures:
            ran_on[kind].add(future.result())
        assert _restrictions(client, [f.key for _, f in futures]) == [None] * 16
    for kind, names in ran_on.items():
        assert names & GPU_WORKERS, f"no {kind} ran on a GPU worker: {names}"
        assert names & CPU_WORKERS, f"no {kind} ran on a CPU worker: {names}"


# ---------------------------------------------------------------- sharing a GPU


def _two_windows(client: Client, sleep: float = 0.6) -> list[tuple[float, float]]:
    futures = [client.submit(gpu_window, i, sleep, pure=False) for i in range(2)]
    return client.gather(futures)


def _overlap(windows: list[tuple[float, float]]) -> bool:
    (start_a, end_a), (start_b, end_b) = windows
    return max(start_a, start_b) < min(end_a, end_b)


def test_two_half_gpu_tasks_share_one_gpu(one_gpu_two_threads):
    windows = _two_windows(one_gpu_two_threads.client)
    assert _overlap(windows), f"tasks of GPU=0.5 on GPU=1 ran one after the other: {windows}"


def test_two_whole_gpu_tasks_take_turns(one_gpu_two_threads):
    with HybridClient(one_gpu_two_threads.cluster, gpu_fraction=1.0,
                      set_as_default=False) as client:
        windows = _two_windows(client)
    assert not _overlap(windows), f"tasks of GPU=1.0 on GPU=1 ran at once: {windows}"
