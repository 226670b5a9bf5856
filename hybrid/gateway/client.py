"""``HTCGateway``: ``dask_gateway.Gateway`` whose clusters can also get batch workers.

A drop-in for ``dask_gateway.Gateway`` and ``GatewayCluster``: the same constructors, the same
synchronous and asynchronous forms (``asynchronous=True``, ``async with``, ``await``), the same
exceptions. A cluster with no batch pool IS a stock gateway cluster: ``scale``/``adapt`` go to
the gateway. A cluster with batch pools (``new_cluster(pool="slurm", ...)``, ``pools={...}``
or ``hybrid.gateway.pool``) gets its workers from batch jobs that this client submits: they
join the gateway's scheduler through its TCP proxy (TLS, SNI ``daskgateway-<cluster>``) with
the cluster's own certificate; the gateway API token never reaches a job.

The batch side is a :class:`~hybrid.manager.PoolManager` on the gateway client's event loop.
The pools are kept in the scheduler's metadata
(:data:`~hybrid.gateway.options.METADATA_KEY`), so a later
``gateway.connect(name)`` in any process of the same user finds them, and their jobs by tag.

Keywords of ``new_cluster``: one the gateway offers goes to the gateway exactly as the stock
client sends it; ``worker_cores``, ``worker_memory``, ``env`` and the environment keywords
also size or set up the batch pool; a keyword only hybrid knows never shadows one the gateway
offers (see docs/gateway.md for the table).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from dask_gateway import GatewayCluster

from hybrid import config, lifecycle
from hybrid.errors import (
    CleanupFailed,
    ConfigurationError,
    HybridError,
    cleanup_after,
)
from hybrid.gateway.gateway import (
    GatewayClusterClosed,
    HTCClusterReport,
    HTCGateway,
    _heartbeat,
)
from hybrid.gateway.options import (
    CLIENT_KEYWORDS,
    LIMITS_KEY,
    METADATA_FORMAT,
    METADATA_KEY,
    POOL_KEYWORDS,
    _gateway_secrets,
    _settings_dict,
    batch_worker_address,
    changed_options,
    job_environment,
    offered_value,
    pool_specs,
    scheduler_sni,
    wait_timeout,
)
from hybrid.widgets import ClusterViews

logger = logging.getLogger("hybrid")


class HTCGatewayCluster(ClusterViews, GatewayCluster):
    """``dask_gateway.GatewayCluster`` with batch pools (none: exactly the stock cluster)."""

    _hybrid_options: dict[str, Any] = {}
    _worker_proxy_address: str | None = None
    _pools: Any = None  # the PoolManager, once the cluster runs and has batch pools
    _settings: dict[str, Any] | None = None
    _submitted: set[str] = set()
    _job_env: dict[str, str] = {}
    _ending: Any = None  # its registration with hybrid.lifecycle
    _shut_down = False
    _close_note = ""
    _stopping: asyncio.Future | None = None
    _beating: asyncio.Task | None = None

    def __init__(self, address: str | None = None, proxy_address: Any = None,
                 public_address: str | None = None, auth: Any = None,
                 cluster_options: Any = None, shutdown_on_close: bool = True,
                 asynchronous: bool = False, loop: Any = None, *,
                 worker_proxy_address: str | None = None, **kwargs: Any):
        self._hybrid_options = {k: kwargs.pop(k) for k in (*CLIENT_KEYWORDS, *POOL_KEYWORDS)
                                if k in kwargs}
        self._worker_proxy_address = worker_proxy_address
        self._submitted = set()
        # what jobs get of env, checked here, in the caller's thread (warnings point there)
        self._job_env = job_environment(self._hybrid_options.get("env"),
                                        _gateway_secrets(auth)) if self._hybrid_options or (
            config.get("gateway.pool", None)) else {}
        super().__init__(address=address, proxy_address=proxy_address,
                         public_address=public_address, auth=auth,
                         cluster_options=cluster_options, shutdown_on_close=shutdown_on_close,
                         asynchronous=asynchronous, loop=loop, **kwargs)

    @classmethod
    def from_name(cls, cluster_name: str, shutdown_on_close: bool = False,
                  address: str | None = None, proxy_address: Any = None,
                  public_address: str | None = None, auth: Any = None,
                  asynchronous: bool = False, loop: Any = None, *,
                  worker_proxy_address: str | None = None) -> HTCGatewayCluster:
        """Connect to a submitted cluster (``Gateway.connect``)."""
        self = object.__new__(cls)
        self._worker_proxy_address = worker_proxy_address
        self._submitted = set()
        self._init_internal(address=address, proxy_address=proxy_address,
                            public_address=public_address, auth=auth,
                            asynchronous=asynchronous, loop=loop,
                            shutdown_on_close=shutdown_on_close, name=cluster_name)
        return self

    # ---------------------------------------------------------------- starting
    def _init_internal(self, address: str | None = None, proxy_address: Any = None,
                       public_address: str | None = None, auth: Any = None,
                       cluster_options: Any = None, cluster_kwargs: Any = None,
                       shutdown_on_close: bool | None = None, asynchronous: bool = False,
                       loop: Any = None, name: str | None = None) -> None:
        """``GatewayCluster._init_internal`` (dask-gateway 2025.4-2026.3, identical), with
        an :class:`HTCGateway` as the cluster's own client: collected on its event loop, the
        stock client's ``__del__`` waits for that very loop and hangs the process."""
        self.status = "created"
        self.shutdown_on_close = shutdown_on_close
        self._instances.add(self)
        self.gateway = HTCGateway(address=address, proxy_address=proxy_address,
                                  public_address=public_address, auth=auth,
                                  asynchronous=asynchronous, loop=loop,
                                  worker_proxy_address=self._worker_proxy_address)
        self.scheduler_info = {}
        self.scheduler_comm = None
        self._watch_worker_status_task = None
        self._clients = weakref.WeakSet()
        self._cluster_options = cluster_options
        self._cluster_kwargs = cluster_kwargs or {}
        self._start_task = None
        self._stop_task = None
        self.name = name
        self.scheduler_address = None
        self.dashboard_link = None
        self.security = None
        if name is not None:
            self.status = "starting"
        # how it ends, whatever ends the process (hybrid.lifecycle)
        self._ending = lifecycle.register(
            self._label(), self._stop_internal if self.asynchronous else self.close,
            asynchronous=self.asynchronous)
        if not self.asynchronous:
            try:
                self.gateway.sync(self._start_internal)
            except BaseException as error:  # a cluster it submitted is stopped, then it raises
                cleanup_after(error, self.close, "stopping the cluster")
                raise

    def _label(self) -> str:
        return f"gateway cluster {self.name}" if self.name else "a new gateway cluster"

    def _check_open(self) -> None:
        """Refuse any call once this cluster object is closing or closed (one clear error)."""
        if self.status in ("closing", "closed"):
            raise lifecycle.closed_error(
                self._label(),
                "it was shut down; start another with gateway.new_cluster()"
                if self._shut_down else
                f"the cluster may run on; gateway.connect({self.name!r}) connects to it again",
                GatewayClusterClosed)

    @property
    def worker_scheduler_address(self) -> str:
        """What batch workers dial: ``tls://PROXY_HOST:PROXY_PORT``."""
        return batch_worker_address(self.gateway.proxy_address, self._worker_proxy_address)

    async def _start_async(self) -> None:
        """``GatewayCluster._start_async`` (dask-gateway 2025.4-2026.3), where a submission
        that is interrupted still learns its cluster's name, so that the cluster is stopped."""
        if self.status in ("closing", "closed"):
            return
        specs: dict[str, Any] = {}
        if self.status == "created":
            specs = await self._split_options()
            self.status = "starting"
            submission = asyncio.ensure_future(self.gateway._submit(
                cluster_options=self._cluster_options, **self._cluster_kwargs))
            try:
                self.name = await asyncio.shield(submission)
            except asyncio.CancelledError:
                self.name = await lifecycle.outcome(submission, 10)  # the gateway may have made it
                raise
            finally:
                if self._ending is not None:
                    self._ending.label = self._label()
        report = await self.gateway._wait_for_start(self.name)
        self.scheduler_address = report.scheduler_address
        self.dashboard_link = report.dashboard_link
        self.security = report.security
        await self._init_internals()
        self.status = "running"
        # (a task of its own that holds no reference to the cluster: a dropped cluster is
        # still collected, and its __del__ closes it, as dask-gateway's)
        self._beating = asyncio.ensure_future(_heartbeat(self.scheduler_comm, self.name))
        if self._ending is not None:
            self._ending.label = self._label()
            if self.asynchronous:
                await self._ending.guard()
        # a failure here stops a cluster this call created (shutdown_on_close)
        await self._attach(specs)

    async def _split_options(self) -> dict[str, Any]:
        """Send the gateway what it offers; validate the batch pools. Nothing is created."""
        ours = dict(self._hybrid_options)
        single = bool(ours.get("pool") or config.get("gateway.pool", None))
        if not ours and not single:
            return {}
        defaults = await self.gateway._cluster_options(use_local_defaults=False)
        for keyword in list(ours):
            if keyword in defaults:  # sent as the stock client sends it, in the gateway's unit
                self._cluster_kwargs[keyword] = offered_value(keyword, ours[keyword],
                                                              defaults[keyword])
                if keyword in CLIENT_KEYWORDS or not (single or "pools" in ours):
                    del ours[keyword]  # the gateway's option alone: no batch pool reads it
        if single and "pools" not in ours:  # the sizes an Options object changes, unless given
            for keyword, value in changed_options(self._cluster_options, defaults).items():
                if keyword in POOL_KEYWORDS:
                    ours.setdefault(keyword, value)
        self._hybrid_options = ours
        specs = pool_specs(ours, self._job_env, _gateway_secrets(self.gateway.auth))
        self._check_client_options(ours)
        return specs

    @staticmethod
    def _check_client_options(options: Mapping[str, Any]) -> None:
        annotate = options.get("annotate_resources")
        if annotate is not None and not isinstance(annotate, bool):
            raise ConfigurationError("annotate_resources", annotate,
                                     "True, False or None (the configured default)")
        if options.get("gpu_fraction") is not None:
            from hybrid.routing import gpu_fraction

            gpu_fraction(options["gpu_fraction"])

    async def _attach(self, specs: dict[str, Any]) -> None:
        """Set up the batch side: record a new cluster's pools, or read a connected one's."""
        from hybrid.pools import PoolSpec

        comm = self.scheduler_comm
        if specs:
            settings = _settings_dict(self.worker_scheduler_address, specs,
                                      self._hybrid_options, set())
            await comm.set_metadata(keys=[METADATA_KEY], value=settings)
            fresh = True
        else:
            settings = await comm.get_metadata(keys=[METADATA_KEY], default=None)
            if not settings or not settings.get("pools"):
                self._settings = settings
                return  # a stock gateway cluster
            if settings.get("format") != METADATA_FORMAT:
                raise HybridError(f"cluster {self.name}'s pools were written by another "
                                  f"version of hybrid (format {settings.get('format')!r}; "
                                  f"this one reads {METADATA_FORMAT})")
            specs = {name: PoolSpec.from_dict(data) for name, data in settings["pools"].items()}
            fresh = False
        self._settings = settings
        manager = self._make_manager(settings)
        for spec in specs.values():
            manager.add(spec)
        limits = await comm.get_metadata(keys=[LIMITS_KEY], default=None)
        if isinstance(limits, Mapping):
            manager.limits = {k: limits.get(k) for k in ("max_workers", "max_cores",
                                                         "max_memory")}
        if not fresh:
            self._submitted = set(settings.get("submitted") or ())
            await manager.adopt(self._submitted)
        manager.start()
        self._pools = manager

    def _make_manager(self, settings: Mapping[str, Any]) -> Any:
        from hybrid.dashboard import publish_pools
        from hybrid.manager import PoolManager
        from hybrid.worker import Connection, TLSFiles

        security = self.security
        tls = TLSFiles(security.tls_cert, security.tls_cert, security.tls_key)
        connection = Connection(settings["worker_scheduler_address"], tls,
                                scheduler_sni(self.name))
        manager = PoolManager(self.name, connection, self.scheduler_comm,
                              fraction=settings.get("gpu_fraction"))
        publish_pools(manager)  # the dashboard's Pools page, through the gateway's proxy
        return manager

    # ---------------------------------------------------------------- the batch side
    def _manager(self) -> Any:
        self._check_open()
        if self._pools is None:
            if self.status != "running":
                raise HybridError(f"cluster {self.name} is {self.status}: connect again with "
                                  f"gateway.connect({self.name!r})")
            raise HybridError(f"cluster {self.name} has no batch pool: add one with "
                              "cluster.add_pool(name, system, ...), or scale the gateway's "
                              "own workers with scale(n)")
        return self._pools

    @property
    def pools(self) -> dict[str, Any]:
        """The batch pools, by name (empty for a stock cluster)."""
        return dict(self._pools.pools) if self._pools is not None else {}

    def add_pool(self, name: str, system: str = "local", resources: Any = None,
                 **options: Any) -> Any:
        """Add a batch pool (the options of :meth:`hybrid.HybridCluster.add_pool`); nothing is
        submitted. It is recorded in the scheduler's metadata for later connects."""
        from hybrid.pools import PoolSpec

        self._check_open()
        secrets = _gateway_secrets(self.gateway.auth)
        options["env"] = job_environment(options.get("env"), secrets)
        spec = PoolSpec.build(name, system, resources, **options)
        return self.gateway.sync(self._add_pool, spec)

    async def _add_pool(self, spec: Any) -> Any:
        if self.status != "running":
            raise HybridError(f"cluster {self.name} is {self.status}")
        if self._pools is None:
            settings = self._settings or {}
            self._settings = _settings_dict(
                settings.get("worker_scheduler_address") or self.worker_scheduler_address,
                {}, settings, set())
            self._pools = self._make_manager(self._settings)
            self._pools.start()
        pool = self._pools.add(spec)
        await self._record()
        return pool

    async def _record(self) -> None:
        """Write the pools (and which ones submitted) to the scheduler's metadata."""
        settings = _settings_dict(self._settings["worker_scheduler_address"],
                                  {n: p.spec for n, p in self._pools.pools.items()},
                                  self._settings, self._submitted)
        await self.scheduler_comm.set_metadata(keys=[METADATA_KEY], value=settings)
        self._settings = settings

    def job_script(self, pool: str | None = None, count: int = 1) -> str:
        """The files a batch pool submits, as they would be (nothing is submitted)."""
        return self._manager().pool(pool).job_script(count)

    def scale(self, n: int, pool: str | None = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """Scale to ``n`` workers: a batch pool's jobs when the cluster has batch pools
        (``pool`` names one; only the missing jobs go out, the surplus retires gracefully),
        else the gateway's own workers (exactly ``GatewayCluster.scale``). ``wait=True``
        (batch pools) then waits for their workers, at most ``timeout``, with progress."""
        self._check_open()
        if self._pools is None and pool is None and not {"wait", "timeout",
                                                         "progress"} & set(kwargs):
            return super().scale(n, **kwargs)
        wait, timeout = kwargs.pop("wait", False), kwargs.pop("timeout", None)
        progress = kwargs.pop("progress", None)
        if kwargs:
            raise ConfigurationError("scale", sorted(kwargs), "scale(n, pool=None, wait=False, "
                                     "timeout=None, progress=None)")
        from hybrid.fields import validate_value
        from hybrid.manager.waiting import WORKERS

        n = validate_value(WORKERS, n, "scale.n")
        return self.gateway.sync(self._scale, n, pool, wait, timeout, progress)

    async def _scale(self, n: int, pool: str | None, wait: bool = False,
                     timeout: Any = None, progress: Any = None) -> None:
        from hybrid.manager.waiting import scale_and_wait

        manager = self._manager()
        target = manager.pool(pool)
        await self.gateway._check_running(self.name)
        if target.adaptive is not None:
            target.adaptive.stop()
        try:
            await scale_and_wait(manager, target, n, wait, timeout, progress)
        finally:
            await self._note_submitted(target)

    async def _note_submitted(self, target: Any) -> None:
        if target.submit_calls and target.name not in self._submitted:
            self._submitted.add(target.name)
            await self._record()

    def adapt(self, minimum: int | None = None, maximum: int | None = None,  # type: ignore[override]
              active: bool = True, pool: str | None = None, **kwargs: Any) -> Any:
        """Adaptive scaling: a batch pool's jobs between ``minimum`` (0) and ``maximum`` (10:
        batch jobs need a bound) from the demand for its resource (GPU or CPU tasks) when
        the cluster has batch pools, else the gateway's own (exactly
        ``GatewayCluster.adapt``). ``active=False`` stops it."""
        self._check_open()
        if self._pools is None and pool is None:
            return super().adapt(minimum=minimum, maximum=maximum, active=active, **kwargs)
        return self.gateway.sync(self._adapt, minimum, maximum, active, pool, kwargs)

    async def _adapt(self, minimum: int | None, maximum: int | None, active: bool,
                     pool: str | None, kwargs: dict[str, Any]) -> Any:
        from hybrid.adaptive import PoolAdaptive, check_adapt_keywords, stop_adapting

        manager = self._manager()
        targets = [manager.pool(pool)] if pool is not None or len(manager.pools) == 1 else list(
            manager.pools.values())
        check_adapt_keywords({k: v for k, v in kwargs.items()
                              if k not in ("interval", "wait_count")},
                             "adapt(minimum=None, maximum=None, active=True, pool=None, "
                             "interval='2s', wait_count=3)")
        if not active:
            stop_adapting(targets)
            return None
        target = manager.pool(pool)
        maximum = 10 if maximum is None else maximum  # (as HybridCluster.adapt's)
        adaptive = PoolAdaptive(manager, target, minimum=minimum or 0, maximum=maximum,
                                **kwargs)
        manager.check_limits(target, maximum)
        await self.gateway._check_running(self.name)
        if target.adaptive is not None:
            target.adaptive.stop()
        target.adaptive = adaptive
        self._submitted.add(target.name)
        await self._record()
        adaptive.start()
        return adaptive

    def prefer(self, order: list[str] | None, fallback_after: Any = None) -> None:
        """An order of preference between batch pools that serve the same tasks, as
        :meth:`hybrid.HybridCluster.prefer` (``None`` forgets every order)."""
        self._manager().prefer(order, fallback_after, label="prefer")

    def wait_for_workers(self, n_workers: int, timeout: Any = None, *,
                         pool: str | None = None, progress: bool | None = None) -> Any:
        """Wait until ``n_workers`` workers are connected (``distributed``'s signature).

        With batch pools, held or failing jobs raise
        :class:`~hybrid.errors.WorkersDidNotArrive` with the batch system's reasons."""
        self._check_open()
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"`n_workers` must be a positive integer. Instead got "
                             f"{n_workers}.")
        if self._pools is None and pool is None:
            return self.gateway.sync(self._wait_for_any_workers, n_workers, wait_timeout(timeout))
        return self.gateway.sync(self._manager().wait_for_workers, n_workers, pool=pool,
                                 timeout=wait_timeout(timeout), progress=progress)

    async def _wait_for_any_workers(self, n_workers: int, timeout: Any) -> None:
        from dask.utils import parse_timedelta
        from distributed.exceptions import WorkerStartTimeoutError

        deadline = None if timeout is None else time.monotonic() + parse_timedelta(timeout)
        while True:
            workers = (await self.scheduler_comm.identity()).get("workers", {})
            running = [w for w in workers.values() if w.get("status", "running") == "running"]
            if len(running) >= n_workers:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise WorkerStartTimeoutError(len(running), n_workers, timeout)
            await asyncio.sleep(0.1)

    def connected_workers(self, pool: str | None = None) -> Any:
        """Names of the connected batch workers of ``pool`` (or of every pool)."""
        return self.gateway.sync(self._manager().connected_workers, pool)

    def jobs(self, pool: str | None = None) -> Any:
        """The cluster's batch jobs in the queue, as the batch systems list them now."""
        return self.gateway.sync(self._manager().jobs, pool)

    def pool_status(self) -> dict[str, Any]:
        """Each batch pool's jobs by state, with the batch system's reasons
        (:class:`~hybrid.manager.PoolStatus`), as of the last refresh; empty for a stock
        cluster."""
        return {} if self._pools is None else lifecycle.read_on_loop(
            self._pools.status, self.gateway.sync, self.gateway.asynchronous)

    def get_client(self, set_as_default: bool = True) -> Any:  # type: ignore[override]
        """A ``Client`` of this cluster that routes GPU tasks to GPU workers
        (:class:`~hybrid.annotator.HybridClient`)."""
        from hybrid.annotator import HybridClient

        self._check_open()
        settings = self._settings or {}
        # the gateway's own workers advertise no GPU/notGPU resource: a stock cluster's
        # tasks go unannotated, or they would wait for workers that never come
        annotate = settings.get("annotate_resources") if self._pools is not None else False
        client = HybridClient(self, security=self.security, set_as_default=set_as_default,
                              asynchronous=self.asynchronous, loop=self.loop,
                              annotate_resources=annotate,
                              gpu_fraction=settings.get("gpu_fraction"))
        if not self.asynchronous:
            self._clients.add(client)
        return client

    # ---------------------------------------------------------------- closing
    async def _stop_internal(self, shutdown: bool | None = None) -> None:
        """The batch side first (jobs removed on shutdown, else left running), then stock.
        Run once: a second caller (an interrupted start's cleanup and ``close()``) waits
        for the first, and a caller that is cancelled does not cut it short."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop_once(shutdown))
        await asyncio.shield(self._stopping)

    async def _stop_once(self, shutdown: bool | None) -> None:
        if shutdown is None:
            shutdown = self.shutdown_on_close
        beating, self._beating = self._beating, None
        if beating is not None:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        start = self._start_task
        if start is not None and not start.done():  # an interrupted start: learn its name
            start.cancel()
            with contextlib.suppress(BaseException):
                await start
        manager, self._pools = self._pools, None
        problem: BaseException | None = None
        if manager is not None:
            if shutdown:
                try:
                    removed = await manager.close()
                    if removed:
                        self._close_note = f"{removed} batch job(s) removed"
                except HybridError as error:
                    problem = error
            else:
                await manager.stop()
                manager.shutdown_executor()
        if shutdown and self.name is not None:
            self._shut_down = True
            self._close_note = "shut down" + (f", {self._close_note}" if self._close_note
                                               else "")
        await super()._stop_internal(shutdown=shutdown)
        if self.asynchronous and self._ending is not None:
            self._ending.finished(problem, self._close_note)
        if problem is not None:
            raise CleanupFailed(f"cluster {self.name} stopped, but {problem}") from problem

    def close(self, shutdown: bool | None = None) -> Any:  # type: ignore[override]
        """Close this view of the cluster (as ``GatewayCluster.close``). ``shutdown=True``
        also removes every batch job (confirmed by the batch systems)."""
        if self.asynchronous:
            return self._stop_internal(shutdown=shutdown)
        if self.status == "closed" and (self._ending is None or not self._ending.open):
            return None  # closed before (a second close, or __del__ after close)
        if self.gateway._on_own_loop():
            # collected on its own event loop's thread (__del__): waiting there for that
            # loop would wait forever; the stop runs on the loop instead
            if self._stopping is None:
                self._stopping = asyncio.ensure_future(self._stop_once(shutdown))
            return None
        problem: BaseException | None = None
        # a Ctrl-C while it closes does not cut it short
        with self._ending.closing() if self._ending else lifecycle.closing():
            try:
                # (a stop already under way, e.g. an interrupted start's, marks the cluster
                # closed before the gateway answers it: waited for, not cut off)
                if (self.status != "closed" or self._stopping is not None) and (
                        self.loop.asyncio_loop.is_running()):
                    self.gateway.sync(self._stop_internal, shutdown=shutdown)
            except BaseException as error:
                problem = error
                raise
            finally:
                self.status = "closed"
                try:
                    self.gateway.close()
                finally:
                    if self._ending is not None:
                        self._ending.finished(problem, self._close_note)
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        if not self.asynchronous:
            cleanup_after(exc, self.close, "closing the cluster")

    def __repr__(self) -> str:
        pools = f", pools={sorted(self.pools)}" if self._pools is not None else ""
        return f"HTCGatewayCluster<{self.name}, status={self.status}{pools}>"


HTCGateway.cluster_class = HTCGatewayCluster


__all__ = [
    "LIMITS_KEY",
    "METADATA_KEY",
    "HTCClusterReport",
    "HTCGateway",
    "HTCGatewayCluster",
    "job_environment",
]
