"""Closing a cluster's pools: every job removed and confirmed gone, staging dropped.

The part of :class:`~hybrid.manager.PoolManager` that ends a cluster: problems are
collected per pool and reported together in one :class:`~hybrid.errors.CleanupFailed` that
names the leftover jobs and the command that removes them.
"""

from __future__ import annotations

import asyncio
import time

from hybrid.batch import JobState, JobStatus
from hybrid.batch.staging import remove_staging_of
from hybrid.errors import BatchError, CleanupFailed
from hybrid.manager.pool import ManagedPool, short_ids


class Closing:
    """``close`` for the pool manager (uses its ``cluster``, ``pools``, ``stop()``,
    ``call()``, ``remove()`` and its thread pool)."""

    cluster: str
    pools: dict[str, ManagedPool]

    async def close(self, timeout: float = 60) -> int:
        """Remove every job of every pool, confirm with the batch systems, drop staging.

        A pool that never submitted does not ask its batch system anything. Problems are
        collected; :class:`~hybrid.errors.CleanupFailed` names the leftover jobs and the
        command that removes them (their files stay: a local job's record, a job's log).
        Returns how many jobs were removed.
        """
        await self.stop()
        self._closed = True
        problems: list[str] = []
        used = [p for p in self.pools.values() if p.used]
        # pools whose jobs may still run keep their files (a local job's record, the logs)
        left = {pool.name for pool in used}
        removed = 0
        try:
            counts = await asyncio.gather(*(self._close_pool(pool, timeout, problems)
                                            for pool in used))
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

    async def _close_pool(self, pool: ManagedPool, timeout: float,
                          problems: list[str]) -> int:
        """Remove the pool's jobs and wait until the system lists none: how many were
        removed, or -1 when some may still run (the problem is in ``problems``)."""
        def ours(statuses: list[JobStatus]) -> list[JobStatus]:
            return [s for s in statuses if s.state.active and s.pool == pool.name]

        command = f"hybrid cancel --system {pool.system.name} --cluster {self.cluster}"
        try:
            listed = ours(await self.call(pool.system.query, cluster=self.cluster))
            ids = sorted({*(s.job_id for s in listed if s.state is not JobState.removing),
                          *pool.active()})
            if ids:
                await self.remove(pool, ids)
            deadline = time.monotonic() + timeout
            pause = 0.05
            while True:
                left = ours(await self.call(pool.system.query, cluster=self.cluster))
                if not left:
                    pool.jobs.clear()
                    return len(ids)
                if time.monotonic() > deadline:
                    problems.append(
                        f"pool {pool.name}: {len(left)} job(s) still listed after removal: "
                        + ", ".join(f"{s.job_id} ({s.state.value})" for s in left)
                        + f"; `{command}` removes them")
                    return -1
                await asyncio.sleep(pause)
                pause = min(0.5, pause * 1.5)
        except (BatchError, OSError) as error:
            tracked = pool.active()
            where = (f"jobs {short_ids(tracked)} may still run; `{command}` removes them"
                     if tracked else f"`{command}` removes any job left")
            problems.append(f"pool {pool.name}: {error} ({where})")
            return -1

    def shutdown_executor(self) -> None:
        """Release the manager's threads (after :meth:`stop`, when the jobs stay)."""
        self._executor.shutdown(wait=False)
