"""Publishing the pools to the scheduler, for its dashboard's Pools page.

The pools live in the process that manages them; the page runs in the scheduler. A
:class:`PoolsPublisher`, one of the pool manager's observers (called after each reconcile
round, every ``hybrid.batch.poll-interval``), writes a snapshot of the pools into the
scheduler's metadata under :data:`~hybrid.dashboard.page.POOLS_METADATA_KEY` and, the first
time, adds the page to the scheduler's dashboard (:func:`hybrid.dashboard.page.install`,
sent with ``run_function``). It only reads the manager's state as of its last refresh: no
batch system is asked here.

The snapshot (``format`` 1)::

    {"format": 1, "cluster": NAME, "time": EPOCH_SECONDS, "interval": SECONDS,
     "pools": {POOL: {**PoolStatus.as_dict(), "summary": ..., "workers": N,
                      "error": LAST_QUERY_ERROR | None,
                      "table": [{"job_id", "state", "reason", "workers": [ADDRESS, ...]}],
                      "more_jobs": N,
                      "history": [[EPOCH_SECONDS, PENDING, RUNNING, HELD, REMOVING,
                                   WORKERS], ...]}}}
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from hybrid.batch import JobState
from hybrid.dashboard.page import POOLS_FORMAT, POOLS_METADATA_KEY, STATES
from hybrid.manager.pacing import poll_interval

logger = logging.getLogger("hybrid")

#: Rows of a pool's job table at most (the rest are counted as ``more_jobs``).
MAX_ROWS = 200
#: Points of a pool's chart at most (one is added only when a count changes).
MAX_HISTORY = 720
#: Ended jobs listed after the pool's jobs in the queue (with why they ended).
ENDED_ROWS = 10
_ORDER = {JobState.held: 0, JobState.pending: 1, JobState.suspended: 2, JobState.running: 3,
          JobState.removing: 4}


class PoolsPublisher:
    """Writes a manager's pools into its scheduler's metadata (call it to publish once).

    Parameters
    ----------
    manager : hybrid.manager.PoolManager
        The pools to publish; its ``scheduler`` (an ``rpc``) receives them.
    install_page : bool
        Add the Pools page to the scheduler's dashboard with the first publication.
    """

    def __init__(self, manager: Any, install_page: bool = True) -> None:
        self.manager = manager
        self.install_page = install_page
        #: What installing the page answered (``None``: not tried yet).
        self.page: str | None = None
        self.history: dict[str, deque[list[float]]] = {}
        #: Publications so far.
        self.published = 0

    def __repr__(self) -> str:
        return f"<PoolsPublisher of {self.manager.cluster}: {self.published} published>"

    async def __call__(self) -> None:
        await self.publish()

    async def publish(self) -> dict[str, Any]:
        """Write one snapshot (installing the page first, once); return it."""
        if self.install_page and self.page is None:
            self.page = await self.install()
        snapshot = await self.snapshot()
        await self.manager.scheduler.set_metadata(keys=[POOLS_METADATA_KEY], value=snapshot)
        self.published += 1
        return snapshot

    async def install(self) -> str:
        """Add the Pools page to the scheduler's dashboard; what the scheduler answered."""
        import cloudpickle
        from distributed.protocol.pickle import dumps

        from hybrid.dashboard import page

        cloudpickle.register_pickle_by_value(page)  # a scheduler without hybrid serves it too
        try:
            response = await self.manager.scheduler.run_function(
                function=dumps(page.install), args=dumps(()), kwargs=dumps({}), wait=True)
        except Exception as error:
            answer = f"not installed: {type(error).__name__}: {error}"
        else:
            answer = (str(response.get("result")) if response.get("status") == "OK" else
                      f"not installed: {response.get('exception') or response}")
        if answer not in ("installed", "present"):
            logger.info("cluster %s: no Pools page on the dashboard (%s)",
                        self.manager.cluster, answer)
        return answer

    async def snapshot(self) -> dict[str, Any]:
        """The pools as of their last refresh, with their connected workers asked now."""
        manager = self.manager
        now = time.time()
        try:
            live = await manager.live_workers()
        except Exception:  # the scheduler is busy or going: the last known workers stay
            live = None
        pools: dict[str, Any] = {}
        for pool in list(manager.pools.values()):
            by_job = await manager.pool_workers(pool, live) if live is not None else {}
            status = manager.status_of(pool)
            workers = sum(len(a) for a in by_job.values())
            jobs = sorted(pool.jobs.values(), key=lambda s: (_ORDER.get(s.state, 9), s.job_id))
            rows = [{"job_id": s.job_id, "state": s.state.value, "reason": s.reason,
                     "workers": list(by_job.get(s.job_id, ()))} for s in jobs]
            rows += [{"job_id": s.job_id, "state": s.state.value, "reason": s.reason,
                      "workers": []} for s in reversed(list(pool.ended)[-ENDED_ROWS:])]
            counts = [status.jobs.get(state, 0) for state in STATES[:-1]]  # (the chart's)
            history = self.history.setdefault(pool.name, deque(maxlen=MAX_HISTORY))
            if not history or history[-1][1:] != [*counts, workers]:
                history.append([now, *counts, workers])
            pools[pool.name] = {
                **status.as_dict(), "summary": status.summary(), "workers": workers,
                "error": pool.query_error, "table": rows[:MAX_ROWS],
                "more_jobs": max(0, len(rows) - MAX_ROWS), "history": list(history)}
        return {"format": POOLS_FORMAT, "cluster": manager.cluster, "time": now,
                "interval": poll_interval(),
                "pools": pools}


def publish_pools(manager: Any) -> PoolsPublisher:
    """Make ``manager`` publish its pools after every reconcile round; the publisher."""
    for observer in manager.observers:
        if isinstance(observer, PoolsPublisher):
            return observer
    publisher = PoolsPublisher(manager)
    manager.observers.append(publisher)
    return publisher
