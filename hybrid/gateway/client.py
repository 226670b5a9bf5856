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
import logging
import time
import weakref
from collections.abc import Mapping
from typing import Any

from dask_gateway import Gateway, GatewayCluster
from dask_gateway.client import ClusterReport

from hybrid import config
from hybrid.errors import (
    CleanupFailed,
    ConfigurationError,
    HybridError,
    cleanup_after,
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
    job_environment,
    pool_specs,
    scheduler_sni,
    worker_address,
)
from hybrid.widgets import ClusterViews

logger = logging.getLogger("hybrid")


class HTCClusterReport(ClusterReport):
    """A :class:`dask_gateway.ClusterReport` that connects with :class:`HTCGateway`."""

    __slots__ = ("_gateway",)

    @classmethod
    def from_report(cls, report: ClusterReport, gateway: HTCGateway) -> HTCClusterReport:
        """Wrap a report of ``gateway``."""
        out = cls(name=report.name, options=report.options, status=report.status,
                  scheduler_address=report.scheduler_address,
                  dashboard_link=report.dashboard_link, start_time=report.start_time,
                  stop_time=report.stop_time, tls_cert=report.tls_cert, tls_key=report.tls_key)
        out._gateway = gateway
        return out

    def connect(self, shutdown_on_close: bool = False) -> HTCGatewayCluster:
        """``gateway.connect(report.name)``: an :class:`HTCGatewayCluster`."""
        return self._gateway.connect(self.name, shutdown_on_close=shutdown_on_close)


class HTCGateway(Gateway):
    """``dask_gateway.Gateway``, whose clusters may get batch workers.

    Same constructor as :class:`dask_gateway.Gateway`, plus ``worker_proxy_address``: the
    gateway's TCP proxy as batch nodes reach it (default
    ``hybrid.gateway.worker-proxy-address``, else the host and port of ``proxy_address``).
    """

    def __init__(self, address: str | None = None, proxy_address: str | int | None = None,
                 public_address: str | None = None, auth: Any = None,
                 asynchronous: bool = False, loop: Any = None, *,
                 worker_proxy_address: str | None = None):
        if worker_proxy_address is not None:
            worker_address(worker_proxy_address, "worker_proxy_address")
        super().__init__(address=address, proxy_address=proxy_address,
                         public_address=public_address, auth=auth, asynchronous=asynchronous,
                         loop=loop)
        self._worker_proxy_address = worker_proxy_address

    @property
    def worker_scheduler_address(self) -> str:
        """What batch workers dial: ``tls://PROXY_HOST:PROXY_PORT``."""
        return batch_worker_address(self.proxy_address, self._worker_proxy_address)

    def _cluster_kwargs(self) -> dict[str, Any]:
        return {"address": self.address, "proxy_address": self.proxy_address,
                "public_address": self._public_address, "auth": self.auth,
                "asynchronous": self.asynchronous, "loop": self.loop,
                "worker_proxy_address": self._worker_proxy_address}

    def new_cluster(self, cluster_options: Any = None, shutdown_on_close: bool = True,
                    **kwargs: Any) -> HTCGatewayCluster:
        """Submit a new cluster to the gateway and wait for it to start (as the stock client).

        Batch workers: ``pool`` (htcondor, slurm, sge, pbs, lsf, local, kubernetes; default
        ``hybrid.gateway.pool``) with ``worker_cores``, ``worker_memory`` (GiB as a number, or
        ``"4 GiB"``), ``worker_gpus``, ``worker_walltime``, ``env`` and one environment
        (``container_image``, ``pixi_project`` + ``pixi_env``, ``conda_env``), or
        ``pools={name: {system: ..., <add_pool options>}}``; ``annotate_resources`` and
        ``gpu_fraction`` set the clients' GPU/CPU routing. Every other keyword, and each of
        these that the gateway offers as a cluster option, goes to the gateway. Nothing is
        submitted until :meth:`HTCGatewayCluster.scale` or ``adapt``.
        """
        return HTCGatewayCluster(cluster_options=cluster_options,
                                 shutdown_on_close=shutdown_on_close,
                                 **self._cluster_kwargs(), **kwargs)

    def connect(self, cluster_name: str, shutdown_on_close: bool = False
                ) -> HTCGatewayCluster:
        """Connect to a running cluster (this process's or another's); its batch pools and
        their jobs are found again (pools from the scheduler, jobs by their tag)."""
        return HTCGatewayCluster.from_name(cluster_name, shutdown_on_close=shutdown_on_close,
                                           **self._cluster_kwargs())

    async def _reports(self, reports: Any) -> Any:
        found = await reports
        if isinstance(found, list):
            return [HTCClusterReport.from_report(r, self) for r in found]
        return HTCClusterReport.from_report(found, self)

    def list_clusters(self, status: Any = None, **kwargs: Any) -> Any:
        """This user's clusters; ``report.connect()`` gives an :class:`HTCGatewayCluster`."""
        found = super().list_clusters(status=status, **kwargs)
        if self.asynchronous:
            return self._reports(found)
        return [HTCClusterReport.from_report(report, self) for report in found]

    def get_cluster(self, cluster_name: str, **kwargs: Any) -> Any:
        """One cluster's report (connectable with ``report.connect()``)."""
        found = super().get_cluster(cluster_name, **kwargs)
        if self.asynchronous:
            return self._reports(found)
        return HTCClusterReport.from_report(found, self)

    def close(self) -> Any:
        """Close the client (its clusters keep running unless they were shut down)."""
        self._closed = True
        return super().close()

    def __del__(self) -> None:
        # Collected on its own event loop's thread (as a failed cluster's client can be),
        # the stock __del__ would wait for that loop: it would never return.
        if getattr(self, "_closed", False) or not hasattr(self, "_loop_runner"):
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            own = self.loop.asyncio_loop
        except RuntimeError:  # its loop runner already stopped: nothing left to wait for
            return
        if running is not None and running is own:
            if self._session is not None:
                running.create_task(self._session.close())
            return
        super().__del__()

    def __repr__(self) -> str:
        return f"HTCGateway<{self.address}>"


