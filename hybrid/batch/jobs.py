"""A worker job as every batch system sees it: its state, its tag, its name.

The words shared by every system, the pool manager and the tools above: a job's
:class:`JobState`, one :class:`JobStatus` as a system reports it, and the
:class:`WorkerJob` a pool renders and submits, tagged so that ``hybrid status`` and
``hybrid gc`` find it again from any process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from hybrid import config
from hybrid.worker import Connection

if TYPE_CHECKING:
    from hybrid.pools import PoolSpec


class JobState(str, Enum):
    """Where a job stands, in the same words for every batch system."""

    pending = "pending"
    running = "running"
    held = "held"
    #: Started, then stopped by the system (preemption by suspension, an admin, a desktop
    #: pool's owner back): it keeps its slot and its worker, and resumes by itself.
    suspended = "suspended"
    #: Asked to go, still in the queue (its processes may still be stopping).
    removing = "removing"
    finished = "finished"
    failed = "failed"
    removed = "removed"

    @property
    def active(self) -> bool:
        """Pending, running, held, suspended or being removed: the job still occupies the
        queue."""
        return self in ACTIVE_STATES


#: The states of a job still in the queue (:attr:`JobState.active`).
ACTIVE_STATES = frozenset({JobState.pending, JobState.running, JobState.held,
                           JobState.suspended, JobState.removing})
#: The states of a job that counts toward a pool's jobs: in the queue, not being removed.
QUEUED_STATES = frozenset({JobState.pending, JobState.running, JobState.held,
                           JobState.suspended})


@dataclass(frozen=True)
class JobStatus:
    """One job as the batch system reports it.

    ``starts`` is how many times the system has started the job (HTCondor's
    ``JobRunCount``; ``None`` where the query does not say): a job that starts again after
    an eviction counts up. ``evicted`` is True when the system itself says the job was
    evicted: it waits in the queue again after a vacate, or it left the queue preempted
    (state ``removed``), neither a failure.
    """

    job_id: str
    state: JobState
    reason: str | None = None
    cluster: str | None = None
    pool: str | None = None
    scheduler: str | None = None
    starts: int | None = None
    evicted: bool = False

    def for_jobs(self, job_ids: Iterable[str]) -> list[JobStatus]:
        """This status for each of ``job_ids`` (a submission's jobs, the same but for the
        id), copied field by field instead of a frozen ``__init__`` per job."""
        cls, fields, made = type(self), self.__dict__, []
        for job_id in job_ids:
            status = object.__new__(cls)
            status.__dict__.update(fields, job_id=job_id)
            made.append(status)
        return made

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"job_id": self.job_id, "state": self.state.value, "reason": self.reason,
                "cluster": self.cluster, "pool": self.pool, "scheduler": self.scheduler,
                "starts": self.starts, "evicted": self.evicted}


#: The tag of ``hybrid.yaml`` (staging directories recorded before tags were recorded).
DEFAULT_TAG = "HybridCluster"


def tag_prefix() -> str:
    """The tag that marks our jobs (``hybrid.batch.tag``, checked as
    ``hybrid.fields.Tag`` for every system that carries it)."""
    return config.get("batch.tag")


@dataclass(frozen=True)
class WorkerJob:
    """One pool's worker job in one cluster: what a system renders and submits."""

    cluster: str
    spec: PoolSpec
    connection: Connection

    @property
    def pool(self) -> str:
        """The pool's name."""
        return self.spec.name

    @property
    def tag(self) -> str:
        """``hybrid.batch.tag``."""
        return tag_prefix()

    @property
    def name_prefix(self) -> str:
        """Workers are named ``<cluster>-<pool>-<batch job id>``."""
        return f"{self.cluster}-{self.spec.name}"

    @property
    def job_name(self) -> str:
        """The batch job name: the tag, the cluster and the pool."""
        return f"{self.tag}-{self.cluster}-{self.spec.name}"

    @property
    def tag_value(self) -> str:
        """``<tag>:<cluster>:<pool>:<scheduler address>``, read back by :func:`parse_tag`."""
        return f"{self.tag}:{self.cluster}:{self.spec.name}:{self.connection.scheduler_address}"


def parse_tag(value: str, tag: str | None = None) -> tuple[str | None, str | None, str | None]:
    """``<tag>:<cluster>:<pool>[:<scheduler address>]`` -> (cluster, pool, scheduler);
    ``tag``: :func:`tag_prefix`, when the caller already has it."""
    parts = value.split(":", 3)
    if len(parts) >= 3 and parts[0] == (tag or tag_prefix()):
        return parts[1], parts[2], parts[3] if len(parts) == 4 else None
    return None, None, None


#: What the shell wrapper replaces in a job id to make its worker name's suffix.
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9._-]")


def worker_name_suffix(job_id: str) -> str:
    """The part of a worker name the job derives from its id (as the shell wrapper does)."""
    return _NOT_IN_NAMES.sub("-", job_id)
