"""One pool of a cluster as the pool manager tracks it: its jobs, target and failures.

A :class:`ManagedPool` holds a :class:`~hybrid.pools.PoolSpec`, its batch system, the jobs
it tracks (as of the last refresh) and its target; :class:`PoolStatus` is what a user is
shown of it. The :class:`~hybrid.manager.PoolManager` changes them; nothing here asks a
batch system anything.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress, filterfalse, repeat
from operator import and_, attrgetter, ge, is_, is_not, neg, not_, sub
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hybrid.batch import BatchSystem, JobState, JobStatus, Staging, WorkerJob
from hybrid.batch.jobs import QUEUED_STATES, worker_name_suffix
from hybrid.manager.pacing import QueryPacing
from hybrid.manager.records import ChangeLog, CountingDict
from hybrid.pools import PoolSpec
from hybrid.routing import GPU, NOT_GPU

__all__ = ["EXIT_HINTS", "KEPT_LOGS", "ManagedPool", "PoolStatus", "keep_log", "short_ids",
           "tail_of"]

#: The reason of a job that left the queue without a record of how it ended.
GONE = "no longer in the queue"
#: The order :meth:`ManagedPool.least_needed` removes jobs in (other states: 2): a
#: suspended job's worker does nothing, and cannot hand its results over while stopped.
_REMOVAL_RANK = {JobState.held: 0, JobState.pending: 1, JobState.suspended: 1.5}
#: A job the pool does not track: ranked as pending in the order of removal, and not
#: counted as pending among the stale jobs.
_UNKNOWN = JobStatus("", JobState.pending)
_NOT_KEPT = SimpleNamespace(state=None)
_state, _reason, _job_id = attrgetter("state"), attrgetter("reason"), attrgetter("job_id")
#: The job states a pool's status counts (the jobs still in the queue).
_SHOWN = (JobState.pending, JobState.running, JobState.suspended, JobState.held,
          JobState.removing)


@dataclass(frozen=True)
class PoolStatus:
    """What a user is shown of one pool: its jobs by state, with the batch system's reasons.

    ``jobs`` counts the pool's jobs in the queue by state (``pending``, ``running``,
    ``suspended``, ``held``, ``removing``); ``reasons`` gives, per state, each reason the batch
    system gave and how many jobs it holds (``{"pending": {"Resources": 3}}``); ``connected`` is
    the number of the pool's jobs whose worker has joined; ``adaptive`` the bounds while the
    pool adapts. ``retiring`` counts the jobs at the end of their lifetime (their workers drain,
    their replacements are on the way), ``evictions`` the jobs the batch system evicted or
    preempted so far (none of them a failure), ``oldest_pending`` how long the longest-waiting
    pending job has waited (seconds), and ``fallback`` the pool that takes this pool's demand
    when its jobs wait longer than ``fallback_after`` seconds
    (:meth:`hybrid.HybridCluster.prefer`).
    """

    name: str
    system: str
    resource: str
    target: int
    jobs: dict[str, int]
    reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    connected: int = 0
    adaptive: tuple[int, int] | None = None
    failed: str | None = None
    retiring: int = 0
    evictions: int = 0
    oldest_pending: float | None = None
    fallback: str | None = None
    fallback_after: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"name": self.name, "system": self.system, "resource": self.resource,
                "target": self.target, "jobs": dict(self.jobs),
                "reasons": {k: dict(v) for k, v in self.reasons.items()},
                "connected": self.connected,
                "adaptive": list(self.adaptive) if self.adaptive else None,
                "failed": self.failed, "retiring": self.retiring,
                "evictions": self.evictions, "oldest_pending": self.oldest_pending,
                "fallback": self.fallback, "fallback_after": self.fallback_after}

    def summary(self) -> str:
        """One line: ``pool gpu (htcondor): 2 running, 3 pending (Resources: 3); target 5``."""
        parts = []
        for state, count in self.jobs.items():
            if count:
                why = self.reasons.get(state)
                detail = (" (" + ", ".join(f"{r}: {n}" for r, n in why.items()) + ")"
                          if why else "")
                parts.append(f"{count} {state}{detail}")
        text = f"pool {self.name} ({self.system}): " + (", ".join(parts) or "no job")
        if self.oldest_pending is not None and self.oldest_pending >= 60:
            text += f", the oldest pending for {_duration(self.oldest_pending)}"
        text += f"; target {self.target}"
        if self.adaptive:
            text += f" (adaptive {self.adaptive[0]}-{self.adaptive[1]})"
        if self.retiring:
            text += f"; {self.retiring} retiring at the end of their lifetime"
        if self.evictions:
            text += f"; {self.evictions} evicted so far"
        if self.fallback:
            text += f"; {self.fallback_words()}"
        if self.failed:
            text += f"; gave up: {self.failed}"
        return text

    def fallback_words(self) -> str:
        """``"falls back to fast after 5 min pending"`` (``""`` without a fallback)."""
        return (f"falls back to {self.fallback} after {_duration(self.fallback_after or 0)} "
                "pending") if self.fallback else ""


def _duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"3.5 h"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


#: What common exit codes of a worker job mean, and what to do.
EXIT_HINTS = {
    "127": "a command was not found on the execute node: the worker's python, apptainer, "
           "pixi or conda (check PATH there, or give python=...)",
    "126": "a command was found but could not be run (permissions, or a binary for "
           "another platform)",
    "137": "killed by SIGKILL: often the memory limit (give the pool more memory)",
    "9": "killed by SIGKILL: often the memory limit (give the pool more memory)",
}

def by_job_id(statuses: Iterable[JobStatus]) -> dict[str, JobStatus]:
    """Job id -> status (a C pass: a query's answer may list a thousand jobs)."""
    listed = list(statuses)
    return dict(zip(map(_job_id, listed), listed, strict=True))


def worker_names(live: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The name of each worker of ``live`` (address -> the scheduler's identity of the
    worker), in its order; a C pass where the identities are dicts (as they come)."""
    infos = live.values()
    if all(map(isinstance, infos, repeat(dict))):
        return list(map(dict.get, infos, repeat("name")))
    return [info.get("name") for info in infos]


class JobTable(CountingDict):
    """A pool's tracked jobs (job id -> :class:`JobStatus`) that counts its changes and
    keeps, as they change, its jobs in the queue (:attr:`queued`) and its jobs by state and
    reason (:attr:`by_state_reason`): an adaptive step asks for both many times, over
    hundreds of jobs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        #: The ids of the jobs pending, running or held (a dict used as an ordered set).
        self.queued: dict[str, None] = {}
        #: ``(state, reason)`` -> how many jobs.
        self.by_state_reason: Counter[tuple[JobState, str | None]] = Counter()
        self.update(*args, **kwargs)

    def _count(self, status: JobStatus, by: int) -> None:
        key = (status.state, status.reason)
        left = self.by_state_reason[key] + by
        if left:
            self.by_state_reason[key] = left
        else:
            del self.by_state_reason[key]

    def __setitem__(self, job_id: str, status: JobStatus) -> None:
        old = dict.get(self, job_id)
        if old is not None:
            self._count(old, -1)
        self._count(status, 1)
        if status.state in QUEUED_STATES:
            self.queued.setdefault(job_id, None)
        else:
            self.queued.pop(job_id, None)
        super().__setitem__(job_id, status)

    def __delitem__(self, job_id: str) -> None:
        self._count(self[job_id], -1)
        self.queued.pop(job_id, None)
        super().__delitem__(job_id)

    def pop(self, job_id: str, *default: Any) -> Any:
        if job_id not in self:
            return super().pop(job_id, *default)  # the default, or KeyError
        status = self[job_id]
        del self[job_id]
        return status

    def not_the_same(self, job_ids: list[str], statuses: Mapping[str, JobStatus]
                     ) -> list[str]:
        """Those of ``job_ids`` whose status in ``statuses`` is not the very object kept
        here (a system that answers an unchanged job with the same object: a refresh has
        nothing to do for it), in their order; a C pass, not a Python loop."""
        return list(compress(job_ids, map(is_not, map(statuses.get, job_ids),
                                          map(dict.get, repeat(self), job_ids))))

    def popitem(self) -> Any:
        if not self:
            raise KeyError("popitem(): the job table is empty")
        job_id = next(reversed(self))
        return job_id, self.pop(job_id)

    def setdefault(self, job_id: str, status: Any = None) -> Any:
        if job_id in self:
            self.version += 1  # (counted even when the job was there)
            return self[job_id]
        self[job_id] = status
        return status

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Set these jobs' statuses together (a submission's, or the hundreds a refresh
        notes at once), as one by one would: the tallies and the queued jobs move in C
        passes."""
        items = dict(*args, **kwargs)
        olds = list(filter(None, map(dict.get, repeat(self), items)))
        counts = self.by_state_reason
        counts.subtract(zip(map(_state, olds), map(_reason, olds), strict=True))
        states = list(map(_state, items.values()))
        counts.update(zip(states, map(_reason, items.values()), strict=True))
        for key in [key for key, left in counts.items() if left <= 0]:
            del counts[key]
        queued = list(map(QUEUED_STATES.__contains__, states))
        self.queued.update(dict.fromkeys(filterfalse(self.queued.__contains__,
                                                     compress(items, queued))))
        for job_id in compress(items, map(not_, queued)):
            self.queued.pop(job_id, None)
        self.version += 1
        dict.update(self, items)

    def clear(self) -> None:
        self.queued.clear()
        self.by_state_reason.clear()
        super().clear()


class ManagedPool:
    """One pool of a cluster: its spec, its system, its tracked jobs, its target."""

    def __init__(self, spec: PoolSpec, system: BatchSystem, job: WorkerJob):
        self.spec = spec
        self.system = system
        self.job = job
        self._name_prefix = job.name_prefix + "-"
        self._processes = spec.max_processes
        #: Tracked jobs still in the queue (pending, running, held, being removed).
        self.jobs: dict[str, JobStatus] = JobTable()
        self._counted: tuple[Any, list[str]] = (None, [])  # (both versions, counted ids)
        #: The last jobs that ended, newest last (for reports).
        self.ended: deque[JobStatus] = deque(maxlen=50)
        self.target = 0
        self.submit_calls = 0
        #: Jobs submitted so far (all submissions together).
        self.submitted = 0
        self.remove_calls = 0
        #: Failures in a row: refused submissions, jobs that ended before their worker came.
        self.failures = 0
        #: Why the pool gave up (``None`` while it has not).
        self.failed: str | None = None
        #: Why the last query of the batch system failed (``None``: it answered).
        self.query_error: str | None = None
        #: Jobs reported as stuck in the queue: job id -> the batch system's reason.
        self.stuck: dict[str, str | None] = {}
        self.adaptive: Any = None
        self.staging: Staging | None = None
        #: Another process may have submitted jobs for this pool (a connect): ask its system.
        self.adopted = False
        #: A submission failed in a way that may have reached the batch system.
        self.attempted = False
        #: How many ``wait_for_workers`` wait for this pool now (they report its failures).
        self.waiters = 0
        #: The task that fails the pool's waiting tasks once it gave up.
        self.giving_up: asyncio.Future | None = None
        #: Jobs at the end of their lifetime: job id -> when their worker starts draining
        #: (manager clock). They no longer count toward the target: their replacements do.
        self.retiring: dict[str, float] = CountingDict()
        #: Evictions and preemptions so far (never failures), the last ones for reports.
        self.evictions = 0
        self.evicted: deque[str] = deque(maxlen=20)
        #: How long the last jobs waited in the queue before they started (seconds).
        self.queue_waits: deque[float] = deque(maxlen=50)
        #: How long the last jobs took from their submission to their worker's connection
        #: (the queue wait and the worker's start-up; seconds).
        self.arrival_waits: deque[float] = deque(maxlen=50)
        #: When each job was submitted (until its worker connects) and first seen running
        #: (its walltime's start), and how many times the system started it, by job id
        #: (manager clock).
        self._submitted: dict[str, float] = {}
        self._started: dict[str, float] = ChangeLog()
        self._starts: dict[str, int] = {}
        #: Jobs whose workers were told to drain; retiring jobs that were evicted (their
        #: replacements are on the way: they are removed).
        self._drained: set[str] = set()
        self._kept_back: set[str] = set()  # (drains held for a receiver, said once)
        self._unneeded: set[str] = set()
        #: When the pool's jobs were last reconciled with its system (manager clock), and
        #: how many were in each state then.
        self.refreshed_at = float("-inf")
        self.state_counts: dict[JobState, int] = {}
        #: When each running job's worker drains: job id -> (its start, the drain time).
        self._drain_times: dict[str, tuple[float, float]] = {}
        #: Heaps of (drain time, job id, start) of running jobs: those not yet retiring
        #: (nor drained, with ``lifetime_restart``), then those retiring and not yet drained.
        self._to_retire: list[tuple[float, str, float]] = []
        self._to_drain: list[tuple[float, str, float]] = []
        self._last_logged: Any = None
        #: When each pending job was first seen pending (manager clock), in that order.
        self._first_pending: dict[str, float] = {}
        self._by_suffix: dict[str, str] = {}
        #: Worker name -> its job id here, as found; "" for a name no job of this pool can
        #: have (another pool's); a name of this pool whose job is not tracked is not kept.
        self._by_name: dict[str, str] = {}
        self._connected: set[str] = set()  # (jobs whose worker ever connected)
        #: How many workers of each job are connected now (as of the manager's last look).
        self._connected_now: dict[str, int] = {}
        #: When each job's worker first connected (manager clock).
        self._connected_at: dict[str, float] = {}
        self._removed: set[str] = set()
        #: When its batch system is asked next (:mod:`hybrid.manager.pacing`).
        self.pacing = QueryPacing()
        #: Jobs that left the queue while they waited, with no record yet of how: job id ->
        #: (when, the status then); and how many waiting jobs were removed from outside.
        self._vanished: dict[str, tuple[float, JobStatus]] = {}
        self.removed_waiting = 0
        #: False for jobs nothing replaces (``hybrid submit --wait``): a wait for their
        #: workers ends once too few are left to start them.
        self.replaces_jobs = True
        self.lock = asyncio.Lock()
        #: Held from counting the missing jobs until they are submitted (scale, refill): a
        #: submission in flight is not tracked yet, so no other may count without it.
        self.scaling = asyncio.Lock()

    # ------------------------------------------------------------------ names
    @property
    def name(self) -> str:
        """The pool's name."""
        return self.spec.name

    @property
    def resource(self) -> str:
        """``"GPU"`` or ``"notGPU"``."""
        return self.spec.resource

    @property
    def used(self) -> bool:
        """Whether this pool may have jobs: it submitted, tracks some, or adopted them."""
        return bool(self.submit_calls or self.jobs or self.adopted or self.attempted)

    def active(self) -> list[str]:
        """Ids of the jobs in the queue: pending, running, suspended or held (as of the last
        refresh; jobs being removed are not listed)."""
        return list(self.jobs.queued)  # type: ignore[attr-defined]

    def counted(self) -> list[str]:
        """The :meth:`active` jobs that count toward the target: all but those retiring at
        the end of their lifetime (their replacements count instead)."""
        if not self.retiring:
            return self.active()
        versions = (self.jobs.version, self.retiring.version)  # type: ignore[attr-defined]
        seen, found = self._counted
        if versions != seen:
            found = list(filterfalse(self.retiring.__contains__, self.active()))
            self._counted = (versions, found)
        return list(found)

    def queued_count(self) -> int:
        """How many jobs count toward the target now: the :meth:`counted` ones and those
        that left the queue while they waited, not decided yet (they are replaced once they
        are known to be no failure)."""
        return len(self.counted()) + len(self._vanished)

    def least_needed(self, job_ids: Iterable[str], count: int | None = None) -> list[str]:
        """Jobs without a worker in the order to remove them: held first, then pending,
        the newest first (the oldest have waited longest and start soonest), then suspended
        ones, then running jobs whose worker has not joined yet (ties by job id: the same
        order every time); ``count``: only the first ``count`` of that order."""
        ids = list(job_ids)
        # the keys (rank of the state, -submitted, id) built in C passes, not a Python key
        statuses = list(map(self.jobs.get, ids, repeat(_UNKNOWN)))
        keys = list(zip(map(_REMOVAL_RANK.get, map(_state, statuses), repeat(2)),
                        map(neg, map(self._submitted.get, ids, repeat(0.0))), ids,
                        strict=True))
        keys.sort()  # (in C: heapq.nsmallest's Python loop costs more for a large pool)
        return [key[2] for key in (keys if count is None else keys[:max(0, count)])]

    def stale_pending(self, now: float, after: float) -> int:
        """How many pending jobs were submitted (else first seen pending) ``after``
        seconds or longer before ``now`` (C passes: a large pool has hundreds pending, and
        every step of its order of preference asks)."""
        first_pending = self._first_pending
        ids = list(first_pending)
        pending = map(is_, map(_state, map(self.jobs.get, ids, repeat(_NOT_KEPT))),
                      repeat(JobState.pending))
        waited = map(sub, repeat(now), map(self._submitted.get, ids, first_pending.values()))
        return sum(map(and_, pending, map(ge, waited, repeat(after))))

    def forget(self, job_id: str) -> None:
        """Drop what the pool keeps on a job that left the queue."""
        for record in (self._first_pending, self._submitted, self._started, self._starts,
                       self.retiring, self.stuck, self._drain_times, self._connected_at):
            record.pop(job_id, None)
        self._drained.discard(job_id)
        self._kept_back.discard(job_id)
        self._unneeded.discard(job_id)

    def job_id_of_worker(self, worker_name: str) -> str | None:
        """The job id behind a worker name ``<cluster>-<pool>-<id>[-<process>]``."""
        found = self._by_name.get(worker_name)
        if found is not None:
            return found or None  # ("": another pool's worker, or no pool's)
        if not worker_name.startswith(self._name_prefix):
            self._remember(worker_name, "")  # never this pool's: one lookup from now on
            return None
        suffix = worker_name[len(self._name_prefix):]
        if self._processes > 1 and "-" in suffix and suffix not in self._by_suffix:
            suffix = suffix.rsplit("-", 1)[0]  # --nworkers k: NAME-0 .. NAME-k-1
        found = self._by_suffix.get(suffix)
        if found is not None:  # one not yet tracked (adopted jobs) is looked up again
            self._remember(worker_name, found)
        return found

    def _remember(self, worker_name: str, job_id: str) -> None:
        if len(self._by_name) > 100_000:
            self._by_name.clear()
        self._by_name[worker_name] = job_id

    def jobs_of_workers(self, names: list[Any]) -> list[str | None]:
        """The job id of each worker name ("" or ``None``: not this pool's), in a C pass
        for the names seen before (most; a large pool's step asks for a thousand)."""
        job_ids = list(map(self._by_name.get, names))  # (a worker seen before: ours or "")
        unseen = -1
        while True:  # the names not seen before (a few per step), each looked up
            try:
                unseen = job_ids.index(None, unseen + 1)
            except ValueError:
                break
            name = names[unseen]
            if isinstance(name, str):
                job_ids[unseen] = self.job_id_of_worker(name)
        return job_ids

    def workers_by_job(self, live: Mapping[str, Mapping[str, Any]],
                       names: list[Any] | None = None) -> dict[str, tuple[str, ...]]:
        """Job id -> addresses of this pool's workers among ``live`` (address -> the
        scheduler's identity of the worker; ``names``: its workers' names, where the
        caller has them), found by name in C passes (a large pool's adaptive step asks for
        them over a thousand workers); tuples, which no caller can change under another."""
        addresses = list(live)
        job_ids = self.jobs_of_workers(worker_names(live) if names is None else names)
        ours = list(compress(job_ids, job_ids))
        where = list(compress(addresses, job_ids))
        out = dict(zip(ours, zip(where), strict=True))
        if len(out) < len(ours):  # a job with several workers (--nworkers, or a restart)
            several: dict[str, list[str]] = {}
            for job_id, address in zip(ours, where, strict=True):
                several.setdefault(job_id, []).append(address)
            out = {job_id: tuple(found) for job_id, found in several.items()}
        return out

    def track(self, statuses: Iterable[JobStatus]) -> None:
        """Start (or keep) tracking these jobs."""
        found = by_job_id(statuses)
        self.jobs.update(found)
        self._by_suffix.update(zip(map(worker_name_suffix, found), found, strict=True))

    def staging_path(self) -> Path:
        """The staging directory (a would-be path before the first submission)."""
        if self.staging is not None:
            return self.staging.path
        return Staging.would_be(self.job)

    def job_script(self, count: int = 1) -> str:
        """The job's files as they would be submitted, for reading (nothing is written)."""
        return self.system.job_script(self.job, self.staging_path(), count)

    def describe_end(self, status: JobStatus) -> str:
        """One line on a job that ended before its worker came: reason, hint, log."""
        words = f"job {status.job_id} {status.state.value}"
        if status.reason:
            words += f" ({status.reason})"
        code = status.reason.rsplit(" ", 1)[-1].rstrip(")") if status.reason else ""
        if code in EXIT_HINTS:
            words += f": {EXIT_HINTS[code]}"
        log = self.system.log_path(self.staging_path(), status.job_id)
        tail = tail_of(log) if log is not None else []
        if log is not None and tail:
            # the staging directory goes with the cluster: the log is kept where it stays
            kept = keep_log(log, self.job.cluster)
            words += (f". Its log ({kept or 'removed with the cluster'}) ends with:\n    "
                      + "\n    ".join(tail))
        return words

    @property
    def served(self) -> set[str | None]:
        """The task kinds the pool's workers run: resource names, ``None`` for unannotated
        tasks."""
        served: set[str | None] = {GPU} if self.spec.gpus else set()
        if self.spec.serves_cpu_tasks:
            served |= {NOT_GPU, None}
        return served

    def status(self, now: float | None = None,
               fallback: tuple[str, float] | None = None) -> PoolStatus:
        """Where the pool stands, as of its last refresh (no batch system is asked);
        ``now`` on the manager's clock, ``fallback`` the pool (and its time) that takes
        this pool's demand when its jobs wait."""
        counts = {state.value: 0 for state in _SHOWN}
        reasons: dict[str, dict[str, int]] = {}
        for job in self.jobs.values():
            if job.state in _SHOWN:
                counts[job.state.value] += 1
                if job.reason:
                    by_reason = reasons.setdefault(job.state.value, {})
                    by_reason[job.reason] = by_reason.get(job.reason, 0) + 1
        adaptive = self.adaptive
        now = time.monotonic() if now is None else now
        waiting = [now - since for j, since in self._first_pending.items()
                   if j in self.jobs and self.jobs[j].state is JobState.pending]
        return PoolStatus(
            name=self.name, system=self.system.name, resource=self.resource,
            target=self.target, jobs=counts, reasons=reasons,
            connected=sum(n for j, n in self._connected_now.items() if j in self.jobs),
            adaptive=None if adaptive is None else (adaptive.minimum, adaptive.maximum),
            failed=self.failed, retiring=sum(1 for j in self.retiring if j in self.jobs),
            evictions=self.evictions,
            oldest_pending=round(max(waiting), 1) if waiting else None,
            fallback=fallback[0] if fallback else None,
            fallback_after=fallback[1] if fallback else None)

    def __repr__(self) -> str:
        failed = f", failed: {self.failed}" if self.failed else ""
        return (f"<Pool {self.name!r} on {self.system.name}: target {self.target}, "
                f"{self.status().summary().split(': ', 1)[1].split('; target')[0]}"
                f"{failed}>")


#: Where the logs of failed jobs are kept after their cluster's staging is gone.
KEPT_LOGS = Path.home() / ".cache" / "hybrid" / "logs"


def keep_log(path: Path, cluster: str, limit: int = 65536) -> Path | None:
    """Copy the end of a failed job's log (at most ``limit`` bytes), 0600, to
    ``~/.cache/hybrid/logs/<cluster>/``: its staging directory is removed with the
    cluster, and a message must not cite a file that is gone. ``None`` if it cannot."""
    from hybrid.batch.staging import write_private

    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            data = f.read()
        directory = KEPT_LOGS / cluster
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return write_private(directory / path.name, data)
    except OSError:
        return None


def tail_of(path: Path, lines: int = 8) -> list[str]:
    """The last non-empty ``lines`` of a (log) file; none if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def short_ids(ids: list[str], shown: int = 8) -> str:
    """Job ids for a log line: the first ``shown`` and how many in all."""
    if len(ids) <= shown:
        return " ".join(ids)
    return " ".join(ids[:shown]) + f" ... ({len(ids)} in all)"
