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

import logging
import zlib
from collections.abc import Callable
from typing import Any

from dask.utils import parse_timedelta

from hybrid import config
from hybrid.batch import JobState
from hybrid.manager.pool import ManagedPool, short_ids

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
        poll = parse_timedelta(config.get("batch.poll-interval", "2s"))

        def p75(values: Any) -> float:
            ordered = sorted(values)
            return ordered[(3 * len(ordered)) // 4] if ordered else 0.0

        typical = max(p75(pool.arrival_waits), p75(pool.queue_waits))
        lifetime = pool.spec.lifetime_seconds() or 0.0
        return min(lifetime / 2, typical + 2 * poll)

    async def check_lifetimes(self, pool: ManagedPool) -> None:
        """Mark the jobs due for replacement as retiring; drain the workers due; remove
        retiring jobs that were evicted (replaced already)."""
        if pool._unneeded:
            unneeded = sorted(j for j in pool._unneeded if j in pool.jobs)
            pool._unneeded.clear()
            await self.remove(pool, unneeded)  # type: ignore[attr-defined]
        lifetime = pool.spec.lifetime_seconds()
        if lifetime is None:
            return
        stagger = pool.spec.lifetime_stagger_seconds()
        now = self.clock()
        restart = pool.spec.lifetime_restart
        lead = self.replacement_lead(pool)
        retiring, due = [], []
        times = pool._drain_times
        for job_id, started in list(pool._started.items()):
            status = pool.jobs.get(job_id)
            if status is None or status.state is not JobState.running:
                continue
            known = times.get(job_id)
            if known is None or known[0] != started:  # a new run (an eviction, a restart)
                known = times[job_id] = (started, self._drain_time(started, lifetime,
                                                                   stagger, job_id))
            drain_at = known[1]
            if not restart and job_id not in pool.retiring and now >= drain_at - lead:
                pool.retiring[job_id] = drain_at
                retiring.append(job_id)
            if now >= drain_at and job_id not in pool._drained:
                due.append(job_id)
        if retiring:
            logger.info("pool %s: %d job(s) reach the end of their lifetime within %.0f s: "
                        "%s; their replacements go out now", pool.name, len(retiring),
                        lead, short_ids(retiring))
        if due:
            await self.drain(pool, due, restart=restart)

    async def drain(self, pool: ManagedPool, job_ids: list[str], restart: bool = False
                    ) -> None:
        """Drain the workers of these jobs (jobs without a worker are removed)."""
        import cloudpickle
        from distributed.protocol.pickle import dumps

        from hybrid import scheduler_probe

        cloudpickle.register_pickle_by_value(scheduler_probe)  # workers need no hybrid
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
                    msg={"op": "run", "function": dumps(scheduler_probe.drain_worker),
                         "args": dumps(()), "kwargs": dumps(kwargs), "wait": False},
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
