"""Backends in the style of openff-evaluator's: context managers with ``submit_task``."""

from hybrid.backends.base import BaseDaskBackend
from hybrid.backends.batch import (
    BaseDaskJobQueueBackend,
    DaskHTCondorBackend,
    DaskLSFBackend,
    DaskPBSBackend,
    DaskSLURMBackend,
)
from hybrid.backends.kubernetes import DaskKubernetesBackend, DaskKubernetesExistingBackend
from hybrid.backends.local import DaskLocalCluster, NoGPUWarning

__all__ = [
    "BaseDaskBackend",
    "BaseDaskJobQueueBackend",
    "DaskHTCondorBackend",
    "DaskKubernetesBackend",
    "DaskKubernetesExistingBackend",
    "DaskLSFBackend",
    "DaskLocalCluster",
    "DaskPBSBackend",
    "DaskSLURMBackend",
    "NoGPUWarning",
]