class HTCGatewayCluster(ClusterViews, GatewayCluster):
    """``dask_gateway.GatewayCluster`` with batch pools (none: exactly the stock cluster)."""

    _hybrid_options: dict[str, Any] = {}
    _worker_proxy_address: str | None = None
    _pools: Any = None  # the PoolManager, once the cluster runs and has batch pools
    _settings: dict[str, Any] | None = None
    _submitted: set[str] = set()
    _job_env: dict[str, str] = {}

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
        if not self.asynchronous:
            self.gateway.sync(self._start_internal)

    @property
    def worker_scheduler_address(self) -> str:
        """What batch workers dial: ``tls://PROXY_HOST:PROXY_PORT``."""
        return batch_worker_address(self.gateway.proxy_address, self._worker_proxy_address)

    async def _start_async(self) -> None:
        specs: dict[str, Any] = {}
        if self.status == "created":
            specs = await self._split_options()
        await super()._start_async()
        if self.status == "running":
            # a failure here stops a cluster this call created (shutdown_on_close)
            await self._attach(specs)

    async def _split_options(self) -> dict[str, Any]:
        """Send the gateway what it offers; validate the batch pools. Nothing is created."""
        ours = dict(self._hybrid_options)
        if not ours and not config.get("gateway.pool", None):
            return {}
        options = await self.gateway._cluster_options(use_local_defaults=False)
        offered = set(options)
        for keyword in list(ours):
            if keyword in offered:
                self._cluster_kwargs[keyword] = ours[keyword]  # exactly as the stock client
                if keyword in CLIENT_KEYWORDS:
                    del ours[keyword]  # the gateway's option: ours does not shadow it
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
        if self._pools is None and pool is None and not {"wait", "timeout"} & set(kwargs):
            return super().scale(n, **kwargs)
        wait, timeout = kwargs.pop("wait", False), kwargs.pop("timeout", None)
        if kwargs:
            raise ConfigurationError("scale", sorted(kwargs),
                                     "scale(n, pool=None, wait=False, timeout=None)")
        from hybrid.fields import validate_value
        from hybrid.manager.waiting import WORKERS

        n = validate_value(WORKERS, n, "scale.n")
        return self.gateway.sync(self._scale, n, pool, wait, timeout)

    async def _scale(self, n: int, pool: str | None, wait: bool = False,
                     timeout: Any = None) -> None:
        from hybrid.manager.waiting import scale_and_wait

        manager = self._manager()
        target = manager.pool(pool)
        if target.adaptive is not None:
            target.adaptive.stop()
        try:
            await scale_and_wait(manager, target, n, wait, timeout)
        finally:
            await self._note_submitted(target)

    async def _note_submitted(self, target: Any) -> None:
        if target.submit_calls and target.name not in self._submitted:
            self._submitted.add(target.name)
            await self._record()

    def adapt(self, minimum: int | None = None, maximum: int | None = None,  # type: ignore[override]
              active: bool = True, pool: str | None = None, **kwargs: Any) -> Any:
        """Adaptive scaling: a batch pool's jobs between ``minimum`` and ``maximum`` from the
        demand for its resource (GPU or CPU tasks) when the cluster has batch pools, else
        the gateway's own (exactly ``GatewayCluster.adapt``). ``active=False`` stops it."""
        if self._pools is None and pool is None:
            return super().adapt(minimum=minimum, maximum=maximum, active=active, **kwargs)
        return self.gateway.sync(self._adapt, minimum, maximum, active, pool, kwargs)

    async def _adapt(self, minimum: int | None, maximum: int | None, active: bool,
                     pool: str | None, kwargs: dict[str, Any]) -> Any:
        from hybrid.adaptive import PoolAdaptive

        manager = self._manager()
        targets = [manager.pool(pool)] if pool is not None or len(manager.pools) == 1 else list(
            manager.pools.values())
        if not active:
            for target in targets:
                if target.adaptive is not None:
                    target.adaptive.stop()
            return None
        if maximum is None:
            raise ConfigurationError("adapt.maximum", None,
                                     "a whole number of workers: batch jobs need a bound")
        target = manager.pool(pool)
        adaptive = PoolAdaptive(manager, target, minimum=minimum or 0, maximum=maximum,
                                **kwargs)
        manager.check_limits(target, maximum)
        if target.adaptive is not None:
            target.adaptive.stop()
        target.adaptive = adaptive
        self._submitted.add(target.name)
        await self._record()
        adaptive.start()
        return adaptive

    def wait_for_workers(self, n_workers: int, timeout: Any = None, *,
                         pool: str | None = None, progress: bool | None = None) -> Any:
        """Wait until ``n_workers`` workers are connected (``distributed``'s signature).

        With batch pools, held or failing jobs raise
        :class:`~hybrid.errors.WorkersDidNotArrive` with the batch system's reasons."""
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise ValueError(f"`n_workers` must be a positive integer. Instead got "
                             f"{n_workers}.")
        if self._pools is None and pool is None:
            return self.gateway.sync(self._wait_for_any_workers, n_workers, timeout)
        return self.gateway.sync(self._manager().wait_for_workers, n_workers, pool=pool,
                                 timeout=timeout, progress=progress)

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
        return self._pools.status() if self._pools is not None else {}

    def get_client(self, set_as_default: bool = True) -> Any:  # type: ignore[override]
        """A ``Client`` of this cluster that routes GPU tasks to GPU workers
        (:class:`~hybrid.annotator.HybridClient`)."""
        from hybrid.annotator import HybridClient

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
        """The batch side first (jobs removed on shutdown, else left running), then stock."""
        if shutdown is None:
            shutdown = self.shutdown_on_close
        manager, self._pools = self._pools, None
        problem: BaseException | None = None
        if manager is not None:
            if shutdown:
                try:
                    await manager.close()
                except HybridError as error:
                    problem = error
            else:
                await manager.stop()
                manager.shutdown_executor()
        await super()._stop_internal(shutdown=shutdown)
        if problem is not None:
            raise CleanupFailed(f"cluster {self.name} stopped, but {problem}") from problem

    def close(self, shutdown: bool | None = None) -> Any:  # type: ignore[override]
        """Close this view of the cluster (as ``GatewayCluster.close``). ``shutdown=True``
        also removes every batch job (confirmed by the batch systems)."""
        if self.asynchronous:
            return self._stop_internal(shutdown=shutdown)
        if self.status == "closed":
            return None
        try:
            if self.loop.asyncio_loop.is_running():
                self.gateway.sync(self._stop_internal, shutdown=shutdown)
        finally:
            self.gateway.close()
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        if not self.asynchronous:
            cleanup_after(exc, self.close, "closing the cluster")

    def __repr__(self) -> str:
        pools = f", pools={sorted(self.pools)}" if self._pools is not None else ""
        return f"HTCGatewayCluster<{self.name}, status={self.status}{pools}>"


__all__ = [
    "LIMITS_KEY",
    "METADATA_KEY",
    "HTCClusterReport",
    "HTCGateway",
    "HTCGatewayCluster",
    "job_environment",
]
