"""Reading each refresh of a pool: starts, queue waits, evictions, long waits, the log.

The part of :class:`~hybrid.manager.PoolManager` that interprets how a pool's jobs changed
between two refreshes: when a job started (its walltime runs from then) and how long it
waited; a job that ran and waits in the queue again, or that the system started again
between two looks, was evicted (HTCondor vacate, Slurm requeue or preemption): that is
reported as such and is never a failure; jobs pending longer than
``hybrid.batch.stuck-timeout`` are reported together with the batch system's reasons; and
every change of a pool's jobs by state is one readable INFO line. With
``hybrid.batch.held-jobs: replace``, held jobs are removed here (each a failure); a pool
that gave up removes its pending jobs and fails the tasks no other pool runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from itertools import filterfalse
from typing import Any

import dask
from dask.utils import parse_timedelta

from hybrid import config
from hybrid.batch import JobState, JobStatus
from hybrid.errors import BatchError
from hybrid.manager.pacing import poll_interval
from hybrid.manager.pool import GONE, ManagedPool, by_job_id, short_ids

logger = logging.getLogger("hybrid")

#: Seconds a job that left the queue while it waited, with no record of how, is given for
#: its record to appear (Grid Engine's accounting lags up to 15 s behind ``qstat``) before
#: it is taken as removed from outside rather than as a job that started and failed between
#: two looks; it is replaced only then (a job that fails at once is not resubmitted faster
#: than its failures are counted).
VANISHED_GRACE = 20.0

#: What each system calls an eviction, for the log.
_EVICTION_WORDS = {"htcondor": "vacated (evicted)", "slurm": "requeued or preempted",
                   "sge": "rescheduled (qmod -rj, or its host failed)", "kubernetes": "evicted"}


class JobWatch:
    """Interpreting a pool's refreshed jobs, and listing what the systems hold, for the pool
    manager (uses its ``cluster``, ``clock``, ``pools``, ``call`` and ``preferences``)."""

    cluster: str
    clock: Callable[[], float]
    pools: dict[str, ManagedPool]
    call: Callable[..., Awaitable[Any]]
    remove: Callable[[ManagedPool, Iterable[str]], Awaitable[None]]
    _failure: Callable[..., None]
    _run_on_scheduler: Callable[..., Awaitable[Any]]
    pool: Callable[[str | None], ManagedPool]

    async def adopt(self, names: Iterable[str] | None = None) -> None:
        """Track the cluster's jobs the batch systems list (submitted by any process), for
        the pools ``names`` (default: all)."""
        for pool in self.pools.values():
            if names is not None and pool.name not in names:
                continue
            pool.adopted = True
            try:
                statuses = await self.call(pool.system.query, cluster=self.cluster)
            except (BatchError, OSError) as error:
                logger.warning("pool %s: cannot list the cluster's jobs on %s (%s); `hybrid "
                               "status --system %s --cluster %s` lists them", pool.name,
                               pool.system.name, error, pool.system.name, self.cluster)
                continue
            pool.track(s for s in statuses if s.pool == pool.name and s.state.active)
            now = self.clock()
            for status in statuses:  # their walltime runs from about now: a lower bound
                if status.pool == pool.name and status.state is JobState.running:
                    pool._started.setdefault(status.job_id, now)
                elif status.pool == pool.name and status.state is JobState.pending:
                    pool._first_pending.setdefault(status.job_id, now)  # (as a lower bound)
            pool.target = len(pool.counted())

    async def jobs(self, pool: str | None = None) -> list[JobStatus]:
        """The jobs of ``pool`` (or of every pool) in the queue, as the systems list them now
        (also jobs another process submitted); pools that never submitted are not asked."""
        pools = [self.pool(pool)] if pool is not None else list(self.pools.values())
        found: dict[tuple[str, str], JobStatus] = {}
        for target in pools:
            if not target.used:
                continue
            for status in await self.call(target.system.query, cluster=self.cluster):
                if status.state.active and status.pool == target.name:
                    found[(target.system.name, status.job_id)] = status
        return list(found.values())

    @staticmethod
    def poll_interval() -> float:
        """Seconds between reconciles (``hybrid.batch.poll-interval``)."""
        return poll_interval()

    @staticmethod
    def stuck_after() -> float:
        """Seconds a job may wait in the queue before it is reported
        (``hybrid.batch.stuck-timeout``)."""
        return parse_timedelta(config.get("batch.stuck-timeout", "5 minutes"))

    def _note_together(self, pool: ManagedPool, job_ids: list[str],
                       statuses: Mapping[str, JobStatus], now: float) -> list[str]:
        """Note together what :meth:`_observe` would note one by one for the jobs that
        still wait and did not run since the last look (a new reason, a first start count)
        and the jobs that start for the first time (hundreds at once when a queue fills or
        drains); the others of ``job_ids`` are returned, in order, for a look each."""
        jobs, started, starts = pool.jobs, pool._started, pool._starts
        pending, running = JobState.pending, JobState.running
        waiting: list[JobStatus] = []
        starting: list[JobStatus] = []
        rest: list[str] = []
        for job_id in job_ids:  # (every first start goes together: the waits' order)
            old, new = jobs.get(job_id), statuses.get(job_id)
            if old is None or new is None or job_id in started:
                rest.append(job_id)
            elif new.state is running and (old.state is not running or new != old):
                starting.append(new)
            elif (new.state is pending and old.state is pending and new != old
                  and new.evicted == old.evicted
                  # (not run since the last look: a start count that did not grow)
                  and (new.starts is None or starts.get(job_id) is None
                       or new.starts <= starts[job_id])):
                waiting.append(new)
            else:
                rest.append(job_id)
        if waiting:
            ids = [s.job_id for s in waiting]
            starts.update((s.job_id, s.starts) for s in waiting if s.starts is not None)
            pool._first_pending.update(dict.fromkeys(
                filterfalse(pool._first_pending.__contains__, ids), now))
        if starting:  # their first start: how long the queue made them wait
            ids = [s.job_id for s in starting]
            starts.update((s.job_id, s.starts) for s in starting if s.starts is not None)
            for job_id in ids:
                pool._first_pending.pop(job_id, None)
            started.update(dict.fromkeys(ids, now))
            pool.queue_waits.extend(now - submitted for submitted in map(
                pool._submitted.get, ids) if submitted is not None)
        if waiting or starting:
            jobs.update(by_job_id(waiting + starting))
        return rest

    def _observe(self, pool: ManagedPool, old: JobStatus, new: JobStatus, now: float) -> None:
        """Note what changed for a job still in the queue (``old``: as last seen)."""
        job_id = new.job_id
        was_started = job_id in pool._started
        previous_starts = pool._starts.get(job_id)
        if new.starts is not None:
            pool._starts[job_id] = new.starts
        if new.state is JobState.running:
            pool._first_pending.pop(job_id, None)
            pool.stuck.pop(job_id, None)  # (should it wait again, its long wait is said again)
            if not was_started:
                pool._started[job_id] = now
                submitted = pool._submitted.get(job_id)  # kept until its worker connects
                if submitted is not None:  # its first start: how long the queue made it wait
                    pool.queue_waits.append(now - submitted)
            elif (new.starts is not None and previous_starts is not None
                  and new.starts > previous_starts):
                self._evicted(pool, new, restarted=True)  # between two looks
                pool._started[job_id] = now  # a new run: its walltime starts again
            return
        if new.state is JobState.pending:
            if was_started:  # it ran and waits again
                del pool._started[job_id]
                self._evicted(pool, new)
            elif (new.starts is not None and previous_starts is not None
                  and new.starts > previous_starts):  # it ran between two looks
                self._evicted(pool, new)
            pool._first_pending.setdefault(job_id, now)
            return
        pool._first_pending.pop(job_id, None)
        if new.state is JobState.held and old.state is not JobState.held:
            self._held(pool, new)
        elif new.state is JobState.suspended and old.state is not JobState.suspended:
            self._suspended(pool, new)  # (its run goes on when it resumes: _started kept)

    def _suspended(self, pool: ManagedPool, status: JobStatus) -> None:
        """A job the batch system suspended: no eviction, no hold, no failure. Said once per
        suspension, with what its tasks do meanwhile."""
        ttl = dask.config.get("distributed.scheduler.worker-ttl", None)
        waits = (f"until the scheduler stops waiting for its worker "
                 f"(distributed.scheduler.worker-ttl: {ttl}), then run elsewhere"
                 if ttl else "for it")
        logger.warning(
            "pool %s: job %s is suspended by %s (%s): its worker is stopped, and goes on "
            "where it was when the job resumes (the batch system resumes it by itself, or "
            "its admin does; nothing for you to do). Its running tasks wait %s; the job "
            "counts toward the pool's target. To have them run elsewhere now, remove it: "
            "`hybrid cancel --system %s %s` (the pool replaces it).", pool.name,
            status.job_id, pool.system.name, status.reason or "no reason given", waits,
            pool.system.name, status.job_id)

    def _held(self, pool: ManagedPool, status: JobStatus) -> None:
        """A job the batch system holds: it neither starts nor runs on by itself, and it
        counts toward the target. Said once per hold (not where someone waits for workers:
        the wait raises with it; nor with ``held-jobs: replace``, which replaces it)."""
        if pool.waiters or config.get("batch.held-jobs", "report") == "replace":
            return
        logger.warning(
            "pool %s: job %s is held by %s (%s): it will not start or run by itself, and it "
            "counts toward the pool's target. Release it with %s's own tool, remove it "
            "(`hybrid cancel --system %s %s`: the pool replaces it), or set "
            "hybrid.batch.held-jobs: replace to have held jobs replaced.", pool.name,
            status.job_id, pool.system.name, status.reason or "no reason given",
            pool.system.name, pool.system.name, status.job_id)

    def _evicted(self, pool: ManagedPool, status: JobStatus, *, restarted: bool = False,
                 left: bool = False) -> None:
        """A job the batch system evicted: counted and reported, never a failure."""
        pool.evictions += 1
        pool.evicted.append(status.job_id)
        replaced = status.job_id in pool.retiring
        if replaced and not left:  # its replacement is on its way: it is not needed again
            pool._unneeded.add(status.job_id)
        else:
            pool.retiring.pop(status.job_id, None)
        pool._drained.discard(status.job_id)
        how = _EVICTION_WORDS.get(pool.system.name, "evicted")
        # (the reason of a job that left is the eviction's; of one that waits, the wait's)
        why = f" ({status.reason})" if status.reason and left else ""
        if left:
            then = ("it left the queue; the pool submits a replacement" if pool.adaptive is None
                    else "it left the queue; adaptivity replaces it while the demand lasts")
        elif replaced:
            then = "its replacement is already on its way, so it is removed"
        elif restarted:
            then = "it has already started again"
        else:
            then = ("it waits in the queue to start again" + (
                f" (now: {status.reason})" if status.reason else "")
                + " and counts toward the target")
        logger.warning(
            "pool %s: job %s was %s by %s%s; %s. The tasks its worker was running are rerun "
            "elsewhere. Not a failure (%d eviction(s) in this pool so far).", pool.name,
            status.job_id, how, pool.system.name, why, then, pool.evictions)

    def _removed_waiting(self, pool: ManagedPool, status: JobStatus) -> None:
        """A job removed from outside while it waited (``scancel``, ``qdel``, ``condor_rm``,
        a site's policy): it never ran, so it is no failure; the pool replaces it, as it
        does a running job removed from outside."""
        pool.removed_waiting += 1
        known = bool(status.reason) and status.reason != GONE
        why = f" ({status.reason})" if known else (
            ", with no record of how (scancel, qdel, condor_rm or a site policy?)")
        _replace_ended(pool, dataclasses.replace(
            status, state=JobState.removed,
            reason=status.reason if known else "removed while it waited, not by hybrid"))
        then = ("the pool submits a replacement" if pool.adaptive is None else
                "adaptivity replaces it while the demand lasts")
        logger.warning(
            "pool %s: job %s was removed while it waited in the queue, not by hybrid%s; it "
            "never ran, so it is no failure, and %s. To run fewer jobs, scale the pool down "
            "(cluster.scale(n, pool=%r)).", pool.name, status.job_id, why, then, pool.name)

    async def _vanished_while_waiting(self, pool: ManagedPool, now: float) -> None:
        """Decide on the jobs that left the queue while they waited, with no record then:
        once :data:`VANISHED_GRACE` has passed, a record of a failure is a failure, none is
        a removal from outside; a job listed again is tracked again (a listing that missed
        it: the pool's surplus, if any, goes as any surplus does)."""
        due = [j for j, (seen, _) in pool._vanished.items() if now - seen >= VANISHED_GRACE]
        if not due:
            return
        try:
            found = by_job_id(await self.call(pool.system.query, job_ids=due, history=True))
        except (BatchError, OSError) as error:  # asked again at the next refresh
            logger.debug("pool %s: cannot look up %s: %s", pool.name, short_ids(due), error)
            return
        for job_id in due:
            _, status = pool._vanished.pop(job_id)
            record = found.get(job_id)
            if record is not None and record.state.active:
                logger.info("pool %s: job %s is listed again (%s): tracked again", pool.name,
                            job_id, record.state.value)
                pool.jobs[job_id] = record
            elif record is None or record.state is JobState.removed:
                self._removed_waiting(pool, record or status)
            else:
                _replace_ended(pool, record)  # (how it ended, for the views)
                self._failure(pool, pool.describe_end(record))

    def _ended_with_worker(self, pool: ManagedPool, status: JobStatus) -> None:
        """A job whose worker had joined ended by failing (a walltime, a signal)."""
        hint = ""
        if status.reason and "TIMEOUT" in status.reason.upper():
            hint = (" It reached its walltime: a pool lifetime shorter than the walltime "
                    "retires workers before it, with their results moved.")
        logger.warning("pool %s: job %s ended (%s) while its worker was in the cluster; its "
                       "running tasks are rerun elsewhere.%s", pool.name, status.job_id,
                       status.reason or status.state.value, hint)

    async def _remove_held(self, pool: ManagedPool) -> None:
        """With ``hybrid.batch.held-jobs: replace``, remove the held jobs, each a failure
        (once, and none once the pool gave up); the next reconcile replaces them."""
        if config.get("batch.held-jobs", "report") != "replace":
            return
        held = [s for s in pool.jobs.values() if s.state is JobState.held]
        for status in held:
            if pool.failed is None and status.job_id not in pool._removed:
                self._failure(pool, f"job {status.job_id} is held: {status.reason}")
        await self.remove(pool, [s.job_id for s in held])

    async def _give_up(self, pool: ManagedPool) -> None:
        """Stop the pool's adaptivity; remove its pending jobs (each would start one more
        worker of a pool that keeps failing, or hold an allocation for nothing); fail the
        waiting tasks no other pool will run. At every reconcile, so that jobs pending again
        and tasks submitted later are handled too; running jobs stay (their workers serve)."""
        if pool.adaptive is not None:
            pool.adaptive.stop()
        pending = [job_id for job_id, status in list(pool.jobs.items())
                   if status.state is JobState.pending and job_id not in pool._removed]
        if pending:  # (said beside the reason, or where someone waits, in the exception)
            logger.log(logging.INFO if pool.waiters else logging.WARNING,
                       "pool %s gave up: removing its %d pending job(s): %s", pool.name,
                       len(pending), short_ids(pending))
            try:
                await self.remove(pool, pending)
            except (BatchError, OSError) as error:  # the pool's close tries again
                logger.warning("pool %s: could not remove its pending jobs: %s", pool.name,
                               error)
        others = set().union(*(p.served for p in self.pools.values()
                               if p is not pool and not p.failed))
        orphaned = pool.served - others
        if not orphaned:
            return
        from hybrid import scheduler_probe

        message = (f"hybrid: pool {pool.name} gave up, so no worker will run this task: "
                   f"{pool.failed}")
        with contextlib.suppress(Exception):
            await self._run_on_scheduler(scheduler_probe.fail_unrunnable,
                                         resources=tuple(orphaned), message=message)

    def _report_pending(self, pool: ManagedPool, now: float) -> None:
        """One warning for the jobs that newly waited longer than the stuck timeout (or
        whose reason arrived since), with the batch system's reasons."""
        if not pool._first_pending:
            return
        limit = self.stuck_after()
        new: list[JobStatus] = []
        for job_id, since in pool._first_pending.items():
            if now - since < limit:
                break  # (noted in the order seen: every later one waited less)
            status = pool.jobs.get(job_id)
            if status is None or status.state is not JobState.pending:
                continue
            known = pool.stuck.get(job_id, "unreported")
            if known == "unreported" or (known is None and status.reason):
                pool.stuck[job_id] = status.reason
                new.append(status)
        if not new:
            return
        reasons = Counter(s.reason or "no reason given by the batch system yet" for s in new)
        fallback = self.preferences.fallback_of(pool.name)  # type: ignore[attr-defined]
        then = (f"; pool {fallback[0]} takes the demand they do not meet" if fallback
                else "")
        logger.warning(
            "pool %s: %d job(s) queued for more than %.0f s (%s): %s. They count toward the "
            "target and are not resubmitted%s. `hybrid status --system %s --cluster %s` "
            "shows the queue.", pool.name, len(new), limit,
            ", ".join(f"{r}: {n}" for r, n in reasons.most_common()),
            short_ids([s.job_id for s in new]), then, pool.system.name, self.cluster)

    def _log_change(self, pool: ManagedPool) -> None:
        """One INFO line whenever the pool's jobs by state (or its reasons) changed."""
        states = pool.jobs.by_state_reason  # type: ignore[attr-defined]
        by_state: Counter = Counter()
        for (state, _), count in states.items():
            by_state[state] += count
        pool.state_counts = dict(by_state)
        key = (frozenset(states.items()), pool.target, len(pool.retiring), pool.evictions,
               pool.failed)
        if key != pool._last_logged:
            pool._last_logged = key
            if logger.isEnabledFor(logging.INFO):
                logger.info("%s", pool.status(self.clock()).summary())


def _replace_ended(pool: ManagedPool, status: JobStatus) -> None:
    """Put what became known of how a job ended in place of its first entry in
    ``pool.ended`` (the views show it: a job removed while it waited is not "finished")."""
    for i, ended in enumerate(pool.ended):
        if ended.job_id == status.job_id:
            pool.ended[i] = status
            return
    pool.ended.append(status)
