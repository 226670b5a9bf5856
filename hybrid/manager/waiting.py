"""Waiting for workers: progress, the batch system's reasons, and when to stop waiting.

The part of :class:`~hybrid.manager.PoolManager` that a user's ``wait_for_workers`` (and
``scale(..., wait=True)``) drives: it polls the scheduler for the pools' workers, refreshes
the jobs as often as each pool's pacing allows (:mod:`hybrid.manager.pacing`), and raises as
soon as the jobs say the workers will not come (held jobs, a pool that gave up, too few jobs
left).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from dask.utils import parse_timedelta

from hybrid import config
from hybrid.batch import JobState
from hybrid.errors import ConfigurationError, PoolFailed, WorkersDidNotArrive
from hybrid.fields import count
from hybrid.manager.pacing import poll_interval
from hybrid.manager.pool import ManagedPool
from hybrid.manager.progress import WaitProgress, progress_mode
from hybrid.resources import MAX_WORKERS

#: How many workers a pool is scaled to (``scale(n)``): at most ``MAX_WORKERS``, so that a
#: typo (``scale(10**6)``) submits nothing (a local pool started 2,400 processes).
WORKERS = count(0, MAX_WORKERS, f"a whole number of workers from 0 to {MAX_WORKERS}")


class WaitingForWorkers:
    """``wait_for_workers`` and the one-line job report, for the pool manager.

    Uses the manager's ``cluster``, ``pools``, ``clock``, ``pool()``, ``live_workers()``,
    ``pool_workers()`` and ``refresh_when_due()``.
    """

    cluster: str
    pools: dict[str, ManagedPool]
    clock: Callable[[], float]

    async def wait_for_workers(self, n: int, pool: str | None = None, timeout: Any = None,
                               progress: bool | str | None = None) -> None:
        """Wait until ``n`` workers of ``pool`` (or of all pools) are connected.

        Raises :class:`~hybrid.errors.WorkersDidNotArrive` naming the batch system's reasons
        when jobs are held or the pool gave up, or when ``timeout`` passes. ``progress``:
        see :func:`~hybrid.manager.progress.progress_mode` (``None`` picks a display,
        ``False`` shows none).
        """
        pools = [self.pool(pool)] if pool is not None or len(self.pools) == 1 else list(
            self.pools.values())
        if not pools:
            raise ConfigurationError("pool", pool, "a pool: add one first with "
                                     "cluster.add_pool(name, system=...)")
        self._check_failed(pools)  # a pool that gave up: at once, not after a poll
        label = pools[0].name if len(pools) == 1 else "all pools"
        limit = None if timeout is None else parse_timedelta(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        poll = poll_interval()
        mode = progress_mode(progress, sys.stderr)
        display = None if mode is None else WaitProgress(n, label, mode, sys.stderr)
        last_refresh = time.monotonic()
        outcome = "stopped"
        first = True
        for target in pools:  # failures now reach the caller through this wait's exception
            target.waiters += 1
            target.pacing.changed(self.clock())  # (someone waits: the queue is looked at)
        try:
            while True:
                live = await self.live_workers()
                workers = {target.name: sum(len(a) for a in (
                    await self.pool_workers(target, live)).values()) for target in pools}
                have = sum(workers.values())
                if display is not None:  # every change is drawn at once
                    display.update(have, {p.name: p.status() for p in pools}, workers)
                if have >= n:
                    outcome = "done"
                    return
                if first:  # (once the display shows where the pools stand)
                    first = False
                    self._check_reachable(pools, n, label, pool)
                now = time.monotonic()
                if now - last_refresh >= poll:
                    last_refresh = now
                    for target in pools:  # (as often as the pool's pacing allows)
                        await self.refresh_when_due(target)
                    self._check_progress(pools, n, have)
                if deadline is not None and now > deadline:
                    raise WorkersDidNotArrive(
                        f"{have} of {n} workers of {label} connected after {limit:g} s. "
                        + self.report(pools))
                await asyncio.sleep(0.1)
        except (asyncio.CancelledError, KeyboardInterrupt):
            outcome = "interrupted"
            raise
        finally:
            for target in pools:
                target.waiters -= 1
            if display is not None:
                display.close(outcome)

    @staticmethod
    def _check_reachable(pools: list[ManagedPool], n: int, label: str,
                         pool: str | None) -> None:
        """Refuse at once a wait for more workers than the pools' jobs can start: their
        targets (an adaptive pool's maximum) times the workers of a job."""
        most = {p.name: max(p.target, p.adaptive.maximum if p.adaptive is not None else 0)
                * p.spec.max_processes for p in pools}
        if n <= sum(most.values()):
            return
        scaled = ", ".join(f"{name}: {count}" for name, count in most.items())
        if len(pools) == 1:  # scale counts jobs: a job may run several workers
            jobs = -(-n // pools[0].spec.max_processes)
            where = f", pool={pool!r}" if pool is not None else ""
            fix = f"call cluster.scale({jobs}{where}) or adapt(maximum={jobs})"
        else:
            fix = "scale (or adapt) the pools to them"
        raise WorkersDidNotArrive(
            f"waiting for {n} workers of {label}, but its jobs start at most "
            f"{sum(most.values())} ({scaled}): {fix} first, then wait.")

    @staticmethod
    def _check_failed(pools: list[ManagedPool]) -> None:
        failed = [p for p in pools if p.failed]
        if failed:
            raise PoolFailed("; ".join(f"pool {p.name} gave up: {p.failed}" for p in failed))

    def _check_progress(self, pools: list[ManagedPool], n: int, have: int) -> None:
        self._check_failed(pools)
        held = [s for p in pools for s in p.jobs.values() if s.state is JobState.held]
        if held and config.get("batch.held-jobs", "report") != "replace":
            raise WorkersDidNotArrive(
                f"{len(held)} job(s) are held and will not start by themselves: "
                + "; ".join(f"{s.job_id}: {s.reason}" for s in held)
                + f". `hybrid cancel --system {pools[0].system.name} --cluster "
                f"{self.cluster}` removes them.")
        queued = sum(len(p.active()) * p.spec.processes for p in pools)
        if have + queued < n and any(p.ended for p in pools) and all(
                p.adaptive is None and (p.target <= len(p.active()) or not p.replaces_jobs)
                for p in pools):
            last = [s for p in pools for s in p.ended if s.state is JobState.failed][-3:]
            raise WorkersDidNotArrive(
                f"only {queued} job(s) are still queued or running for {n} workers ({have} "
                "connected); " + ("failed: " + "; ".join(
                    f"{s.job_id}: {s.reason}" for s in last) if last else "the others ended"))

    def report(self, pools: Iterable[ManagedPool] | None = None) -> str:
        """The jobs of the pools and their states, in one line per pool."""
        lines = []
        for pool in self.pools.values() if pools is None else pools:
            states = [f"{s.job_id} {s.state.value}" + (f" ({s.reason})" if s.reason else "")
                      for s in pool.jobs.values()]
            ended = [f"{s.job_id} {s.state.value}" + (f" ({s.reason})" if s.reason else "")
                     for s in list(pool.ended)[-3:]]
            text = f"pool {pool.name}: " + ("; ".join(states) if states else
                                            "no job in the queue")
            if ended:
                text += "; ended: " + "; ".join(ended)
            if pool.failed:
                text += f"; gave up: {pool.failed}"
            if not pool.used:
                text = f"pool {pool.name}: none submitted (call scale first)"
            lines.append(text)
        return "Jobs: " + " | ".join(lines)


async def scale_and_wait(manager: Any, pool: ManagedPool, n: int, wait: bool = False,
                         timeout: Any = None, progress: bool | str | None = None) -> None:
    """``manager.scale(pool, n)``, then (``wait``) wait for the workers of its ``n`` jobs."""
    await manager.scale(pool, n)
    if wait and n:
        await manager.wait_for_workers(n * pool.spec.processes, pool=pool.name,
                                       timeout=timeout, progress=progress)
