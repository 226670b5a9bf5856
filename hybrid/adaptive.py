"""Per-pool adaptive scaling on distributed's ``AdaptiveCore``, on the cluster's event loop.

A GPU backlog grows the GPU pool only; CPU tasks grow the CPU pool only. The workers
``AdaptiveCore`` counts are the pool's batch jobs: ``plan``/``requested`` are the jobs in the
queue (pending jobs count: a pending job is a worker on its way, so the pool never has more
than ``maximum`` jobs queued and running, and demand that pending jobs will meet submits
nothing; jobs retiring at the end of their lifetime no longer count, and overlap their
replacements while they drain), ``observed`` those whose worker has connected. The target
is the tasks that can run now for the pool's resource, divided by what one job runs at
once: with no worker yet, the whole demand goes out in one submission, not one job per
queue wait. Scaling down waits for
``wait_count`` low readings (``AdaptiveCore``'s own rule) and removes jobs without a worker
first (held, then pending, the newest first), then idle workers only, retired gracefully so a
worker holding the only copy of a result keeps it until it moved. Pools in an order of
preference (:meth:`hybrid.HybridCluster.prefer`) split the demand by
:func:`hybrid.manager.preference.shares`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable, Mapping
from itertools import compress
from typing import TYPE_CHECKING, Any

from distributed.deploy.adaptive_core import AdaptiveCore
from tornado.ioloop import PeriodicCallback

from hybrid.errors import ConfigurationError
from hybrid.manager.pool import worker_names
from hybrid.routing import NOT_GPU

if TYPE_CHECKING:
    from hybrid.manager import ManagedPool, PoolManager

logger = logging.getLogger("hybrid")


class PoolAdaptive(AdaptiveCore):
    """Scale one pool between ``minimum`` and ``maximum`` from its resource's demand."""

    def __init__(self, manager: PoolManager, pool: ManagedPool, minimum: int = 0,
                 maximum: int = 10, interval: Any = "2s", wait_count: int = 3):
        from hybrid.fields import count, seconds, validate_value
        from hybrid.resources import MAX_WORKERS

        minimum, maximum, wait_count = (
            validate_value(count(low, high), value, f"adapt.{label}")
            for label, value, low, high in (("minimum", minimum, 0, MAX_WORKERS),
                                            ("maximum", maximum, 0, MAX_WORKERS),
                                            ("wait_count", wait_count, 1, None)))
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
        self._plan: set[str] | None = None
        self._step_workers: tuple[dict, dict[str, tuple[str, ...]]] | None = None
        self._step_names: list[Any] | None = None  # (the names of the step's workers)
        self._callback: PeriodicCallback | None = None

    # ------------------------------------------------------------------ AdaptiveCore
    @property
    def plan(self) -> set[str]:
        """The pool's jobs in the queue that count toward its target (not those being
        removed, nor those retiring at the end of their lifetime); read once per step."""
        if self._plan is None:
            self._plan = set(self.pool.counted())
        return self._plan

    @property
    def requested(self) -> set[str]:
        """What the batch system was asked for and still holds: the same as :attr:`plan`."""
        return self.plan

    @property
    def observed(self) -> set[str]:
        """Jobs whose worker has connected (as of the last step)."""
        return self._connected & self.plan

    async def target(self) -> int:
        """Jobs the pool should have for the demand for its resource (its share, when it is
        in an order of preference)."""
        probe = await self.manager.probe()
        if self.manager.closing_elsewhere:  # another client shuts the cluster down
            return len(self.plan)
        self._busy = probe["busy"]
        self._holds = probe.get("holds", {})
        demand = probe["demand"].get(self.pool.resource, 0)
        if self.pool.spec.serves_cpu_tasks:
            demand += probe.get("unrestricted", 0)
            if self.pool.spec.gpus:  # a GPU pool that also takes the CPU tasks
                demand += probe["demand"].get(NOT_GPU, 0)
        order = self.manager.preferences.order_of(self.pool.name)
        if len(order) > 1:
            return self.manager.share(self.pool, demand, order)
        return math.ceil(demand / self.pool.spec.tasks_per_job(self.manager.fraction))

    async def recommendations(self, target: int) -> dict:
        """``AdaptiveCore``'s, but the jobs to close come in order: held and pending first,
        the newest first, then running jobs whose worker has not joined, then idle workers."""
        plan = self.plan
        if target >= len(plan):
            return await super().recommendations(target)
        surplus = len(plan) - target
        without_worker = plan - self.observed
        # all of them go (most scale-downs of a large pool): their order changes nothing
        to_close = (list(without_worker) if surplus >= len(without_worker)
                    else self.pool.least_needed(without_worker, surplus))
        if surplus > len(to_close):
            chosen = set(to_close)
            to_close += [j for j in await self.workers_to_close(target)
                         if j not in chosen][:surplus - len(to_close)]
        firmly_close = set()
        for job_id in to_close:
            self.close_counts[job_id] += 1
            if self.close_counts[job_id] >= self.wait_count:
                firmly_close.add(job_id)
        for job_id in list(self.close_counts):  # clear out unseen keys
            if job_id in firmly_close or job_id not in to_close:
                del self.close_counts[job_id]
        if firmly_close:
            return {"status": "down", "workers": list(firmly_close)}
        return {"status": "same"}

    async def workers_to_close(self, target: int) -> list[str]:
        """Idle jobs (no task on their workers); a worker holding results only while
        another worker of the cluster stays to take them (else retiring it would fail)."""
        busy = getattr(self, "_busy", {})
        holds = getattr(self, "_holds", {})
        live, jobs = await self._workers()
        plan = self.plan
        jobs_of = self.pool.jobs_of_workers  # (by worker name)
        busy_jobs = set(jobs_of(list(compress(busy, busy.values()))))
        holders = list(compress(holds, holds.values()))
        held: dict[str | None, int] = {}  # job id -> results its workers hold
        for job_id, results in zip(jobs_of(holders), map(holds.__getitem__, holders),
                                   strict=True):
            held[job_id] = held.get(job_id, 0) + results
        idle = [j for j in jobs if j in plan and j not in busy_jobs]
        if held:  # (a stable sort: without results held, the order stays)
            idle.sort(key=lambda j: held.get(j, 0))
        chosen: list[str] = []
        staying = set(live)
        for job_id in idle[:max(0, len(plan) - target)]:
            addresses = set(jobs[job_id])
            if held.get(job_id) and staying <= addresses:
                continue  # its results would have nowhere to go
            staying -= addresses
            chosen.append(job_id)
        return chosen

    async def _workers(self
                       ) -> tuple[dict[str, dict[str, Any]], dict[str, tuple[str, ...]]]:
        """The scheduler's workers and this pool's (job id -> addresses), as the step
        found them (a call outside a step asks now)."""
        if self._step_workers is not None:
            return self._step_workers
        live = await self.manager.live_workers()
        return live, await self.manager.pool_workers(self.pool, live)

    async def scale_up(self, n: int) -> None:
        """Submit jobs up to ``n`` counting toward the target (``n`` is at most
        ``maximum``): a job retiring at the end of its lifetime no longer counts, so its
        replacement goes out ahead of time, while it drains. The jobs are counted as the
        step's look found them (at the pool's pace: a job that ended since is seen by a later
        step; it can only make this step submit less, never more)."""
        if self.adapting and not self.manager.closing_elsewhere:
            await self.manager.scale(self.pool, n, refresh=False)
        self._plan = None

    async def scale_down(self, workers: Iterable[str]) -> None:
        """Remove these jobs: without a worker at once, with one after graceful retirement.
        The batch system is asked first (the step's look may be a paced interval old): a job
        that has ended meanwhile (an eviction, a preemption) is read as such, not removed."""
        if not self.adapting:
            return
        await self.manager.refresh(self.pool)
        if not self.adapting:  # (stopped while the batch system answered)
            return
        chosen = sorted(j for j in workers if j in self.pool.jobs)
        live = await self.manager.live_workers()  # (a worker may have joined since the step)
        step = self._step_workers
        if step is not None and same_workers(live, step[0], self._step_names):
            connected = step[1]
        else:
            connected = await self.manager.pool_workers(self.pool, live)
        await self.manager.remove(self.pool, [j for j in chosen if j not in connected])
        addresses = [a for j in chosen if j in connected for a in connected[j]]
        if addresses:
            retired = await self.manager.scheduler.retire_workers(
                workers=addresses, close_workers=True, remove=True) or {}
            # a worker whose results could not move stays, and so does its job
            await self.manager.remove(self.pool, [
                j for j in chosen if j in connected
                and all(a in retired for a in connected[j])])
        self._plan = None
        if self.adapting:
            self.pool.target = len(self.plan)

    async def adapt(self) -> None:
        """One step: reconcile the jobs, then ``AdaptiveCore.adapt`` (errors are reported)."""
        self.steps += 1
        self._step_workers = None
        try:
            self._plan = None
            live = await self.manager.live_workers()  # asked once per step
            self._step_names = worker_names(live)
            self._step_workers = (live, await self.manager.pool_workers(
                self.pool, live, self._step_names))
            # (after the workers: one that left makes the batch system due at once)
            await self.manager.refresh_when_due(self.pool)
            self._connected = set(self._step_workers[1])
            await super().adapt()
            self._plan = None
            if self.adapting:
                self.pool.target = len(self.plan)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # keep adapting; the error is reported
            self._plan = None
            self.errors.append(str(error))
            # (a step under way when adaptivity stopped fails as its cluster closes: that
            # is how the close goes, not news)
            logger.log(logging.WARNING if self._callback is not None else logging.DEBUG,
                       "pool %s: adaptive step failed: %s", self.pool.name, error)
        finally:
            self._step_workers = self._step_names = None
        if self.pool.failed:
            self.stop()

    # ------------------------------------------------------------------ life cycle
    @property
    def adapting(self) -> bool:
        """Whether this still scales its pool: a step under way when it stopped (``scale(n)``,
        a new ``adapt``, right after it started) ends without changing anything."""
        return self.pool.adaptive is self

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


