"""Batch systems: one module each on the shared :mod:`hybrid.batch.base`.

Which systems exist is the registry's (:mod:`hybrid.systems`); each system's module is
imported when a pool first uses it.
"""

from __future__ import annotations

from typing import Any

from hybrid.batch.base import BatchSystem
from hybrid.batch.jobs import JobState, JobStatus, WorkerJob
from hybrid.batch.staging import Staging
from hybrid.systems import SYSTEMS, system_class

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


def get_system(name: str, **settings: Any) -> BatchSystem:
    """The system called ``name`` (one of :data:`~hybrid.systems.SYSTEMS`), with its
    settings: ``settings`` over its section ``hybrid.batch.<name>``."""
    cls = system_class(name)
    return cls(**{**cls.configured_settings(), **settings})
