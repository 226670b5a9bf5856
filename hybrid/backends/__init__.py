"""Backends in the style of openff-evaluator's: context managers with ``submit_task``.

The Kubernetes backends are imported on first use (they need the ``kubernetes`` package).
"""

from __future__ import annotations

from typing import Any

from hybrid.backends.base import BaseDaskBackend, CalculationBackend
from hybrid.backends.batch import (
    BaseDaskJobQueueBackend,
    BatchToolMissingWarning,
    DaskHTCondorBackend,
    DaskLSFBackend,
    DaskPBSBackend,
    DaskSGEBackend,
    DaskSLURMBackend,
)
from hybrid.backends.local import DaskLocalCluster, NoGPUWarning

_KUBERNETES = ("DaskKubernetesBackend", "DaskKubernetesExistingBackend")


def __getattr__(name: str) -> Any:
    if name in _KUBERNETES:
        from hybrid.backends import kubernetes

        return getattr(kubernetes, name)
    raise AttributeError(f"module 'hybrid.backends' has no attribute {name!r}")


__all__ = [
    "BaseDaskBackend",
    "BaseDaskJobQueueBackend",
    "BatchToolMissingWarning",
    "CalculationBackend",
    "DaskHTCondorBackend",
    "DaskKubernetesBackend",
    "DaskKubernetesExistingBackend",
    "DaskLSFBackend",
    "DaskLocalCluster",
    "DaskPBSBackend",
    "DaskSGEBackend",
    "DaskSLURMBackend",
    "NoGPUWarning",
]
