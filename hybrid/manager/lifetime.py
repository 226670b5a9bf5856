"""Walltimes without lost work: replacements ahead of time, workers drained at their lifetime.

The part of :class:`~hybrid.manager.PoolManager` that keeps a pool with a lifetime
(:mod:`hybrid.lifetimes`) at its target while its jobs reach their walltime. Each running
job's worker drains at ``start + lifetime`` (spread by the stagger, the same for a job on
every look); ahead of that, by about how long the pool's recent jobs took from their
submission to their worker (the queue wait and the worker's start-up), the job becomes
*retiring*: it stops counting toward the target, so the refill (or adaptivity, while the
demand lasts) submits its replacement. At the drain the worker takes
no new task, finishes its running ones and retires with its results moved elsewhere
(:func:`hybrid.scheduler_probe.drain_worker`), then its job ends. No task is cut by a
walltime, and no result is lost with one.
"""

from __future__ import annotations

import heapq
import logging
import zlib
from collections.abc import Callable
from typing import Any

from hybrid.batch import JobState
from hybrid.manager.pacing import poll_interval
from hybrid.manager.pool import ManagedPool, short_ids
from hybrid.manager.remote import NO_ARGS, pickled_probe

logger = logging.getLogger("hybrid")


def spread(job_id: str) -> float:
    """A number in [-1, 1] fixed for a job id (its share of the stagger)."""
    return (zlib.crc32(job_id.encode()) % 20001) / 10000.0 - 1.0


