"""DaskLocalCluster: REAL local scheduler and nanny workers, GPU device pinning, bad inputs."""

from __future__ import annotations

import os
import socket
import time
import warnings
from urllib.parse import urlparse

import psutil
import pytest

from hybrid.backends import DaskLocalCluster, NoGPUWarning
from hybrid.backends.local import detect_gpus
from hybrid.errors import ConfigurationError, HybridError
from hybrid.resources import ComputeResources, QueueWorkerResources
from tests.foundation._tasks import add, pickle_by_value, simulate, worker_environment
from tests.scheduler_workers import scheduler_workers

pickle_by_value()

GPU = ComputeResources(number_of_gpus=1)


def _worker_pids(backend: DaskLocalCluster) -> dict[str, int]:
    """Worker name -> PID of the worker's own subprocess (its nanny runs there)."""
    pids = {name: worker.process.pid for name, worker in backend.cluster.workers.items()}
    assert all(isinstance(pid, int) for pid in pids.values()), pids
    return pids


def _by_name(backend: DaskLocalCluster, per_address: dict) -> dict:
    info = scheduler_workers(backend.client)
    return {info[address]["name"]: value for address, value in per_address.items()}


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid):
            return True
        time.sleep(0.1)
    return False


def _refuses_connections(address: str) -> bool:
    url = urlparse(address)
    try:
        socket.create_connection((url.hostname, url.port), timeout=2).close()
    except OSError:
        return True
    return False