def same_workers(now: Mapping[str, Mapping[str, Any]],
                 then: Mapping[str, Mapping[str, Any]],
                 then_names: list[Any] | None = None) -> bool:
    """Whether two answers of the scheduler list the same workers: the same addresses
    with the same names, in the same order (passes in C, not in Python; ``then_names``:
    the names of ``then``, where they are known)."""
    return (len(now) == len(then) and list(now) == list(then)
            and worker_names(now) == (worker_names(then) if then_names is None
                                      else then_names))


def stop_adapting(pools: Iterable[ManagedPool]) -> None:
    """``adapt(active=False)``: these pools stop adapting (their jobs stay)."""
    for pool in pools:
        if pool.adaptive is not None:
            pool.adaptive.stop()


def check_adapt_keywords(kwargs: Mapping[str, Any], signature: str) -> None:
    """Refuse what ``adapt`` does not take; distributed's ``target_duration`` with why."""
    if "target_duration" in kwargs:
        raise ConfigurationError(
            "adapt.target_duration", kwargs["target_duration"],
            "nothing: a pool scales from the tasks waiting for its resource (a job per task "
            "slot), not to finish them within a duration",
            "Leave it out; bound the pool with maximum= instead.")
    if kwargs:
        raise ConfigurationError("adapt", sorted(kwargs), signature)


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