class Lifetimes:
    """Lifetime replacement and draining, for the pool manager (uses its ``clock``,
    ``scheduler``, ``live_workers()``, ``pool_workers()`` and ``remove()``)."""

    clock: Callable[[], float]
    scheduler: Any

    def drain_at(self, pool: ManagedPool, job_id: str) -> float | None:
        """When the worker of a running job starts draining (manager clock), or ``None``."""
        lifetime = pool.spec.lifetime_seconds()
        started = pool._started.get(job_id)
        if lifetime is None or started is None:
            return None
        return started + lifetime + pool.spec.lifetime_stagger_seconds() * spread(job_id)

    @staticmethod
    def _drain_time(started: float, lifetime: float, stagger: float, job_id: str) -> float:
        return started + lifetime + stagger * spread(job_id)

    def replacement_lead(self, pool: ManagedPool) -> float:
        """How long before a worker drains its replacement goes out: about how long the
        pool's recent jobs took from their submission to their worker's connection (the
        queue wait and the worker's start-up, their 75th percentile; the queue wait alone
        until a worker connected), plus two polls, at most half the lifetime."""
        poll = poll_interval()

        def p75(values: Any) -> float:
            ordered = sorted(values)
            return ordered[(3 * len(ordered)) // 4] if ordered else 0.0

        typical = max(p75(pool.arrival_waits), p75(pool.queue_waits))
        lifetime = pool.spec.lifetime_seconds() or 0.0
        return min(lifetime / 2, typical + 2 * poll)

    async def check_lifetimes(self, pool: ManagedPool) -> None:
        """Mark the jobs due for replacement as retiring; drain the workers due; remove
        retiring jobs that were evicted (replaced already).

        Only the jobs whose start changed since the last look get a new drain time, and
        only those whose time comes are looked at (two heaps by drain time): a large pool's
        reconcile does not walk every running job."""
        if pool._unneeded:
            unneeded = sorted(j for j in pool._unneeded if j in pool.jobs)
            pool._unneeded.clear()
            await self.remove(pool, unneeded)  # type: ignore[attr-defined]
        lifetime = pool.spec.lifetime_seconds()
        changed = pool._started.take_changes()  # type: ignore[attr-defined]
        if lifetime is None:
            return
        stagger = pool.spec.lifetime_stagger_seconds()
        times = pool._drain_times
        for job_id in changed:  # a first start, a new run (an eviction, a restart), an end
            started = pool._started.get(job_id)
            known = times.get(job_id)
            if started is None:
                times.pop(job_id, None)
            elif known is None or known[0] != started:
                drain_at = self._drain_time(started, lifetime, stagger, job_id)
                times[job_id] = (started, drain_at)
                heapq.heappush(pool._to_retire, (drain_at, job_id, started))
        now = self.clock()
        restart = pool.spec.lifetime_restart
        lead = 0.0 if restart else self.replacement_lead(pool)
        # the jobs within the lead of their drain move on to the drain heap; without a
        # restart they stop counting toward the target: their replacements go out now
        moved = self._due(pool, pool._to_retire, now + lead, pool._to_drain)
        retiring = {} if restart else {job_id: drain_at for drain_at, job_id, _ in moved
                                       if job_id not in pool.retiring}
        if retiring:
            pool.retiring.update(retiring)
            logger.info("pool %s: %d job(s) reach the end of their lifetime within %.0f s: "
                        "%s; their replacements go out now", pool.name, len(retiring),
                        lead, short_ids(list(retiring)))
        entries = [e for e in self._due(pool, pool._to_drain, now) if e[1] not in pool._drained]
        if entries and not restart:
            entries = await self._keep_a_receiver(pool, entries, now)
        due = list(dict.fromkeys(entry[1] for entry in entries))
        if due:
            await self.drain(pool, due, restart=restart)

    async def _keep_a_receiver(self, pool: ManagedPool, entries: list[tuple[float, str, float]],
                               now: float) -> list[tuple[float, str, float]]:
        """The drain entries to act on now. A draining worker moves its results to another
        worker: where none would be left (every other one drains too, and the replacements
        wait for the very slots these workers hold: a full partition), the last of them waits
        for one to join, until half its time between the drain and its own ``--lifetime``
        is gone (its entry goes back on the heap). Else both would leave with their results
        and the graph would compute them again."""
        live = await self.live_workers()  # type: ignore[attr-defined]
        connected = await self.pool_workers(pool, live)  # type: ignore[attr-defined]
        leaving = {a for j in {*pool._drained, *(e[1] for e in entries)}
                   for a in connected.get(j, ())}
        if set(live) - leaving:
            return entries
        drain_at, job_id, started = entries[-1]
        deadline = pool.spec.worker_deadline_seconds()
        if deadline is None or now >= drain_at + (started + deadline - drain_at) / 2:
            return entries
        if job_id not in pool._kept_back:
            pool._kept_back.add(job_id)
            logger.info("pool %s: the worker of job %s waits to drain until another worker "
                        "can take its results (its replacement is queued)", pool.name, job_id)
        heapq.heappush(pool._to_drain, entries[-1])
        return entries[:-1]

    @staticmethod
    def _due(pool: ManagedPool, heap: list[tuple[float, str, float]], until: float,
             then: list[tuple[float, str, float]] | None = None
             ) -> list[tuple[float, str, float]]:
        """Take from ``heap`` the entries of running jobs whose drain time is ``until`` or
        earlier (into ``then``, when given); entries of a start that is no longer the job's
        are dropped, those of a job not running now stay for a later look."""
        taken, later = [], []
        times, jobs, running = pool._drain_times, pool.jobs, JobState.running
        while heap and heap[0][0] <= until:
            entry = heapq.heappop(heap)
            known = times.get(entry[1])
            if known is None or known[0] != entry[2]:
                continue  # the job ended, or started again: its new start has its entry
            status = jobs.get(entry[1])
            if status is None or status.state is not running:
                later.append(entry)
                continue
            taken.append(entry)
            if then is not None:
                heapq.heappush(then, entry)
        for entry in later:
            heapq.heappush(heap, entry)
        return taken

    async def drain(self, pool: ManagedPool, job_ids: list[str], restart: bool = False
                    ) -> None:
        """Drain the workers of these jobs (jobs without a worker are removed)."""
        from distributed.protocol.pickle import dumps

        from hybrid import scheduler_probe

        drain_worker = pickled_probe(scheduler_probe.drain_worker)  # (workers need no hybrid)
        connected = await self.pool_workers(pool)  # type: ignore[attr-defined]
        now = self.clock()
        lonely = [j for j in job_ids if j not in connected]
        deadline = pool.spec.worker_deadline_seconds()
        for job_id in job_ids:
            pool._drained.add(job_id)
            if job_id not in connected:
                continue
            left = None if deadline is None else (
                pool._started.get(job_id, now) + deadline - now)
            kwargs = {"deadline": left, "restart": restart}
            try:
                await self.scheduler.broadcast(
                    msg={"op": "run", "function": drain_worker, "args": NO_ARGS,
                         "kwargs": dumps(kwargs), "wait": False},
                    workers=connected[job_id], on_error="ignore")
            except OSError as error:  # its own --lifetime still stops it before the walltime
                logger.warning("pool %s: could not tell the worker of job %s to drain (%s)",
                               pool.name, job_id, error)
            if restart:  # a fresh worker in the same job: its next lifetime starts now
                pool._started[job_id] = now
                pool._drained.discard(job_id)
        drained = [j for j in job_ids if j in connected]
        if drained:
            logger.info("pool %s: the workers of %d job(s) reached their lifetime (%s): they "
                        "take no new task, finish their running ones and leave with their "
                        "results moved to other workers%s", pool.name, len(drained),
                        short_ids(drained), "; each restarts in its job" if restart else "")
        if lonely:
            logger.info("pool %s: %d job(s) reached their lifetime before their worker "
                        "joined; removing them: %s", pool.name, len(lonely), short_ids(lonely))
            await self.remove(pool, lonely)  # type: ignore[attr-defined]
