"""hybrid: Dask on heterogeneous facility resources."""

from hybrid import config  # noqa: F401  (loads the packaged hybrid.yaml into dask.config)
from hybrid.annotator import HybridClient, gpu_task, gpu_tasks
from hybrid.cluster import HybridCluster
from hybrid.resources import ComputeResources, GPUToolkit, PodResources, QueueWorkerResources
from hybrid.units import unit

__version__ = "0.1.0"


def __getattr__(name: str):
    """``hybrid.HTCGateway`` is imported on first use (it needs dask-gateway)."""
    if name == "HTCGateway":
        from hybrid.gateway.client import HTCGateway

        return HTCGateway
    raise AttributeError(f"module 'hybrid' has no attribute {name!r}")

__all__ = [
    "ComputeResources",
    "GPUToolkit",
    "HybridClient",
    "HybridCluster",
    "PodResources",
    "QueueWorkerResources",
    "__version__",
    "gpu_task",
    "gpu_tasks",
    "unit",
]
