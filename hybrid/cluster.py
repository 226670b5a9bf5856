"""``HybridCluster``: one Dask cluster, many named pools of workers from different systems.

A thin ``distributed`` ``Cluster`` over a :class:`~hybrid.manager.PoolManager`: this class
starts (or attaches to) the scheduler and writes its TLS files for the jobs; the manager does
the pools' work (scaling, retirement, reconciling, reports, closing). The scheduler speaks TLS
with client certificates unless plain TCP is asked for (:mod:`hybrid.security`).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
import weakref
from typing import Any

from distributed import Scheduler
from distributed.core import Status, rpc
from distributed.deploy.cluster import Cluster
from distributed.security import Security

from hybrid import config, lifecycle
from hybrid.annotator import HybridClient
from hybrid.batch import BatchSystem
from hybrid.dashboard import publish_pools
from hybrid.errors import ConfigurationError, HybridError, attach_note, cleanup_after
from hybrid.fields import Address, Interval, ListenPort, boolean, count, validate_value
from hybrid.manager import ManagedPool, PoolManager, PoolStatus
from hybrid.manager.waiting import WORKERS, scale_and_wait
from hybrid.pools import PoolSpec, numpydoc_parameters
from hybrid.quiet_logs import DeparturesUnsaid, RestartsExplained, log_level, quieter
from hybrid.security import (
    ClusterCredentials,
    attach_security,
    dashboard_link,
    dashboard_listen,
    dashboard_ssl_context,
    find_credentials,
    listen_error,
    own_security,
    remove_credentials,
    scheduler_class,
    store_credentials,
    warn_if_open,
)
from hybrid.widgets import ClusterViews
from hybrid.worker import Connection, TLSFiles

logger = logging.getLogger("hybrid")


class HybridCluster(ClusterViews, Cluster):
    """A Dask cluster whose workers come from several pools at once.

    Parameters
    ----------
    scheduler_address : str, optional
        An existing scheduler to manage workers for (re-attach: a cluster of yours is
        found with the credentials stored for it); by default a scheduler starts in this
        process, listening on ``host``.
    name : str, optional
        Tags the cluster's jobs and names its workers (default: ``hybrid-<random>``).
    security : distributed.Security or bool, optional
        TLS for the scheduler, the workers and the clients. The default
        (``hybrid.scheduler.tls: true``) and ``True`` make a temporary CA and certificate
        for this cluster: nothing without a certificate it signed is accepted. ``False``:
        plain TCP (a warning names the open address unless the scheduler listens on
        loopback only). Attaching to ``scheduler_address``: the default takes the
        credentials this user stored for that cluster.
    host : str, optional
        Where the scheduler listens (default ``hybrid.scheduler.host``: every interface, so
        that batch nodes can reach it).
    scheduler_port : int
        The port it listens on (default 0: any free port).
    worker_scheduler_address : str, optional
        The address workers dial, if not the scheduler's own (a proxy, an ingress).
    scheduler_sni : str, optional
        The TLS server name workers send (a gateway's proxy routes by it).
    annotate_resources : bool, optional
        Route GPU tasks to GPU workers and the rest to CPU workers (default
        ``hybrid.annotator.enabled``).
    gpu_fraction : float, optional
        The GPU share one GPU task asks for (default ``hybrid.annotator.gpu-fraction``).
    dashboard_address : str, bool or None
        Where the dashboard listens: ``True`` (default) takes
        ``hybrid.scheduler.dashboard-address`` (loopback: reach it through an SSH tunnel);
        ``":8787"`` or ``8787``: that port on ``host`` (every interface by default);
        ``None``: no dashboard. Served over TLS when the scheduler is.
    asynchronous : bool
        Use the cluster from async code: ``async with HybridCluster(asynchronous=True)``.
    silence_logs : str or int or bool, optional
        The level of ``distributed``'s console messages while the cluster runs, as
        ``LocalCluster``'s: default ``"warning"`` (``hybrid.logging.verbose: true``: none
        silenced); ``False`` leaves them alone. A handler the caller also attached to
        the root logger keeps its own level.
    """

    def __init__(
        self,
        scheduler_address: str | None = None,
        *,
        name: str | None = None,
        security: Security | bool | None = None,
        host: str | None = None,
        scheduler_port: int = 0,
        worker_scheduler_address: str | None = None,
        scheduler_sni: str | None = None,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        dashboard_address: str | bool | None = True,
        loop: Any = None,
        quiet: bool = True,
        asynchronous: bool = False,
        silence_logs: str | int | bool | None = None,
    ):
        from hybrid.fields import Name
        from hybrid.routing import gpu_fraction as check_fraction

        name = validate_value(Name, name or f"hybrid-{uuid.uuid4().hex[:8]}",
                              "HybridCluster.name")
        check_fraction(gpu_fraction, "HybridCluster.gpu_fraction")
        #: How plain TCP was asked for (the warning says it), when it was.
        self._plain_asked = ("security=False" if security is False
                             else "a security without TLS" if isinstance(security, Security)
                             else "hybrid.scheduler.tls: false")
        self._credentials: ClusterCredentials | None = None
        self._async_caller = asynchronous
        if scheduler_address is not None:
            scheduler_address = validate_value(Address, scheduler_address,
                                               "HybridCluster.scheduler_address")
            security = attach_security(security, scheduler_address, "HybridCluster.security")
            stored = find_credentials(address=scheduler_address)
            if stored is not None:  # where the owner's workers dial, and its dashboard
                self._dashboard = stored.dashboard_link or ""
                if worker_scheduler_address is None:
                    worker_scheduler_address = stored.worker_scheduler_address
        else:
            dashboard_listen(dashboard_address, "HybridCluster.dashboard_address")  # (first)
            security = own_security(security, "HybridCluster.security")
        if worker_scheduler_address is not None:
            worker_scheduler_address = validate_value(
                Address, worker_scheduler_address, "HybridCluster.worker_scheduler_address")
        self.security = security or Security()
        self.annotate_resources = boolean(annotate_resources, "HybridCluster.annotate_resources",
                                          "hybrid.annotator.enabled")
        self.gpu_fraction = gpu_fraction
        self._external_address = scheduler_address
        self._worker_scheduler_address = worker_scheduler_address
        self.scheduler_sni = scheduler_sni
        #: Where the listen host was given (an error names it).
        self._host_field = "HybridCluster.host" if host is not None else "hybrid.scheduler.host"
        if host is not None:
            host = validate_value(config.setting_types()["scheduler.host"], host,
                                  "HybridCluster.host")
        self._host = host if host is not None else (config.get("scheduler.host", "") or None)
        self._port = validate_value(ListenPort, scheduler_port,
                                    "HybridCluster.scheduler_port")
        self._dashboard_address = dashboard_address
        self.scheduler: Scheduler | None = None
        self.manager: PoolManager | None = None
        self._clients: weakref.WeakSet = weakref.WeakSet()
        self._quiet_logs = contextlib.ExitStack()
        if silence_logs is None:
            silence_logs = False if config.get("logging.verbose", False) else "warning"
        if silence_logs:
            level = log_level(silence_logs, "HybridCluster.silence_logs")
            for root in ("distributed", "bokeh"):
                self._quiet_logs.enter_context(quieter(level, root))
        super().__init__(asynchronous=asynchronous, loop=loop, quiet=quiet, name=name)
        self._close_note = ""
        # how it ends, whatever ends the process (hybrid.lifecycle)
        self._ending = lifecycle.register(f"cluster {name}",
                                          self._close if asynchronous else self.close,
                                          asynchronous=asynchronous)
        if not asynchronous:
            self._loop_runner.start()
            try:
                self.sync(self._start)
            except BaseException as error:
                cleanup_after(error, self.close, "closing the cluster")
                raise
            self._warn_if_open()

    def __await__(self):
        async def start() -> HybridCluster:
            if self.status == Status.created:
                await self._start()
            return self

        return start().__await__()

    # ------------------------------------------------------------------ start and stop
    async def _start(self) -> None:
        if self.status != Status.created:
            return
        self.status = Status.starting
        if self._external_address is None:
            address = await self._start_scheduler()
            self._quiet_logs.callback(RestartsExplained(self.scheduler).close)
        else:
            address = self._external_address
        self._scheduler_address = address
        self.scheduler_comm = rpc(address, connection_args=self.security.get_connection_args(
            "client"))
        await super()._start()
        self.manager = PoolManager(self.name, self._connection(), self.scheduler_comm,
                                   fraction=self.gpu_fraction)
        publish_pools(self.manager)  # the dashboard's Pools page
        self.manager.start()
        if self._async_caller:  # (self.asynchronous is true on the loop's own thread too)
            await self._ending.guard()

    def sync(self, func: Any, *args: Any, asynchronous: bool | None = None,
             callback_timeout: Any = None, **kwargs: Any) -> Any:
        """As ``distributed``'s, but an interrupted wait (Ctrl-C, SIGTERM) cancels the call
        on the loop too (:func:`hybrid.lifecycle.sync`): nothing runs on behind the caller."""
        if (self.asynchronous if asynchronous is None else asynchronous) or (
                self.called_from_running_loop):
            return super().sync(func, *args, asynchronous=asynchronous,
                                callback_timeout=callback_timeout, **kwargs)
        from dask.utils import parse_timedelta

        return lifecycle.sync(self.loop, func, *args,
                              callback_timeout=parse_timedelta(callback_timeout), **kwargs)

    def __enter__(self) -> HybridCluster:
        self._check_open()  # (not "IOLoop is closed" from a closed cluster's loop)
        return super().__enter__()

    def _check_open(self) -> None:
        """Refuse any call once the cluster is closing or closed (one clear error)."""
        if self.status in (Status.closing, Status.closed):
            raise lifecycle.closed_error(
                f"cluster {self.name}",
                "its jobs were removed and its scheduler stopped (or it was detached); "
                "start a new HybridCluster")

    def _dashboard_on_host(self, address: str) -> str:
        """The dashboard's address: on the scheduler's ``host`` when one was asked for and
        the dashboard address names only a port (``":0"``): listen only where asked."""
        if not self._host or not address.startswith(":"):
            return address
        from distributed.comm.addressing import unparse_host_port

        return unparse_host_port(self._host, int(address[1:] or 0))

    async def _start_scheduler(self) -> str:
        """Start this cluster's scheduler (its credentials stored first, for the dashboard
        and the user's other processes); its address."""
        tls = bool(self.security.require_encryption and self.security.tls_ca_file)
        listen, show = dashboard_listen(self._dashboard_address)
        listen = self._dashboard_on_host(listen)
        credentials = None
        if tls:
            credentials = self._credentials = store_credentials(self.name, self.security)
        ssl_context = None
        if credentials is not None and credentials.tls:
            ssl_context = dashboard_ssl_context(credentials.files.cert, credentials.files.key)
        self.scheduler = scheduler_class()(
            host=self._host, port=self._port, dashboard_address=listen, dashboard=show,
            security=self.security, validate=False, dashboard_ssl=ssl_context,
        )
        try:
            await self.scheduler
        except Exception as error:  # distributed raises "failed to start" from the OSError
            cause = error if isinstance(error, OSError) else error.__cause__
            explained = listen_error(cause, self._host_field, self._host, self._port) \
                if isinstance(cause, OSError) else None
            if explained is None:
                raise
            raise explained from None
        address = self.scheduler.address
        self._dashboard = dashboard_link(self.scheduler, ssl_context is not None) if show \
            else ""
        if credentials is not None:
            self._credentials = credentials.record(
                scheduler_address=address,
                worker_scheduler_address=self._worker_scheduler_address or address,
                dashboard_link=self._dashboard or None)
        if not tls and self._async_caller:  # self.asynchronous is true on the loop itself
            self._warn_if_open()
        return address

    def _warn_if_open(self) -> None:
        """Plain TCP beyond loopback: say which address is open (from the caller's line)."""
        if self.scheduler is not None and not self.security.require_encryption:
            warn_if_open(f"HybridCluster {self.name!r}", self.scheduler.address,
                         self._host or "", self._plain_asked)

    def _connection(self) -> Connection:
        address = self.worker_scheduler_address
        tls = None
        if self.security.require_encryption and str(address).startswith("tcp://"):
            raise ConfigurationError(
                "HybridCluster.worker_scheduler_address", address,
                "a tls:// address: the scheduler speaks TLS",
                "Write tls://HOST:PORT, or start the cluster with security=False for plain "
                "TCP.")
        if self.security.require_encryption or str(address).startswith("tls://"):
            security = self.security
            ca, cert = security.tls_ca_file, security.tls_client_cert
            if not (ca and cert):
                raise ConfigurationError(
                    "HybridCluster.security", security,
                    "a Security with tls_ca_file and tls_client_cert (and key) for TLS workers")
            tls = TLSFiles(ca, cert, security.tls_client_key or cert)
        return Connection(address, tls, self.scheduler_sni,
                          labels=("HybridCluster.worker_scheduler_address",
                                  "HybridCluster.security", "HybridCluster.scheduler_sni"))

    @property
    def scheduler_address(self) -> str:
        """The address clients connect to."""
        return getattr(self, "_scheduler_address", "<Not Connected>")

    @property
    def dashboard_link(self) -> str:
        """The scheduler's dashboard, when it has one (``https`` when served over TLS)."""
        link = getattr(self, "_dashboard", None)
        if link is not None and (link or self.scheduler is not None):
            return link
        try:
            return super().dashboard_link
        except (KeyError, TypeError):
            return ""

    @property
    def worker_scheduler_address(self) -> str:
        """The address workers dial (a gateway proxy, for instance)."""
        return self._worker_scheduler_address or self.scheduler_address

    def get_client(self, set_as_default: bool = False) -> HybridClient:
        """A :class:`~hybrid.annotator.HybridClient` connected to this cluster (closed with
        the cluster, so it does not try to reconnect to a scheduler that is gone)."""
        self._check_open()
        client = HybridClient(self, annotate_resources=self.annotate_resources,
                              gpu_fraction=self.gpu_fraction, set_as_default=set_as_default,
                              asynchronous=self.asynchronous, security=self.security)
        self._clients.add(client)
        return client

    async def _close(self) -> None:
        """Stop adapting; stop its own scheduler, which lets its workers go (so no
        "lose computed tasks" warning ends a run that went well); remove every job of every
        pool (confirmed)."""
        if self.status == Status.closed:
            return
        problem: BaseException | None = None
        departures = DeparturesUnsaid(self.scheduler)
        try:
            if self.manager is not None:
                await self.manager.stop()  # no adaptive step or refill from here on
                if self.scheduler is not None:  # said while the scheduler still listens
                    await self.manager.say_closing()
            for client in list(self._clients):
                with contextlib.suppress(Exception):
                    await client._close(fast=True)
            if self.scheduler is not None:
                scheduler, self.scheduler = self.scheduler, None
                await scheduler.close()
            if self.manager is not None:
                removed = await self.manager.close()
                if removed:
                    self._close_note = f"closed, {removed} job(s) removed"
        except HybridError as error:
            problem = error
        finally:
            try:
                await super()._close()
                if self.scheduler is not None:
                    scheduler, self.scheduler = self.scheduler, None
                    await scheduler.close()
            finally:  # also where the loop's end cancels those: no key stays behind
                if self._credentials is not None:
                    credentials, self._credentials = self._credentials, None
                    remove_credentials(credentials)
                departures.close()
                self._quiet_logs.close()
                if self._async_caller:  # a synchronous close() reports from its caller
                    self._ending.finished(problem, self._close_note)
        if problem is not None:
            raise problem

    def close(self, timeout: float | None = None) -> Any:
        """Remove every job of every pool (checked with the batch systems), stop the
        scheduler. Leftovers raise :class:`~hybrid.errors.CleanupFailed` naming them."""
        if self.asynchronous:
            return super().close(timeout)
        problem: BaseException | None = None
        with self._ending.closing():  # a Ctrl-C while it closes does not cut it short
            try:
                return super().close(timeout)
            except BaseException as error:
                problem = error
                raise
            finally:
                if self.status == Status.closed or isinstance(problem, KeyboardInterrupt):
                    self._ending.finished(problem, self._close_note)  # (or stopped waiting)
                if self.status == Status.closed and not lifecycle.terminating():
                    for client in self._clients:  # (each holds the loop's thread too)
                        client._loop_runner.stop()
                    self._loop_runner.stop()  # (a terminating process ends it with itself)

    async def _detach(self) -> None:
        if self.manager is not None:
            await self.manager.stop()
            self.manager.shutdown_executor()
        await super()._close()
        if self._async_caller:
            self._ending.finished(None, "detached (its jobs run on)")

    def detach(self) -> Any:
        """Disconnect and leave the jobs running (another process may ``connect`` to them).

        Only for a cluster attached to an existing scheduler: one that runs its own
        scheduler takes it, and so its workers, down with it; use :meth:`close`.
        """
        if self._external_address is None:
            raise HybridError("this cluster runs its own scheduler: close() it instead")
        result = self.sync(self._detach)
        if not self.asynchronous:
            self._ending.finished(None, "detached (its jobs run on)")
            self._loop_runner.stop()
        return result

    def __exit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        cleanup_after(exc, self.close, "closing the cluster")

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, traceback: Any) -> None:
        try:
            await self._close()
        except Exception as cleanup:
            if exc is None:
                raise
            attach_note(exc, f"while closing the cluster after this error: {cleanup}")

    # ------------------------------------------------------------------ pools
    def _manager(self) -> PoolManager:
        self._check_open()
        if self.manager is None:
            raise HybridError(f"cluster {self.name} is {self.status.name}: start it first")
        return self.manager

    @property
    def pools(self) -> dict[str, ManagedPool]:
        """The pools, by name."""
        return dict(self.manager.pools) if self.manager is not None else {}

    def add_pool(self, name: str, system: str | BatchSystem = "local", resources: Any = None,
                 **options: Any) -> ManagedPool:
        """Add a named pool and return it (nothing is submitted until :meth:`scale`)."""
        self._check_open()
        spec = PoolSpec.build(name, system, resources, **options)
        return self.add_spec(spec, system if isinstance(system, BatchSystem) else None)

    def add_spec(self, spec: PoolSpec, system: BatchSystem | None = None) -> ManagedPool:
        """Add a pool from a validated :class:`~hybrid.pools.PoolSpec` (``system``: a
        system object to use instead of one made from the spec)."""
        return self._manager().add(spec, system)

    def pool(self, name: str | None = None) -> ManagedPool:
        """The pool called ``name``; with one pool, ``None`` means that one."""
        return self._manager().pool(name)

    def job_script(self, pool: str | None = None, count: int = 1) -> str:
        """The files a pool submits, as they would be (nothing is written or submitted)."""
        return self.pool(pool).job_script(count)

    # ------------------------------------------------------------------ scaling
    def scale(self, n: int | None = None, pool: str | None = None, *, wait: bool = False,
              timeout: Any = None, progress: bool | str | None = None, **kwargs: Any) -> Any:
        """Set ``pool``'s target to ``n`` workers (jobs): submit the missing, retire the
        surplus. Pending jobs count toward the target, so repeating a call never
        over-submits; a pool that loses jobs is refilled to its target.

        ``wait=True`` then waits for the jobs' workers (at most ``timeout``), showing
        progress per pool as :meth:`wait_for_workers` does (``progress`` as there)."""
        self._check_open()
        if n is None:
            n = kwargs.pop("jobs", None)
        if kwargs:
            raise ConfigurationError("scale", sorted(kwargs), "scale(n, pool=None, wait=False, "
                                     "timeout=None, progress=None)")
        n = validate_value(WORKERS, n, "scale.n")
        if timeout is not None:
            timeout = validate_value(Interval, timeout, "scale.timeout")
        target = self.pool(pool)
        if target.adaptive is not None:
            target.adaptive.stop()
        return self.sync(scale_and_wait, self._manager(), target, n, wait, timeout, progress)

    def adapt(self, pool: str | None = None, minimum: int = 0, maximum: int = 10,
              interval: Any = "2s", wait_count: int = 3, Adaptive: type | None = None,
              active: bool = True, **kwargs: Any) -> Any:
        """Scale ``pool`` between ``minimum`` and ``maximum`` from the demand for its
        resource (GPU or CPU tasks), on this cluster's event loop. ``Adaptive`` (as in
        distributed's ``Cluster.adapt``): a subclass of :class:`~hybrid.adaptive.PoolAdaptive`
        to scale it with. ``active=False`` (as dask-gateway's) stops it, for every pool
        without ``pool``; the jobs stay."""
        from hybrid.adaptive import adaptive_class, check_adapt_keywords, stop_adapting

        self._check_open()
        check_adapt_keywords(kwargs, "adapt(pool=None, minimum=0, maximum=10, interval='2s', "
                                     "wait_count=3, Adaptive=None, active=True)")
        if not active:
            stop_adapting([self.pool(pool)] if pool is not None else self.pools.values())
            return None
        target = self.pool(pool)
        adaptive = adaptive_class(Adaptive, "adapt.Adaptive")(
            self._manager(), target, minimum=minimum, maximum=maximum, interval=interval,
            wait_count=wait_count)
        if target.adaptive is not None:
            target.adaptive.stop()
        target.adaptive = adaptive
        self.loop.add_callback(adaptive.start)
        return adaptive

    def prefer(self, order: list[str] | None, fallback_after: Any = None) -> None:
        """Declare an order of preference between pools that serve the same tasks.

        The demand goes to ``order[0]`` first; what its jobs will not meet goes on to the
        next pool: the part beyond its ``maximum``, and the part its jobs would meet but that
        have pended longer than ``fallback_after`` (default
        ``hybrid.adaptive.fallback-after``; held jobs at once). When the preferred pool's
        workers arrive, the next pool shrinks back (pending jobs first, then idle workers);
        the preferred pool's waiting jobs keep their place in the queue. Each pool adapts
        within its own bounds (:meth:`adapt`). ``None`` forgets every order.

        Examples
        --------
        >>> cluster.adapt(pool="slurm", maximum=300)  # doctest: +SKIP
        >>> cluster.adapt(pool="k8s", maximum=50)  # doctest: +SKIP
        >>> cluster.prefer(["slurm", "k8s"], fallback_after="10 minutes")  # doctest: +SKIP
        """
        self._manager().prefer(order, fallback_after, label="prefer")

    # ------------------------------------------------------------------ waiting
    def connected_workers(self, pool: str | None = None) -> Any:
        """Names of the connected workers of ``pool`` (or of every pool)."""
        return self.sync(self._manager().connected_workers, pool)

    def wait_for_workers(self, n_workers: int, timeout: Any = None, *, pool: str | None = None,
                         progress: bool | None = None) -> Any:
        """Block until ``n_workers`` workers of ``pool`` (or of all pools) are connected.

        The signature of ``distributed``'s (``client.wait_for_workers(n, timeout)`` comes
        here). Raises :class:`~hybrid.errors.WorkersDidNotArrive` with the batch system's own
        reasons when jobs are held or keep failing, or when ``timeout`` passes. ``progress``
        shows a bar (default: when stderr is a terminal).
        """
        self._check_open()
        n_workers = validate_value(count(1, None, "a whole number of workers >= 1"), n_workers,
                                   "wait_for_workers.n_workers")
        if timeout is not None:
            timeout = validate_value(Interval, timeout, "wait_for_workers.timeout")
        return self.sync(self._manager().wait_for_workers, n_workers, pool=pool,
                         timeout=timeout, progress=progress)

    def jobs(self, pool: str | None = None) -> Any:
        """The cluster's jobs in the queue, as the batch systems list them now."""
        return self.sync(self._manager().jobs, pool)

    def pool_status(self) -> dict[str, PoolStatus]:
        """Each pool's jobs by state, with the batch system's reasons, its target and
        connected workers (:class:`~hybrid.manager.PoolStatus`), as of the last refresh."""
        return lifecycle.read_on_loop(self._manager().status, self.sync,
                                      self.asynchronous or self.called_from_running_loop)

    def __repr__(self) -> str:
        manager = self.manager
        statuses = manager.status() if manager is not None else {}
        pools = "; ".join(status.summary() for status in statuses.values())
        return (f"HybridCluster({self.name!r}, {self.scheduler_address!r}, "
                f"status={self.status.name}, pools=[{pools}])")


HybridCluster.add_pool.__doc__ = (
    "Add a named pool and return it (nothing is submitted until :meth:`scale`).\n\n"
    "Parameters\n----------\n"
    "name : str\n    The pool's name: it tags its jobs and names its workers.\n"
    "system : str or BatchSystem\n    "
    + PoolSpec.model_fields["system"].description + "\n"
    "resources : ComputeResources, QueueWorkerResources or PodResources, optional\n"
    "    Threads, GPUs, memory and wall time of each job, in openff-evaluator's words.\n"
    + numpydoc_parameters(skip=("name", "system")) + "\n\n"
    "Returns\n-------\nManagedPool\n    The pool (its jobs, target and state).\n\n"
    "Examples\n--------\n"
    ">>> cluster.add_pool('gpu', 'htcondor', ComputeResources(number_of_gpus=1))"
    "  # doctest: +SKIP\n"
    ">>> cluster.add_pool('cpu', 'slurm', cores=4, memory='8 GiB', walltime='02:00',"
    "\n...                   job_script_prologue=['module load gcc'])  # doctest: +SKIP\n"
)
