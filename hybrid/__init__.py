"""hybrid: Dask on heterogeneous facility resources."""

from hybrid import config  # noqa: F401  (loads the packaged hybrid.yaml into dask.config)
from hybrid.annotator import HybridClient, gpu_task, gpu_tasks
from hybrid.resources import ComputeResources, GPUToolkit, PodResources, QueueWorkerResources
from hybrid.units import unit

__version__ = "0.1.0"

__all__ = [
    "ComputeResources",
    "GPUToolkit",
    "HybridClient",
    "PodResources",
    "QueueWorkerResources",
    "__version__",
    "gpu_task",
    "gpu_tasks",
    "unit",
]
