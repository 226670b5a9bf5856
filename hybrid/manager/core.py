"""The pool manager: the batch side of a cluster, on the cluster's event loop.

A :class:`PoolManager` holds a cluster's pools (:class:`ManagedPool`: a
:class:`~hybrid.pools.PoolSpec`, its batch system and its tracked jobs) and does everything
between the Dask scheduler and the batch systems: target scaling (only the missing jobs go
out, in one transaction), graceful retirement, reconciling job states, refilling a pool that
lost jobs, reporting stuck jobs with the batch system's reason, giving up on a pool whose
jobs keep failing (its waiting tasks then fail with the reason), the demand probe, and
closing with every job confirmed gone. :class:`hybrid.HybridCluster` and the gateway's
cluster are facades over one; neither does any of this itself.

Every coroutine runs on the cluster's event loop; the batch systems' blocking calls
(subprocesses, HTCondor bindings, Kubernetes API) run in a small thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dask.utils import parse_timedelta

from hybrid import config
from hybrid.batch import BatchSystem, JobState, JobStatus, Staging, WorkerJob, get_system
from hybrid.batch.base import remove_staging_of, worker_name_suffix
from hybrid.errors import (
    BatchError,
    CleanupFailed,
    ConfigurationError,
    HybridError,
    PoolFailed,
    ToolMissing,
    WorkersDidNotArrive,
)
from hybrid.pools import PoolSpec
from hybrid.routing import GPU, NOT_GPU, gpu_fraction
from hybrid.worker import Connection

logger = logging.getLogger("hybrid")

#: What common exit codes of a worker job mean, and what to do.
EXIT_HINTS = {
    "127": "a command was not found on the execute node: the worker's python, apptainer, "
           "pixi or conda (check PATH there, or give python=...)",
    "126": "a command was found but could not be run (permissions, or a binary for "
           "another platform)",
    "137": "killed by SIGKILL: often the memory limit (give the pool more memory)",
    "9": "killed by SIGKILL: often the memory limit (give the pool more memory)",
}

#: Seconds the scheduler has to answer before a pool's lost jobs are replaced.
SCHEDULER_ANSWERS_WITHIN = 5.0


class ManagedPool:
    """One pool of a cluster: its spec, its system, its tracked jobs, its target."""

    def __init__(self, spec: PoolSpec, system: BatchSystem, job: WorkerJob):
        self.spec = spec
        self.system = system
        self.job = job
        #: Tracked jobs still in the queue (pending, running, held, being removed).
        self.jobs: dict[str, JobStatus] = {}
        #: The last jobs that ended, newest last (for reports).
        self.ended: deque[JobStatus] = deque(maxlen=50)
        self.target = 0
        self.submit_calls = 0
        self.remove_calls = 0
        #: Failures in a row: refused submissions, jobs that ended before their worker came.
        self.failures = 0
        #: Why the pool gave up (``None`` while it has not).
        self.failed: str | None = None
        #: Jobs reported as stuck in the queue: job id -> the batch system's reason.
        self.stuck: dict[str, str | None] = {}
        self.adaptive: Any = None
        self.staging: Staging | None = None
        #: Another process may have submitted jobs for this pool (a connect): ask its system.
        self.adopted = False
        #: A submission failed in a way that may have reached the batch system.
        self.attempted = False
        #: The task that fails the pool's waiting tasks once it gave up.
        self.giving_up: asyncio.Future | None = None
        self._first_pending: dict[str, float] = {}
        self._by_suffix: dict[str, str] = {}
        self._connected: set[str] = set()
        self._removed: set[str] = set()
        self.lock = asyncio.Lock()
        #: Held from counting the missing jobs until they are submitted (scale, refill): a
        #: submission in flight is not tracked yet, so no other may count without it.
        self.scaling = asyncio.Lock()

    # ------------------------------------------------------------------ names
    @property
    def name(self) -> str:
        """The pool's name."""
        return self.spec.name

    @property
    def resource(self) -> str:
        """``"GPU"`` or ``"notGPU"``."""
        return self.spec.resource

    @property
    def used(self) -> bool:
        """Whether this pool may have jobs: it submitted, tracks some, or adopted them."""
        return bool(self.submit_calls or self.jobs or self.adopted or self.attempted)

    def active(self) -> list[str]:
        """Ids of the jobs that count toward the target: pending, running or held (as of
        the last refresh; jobs being removed do not count)."""
        return [j for j, s in self.jobs.items()
                if s.state.active and s.state is not JobState.removing]

    def job_id_of_worker(self, worker_name: str) -> str | None:
        """The job id behind a worker name ``<cluster>-<pool>-<id>[-<process>]``."""
        prefix = self.job.name_prefix + "-"
        if not worker_name.startswith(prefix):
            return None
        suffix = worker_name[len(prefix):]
        if self.spec.processes > 1 and "-" in suffix:
            suffix = suffix.rsplit("-", 1)[0]  # dask worker --nworkers k: NAME-0 .. NAME-k-1
        return self._by_suffix.get(suffix)

    def track(self, statuses: Iterable[JobStatus]) -> None:
        """Start (or keep) tracking these jobs."""
        for status in statuses:
            self.jobs[status.job_id] = status
            self._by_suffix[worker_name_suffix(status.job_id)] = status.job_id

    def staging_path(self) -> Path:
        """The staging directory (a would-be path before the first submission)."""
        if self.staging is not None:
            return self.staging.path
        return Staging.would_be(self.job)

    def job_script(self, count: int = 1) -> str:
        """The job's files as they would be submitted, for reading (nothing is written)."""
        return self.system.job_script(self.job, self.staging_path(), count)

    def __repr__(self) -> str:
        failed = f", failed: {self.failed}" if self.failed else ""
        return (f"<Pool {self.name!r} on {self.system.name}: target {self.target}, "
                f"{len(self.active())} active job(s){failed}>")


