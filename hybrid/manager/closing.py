"""Closing a cluster's pools: every job removed and confirmed gone, staging dropped.

The part of :class:`~hybrid.manager.PoolManager` that ends a cluster: problems are
collected per pool and reported together in one :class:`~hybrid.errors.CleanupFailed` that
names the leftover jobs and the command that removes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from hybrid.batch import JobState, JobStatus
from hybrid.batch.base import LISTING_TRIES
from hybrid.batch.staging import remove_staging_of
from hybrid.errors import BatchError, CleanupFailed
from hybrid.manager.pool import ManagedPool, short_ids
from hybrid.scheduler_probe import CLOSING_KEY

logger = logging.getLogger("hybrid.manager")

#: Seconds the scheduler has to take the word that the cluster closes (one that is gone
#: costs this much, overlapped with the first listing of the jobs).
SAY_CLOSING_WITHIN = 2.0
#: Seconds after which a job still listed as queued or running is asked to leave again.
REMOVE_AGAIN_AFTER = 5.0
#: Listings that may fail in a row while a pool closes (a busy controller's timeouts) before
#: the close says it cannot confirm the removal (its removal went out all the same).
QUERY_TRIES = LISTING_TRIES


class Closing:
    """``close`` for the pool manager (uses its ``cluster``, ``pools``, ``stop()``,
    ``call()``, ``remove()`` and its thread pool)."""

    cluster: str
    pools: dict[str, ManagedPool]
    scheduler: Any
    closing_elsewhere: bool
    #: Whether :meth:`say_closing` has run.
    _said_closing: bool = False

    async def close(self, timeout: float = 60) -> int:
        """Remove every job of every pool, confirm with the batch systems, drop staging.

        A pool that never submitted does not ask its batch system anything. Problems are
        collected; :class:`~hybrid.errors.CleanupFailed` names the leftover jobs and the
        command that removes them (their files stay: a local job's record, a job's log).
        Returns how many jobs were removed.
        """
        await self.stop()
        self._closed = True
        # said while the pools list their jobs (unless said already); awaited before any
        # removal
        said = asyncio.ensure_future(self.say_closing())
        problems: list[str] = []
        used = [p for p in self.pools.values() if p.used]
        # pools whose jobs may still run keep their files (a local job's record, the logs)
        left = {pool.name for pool in used}
        removed = 0
        try:
            counts = await asyncio.gather(*(self._close_pool(pool, timeout, problems, said)
                                            for pool in used))
            await said
            removed = sum(c for c in counts if c > 0)
            left = {pool.name for pool, count in zip(used, counts, strict=True) if count < 0}
            closed: set[int] = set()
            for pool in used:
                if id(pool.system) not in closed:
                    closed.add(id(pool.system))
                    try:
                        await self.call(pool.system.cluster_closed, self.cluster)
                    except Exception as error:
                        problems.append(f"{pool.system.name}: {error}")
        finally:
            said.cancel()  # (done by now, unless the close itself was cancelled)
            for pool in self.pools.values():
                if pool.staging is not None and pool.name not in left:
                    pool.staging.remove()
                    pool.staging = None
            if not problems and not left:  # every job is gone: so are the files others staged
                remove_staging_of(self.cluster)
            self._executor.shutdown(wait=False)
        if problems:
            raise CleanupFailed("closing left work behind: " + "; ".join(problems))
        return removed

    def note_closing_elsewhere(self) -> None:
        """Another client is closing the cluster: submit nothing more (said once)."""
        if not self.closing_elsewhere:
            self.closing_elsewhere = True
            logger.info("cluster %s is being shut down by another of its clients: its jobs "
                        "are no longer replaced or added", self.cluster)

    async def closing_said(self) -> bool:
        """Whether another client has said on the scheduler that it closes the cluster (it
        says so before it removes any job): then nothing more is submitted."""
        if await self.scheduler.get_metadata(keys=[CLOSING_KEY], default=False):
            self.note_closing_elsewhere()
        return self.closing_elsewhere

    async def say_closing(self) -> None:
        """Tell the cluster's other clients, through its scheduler, before any job goes: their
        managers read it before they replace a job or scale up, so none refills what this
        close removes (a notebook's view while a script shuts the cluster down). Said once:
        a cluster that stops its own scheduler before :meth:`close` says it first, while the
        scheduler still listens (a scheduler that is gone costs the whole bound)."""
        if self._said_closing:
            return
        self._said_closing = True
        try:
            await asyncio.wait_for(self.scheduler.set_metadata(keys=[CLOSING_KEY], value=True),
                                   SAY_CLOSING_WITHIN)
        except Exception as error:  # a scheduler that is gone has no other client to tell
            logger.debug("cluster %s: cannot mark it closing on its scheduler: %s",
                         self.cluster, error)

    async def _close_pool(self, pool: ManagedPool, timeout: float, problems: list[str],
                          said: asyncio.Future) -> int:
        """Remove the pool's jobs and wait until the system lists none: how many were
        removed, or -1 when some may still run (the problem is in ``problems``)."""
        def ours(statuses: list[JobStatus]) -> list[JobStatus]:
            return [s for s in statuses if s.state.active and s.pool == pool.name]

        command = f"hybrid cancel --system {pool.system.name} --cluster {self.cluster}"
        try:
            listed = ours(await self.call(pool.system.query, cluster=self.cluster))
        except (BatchError, OSError) as error:  # the jobs it tracks are removed all the same
            listed, failed = [], error
        else:
            failed = None
        try:
            ids = sorted({*(s.job_id for s in listed if s.state is not JobState.removing),
                          *pool.active()})
            await asyncio.shield(said)
            if ids:
                await self.remove(pool, ids)
            asked = set(ids)
            now = time.monotonic()
            deadline, again = now + timeout, now + REMOVE_AGAIN_AFTER
            pause, failures = 0.05, 0 if failed is None else 1
            while True:
                if failures >= QUERY_TRIES:  # the listing keeps failing: say what is left
                    raise failed  # type: ignore[misc]
                try:
                    left = ours(await self.call(pool.system.query, cluster=self.cluster))
                except (BatchError, OSError) as error:  # a busy system: asked again
                    failed, failures = error, failures + 1
                    await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
                    continue
                failures = 0
                if not left:
                    pool.jobs.clear()
                    return len(asked)
                now = time.monotonic()
                # a job submitted meanwhile (another client's manager, before it learned
                # that the cluster closes), or one still queued or running a while after its
                # removal (a removal the batch system lost): asked (again) to leave
                staying = [s.job_id for s in left if s.state is not JobState.removing
                           and (s.job_id not in asked or now >= again)]
                if staying:
                    await self._remove_again(pool, staying, asked)
                    if now >= again:
                        again = now + REMOVE_AGAIN_AFTER
                if now > deadline:
                    problems.append(
                        f"pool {pool.name}: {len(left)} job(s) still listed after removal: "
                        + ", ".join(f"{s.job_id} ({s.state.value})" for s in left)
                        + f"; `{command}` removes them")
                    return -1
                await asyncio.sleep(pause)
                pause = min(0.5, pause * 1.5)
        except (BatchError, OSError) as error:
            tracked = pool.active()
            where = (f"jobs {short_ids(tracked)} were asked to leave but may still run; "
                     f"`{command}` removes them" if tracked
                     else f"`{command}` removes any job left")
            problems.append(f"pool {pool.name}: {error} ({where})")
            return -1

    async def _remove_again(self, pool: ManagedPool, job_ids: list[str],
                            asked: set[str]) -> None:
        """Remove jobs found while closing; a failure is left to the deadline to report."""
        fresh = [j for j in job_ids if j not in asked]
        logger.info("pool %s: %s while the cluster closes: removing %s", pool.name,
                    "new job(s) listed" if fresh else "job(s) still listed",
                    short_ids(job_ids))
        asked.update(job_ids)
        with contextlib.suppress(BatchError, OSError):
            await self.remove(pool, job_ids)

    def shutdown_executor(self) -> None:
        """Release the manager's threads (after :meth:`stop`, when the jobs stay)."""
        self._executor.shutdown(wait=False)
