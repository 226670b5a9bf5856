"""Fixtures: the Kubernetes API server double (two pretend nodes), a real scheduler, settings."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator

import cloudpickle
import dask
import pytest
from distributed import Client, LocalCluster

from hybrid.batch import WorkerJob
from hybrid.kubernetes import KubernetesPods
from hybrid.pools import PoolSpec
from hybrid.resources import PodResources
from hybrid.worker import Connection, TLSFiles
from tests.kubernetes import _tasks
from tests.kubernetes.kube_api_double import KubeAPIServerDouble, NodeDouble

# The pods do not have the tests installed: their tasks travel by value.
cloudpickle.register_pickle_by_value(_tasks)

TOKEN = "double-token"
MISSING_IMAGE = "registry.invalid/hybrid/missing:1"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
GPU_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]}}}


def gpu_resources(minimum: int = 0, maximum: int = 2, **changes) -> PodResources:
    """A GPU group: one GPU per pod, tolerating the GPU node's taint, required onto it."""
    settings = dict(number_of_threads=1, memory_limit="2 GiB", ephemeral_storage_limit="1 GiB",
                    number_of_gpus=1, preferred_gpu_toolkit="CUDA",
                    tolerations=copy.deepcopy(GPU_TOLERATIONS),
                    affinity_specification=copy.deepcopy(GPU_AFFINITY))
    settings.update(changes)
    return PodResources(minimum_number_of_workers=minimum, maximum_number_of_workers=maximum,
                        **settings)


def cpu_resources(minimum: int = 0, maximum: int = 2, **changes) -> PodResources:
    """A CPU group: one thread per pod, no GPU, no affinity."""
    settings = dict(number_of_threads=1, memory_limit="1 GiB", ephemeral_storage_limit="1 GiB")
    settings.update(changes)
    return PodResources(minimum_number_of_workers=minimum, maximum_number_of_workers=maximum,
                        **settings)


def worker_job(system: KubernetesPods | str = "kubernetes", resources: PodResources | None = None,
               pool: str = "cpu", cluster: str = "k8s-test",
               address: str = "tcp://127.0.0.1:1", tls: TLSFiles | None = None,
               **options) -> WorkerJob:
    """A pool's job as HybridCluster.add_pool builds it (no nanny, a short death timeout:
    quicker), for a scheduler at ``address``."""
    options = {"nanny": False, "death_timeout": 20, **options}
    spec = PoolSpec.build(pool, system, resources, **options)
    return WorkerJob(cluster, spec, Connection(address, tls))


def double_nodes() -> list[NodeDouble]:
    """A CPU node and a tainted GPU node with four GPUs."""
    return [
        NodeDouble("cpu-node-1", labels={"node.kubernetes.io/instance-type": "cpu"}),
        NodeDouble("gpu-node-1", labels={"nvidia.com/gpu.present": "true"},
                   allocatable={"cpu": "16", "memory": "64Gi", "ephemeral-storage": "500Gi",
                                "pods": "110", "nvidia.com/gpu": "4"},
                   taints=[GPU_TAINT]),
    ]


@pytest.fixture(autouse=True)
def hybrid_settings(tmp_path) -> Iterator[None]:
    """Job staging and dask's scratch space under the test's directory; quick polling."""
    with dask.config.set({"hybrid.batch.staging-directory": str(tmp_path / "staging"),
                          "temporary-directory": str(tmp_path / "dask-scratch"),
                          "hybrid.batch.poll-interval": "0.3s"}):
        yield


@pytest.fixture
def kube(tmp_path) -> Iterator[KubeAPIServerDouble]:
    """The API server double, with a bearer token; checks every pod process is gone after.

    Its kubelet takes half a second to act on a deletion, so deleted pods are seen while
    they are being deleted, as on a real cluster."""
    double = KubeAPIServerDouble(tmp_path / "kube", nodes=double_nodes(), token=TOKEN,
                                 missing_images=(MISSING_IMAGE,),
                                 termination_delay=0.5).start()
    try:
        yield double
    finally:
        double.stop()
    for pid in double.started_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.fixture
def scheduler() -> Iterator[LocalCluster]:
    """A real scheduler on loopback, with no workers of its own."""
    cluster = LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                           processes=False, protocol="tcp")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def client(scheduler) -> Iterator[Client]:
    """A client of :func:`scheduler`."""
    with Client(scheduler, set_as_default=False) as connected:
        yield connected