def test_context_manager_starts_pins_devices_and_stops_everything(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert detect_gpus() == ["0", "1"]
    backend = DaskLocalCluster(
        number_of_workers=2, resources_per_worker=GPU,
        pools={"cpu": (1, ComputeResources(number_of_threads=2))}, gpu_fraction=0.25,
    )
    with pytest.raises(HybridError, match="not started"):
        backend.client  # noqa: B018  (the property raises before start)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoGPUWarning)  # two devices for two workers: no warning
        with backend as started:
            assert started is backend
            client = backend.client
            client.wait_for_workers(3, timeout=60)
            scheduler_address = client.scheduler.address
            assert urlparse(scheduler_address).hostname == "127.0.0.1"
            pids = _worker_pids(backend)
            assert set(pids) == {"gpu-0", "gpu-1", "cpu-0"}
            children = {p.pid for p in psutil.Process().children(recursive=True)}
            assert set(pids.values()) <= children
            # each worker runs in (a child of) its own subprocess, not a child of this one
            for name, pid in _by_name(backend, client.run(os.getpid)).items():
                assert pids[name] in {p.pid for p in psutil.Process(pid).parents()}

            seen = _by_name(backend, client.run(worker_environment, "CUDA_VISIBLE_DEVICES"))
            assert seen["gpu-0"] == "0"
            assert seen["gpu-1"] == "1"

            future = backend.submit_task(add, 2, 3)
            assert future.result(timeout=30) == 5
            assert backend.submit_task(add, 2, 3, gpu_task=True).result(timeout=30) == 5
            assert client.annotator.enabled is True
            assert client.annotator.resources_for(simulate) == {"GPU": 0.25}
            assert backend.submit_task(simulate, 0).result(timeout=30) in {"gpu-0", "gpu-1"}
    assert backend.cluster is None
    with pytest.raises(HybridError):
        backend.client  # noqa: B018
    for name, pid in pids.items():
        assert _gone(pid), f"worker {name} (PID {pid}) is still running after the block"
    assert _refuses_connections(scheduler_address)
    backend.stop()  # a second stop is harmless


def test_gpu_pool_without_devices_still_advertises_gpu(monkeypatch):
    """With no CPU pool at all, the GPU workers also take CPU tasks (notGPU = threads)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus() == []
    backend = DaskLocalCluster(number_of_workers=1, resources_per_worker=GPU)
    with pytest.warns(NoGPUWarning, match="no GPU device was found"):
        backend.start()
    try:
        client = backend.client
        client.wait_for_workers(1, timeout=60)
        resources = {w["name"]: w["resources"]
                     for w in scheduler_workers(client).values()}
        assert resources == {"gpu-0": {"GPU": 1, "notGPU": 1}}
        seen = _by_name(backend, client.run(worker_environment, "CUDA_VISIBLE_DEVICES"))
        assert seen == {"gpu-0": ""}
        assert backend.submit_task(simulate, 1).result(timeout=30) == "gpu-0"
        assert backend.submit_task(add, 1, 1).result(timeout=30) == 2  # a CPU task runs too
        pids = _worker_pids(backend)
    finally:
        backend.stop()
    assert all(_gone(pid) for pid in pids.values())


def test_annotate_resources_false_reaches_the_client():
    backend = DaskLocalCluster(number_of_workers=1, annotate_resources=False)
    with backend:
        assert backend.client.annotator.enabled is False
        # a GPU task runs on the only (CPU) worker: nothing asks for GPU
        assert backend.submit_task(simulate, 2).result(timeout=30) == "cpu-0"


# ---------------------------------------------------------------- worker specs (no processes)


def _resources(backend: DaskLocalCluster) -> dict[str, dict[str, float]]:
    return {name: spec["options"]["worker_kwargs"]["resources"]
            for name, spec in backend.worker_specs().items()}


def _devices(backend: DaskLocalCluster) -> dict[str, str | None]:
    return {name: spec["options"]["worker_kwargs"]["env"].get("CUDA_VISIBLE_DEVICES")
            for name, spec in backend.worker_specs().items()}


def test_worker_specs_give_each_gpu_worker_its_own_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")
    backend = DaskLocalCluster(
        number_of_workers=2, resources_per_worker=ComputeResources(number_of_gpus=2),
        pools={"small": (1, GPU), "cpu": (2, ComputeResources(number_of_threads=3))},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoGPUWarning)
        assert _devices(backend) == {"gpu-0": "0,1", "gpu-1": "2,3", "small-0": "4",
                                     "cpu-0": None, "cpu-1": None}
    specs = backend.worker_specs()
    assert specs["gpu-0"]["options"]["worker_kwargs"]["resources"] == {"GPU": 2, "notGPU": 0}
    assert specs["cpu-1"]["options"]["worker_kwargs"]["resources"] == {"GPU": 0, "notGPU": 3}
    assert specs["cpu-1"]["options"]["worker_kwargs"]["nthreads"] == 3


def test_gpu_workers_take_cpu_tasks_only_when_there_is_no_cpu_pool(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    only_gpu = DaskLocalCluster(number_of_workers=1,
                                resources_per_worker=ComputeResources(number_of_threads=3,
                                                                      number_of_gpus=1),
                                pools={"big": (1, GPU)})
    resources = _resources(only_gpu)
    assert resources == {"gpu-0": {"GPU": 1, "notGPU": 3}, "big-0": {"GPU": 1, "notGPU": 1}}
    mixed = DaskLocalCluster(number_of_workers=1, resources_per_worker=GPU,
                             pools={"cpu": (1, ComputeResources(number_of_threads=2))})
    resources = _resources(mixed)
    assert resources == {"gpu-0": {"GPU": 1, "notGPU": 0}, "cpu-0": {"GPU": 0, "notGPU": 2}}


def test_too_few_devices_are_shared_with_a_warning(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    backend = DaskLocalCluster(number_of_workers=2, resources_per_worker=GPU)
    with pytest.warns(NoGPUWarning, match="asks for 2 GPUs but 1 are visible"):
        assert _devices(backend) == {"gpu-0": "7", "gpu-1": "7"}


@pytest.mark.parametrize("visible", ["", "-1"])
def test_no_visible_device_gives_an_empty_list(monkeypatch, visible):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert detect_gpus() == []


# ---------------------------------------------------------------- bad inputs


BAD_INPUTS = [
    ({"number_of_workers": -1}, "DaskLocalCluster.number_of_workers", "an integer >= 0"),
    ({"number_of_workers": True}, "DaskLocalCluster.number_of_workers", "an integer >= 0"),
    ({"number_of_workers": "2"}, "DaskLocalCluster.number_of_workers", "an integer >= 0"),
    ({"number_of_workers": 0}, "DaskLocalCluster.number_of_workers", "at least one worker"),
    ({"resources_per_worker": QueueWorkerResources().to_dict()},
     "DaskLocalCluster.resources_per_worker", "ComputeResources"),
    ({"pools": {"big": ComputeResources()}}, "DaskLocalCluster.pools['big']",
     "a tuple (number_of_workers >= 0, ComputeResources(...))"),
    ({"pools": {"big": [2, ComputeResources()]}}, "DaskLocalCluster.pools['big']", "a tuple"),
    ({"pools": {"big": (2, "threads=1")}}, "DaskLocalCluster.pools['big']", "a tuple"),
    ({"pools": {"big": (-1, ComputeResources())}}, "DaskLocalCluster.pools['big']", "a tuple"),
    ({"pools": {"big": (1, ComputeResources(), "extra")}}, "DaskLocalCluster.pools['big']",
     "a tuple"),
    ({"number_of_workers": 1, "resources_per_worker": GPU, "pools": {"gpu": (1, GPU)}},
     "DaskLocalCluster.pools['gpu']", "a pool name other than ['gpu']"),
    ({"pools": {"cpu": (1, ComputeResources())}}, "DaskLocalCluster.pools['cpu']",
     "a pool name other than ['cpu']"),
    ({"gpu_fraction": 0}, "DaskLocalCluster.gpu_fraction", "a number in (0, 1]"),
]


@pytest.mark.parametrize(("kwargs", "field", "accepted"), BAD_INPUTS,
                         ids=[f"{i}-{f}" for i, (_, f, _) in enumerate(BAD_INPUTS)])
def test_bad_inputs_raise_before_anything_starts(kwargs, field, accepted):
    """The constructor refuses: no ``start()`` is ever reached, so nothing can have started."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ConfigurationError) as caught:
        DaskLocalCluster(**kwargs)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field} = ")
    assert accepted in str(caught.value)
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before, f"processes were started: {after - before}"
