"""Batch systems: one module each on the shared :mod:`hybrid.batch.base`."""

from __future__ import annotations

import importlib
from typing import Any

from hybrid.batch.base import (
    BatchSystem,
    JobState,
    JobStatus,
    Staging,
    WorkerJob,
)
from hybrid.errors import ConfigurationError

__all__ = [
    "SYSTEMS",
    "BatchSystem",
    "JobState",
    "JobStatus",
    "Staging",
    "WorkerJob",
    "get_system",
    "system_class",
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


def system_class(name: Any) -> type[BatchSystem]:
    """The class of the system called ``name``."""
    key = str(name).lower() if isinstance(name, str) else None
    if key not in SYSTEMS:
        raise ConfigurationError("system", name, f"one of {', '.join(sorted(SYSTEMS))}")
    module, cls = SYSTEMS[key].split(":")
    return getattr(importlib.import_module(module), cls)


def configured_settings(cls: type[BatchSystem]) -> dict[str, Any]:
    """The system's own keys of its section ``hybrid.batch.<name>`` (not the pool defaults)."""
    from hybrid import config

    section = config.section(f"batch.{cls.name}")
    return {k: v for k, v in section.items() if k in cls.Settings.model_fields and v is not None}


def get_system(name: str, **settings: Any) -> BatchSystem:
    """The system called ``name`` (htcondor, slurm, pbs, lsf, local or kubernetes), with its
    settings: ``settings`` over its section ``hybrid.batch.<name>``."""
    cls = system_class(name)
    return cls(**{**configured_settings(cls), **settings})