class PoolManager:
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
        self._executor = ThreadPoolExecutor(max_workers=4,
                                            thread_name_prefix=f"hybrid-{cluster}")
        self._reconciler: asyncio.Task | None = None
        self._closed = False

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

    def systems(self) -> list[BatchSystem]:
        """The batch system objects of the pools, each once."""
        seen: dict[int, BatchSystem] = {}
        for pool in self.pools.values():
            seen.setdefault(id(pool.system), pool.system)
        return list(seen.values())

    async def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking batch-system call in the manager's threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor,
                                          functools.partial(function, *args, **kwargs))

    # ------------------------------------------------------------------ jobs
    async def submit(self, pool: ManagedPool, count: int) -> list[str]:
        """Submit ``count`` workers in one transaction and track them."""
        if count <= 0:
            return []
        if pool.failed:
            raise PoolFailed(f"pool {pool.name} gave up: {pool.failed}")
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
                self._failure(pool, f"submitting {count} worker job(s) to "
                                    f"{pool.system.name} failed: {error}")
            raise
        pool.submit_calls += 1
        pool.track(JobStatus(j, JobState.pending, None, self.cluster, pool.name,
                             self.connection.scheduler_address) for j in ids)
        logger.info("pool %s: submitted %d worker job(s): %s", pool.name, len(ids),
                    _ids(ids))
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
                               pool.name, len(strays), _ids(strays))
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
        pool._removed.update(ids)
        await self.call(pool.system.remove, ids)
        for job_id in ids:
            old = pool.jobs.get(job_id)
            if old is not None and old.state is not JobState.removing:
                pool.jobs[job_id] = JobStatus(job_id, JobState.removing, "removed by hybrid",
                                              old.cluster, old.pool, old.scheduler)

    async def refresh(self, pool: ManagedPool) -> None:
        """Reconcile the tracked jobs with the batch system; ended jobs leave tracking."""
        async with pool.lock:
            await self._refresh(pool)

    async def _refresh(self, pool: ManagedPool) -> None:
        tracked = list(pool.jobs)
        if not tracked:
            return
        statuses = {s.job_id: s for s in await self.call(pool.system.query, job_ids=tracked)}
        # how a job we removed ended needs no history (Slurm's costs a call per job)
        missing = [j for j in tracked if j not in statuses and j not in pool._removed]
        if missing:
            statuses.update({s.job_id: s for s in await self.call(
                pool.system.query, job_ids=missing, history=True)})
        now = time.monotonic()
        stuck_after = parse_timedelta(config.get("batch.stuck-timeout", "5 minutes"))
        for job_id in tracked:
            if job_id not in pool.jobs:
                continue
            status = statuses.get(job_id) or (
                JobStatus(job_id, JobState.removed, "removed by hybrid", self.cluster, pool.name)
                if job_id in pool._removed else JobStatus(
                    job_id, JobState.finished, "no longer in the queue", self.cluster,
                    pool.name))
            if status.state.active:
                pool.jobs[job_id] = status
                self._watch_pending(pool, status, now, stuck_after)
                continue
            del pool.jobs[job_id]
            pool.ended.append(status)
            pool._first_pending.pop(job_id, None)
            if job_id in pool._removed or job_id in pool._connected:
                continue
            if status.state in (JobState.failed, JobState.removed, JobState.finished):
                self._failure(pool, self.describe_end(pool, status))

    def _watch_pending(self, pool: ManagedPool, status: JobStatus, now: float,
                       limit: float) -> None:
        if status.state is not JobState.pending:
            pool._first_pending.pop(status.job_id, None)
            return
        first = pool._first_pending.setdefault(status.job_id, now)
        if now - first < limit:
            return
        known = pool.stuck.get(status.job_id, "unreported")
        if known == "unreported" or (known is None and status.reason):
            pool.stuck[status.job_id] = status.reason
            logger.warning(
                "pool %s: job %s has been queued for more than %.0f s (%s); it counts toward "
                "the target and is not resubmitted. `hybrid status --system %s --cluster %s` "
                "shows the queue.", pool.name, status.job_id, limit,
                status.reason or "no reason given by the batch system yet", pool.system.name,
                self.cluster)

    def describe_end(self, pool: ManagedPool, status: JobStatus) -> str:
        """One line on a job that ended before its worker came: reason, hint, log."""
        words = f"job {status.job_id} {status.state.value}"
        if status.reason:
            words += f" ({status.reason})"
        code = status.reason.rsplit(" ", 1)[-1].rstrip(")") if status.reason else ""
        if code in EXIT_HINTS:
            words += f": {EXIT_HINTS[code]}"
        log = pool.system.log_path(pool.staging_path(), status.job_id)
        if log is not None:
            tail = _tail(log)
            if tail:
                words += f". Its log ({log}) ends with:\n    " + "\n    ".join(tail)
            else:
                words += f". Its log: {log}"
        return words

    def _failure(self, pool: ManagedPool, why: str) -> None:
        pool.failures += 1
        logger.warning("pool %s: %s", pool.name, why)
        limit = int(config.get("batch.max-failures", 3))
        if pool.failures >= limit and pool.failed is None:
            pool.failed = (f"{pool.failures} failures in a row (hybrid.batch.max-failures = "
                           f"{limit}); the last: {why}")
            logger.error("pool %s gives up: %s", pool.name, pool.failed)
            # whoever waits for this pool's workers hears it now, not at the next reconcile
            pool.giving_up = asyncio.ensure_future(self._give_up(pool))

    async def _note_connected(self, pool: ManagedPool, job_ids: Iterable[str]) -> None:
        new = set(job_ids) - pool._connected
        if new:
            pool._connected.update(new)
            pool.failures = 0

    # ------------------------------------------------------------------ workers
    async def live_workers(self) -> dict[str, dict[str, Any]]:
        """Worker address -> info, asked of the scheduler now."""
        return dict((await self.scheduler.identity()).get("workers", {}))

    async def pool_workers(self, pool: ManagedPool,
                           live: Mapping[str, Mapping[str, Any]] | None = None
                           ) -> dict[str, list[str]]:
        """Job id -> addresses of its connected workers."""
        live = await self.live_workers() if live is None else live
        out: dict[str, list[str]] = {}
        for address, info in live.items():
            job_id = pool.job_id_of_worker(str(info.get("name", "")))
            if job_id is not None:
                out.setdefault(job_id, []).append(address)
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

        return await self._run_on_scheduler(scheduler_probe.resource_demand,
                                            resource_names=(GPU, NOT_GPU))

    async def _run_on_scheduler(self, function: Callable, **kwargs: Any) -> Any:
        import cloudpickle
        from distributed.protocol.pickle import dumps

        from hybrid import scheduler_probe

        cloudpickle.register_pickle_by_value(scheduler_probe)
        response = await self.scheduler.run_function(
            function=dumps(function), args=dumps(()), kwargs=dumps(kwargs), wait=True)
        if response.get("status") != "OK":
            raise HybridError(f"the scheduler could not run {function.__name__}: {response}")
        return response["result"]

    # ------------------------------------------------------------------ scaling
    async def scale(self, pool: ManagedPool, n: int, idle_only: bool = False) -> None:
        """Set the pool's target to ``n`` jobs: submit the missing, retire the surplus."""
        async with pool.scaling:
            await self.refresh(pool)
            active = pool.active()
            if len(active) < n:
                self.check_limits(pool, n)
            pool.target = n
            if len(active) < n:
                await self.submit(pool, n - len(active))
            elif len(active) > n:
                await self.retire(pool, len(active) - n, idle_only=idle_only)

    def check_limits(self, pool: ManagedPool, jobs: int) -> None:
        """Refuse ``jobs`` jobs of ``pool`` when the cluster would exceed :attr:`limits`."""
        if not any(v is not None for v in self.limits.values()):
            return
        counts = {p.name: len(p.active()) for p in self.pools.values()}
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
        """Remove ``count`` jobs: first those with no worker yet (pending first), then
        workers retired gracefully (their results moved elsewhere first)."""
        live = await self.live_workers()
        connected = await self.pool_workers(pool, live)
        active = pool.active()
        unconnected = sorted((j for j in active if j not in connected),
                             key=lambda j: pool.jobs[j].state is not JobState.pending)
        chosen = unconnected[:count]
        await self.remove(pool, chosen)
        removed = list(chosen)
        left = count - len(chosen)
        if left > 0 and connected:
            load = busy if busy is not None else (await self.probe())["busy"]

            def job_load(job_id: str) -> int:
                return sum(load.get(str(live[a].get("name")), 0) for a in connected[job_id])

            candidates = sorted((j for j in connected if j in pool.jobs), key=job_load)
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
        """Refresh; refill a pool that lost jobs to its target; give up when it keeps failing."""
        await self.refresh(pool)
        if pool.failed:
            await self._give_up(pool)
            return
        if pool.adaptive is None and pool.target > len(pool.active()):
            async with pool.scaling:
                await self._refill(pool)
        held = [s for s in pool.jobs.values() if s.state is JobState.held]
        if held and config.get("batch.held-jobs", "report") == "replace":
            for status in held:
                self._failure(pool, f"job {status.job_id} is held: {status.reason}")
            await self.remove(pool, [s.job_id for s in held])

    async def _refill(self, pool: ManagedPool) -> None:
        """Submit the jobs a pool lacks for its target (with ``pool.scaling`` held)."""
        missing = pool.target - len(pool.active())
        if pool.adaptive is not None or missing <= 0:
            return
        try:  # replacements only for a scheduler that answers: none would join a dead one
            await asyncio.wait_for(self.live_workers(), SCHEDULER_ANSWERS_WITHIN)
        except (OSError, asyncio.TimeoutError) as error:
            logger.warning("pool %s: %d of its %d job(s) are gone; not replaced, the "
                           "scheduler does not answer (%s)", pool.name, missing, pool.target,
                           error)
            return
        logger.info("pool %s: %d of its %d job(s) are gone; submitting replacements",
                    pool.name, missing, pool.target)
        with contextlib.suppress(BatchError, ConfigurationError, OSError, PoolFailed):
            await self.submit(pool, missing)

    async def _give_up(self, pool: ManagedPool) -> None:
        """Stop the pool's adaptivity; fail the tasks no other pool will run."""
        if pool.adaptive is not None:
            pool.adaptive.stop()
        if getattr(pool, "_tasks_failed", False):
            return
        pool._tasks_failed = True  # type: ignore[attr-defined]
        others = set().union(*(_served(p) for p in self.pools.values()
                               if p is not pool and not p.failed))
        orphaned = _served(pool) - others
        if not orphaned:
            return
        from hybrid import scheduler_probe

        message = (f"hybrid: pool {pool.name} gave up, so no worker will run this task: "
                   f"{pool.failed}")
        with contextlib.suppress(Exception):
            await self._run_on_scheduler(scheduler_probe.fail_unrunnable,
                                         resources=tuple(orphaned), message=message)

    async def _reconcile_forever(self, interval: float) -> None:
        while not self._closed:
            await asyncio.sleep(interval)
            for pool in list(self.pools.values()):
                if not pool.used:
                    continue
                try:
                    await self.reconcile(pool)
                except asyncio.CancelledError:
                    raise
                except Exception as error:  # the next period tries again
                    logger.warning("pool %s: reconciling with %s failed: %s", pool.name,
                                   pool.system.name, error)

    def start(self) -> None:
        """Start reconciling every ``hybrid.batch.poll-interval`` (call on the loop)."""
        if self._reconciler is None:
            interval = parse_timedelta(config.get("batch.poll-interval", "2s"))
            self._reconciler = asyncio.ensure_future(self._reconcile_forever(interval))

    async def stop(self) -> None:
        """Stop reconciling and every pool's adaptivity (the jobs stay)."""
        for pool in self.pools.values():
            if pool.adaptive is not None:
                pool.adaptive.stop()
                pool.adaptive = None
        task, self._reconciler = self._reconciler, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

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
            pool.target = len(pool.active())

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

    # ------------------------------------------------------------------ waiting
    async def wait_for_workers(self, n: int, pool: str | None = None, timeout: Any = None,
                               progress: bool | None = None) -> None:
        """Wait until ``n`` workers of ``pool`` (or of all pools) are connected.

        Raises :class:`~hybrid.errors.WorkersDidNotArrive` naming the batch system's reasons
        when jobs are held or the pool gave up, or when ``timeout`` passes.
        """
        from tqdm import tqdm

        pools = [self.pool(pool)] if pool is not None or len(self.pools) == 1 else list(
            self.pools.values())
        if not pools:
            raise ConfigurationError("pool", pool, "a pool: add one first with "
                                     "cluster.add_pool(name, system=...)")
        label = pools[0].name if len(pools) == 1 else "all pools"
        limit = None if timeout is None else parse_timedelta(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        poll = parse_timedelta(config.get("batch.poll-interval", "2s"))
        show = sys.stderr.isatty() if progress is None else progress
        last_refresh = time.monotonic()
        with tqdm(total=n, desc=f"workers ({label})", unit="worker", disable=not show,
                  leave=False, mininterval=1.0) as bar:
            while True:
                live = await self.live_workers()
                have = 0
                for target in pools:
                    have += sum(len(a) for a in (await self.pool_workers(target, live))
                                .values())
                if min(have, n) != bar.n:
                    bar.update(min(have, n) - bar.n)
                if have >= n:
                    return
                now = time.monotonic()
                if now - last_refresh >= poll:
                    last_refresh = now
                    for target in pools:
                        await self.refresh(target)
                    self._check_progress(pools, n, have)
                if deadline is not None and now > deadline:
                    raise WorkersDidNotArrive(
                        f"{have} of {n} workers of {label} connected after {limit:g} s. "
                        + self.report(pools))
                await asyncio.sleep(0.1)

    def _check_progress(self, pools: list[ManagedPool], n: int, have: int) -> None:
        failed = [p for p in pools if p.failed]
        if failed:
            raise PoolFailed("; ".join(f"pool {p.name} gave up: {p.failed}" for p in failed))
        held = [s for p in pools for s in p.jobs.values() if s.state is JobState.held]
        if held and config.get("batch.held-jobs", "report") != "replace":
            raise WorkersDidNotArrive(
                f"{len(held)} job(s) are held and will not start by themselves: "
                + "; ".join(f"{s.job_id}: {s.reason}" for s in held)
                + f". `hybrid cancel --system {pools[0].system.name} --cluster "
                f"{self.cluster}` removes them.")
        queued = sum(len(p.active()) * p.spec.processes for p in pools)
        if have + queued < n and any(p.ended for p in pools) and all(
                p.adaptive is None and p.target <= len(p.active()) for p in pools):
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

    # ------------------------------------------------------------------ closing
    async def close(self, timeout: float = 60) -> None:
        """Remove every job of every pool, confirm with the batch systems, drop staging.

        A pool that never submitted does not ask its batch system anything. Problems are
        collected; :class:`~hybrid.errors.CleanupFailed` names the leftover jobs and the
        command that removes them.
        """
        await self.stop()
        self._closed = True
        problems: list[str] = []
        used = [p for p in self.pools.values() if p.used]
        try:
            await asyncio.gather(*(self._close_pool(pool, timeout, problems)
                                   for pool in used))
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
                if pool.staging is not None:
                    pool.staging.remove()
                    pool.staging = None
            if not problems:  # every job is gone: so are the files other processes staged
                remove_staging_of(self.cluster)
            self._executor.shutdown(wait=False)
        if problems:
            raise CleanupFailed("closing left work behind: " + "; ".join(problems))

    async def _close_pool(self, pool: ManagedPool, timeout: float,
                          problems: list[str]) -> None:
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
                    return
                if time.monotonic() > deadline:
                    problems.append(
                        f"pool {pool.name}: {len(left)} job(s) still listed after removal: "
                        + ", ".join(f"{s.job_id} ({s.state.value})" for s in left)
                        + f"; `{command}` removes them")
                    return
                await asyncio.sleep(pause)
                pause = min(0.5, pause * 1.5)
        except (BatchError, OSError) as error:
            tracked = pool.active()
            where = (f"jobs {_ids(tracked)} may still run; `{command}` removes them"
                     if tracked else f"`{command}` removes any job left")
            problems.append(f"pool {pool.name}: {error} ({where})")

    def shutdown_executor(self) -> None:
        """Release the manager's threads (after :meth:`stop`, when the jobs stay)."""
        self._executor.shutdown(wait=False)


def _served(pool: ManagedPool) -> set[str | None]:
    """The task kinds a pool's workers run: resource names, ``None`` for unannotated."""
    served: set[str | None] = {GPU} if pool.spec.gpus else set()
    if pool.spec.serves_cpu_tasks:
        served |= {NOT_GPU, None}
    return served


def _tail(path: Path, lines: int = 8) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def _ids(ids: list[str], shown: int = 8) -> str:
    if len(ids) <= shown:
        return " ".join(ids)
    return " ".join(ids[:shown]) + f" ... ({len(ids)} in all)"
