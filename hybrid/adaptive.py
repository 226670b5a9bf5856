"""Per-pool adaptive scaling on distributed's ``AdaptiveCore``, on the cluster's event loop.

A GPU backlog grows the GPU pool only; CPU tasks grow the CPU pool only. The workers
``AdaptiveCore`` counts are the pool's batch jobs: ``plan``/``requested`` are the jobs in the
queue, ``observed`` those whose worker has connected. Scaling up is immediate (queued jobs
count, so nothing is submitted twice); scaling down waits for ``wait_count`` low readings
(``AdaptiveCore``'s own rule) and removes jobs without a worker first, then idle workers only,
retired gracefully so a worker holding the only copy of a result keeps it until it moved.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from distributed.deploy.adaptive_core import AdaptiveCore
from tornado.ioloop import PeriodicCallback

from hybrid.errors import ConfigurationError
from hybrid.routing import NOT_GPU

if TYPE_CHECKING:
    from hybrid.manager import ManagedPool, PoolManager

logger = logging.getLogger("hybrid")


class PoolAdaptive(AdaptiveCore):
    """Scale one pool between ``minimum`` and ``maximum`` from its resource's demand."""

    def __init__(self, manager: PoolManager, pool: ManagedPool, minimum: int = 0,
                 maximum: int = 10, interval: Any = "2s", wait_count: int = 3):
        from hybrid.fields import count, seconds, validate_value

        minimum, maximum, wait_count = (
            validate_value(count(low), value, f"adapt.{label}") for label, value, low in (
                ("minimum", minimum, 0), ("maximum", maximum, 0), ("wait_count", wait_count, 1)))
        if minimum > maximum:
            raise ConfigurationError("adapt.minimum", minimum, f"at most maximum ({maximum})")
        try:
            self.interval = seconds(interval)
        except Exception:
            raise ConfigurationError("adapt.interval", interval,
                                     'a duration such as "2s" or 10 (seconds)') from None
        super().__init__(minimum=minimum, maximum=maximum, wait_count=wait_count)
        self.manager = manager
        self.pool = pool
        #: Errors of steps, newest last (a failing step is retried at the next interval).
        self.errors: list[str] = []
        #: Steps taken so far.
        self.steps = 0
        self._connected: set[str] = set()
        self._callback: PeriodicCallback | None = None

    # ------------------------------------------------------------------ AdaptiveCore
    @property
    def plan(self) -> set[str]:
        """The pool's jobs in the queue (not those already being removed)."""
        from hybrid.batch import JobState

        return {j for j, s in self.pool.jobs.items() if s.state is not JobState.removing}

    @property
    def requested(self) -> set[str]:
        """What the batch system was asked for and still holds: the same as :attr:`plan`."""
        return self.plan

    @property
    def observed(self) -> set[str]:
        """Jobs whose worker has connected (as of the last step)."""
        return self._connected & self.plan

    async def target(self) -> int:
        """Jobs the pool should have for the demand for its resource."""
        probe = await self.manager.probe()
        self._busy = probe["busy"]
        demand = probe["demand"].get(self.pool.resource, 0)
        if self.pool.spec.serves_cpu_tasks:
            demand += probe.get("unrestricted", 0)
            if self.pool.spec.gpus:  # a GPU pool that also takes the CPU tasks
                demand += probe["demand"].get(NOT_GPU, 0)
        return math.ceil(demand / self.pool.spec.tasks_per_job(self.manager.fraction))

    async def workers_to_close(self, target: int) -> list[str]:
        """Idle jobs (no task on their workers), the least loaded first."""
        busy = getattr(self, "_busy", {})
        live = await self.manager.live_workers()
        jobs = await self.manager.pool_workers(self.pool, live)
        idle = [j for j, addresses in jobs.items()
                if not any(busy.get(str(live[a].get("name")), 0) for a in addresses)]
        return idle[:max(0, len(self.plan) - target)]

    async def scale_up(self, n: int) -> None:
        """Submit jobs up to ``n`` in the queue."""
        await self.manager.scale(self.pool, n)

    async def scale_down(self, workers: Iterable[str]) -> None:
        """Remove these jobs: without a worker at once, with one after graceful retirement."""
        chosen = [j for j in workers if j in self.pool.jobs]
        live = await self.manager.live_workers()
        connected = await self.manager.pool_workers(self.pool, live)
        await self.manager.remove(self.pool, [j for j in chosen if j not in connected])
        addresses = [a for j in chosen if j in connected for a in connected[j]]
        if addresses:
            await self.manager.scheduler.retire_workers(workers=addresses, close_workers=True,
                                                        remove=True)
            await self.manager.remove(self.pool, [j for j in chosen if j in connected])
        self.pool.target = len(self.plan)

    async def adapt(self) -> None:
        """One step: reconcile the jobs, then ``AdaptiveCore.adapt`` (errors are reported)."""
        self.steps += 1
        try:
            await self.manager.refresh(self.pool)
            self._connected = set(await self.manager.pool_workers(self.pool))
            await super().adapt()
            self.pool.target = len(self.plan)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # keep adapting; the error is reported
            self.errors.append(str(error))
            logger.warning("pool %s: adaptive step failed: %s", self.pool.name, error)
        if self.pool.failed:
            self.stop()

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Adapt every ``interval`` on the running loop (call on the cluster's loop)."""
        if self._callback is None:
            self._callback = PeriodicCallback(self.adapt, self.interval * 1000)
            self._callback.start()
            self._first_step = asyncio.ensure_future(self.adapt())

    def stop(self) -> None:
        """Stop adapting (the jobs stay)."""
        if self._callback is not None:
            self._callback.stop()
            self._callback = None
        if self.pool.adaptive is self:
            self.pool.adaptive = None


def adaptive_class(value: Any, field: str) -> type[PoolAdaptive]:
    """``value`` as the class that scales a pool (``None``: :class:`PoolAdaptive`)."""
    if value is None:
        return PoolAdaptive
    if not (isinstance(value, type) and issubclass(value, PoolAdaptive)):
        raise ConfigurationError(
            field, value, "None or a subclass of hybrid.adaptive.PoolAdaptive (the "
            "AdaptiveCore that scales one pool of jobs)", "distributed's Adaptive scales the "
            "workers of a SpecCluster, which a HybridCluster's pools are not: subclass "
            "PoolAdaptive to change how a pool decides.")
    return value
