"""``HTCGateway``: ``dask_gateway.Gateway`` whose clusters are
:class:`~hybrid.gateway.client.HTCGatewayCluster` (they may also get batch workers).

The gateway's API client (list, connect, stop clusters); the clusters themselves live in
:mod:`hybrid.gateway.client`, which sets :attr:`HTCGateway.cluster_class` (this module does not
import it: the cluster imports its gateway, not the other way round).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any, ClassVar

from dask_gateway import Gateway, GatewayClusterError
from dask_gateway.client import ClusterReport, ClusterStatus

from hybrid import lifecycle
from hybrid.errors import ClusterClosed, ConfigurationError, GatewayUnreachable, HybridError
from hybrid.gateway.options import (
    HEARTBEAT_KEY,
    HEARTBEAT_SECONDS,
    batch_worker_address,
    worker_address,
)

logger = logging.getLogger("hybrid")


class GatewayClusterClosed(ClusterClosed, GatewayClusterError):
    """A call on a closed gateway cluster object: hybrid's :class:`~hybrid.errors.ClusterClosed`
    and dask-gateway's ``GatewayClusterError``, for code that catches the stock one."""


class GatewayClusterStopped(HybridError, GatewayClusterError):
    """The gateway no longer runs the cluster (stopped, failed, culled): nothing was done."""


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

    def connect(self, shutdown_on_close: bool = False) -> Any:
        """``gateway.connect(report.name)``: an :class:`HTCGatewayCluster`."""
        return self._gateway.connect(self.name, shutdown_on_close=shutdown_on_close)


