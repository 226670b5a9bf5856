"""The pool manager: the batch side of a cluster, on the cluster's event loop.

A :class:`PoolManager` holds a cluster's pools (:class:`~hybrid.manager.pool.ManagedPool`:
a :class:`~hybrid.pools.PoolSpec`, its batch system and its tracked jobs) and does
everything between the Dask scheduler and the batch systems: target scaling (only the
missing jobs go out, in one transaction), graceful retirement, reconciling job states,
refilling a pool that lost jobs, reporting stuck jobs with the batch system's reason, giving
up on a pool whose jobs keep failing (its pending jobs are removed, its waiting tasks fail
with the reason), the demand probe, waiting for workers (:mod:`hybrid.manager.waiting`) and
closing with every job confirmed gone (:mod:`hybrid.manager.closing`).
:class:`hybrid.HybridCluster` and the gateway's cluster are facades over one; neither does
any of this itself. Adaptivity (:mod:`hybrid.adaptive`) sits above: it is given a manager
and a pool, and the manager only knows a pool's ``adaptive`` object as something it can
``stop()``.

Every coroutine runs on the cluster's event loop; the batch systems' blocking calls
(subprocesses, HTCondor bindings, Kubernetes API) run in a small thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hybrid import config
from hybrid.batch import BatchSystem, JobState, JobStatus, Staging, WorkerJob, get_system
from hybrid.batch.jobs import ACTIVE_STATES
from hybrid.errors import BatchError, ConfigurationError, HybridError, PoolFailed, ToolMissing
from hybrid.manager.closing import Closing
from hybrid.manager.lifetime import Lifetimes
from hybrid.manager.pool import GONE, ManagedPool, PoolStatus, by_job_id, short_ids
from hybrid.manager.preference import Preferences, capacity, shares
from hybrid.manager.remote import NO_ARGS, pickled_probe
from hybrid.manager.waiting import WaitingForWorkers
from hybrid.manager.watching import JobWatch
from hybrid.pools import PoolSpec
from hybrid.routing import GPU, NOT_GPU, gpu_fraction
from hybrid.worker import Connection

logger = logging.getLogger("hybrid")

#: Seconds the scheduler has to answer before a pool's lost jobs are replaced.
SCHEDULER_ANSWERS_WITHIN = 5.0

class PoolManager(WaitingForWorkers, Closing, JobWatch, Lifetimes):
    """The pools of one cluster and everything between its scheduler and batch systems.

    ``scheduler`` is an ``rpc`` to the scheduler (``identity``, ``run_function``,
    ``retire_workers``); ``connection`` says how workers reach it.
    """

    def __init__(self, cluster: str, connection: Connection, scheduler: Any, *,
                 fraction: float | None = None):
        self.cluster = cluster
        self.connection = connection
        self.scheduler = scheduler
        self.fraction = gpu_fraction(fraction)
        self.pools: dict[str, ManagedPool] = {}
        #: What the cluster's workers may add up to (``max_workers``, ``max_cores``,
        #: ``max_memory`` in bytes; ``None``: no limit), e.g. a gateway admin's limits.
        self.limits: dict[str, float | None] = {}
        #: The clock of every time the manager keeps (queue waits, lifetimes, fallbacks):
        #: ``time.monotonic``; a simulation gives its own.
        self.clock: Callable[[], float] = time.monotonic
        #: Which pool takes which pool's demand when its jobs wait (:meth:`prefer`).
        self.preferences = Preferences()
        self._executor = ThreadPoolExecutor(max_workers=4,
                                            thread_name_prefix=f"hybrid-{cluster}")
        self._reconciler: asyncio.Task | None = None
        self._closed = False
        #: Coroutine functions called after each reconcile round (e.g. the dashboard's
        #: publisher); their errors are logged, never raised.
        self.observers: list[Callable[[], Awaitable[None]]] = []
        #: Reconcile passes so far (each ``hybrid.batch.poll-interval``).
        self.passes = 0
        #: Whether another client is shutting the cluster down (see ``closing_said``).
        self.closing_elsewhere = False

    # ------------------------------------------------------------------ pools
    def add(self, spec: PoolSpec, system: BatchSystem | None = None) -> ManagedPool:
        """Add a pool (nothing is submitted)."""
        if spec.name in self.pools:
            raise ConfigurationError("pool name", spec.name,
                                     f"a name not in {sorted(self.pools)}")
        self.connection.check_pool(spec, f"add_pool({spec.name!r})")
        if system is None:
            system = get_system(spec.system, **spec.system_options)
        pool = ManagedPool(spec, system, WorkerJob(self.cluster, spec, self.connection))
        system.prepare(pool.job, pool.staging_path())
        self.pools[spec.name] = pool
        return pool

    def pool(self, name: str | None = None) -> ManagedPool:
        """The pool called ``name``; with one pool, ``None`` means that one."""
        if name is None:
            if len(self.pools) == 1:
                return next(iter(self.pools.values()))
            raise ConfigurationError(
                "pool", None,
                f"a pool name, one of {sorted(self.pools)}" if self.pools else
                "a pool: add one first with cluster.add_pool(name, system=...)")
        if not isinstance(name, str) or name not in self.pools:
            raise ConfigurationError("pool", name, f"one of {sorted(self.pools)}"
                                     if self.pools else "a pool added with add_pool first")
        return self.pools[name]

    def status(self) -> dict[str, PoolStatus]:
        """Each pool's :class:`~hybrid.manager.pool.PoolStatus`, as of its last refresh
        (as of each pool's last query, :mod:`hybrid.manager.pacing`; no batch system is asked
        here)."""
        return {name: self.status_of(pool) for name, pool in self.pools.items()}

    def status_of(self, pool: ManagedPool) -> PoolStatus:
        """One pool's status, with the pool its demand falls back to (as :meth:`status`)."""
        return pool.status(self.clock(), self.preferences.fallback_of(pool.name))

    def prefer(self, order: Any, fallback_after: Any = None, label: str = "prefer") -> None:
        """Record an order of preference between pools (see
        :mod:`hybrid.manager.preference`); ``None`` forgets every order."""
        if order is None:
            self.preferences.clear()
            return
        if fallback_after is None:
            fallback_after = config.get("adaptive.fallback-after", "5 minutes")
        self.preferences.add(order, self.pools, fallback_after, label)

    def share(self, pool: ManagedPool, demand: int, order: list[str]) -> int:
        """The jobs ``pool`` should have for ``demand`` tasks, as its share of ``order``."""
        now = self.clock()
        return shares(demand, [capacity(self.pools[name], self.fraction, now,
                                        self.preferences.fallback_of(name))
                               for name in order])[pool.name]

    def systems(self) -> list[BatchSystem]:
        """The batch system objects of the pools, each once."""
        seen: dict[int, BatchSystem] = {}
        for pool in self.pools.values():
            seen.setdefault(id(pool.system), pool.system)
        return list(seen.values())

    async def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking batch-system call in the manager's threads (a system that
        answers at once, on the loop)."""
        if getattr(getattr(function, "__self__", None), "answers_at_once", False):
            return function(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor,
                                          functools.partial(function, *args, **kwargs))

    # ------------------------------------------------------------------ jobs
    async def submit(self, pool: ManagedPool, count: int, report: bool = True) -> list[str]:
        """Submit ``count`` workers in one transaction and track them (``report``: log a
        failure; ``False`` where the caller's exception says it)."""
        if count <= 0:
            return []
        if pool.failed:
            raise PoolFailed(f"pool {pool.name} gave up: {pool.failed}")
        if self.closing_elsewhere:
            raise HybridError(f"cluster {self.cluster} is being shut down by another of its "
                              "clients: no job is submitted; start another cluster")
        if pool.staging is None:
            pool.staging = await self.call(Staging.create, pool.job)
        try:
            ids = await self.call(pool.system.submit, pool.job, pool.staging.path, count)
        except BaseException as error:
            if not isinstance(error, (ConfigurationError, ToolMissing)):
                pool.attempted = True  # it may have reached the batch system: ask it on close
            if pool.attempted and isinstance(error, (BatchError, OSError)):
                await self._remove_untracked(pool)
            if not pool.jobs:  # nothing of this pool runs: no copy of the TLS key stays
                pool.staging.remove()
                pool.staging = None
            if isinstance(error, (BatchError, ConfigurationError, OSError)):
                # a missing tool stays missing: the pool gives up at once
                self._failure(pool, f"submitting {count} worker job(s) to "
                                    f"{pool.system.name} failed: {error}",
                              final=isinstance(error, ToolMissing), report=report)
            raise
        pool.submit_calls += 1
        pool.submitted += len(ids)
        pool.track(JobStatus("", JobState.pending, None, self.cluster, pool.name,
                             self.connection.scheduler_address).for_jobs(ids))
        now = self.clock()
        pool.pacing.changed(now)
        pool._submitted.update(dict.fromkeys(ids, now))
        # waiting from now on, whether or not the batch system ever gives a reason (its
        # status may never change until the job starts)
        pool._first_pending.update(dict.fromkeys(ids, now))
        logger.info("pool %s: submitted %d worker job(s): %s", pool.name, len(ids),
                    short_ids(ids))
        return ids

    async def _remove_untracked(self, pool: ManagedPool) -> None:
        """After a failed submission: remove the pool's jobs that the batch system lists and
        the pool does not track (a submission can reach the system and still fail here, e.g.
        when its answer is lost), so none runs unaccounted for."""
        try:
            listed = await self.call(pool.system.query, cluster=self.cluster)
            strays = [s.job_id for s in listed if s.pool == pool.name and s.state.active
                      and s.state is not JobState.removing and s.job_id not in pool.jobs]
            if strays:
                logger.warning("pool %s: removing %d job(s) of the failed submission: %s",
                               pool.name, len(strays), short_ids(strays))
                pool._removed.update(strays)
                await self.call(pool.system.remove, strays)
        except (BatchError, OSError) as error:
            logger.warning("pool %s: cannot check for jobs of the failed submission (%s); "
                           "closing the cluster removes any", pool.name, error)

    async def remove(self, pool: ManagedPool, job_ids: Iterable[str]) -> None:
        """Remove exactly these jobs (they leave tracking once gone from the queue)."""
        ids = list(job_ids)
        if not ids:
            return
        pool.remove_calls += 1
        pool.pacing.changed(self.clock())
        pool._removed.update(ids)
        await self.call(pool.system.remove, ids)
        removing = JobState.removing
        olds = [old for old in map(pool.jobs.get, ids)
                if old is not None and old.state is not removing]
        if olds:  # (together: a scale-down of a large pool removes hundreds)
            pool.jobs.update({old.job_id: JobStatus(
                old.job_id, removing, "removed by hybrid", old.cluster, old.pool,
                old.scheduler) for old in olds})

    async def refresh(self, pool: ManagedPool) -> None:
        """Reconcile the tracked jobs with the batch system; ended jobs leave tracking."""
        async with pool.lock:
            pool.pacing.asked_at, version = self.clock(), pool.jobs.version
            try:
                await self._refresh(pool)
            except Exception as error:
                pool.query_error = f"{type(error).__name__}: {error}"
                raise
            pool.query_error = None
            if pool.jobs.version != version:
                pool.pacing.changed(self.clock())

    async def refresh_when_due(self, pool: ManagedPool) -> None:
        """:meth:`refresh` when the pool's pacing says its batch system is due to be asked
        (the reconcile, an adaptive step, a wait for workers: :mod:`hybrid.manager.pacing`)."""
        if pool.pacing.due(self.clock()):
            await self.refresh(pool)

    async def _refresh(self, pool: ManagedPool) -> None:
        tracked = list(pool.jobs)
        if not tracked:
            pool.refreshed_at = self.clock()
            if pool._vanished:
                await self._vanished_while_waiting(pool, pool.refreshed_at)
            return
        asked = self.clock()
        statuses = by_job_id(await self.call(pool.system.query, job_ids=tracked))
        pool.refreshed_at = self.clock()  # the system answered
        # how a job we removed ended needs no history (Slurm's costs a call per job)
        missing = [j for j in tracked if j not in statuses and j not in pool._removed
                   ] if len(statuses) < len(tracked) else []
        if missing:
            statuses.update({s.job_id: s for s in await self.call(
                pool.system.query, job_ids=missing, history=True)})
        now = self.clock()
        jobs = pool.jobs
        # the same status object: unchanged (most jobs, most steps; it is in the queue, so
        # a look would find nothing to do), and a job no longer kept: nothing to look at
        for job_id in self._note_together(pool, jobs.not_the_same(tracked, statuses),
                                          statuses, now):
            old = jobs.get(job_id)
            if old is None:
                continue
            status = statuses.get(job_id) or (
                JobStatus(job_id, JobState.removed, "removed by hybrid", self.cluster, pool.name)
                if job_id in pool._removed else JobStatus(
                    job_id, JobState.finished, GONE, self.cluster, pool.name))
            if status.state in ACTIVE_STATES:
                if (status.state is JobState.pending and old.state is JobState.running
                        and pool._connected_at.get(job_id, float("-inf")) >= asked):
                    continue  # asked before its worker connected: it runs (not an eviction)
                if status != old:  # an equal status: nothing to note
                    self._observe(pool, old, status, now)
                    jobs[job_id] = status
                continue
            del pool.jobs[job_id]
            pool.ended.append(status)
            drained = job_id in pool._drained
            pool.forget(job_id)
            if job_id in pool._removed:
                continue
            if status.evicted and status.state is JobState.removed:  # preempted: refilled
                self._evicted(pool, status, left=True)
                continue
            if job_id in pool._connected:
                if status.state in (JobState.failed, JobState.removed) and not drained:
                    self._ended_with_worker(pool, status)
                continue
            if status.state is JobState.finished and status.reason != GONE and pool._connected:
                # a worker exits 0 only when its scheduler closed it (client.restart() of a
                # worker without a nanny, a retirement) or its --lifetime ended; one that never
                # reached its scheduler exits 1. The pool refills it; it is no failure (unless
                # no worker of the pool ever came: then something else exits 0, e.g. a wrong
                # python, and resubmitting would loop).
                logger.info("pool %s: job %s ended, its worker closed", pool.name, job_id)
                continue
            if old.state in (JobState.pending, JobState.held) and (
                    status.state is JobState.removed):
                self._removed_waiting(pool, status)  # (it does not run: no failure)
            elif old.state is JobState.pending and status.reason == GONE:
                pool._vanished[job_id] = (now, status)  # decided once its record had time
            elif status.state in (JobState.failed, JobState.removed, JobState.finished):
                self._failure(pool, pool.describe_end(status))
        if pool._vanished:
            await self._vanished_while_waiting(pool, now)
        self._report_pending(pool, now)
        self._log_change(pool)

    def _failure(self, pool: ManagedPool, why: str, final: bool = False,
                 report: bool = True) -> None:
        """Count a failure (``final``: the pool gives up at once), and say it once: not where
        the caller's exception says it (``report=False``), nor while someone waits for the
        pool's workers (the wait raises with it), nor after the pool gave up (that message
        said it)."""
        pool.failures += 1
        limit = int(config.get("batch.max-failures", 3))
        gives_up = (final or pool.failures >= limit) and pool.failed is None
        if report and not gives_up and pool.failed is None and not pool.waiters:
            logger.warning("pool %s: %s", pool.name, why)
        if gives_up:
            pool.failed = why if final else (
                f"{pool.failures} failures in a row (hybrid.batch.max-failures = {limit}); "
                f"the last: {why}")
            if report and not pool.waiters:
                logger.error("pool %s gives up: %s", pool.name, pool.failed)
            # whoever waits for this pool's workers hears it now, not at the next reconcile
            pool.giving_up = asyncio.ensure_future(self._give_up(pool))

    async def _note_connected(self, pool: ManagedPool, job_ids: Iterable[str]) -> None:
        found = dict.fromkeys(job_ids)
        if found.keys() <= pool._connected:
            return  # (most steps: no worker joined)
        # in the order found (a set's order would change with the string hashing, and so
        # would which of the last arrival waits the pool keeps)
        new = [j for j in found if j not in pool._connected]
        pool._connected.update(new)
        pool.failures = 0
        now = self.clock()
        for job_id in new:
            # a job whose worker connected runs, whatever the last query said: now, not a
            # poll later, with its start noted (its lifetime counts; an unknown start count,
            # so the next query's is not read as a restart)
            pool._connected_at[job_id] = now
            pool._starts.pop(job_id, None)  # (its count while it waited is not this run's)
            status = pool.jobs.get(job_id)
            if status is not None and status.state is JobState.pending:
                running = dataclasses.replace(status, state=JobState.running, reason=None,
                                              starts=None)
                self._observe(pool, status, running, now)
                pool.jobs[job_id] = running
            # from its submission to its worker: how long a replacement takes to arrive
            submitted = pool._submitted.pop(job_id, None)
            if submitted is not None:
                pool.arrival_waits.append(now - submitted)

    # ------------------------------------------------------------------ workers
    async def live_workers(self) -> dict[str, dict[str, Any]]:
        """Worker address -> info, asked of the scheduler now."""
        return dict((await self.scheduler.identity()).get("workers", {}))

    async def pool_workers(self, pool: ManagedPool,
                           live: Mapping[str, Mapping[str, Any]] | None = None,
                           names: list[Any] | None = None) -> dict[str, tuple[str, ...]]:
        """Job id -> addresses of its connected workers (``names``: those of ``live``'s
        workers, where the caller has them)."""
        live = await self.live_workers() if live is None else live
        out = pool.workers_by_job(live, names)
        now = {job_id: len(addresses) for job_id, addresses in out.items()}
        if now != pool._connected_now:  # a worker joined or left: the jobs change
            pool.pacing.changed(self.clock(), left=any(
                now.get(job_id, 0) < n for job_id, n in pool._connected_now.items()))
        pool._connected_now = now
        await self._note_connected(pool, out)
        return out

    async def connected_workers(self, pool: str | None = None) -> list[str]:
        """Names of the connected workers of ``pool`` (or of every pool)."""
        pools = [self.pool(pool)] if pool is not None else list(self.pools.values())
        live = await self.live_workers()
        names = []
        for target in pools:
            jobs = await self.pool_workers(target, live)
            names += [str(live[a].get("name")) for addresses in jobs.values()
                      for a in addresses]
        return sorted(names)

    async def probe(self) -> dict[str, Any]:
        """Demand per resource and per-worker load, computed on the scheduler."""
        from hybrid import scheduler_probe

        result = await self._run_on_scheduler(scheduler_probe.resource_demand,
                                              resource_names=(GPU, NOT_GPU))
        if result.get("closing"):
            self.note_closing_elsewhere()
        return result

    async def _run_on_scheduler(self, function: Callable, **kwargs: Any) -> Any:
        from distributed.protocol.pickle import dumps

        response = await self.scheduler.run_function(
            function=pickled_probe(function), args=NO_ARGS, kwargs=dumps(kwargs), wait=True)
        if response.get("status") != "OK":
            raise HybridError(f"the scheduler could not run {function.__name__}: {response}")
        return response["result"]

    # ------------------------------------------------------------------ scaling
    async def scale(self, pool: ManagedPool, n: int, idle_only: bool = False,
                    refresh: bool = True) -> None:
        """Set the pool's target to ``n`` jobs: submit the missing, retire the surplus.

        A call that fails changes no target (so nothing resubmits behind the caller's back)
        and is reported once: by its exception. ``refresh=False`` counts the jobs as of the
        last refresh (an adaptive step: its look at the pool's pace). The jobs counted are
        :meth:`ManagedPool.queued_count`'s (a vanished job not decided yet among them)."""
        async with pool.scaling:
            if refresh:
                await self.refresh(pool)
            active = pool.counted()
            queued = pool.queued_count()
            if queued < n:
                self.check_limits(pool, n)
            previous, pool.target = pool.target, n
            try:
                if queued < n:
                    await self.submit(pool, n - queued, report=False)
                elif len(active) > n:
                    await self.retire(pool, len(active) - n, idle_only=idle_only)
            except BaseException:
                pool.target = previous
                raise

    def check_limits(self, pool: ManagedPool, jobs: int) -> None:
        """Refuse ``jobs`` jobs of ``pool`` when the cluster would exceed :attr:`limits`."""
        if not any(v is not None for v in self.limits.values()):
            return
        counts = {p.name: len(p.counted()) for p in self.pools.values()}
        counts[pool.name] = jobs
        totals = {
            "max_workers": sum(counts[p.name] * p.spec.processes for p in self.pools.values()),
            "max_cores": sum(counts[p.name] * p.spec.cores for p in self.pools.values()),
            "max_memory": sum(counts[p.name] * (p.spec.memory or 0)
                              for p in self.pools.values()),
        }
        setting = {"max_workers": ("workers", "cluster_max_workers"),
                   "max_cores": ("cores", "cluster_max_cores"),
                   "max_memory": ("bytes of memory", "cluster_max_memory")}
        for key, limit in self.limits.items():
            if limit is None or totals.get(key, 0) <= limit:
                continue
            what, name = setting[key]
            per_job = {"max_workers": pool.spec.processes, "max_cores": pool.spec.cores,
                       "max_memory": pool.spec.memory or 0}[key]
            others = totals[key] - jobs * per_job
            most = int((limit - others) // per_job) if per_job else jobs
            raise ConfigurationError(
                f"scale({jobs}, pool={pool.name!r})", jobs,
                f"at most {max(0, most)} job(s): the cluster may use {limit:g} {what} "
                f"({name}, the gateway admin's limit) and this would need "
                f"{totals[key]:g}", "Nothing was submitted. Scale within the limit, or ask "
                "the admin to raise it.")

    async def retire(self, pool: ManagedPool, count: int, idle_only: bool = False,
                     busy: Mapping[str, int] | None = None) -> list[str]:
        """Remove ``count`` jobs: first those with no worker yet (pending first) and the
        suspended ones (a stopped worker hands nothing over), then workers retired
        gracefully (their results moved elsewhere first)."""
        live = await self.live_workers()
        connected = await self.pool_workers(pool, live)
        chosen = pool.least_needed([j for j in pool.counted() if j not in connected
                                    or pool.jobs[j].state is JobState.suspended], count)
        await self.remove(pool, chosen)
        removed = list(chosen)
        left = count - len(chosen)
        if left > 0 and connected:
            load = busy if busy is not None else (await self.probe())["busy"]

            def job_load(job_id: str) -> int:
                return sum(load.get(str(live[a].get("name")), 0) for a in connected[job_id])

            candidates = sorted((j for j in connected if j in pool.jobs and j not in chosen
                                 and j not in pool.retiring), key=job_load)
            if idle_only:
                candidates = [j for j in candidates if job_load(j) == 0]
            candidates = candidates[:left]
            if candidates:
                addresses = [a for j in candidates for a in connected[j]]
                retired = await self.scheduler.retire_workers(
                    workers=addresses, close_workers=True, remove=True)
                done = [j for j in candidates if all(a in (retired or {})
                                                     for a in connected[j])]
                await self.refresh(pool)
                await self.remove(pool, [j for j in done if j in pool.jobs])
                removed += done
        return removed

    async def reconcile(self, pool: ManagedPool) -> None:
        """Refresh; refill a pool that lost jobs to its target; give up when it keeps failing.

        The batch system is asked when the pool's pacing says so (an adaptive step may
        have just asked it)."""
        await self.refresh_when_due(pool)
        if pool.failed:
            await self._remove_held(pool)  # held after the pool gave up: removed all the same
            await self._give_up(pool)
            return
        await self.check_lifetimes(pool)
        # (a job that left while it waited, not decided yet, is not replaced before it is)
        if pool.adaptive is None and pool.target > pool.queued_count():
            async with pool.scaling:
                await self._refill(pool)
        await self._remove_held(pool)

    async def _refill(self, pool: ManagedPool) -> None:
        """Submit the jobs a pool lacks for its target (with ``pool.scaling`` held)."""
        missing = pool.target - pool.queued_count()
        if pool.adaptive is not None or missing <= 0:
            return
        try:  # replacements only for a scheduler that answers (none would join a dead one)
            closing = await asyncio.wait_for(self.closing_said(), SCHEDULER_ANSWERS_WITHIN)
        except (OSError, asyncio.TimeoutError) as error:
            logger.warning("pool %s: %d of its %d job(s) are gone; not replaced, the "
                           "scheduler does not answer (%s)", pool.name, missing, pool.target,
                           error)
            return
        if closing:  # nor while another client shuts the cluster down
            return
        retiring = sum(1 for j in pool.retiring if j in pool.jobs)
        logger.info("pool %s: %d of its %d job(s) %s; submitting replacements", pool.name,
                    missing, pool.target, "are gone" if not retiring else
                    f"are gone or at the end of their lifetime ({retiring} retiring)")
        with contextlib.suppress(BatchError, ConfigurationError, OSError, PoolFailed):
            await self.submit(pool, missing)

    async def _reconcile_forever(self, interval: float) -> None:
        while not self._closed:
            await asyncio.sleep(interval)
            self.passes += 1
            live = None
            with contextlib.suppress(Exception):  # the jobs are reconciled all the same
                live = await asyncio.wait_for(self.live_workers(), SCHEDULER_ANSWERS_WITHIN)
            for pool in list(self.pools.values()):
                if not pool.used and not pool.failed:  # a failed pool fails new tasks too
                    continue
                try:
                    if live is not None:  # whose worker came: its job's end is no failure
                        await self.pool_workers(pool, live)
                    await self.reconcile(pool)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # the next period tries again
                    logger.warning("pool %s: reconciling with %s failed: %s", pool.name,
                                   pool.system.name, error)
            for observer in list(self.observers):
                try:  # bounded: a scheduler that does not answer must not stall the pools
                    await asyncio.wait_for(observer(), SCHEDULER_ANSWERS_WITHIN)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # an observer never stops the reconciling
                    logger.debug("observer %r of cluster %s failed: %s", observer,
                                 self.cluster, error)

    def start(self) -> None:
        """Start reconciling every ``hybrid.batch.poll-interval`` (call on the loop)."""
        if self._reconciler is None:
            self._reconciler = asyncio.ensure_future(
                self._reconcile_forever(self.poll_interval()))

    async def stop(self) -> None:
        """Stop reconciling and every pool's adaptivity (the jobs stay)."""
        for pool in self.pools.values():
            if pool.adaptive is not None:
                pool.adaptive.stop()
                pool.adaptive = None
        task, self._reconciler = self._reconciler, None
        while task is not None and not task.done():
            # again until it ends: Python 3.11's wait_for drops a cancel that lands as the
            # call it bounds finishes
            task.cancel()
            await asyncio.wait({task}, timeout=0.1)
        if task is not None and not task.cancelled():
            task.result()

