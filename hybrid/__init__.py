"""hybrid: Dask on heterogeneous facility resources.

Importing ``hybrid`` is light: the classes below are imported on first use, and the only
setting it touches is the ``hybrid`` section of ``dask.config`` (its packaged defaults).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from hybrid import config  # noqa: F401  (the packaged hybrid.yaml defaults, under "hybrid")

try:
    __version__ = version("hybrid")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

#: Public name -> the module that defines it (imported on first use).
_LAZY = {
    "HybridCluster": "hybrid.cluster",
    "HybridClient": "hybrid.annotator",
    "gpu_task": "hybrid.annotator",
    "gpu_tasks": "hybrid.annotator",
    "ComputeResources": "hybrid.resources",
    "GPUToolkit": "hybrid.resources",
    "PodResources": "hybrid.resources",
    "QueueWorkerResources": "hybrid.resources",
    "PoolSpec": "hybrid.pools",
    "unit": "hybrid.units",
    "HTCGateway": "hybrid.gateway.client",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hybrid' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [*sorted(_LAZY), "__version__"]
