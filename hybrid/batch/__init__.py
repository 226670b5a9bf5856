"""Batch systems: one module each on the shared :mod:`hybrid.batch.base`."""

from __future__ import annotations

from hybrid.batch.base import (
    BatchPool,
    BatchSystem,
    JobSpec,
    JobState,
    JobStatus,
)
from hybrid.errors import ConfigurationError

__all__ = [
    "SYSTEMS",
    "BatchPool",
    "BatchSystem",
    "JobSpec",
    "JobState",
    "JobStatus",
    "get_system",
]

#: Batch system name -> "module:Class" (imported on first use: bindings are optional).
SYSTEMS = {
    "htcondor": "hybrid.batch.htcondor:HTCondor",
    "slurm": "hybrid.batch.slurm:Slurm",
    "pbs": "hybrid.batch.pbs:PBS",
    "lsf": "hybrid.batch.lsf:LSF",
    "local": "hybrid.batch.local:LocalProcesses",
    "kubernetes": "hybrid.kubernetes.pods:KubernetesPods",
}


def get_system(name: str, **options) -> BatchSystem:
    """The system called ``name``: htcondor, slurm, pbs, lsf, local or kubernetes."""
    import importlib

    key = str(name).lower()
    if key not in SYSTEMS:
        raise ConfigurationError("system", name, f"one of {', '.join(sorted(SYSTEMS))}")
    module, cls = SYSTEMS[key].split(":")
    return getattr(importlib.import_module(module), cls)(**options)