class HTCGateway(Gateway):
    """``dask_gateway.Gateway``, whose clusters may get batch workers.

    Same constructor as :class:`dask_gateway.Gateway`, plus ``worker_proxy_address``: the
    gateway's TCP proxy as batch nodes reach it (default
    ``hybrid.gateway.worker-proxy-address``, else the host and port of ``proxy_address``).
    """

    #: What :meth:`new_cluster` and :meth:`connect` make (:mod:`hybrid.gateway.client` sets
    #: its ``HTCGatewayCluster`` here).
    cluster_class: ClassVar[Any] = None

    async def _check_running(self, cluster_name: str) -> None:
        """Submit nothing for a cluster the gateway no longer runs (an admin's
        ``stop_cluster``, its idle timeout): dask-gateway's error, as its stock scale's."""
        try:
            report = await self._cluster_report(cluster_name)
        except ValueError:  # the gateway no longer knows it
            state = "unknown to the gateway"
        else:
            if report.status is ClusterStatus.RUNNING:
                return
            state = f"the gateway reports it {report.status.name.lower()}"
        raise GatewayClusterStopped(
            f"cluster {cluster_name} is not running ({state}): nothing was submitted; close "
            "this cluster object and start another with gateway.new_cluster()")
    def __init__(self, address: str | None = None, proxy_address: str | int | None = None,
                 public_address: str | None = None, auth: Any = None,
                 asynchronous: bool = False, loop: Any = None, *,
                 worker_proxy_address: str | None = None):
        if worker_proxy_address is not None:
            worker_address(worker_proxy_address, "worker_proxy_address")
        _check_address(address)
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
                    **kwargs: Any) -> Any:
        """Submit a new cluster to the gateway and wait for it to start (as the stock client).

        Batch workers: ``pool`` (htcondor, slurm, sge, pbs, lsf, local, kubernetes; default
        ``hybrid.gateway.pool``) with ``worker_cores``, ``worker_memory`` (GiB as a number, or
        ``"4 GiB"``), ``worker_gpus``, ``worker_walltime``, ``env`` and one environment
        (``container_image``, ``pixi_project`` + ``pixi_env``, ``conda_env``), or
        ``pools={name: {system: ..., <add_pool options>}}``; ``annotate_resources`` and
        ``gpu_fraction`` set the clients' GPU/CPU routing. Every other keyword, and each of
        these that the gateway offers as a cluster option, goes to the gateway (a memory in
        its unit, GiB); the values of a ``cluster_options`` object that differ from the
        gateway's defaults size the pool too. Nothing is submitted until
        :meth:`HTCGatewayCluster.scale` or ``adapt``.
        """
        return self.cluster_class(cluster_options=cluster_options,
                                 shutdown_on_close=shutdown_on_close,
                                 **self._cluster_kwargs(), **kwargs)

    async def _request(self, method: str, url: str, json: Any = None) -> Any:
        """The stock request; a gateway that cannot be reached is one clear error (not
        aiohttp's own), naming the address."""
        import aiohttp

        try:
            return await super()._request(method, url, json=json)
        except aiohttp.ClientConnectionError as error:
            raise GatewayUnreachable(
                f"cannot reach the dask-gateway server at {self.address}: {_reason(error)}. "
                "Check the address (the gateway's http(s):// URL, as `hybrid gateway dev` "
                "prints it) and that the server runs.") from None

    def connect(self, cluster_name: str, shutdown_on_close: bool = False) -> Any:
        """Connect to a running cluster (this process's or another's); its batch pools and
        their jobs are found again (pools from the scheduler, jobs by their tag)."""
        _check_cluster_name(cluster_name, "cluster_name")
        return self.cluster_class.from_name(cluster_name, shutdown_on_close=shutdown_on_close,
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

    def stop_cluster(self, cluster_name: str, **kwargs: Any) -> Any:
        """Stop a cluster by name (the name checked as :meth:`connect` checks it)."""
        _check_cluster_name(cluster_name, "cluster_name")
        return super().stop_cluster(cluster_name, **kwargs)

    def get_cluster(self, cluster_name: str, **kwargs: Any) -> Any:
        """One cluster's report (connectable with ``report.connect()``)."""
        _check_cluster_name(cluster_name, "cluster_name")
        found = super().get_cluster(cluster_name, **kwargs)
        if self.asynchronous:
            return self._reports(found)
        return HTCClusterReport.from_report(found, self)

    def sync(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """As the stock ``sync``, but the wait is :func:`hybrid.lifecycle.sync`'s: a SIGTERM
        that closes the clusters while this process waits here cannot deadlock, and an
        interrupted wait cancels the call on the loop."""
        if self.asynchronous:
            return func(*args, **kwargs)
        return lifecycle.sync(self.loop, func, *args, **kwargs)

    def close(self) -> Any:
        """Close the client (its clusters keep running unless they were shut down); a
        second call does nothing."""
        if getattr(self, "_closed", False) and not self.asynchronous:
            return None
        self._closed = True
        if not self.asynchronous and lifecycle.terminating():  # its loop ends with the process
            if self.loop.asyncio_loop.is_running():
                self.sync(self._cleanup)
            return None
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

    def _on_own_loop(self) -> bool:
        """Whether this thread runs this gateway's event loop (``False`` once it is gone)."""
        try:
            own = self.loop.asyncio_loop
        except RuntimeError:  # its loop runner stopped
            return False
        try:
            return asyncio.get_running_loop() is own
        except RuntimeError:
            return False

    def __repr__(self) -> str:
        return f"HTCGateway<{self.address}>"


__all__ = ["HTCClusterReport", "HTCGateway"]


def _check_address(address: Any) -> None:
    """The gateway's address (or ``gateway.address`` of dask's configuration): an http(s)
    URL with a host."""
    import dask.config

    value = address if address is not None else dask.config.get("gateway.address", None)
    if value is None:
        return  # the stock client says that none was given
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^/\s]+(/\S*)?", value):
        raise ConfigurationError(
            "address" if address is not None else "gateway.address", value,
            'the gateway\'s http(s) URL, e.g. "http://127.0.0.1:8000" or '
            '"https://gateway.example.org"')


def _check_cluster_name(name: Any, field: str) -> None:
    """A cluster name as ``list_clusters()`` shows it."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigurationError(field, name, "a cluster name as gateway.list_clusters() "
                                 "shows it, e.g. '1c2b3a...'")


def _reason(error: BaseException) -> str:
    """The operating system's words for a failed connection, without aiohttp's wrapping."""
    cause = getattr(error, "os_error", None) or error
    return getattr(cause, "strerror", None) or str(cause) or type(error).__name__


async def _heartbeat(scheduler: Any, name: str) -> None:
    """Beat while a cluster object is open: a gateway whose ``client_timeout`` culls clusters
    without a client keeps it, and reclaims it once its process is gone (SIGKILL)."""
    import uuid

    me, beat = uuid.uuid4().hex, 0
    while True:
        beat += 1
        try:
            await scheduler.set_metadata(keys=[HEARTBEAT_KEY, me], value=beat)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the next beat tries again
            logger.debug("gateway cluster %s: heartbeat failed: %s", name, error)
        await asyncio.sleep(HEARTBEAT_SECONDS)
