"""Scheduler preload that lets workers the gateway did not start stay in a gateway cluster.

Run it before the gateway's own preload::

    dask scheduler --preload hybrid.gateway.preload --preload dask_gateway.scheduler_preload ...

(the gateway appends its ``--preload dask_gateway.scheduler_preload`` itself, so naming ours in
``ClusterConfig.scheduler_cmd`` puts it first). Why: the gateway's scheduler service
(``dask_gateway.scheduler_preload.GatewaySchedulerService``) counts every worker of the
scheduler and, on its heartbeat, retires all beyond the number of workers the gateway started,
so workers from batch jobs are retired seconds after they join. This module makes the service
track only the gateway's own workers (named by the gateway with ``uuid4().hex``); every other
worker is *external*: it is neither reported to the gateway nor retired by it.

It also adds two lifetime limits the gateway server does not have, read from the scheduler's
environment (set through ``ClusterConfig.environment``; 0 or unset: no limit):

- ``HYBRID_GATEWAY_MAX_LIFETIME``: seconds after which the cluster is shut down.
- ``HYBRID_GATEWAY_CLIENT_TIMEOUT``: seconds without any connected Dask client (counted from
  the scheduler's start) after which the cluster is shut down.

The module only needs ``distributed`` and ``dask_gateway`` (no hybrid import), so its source can
also be given inline as the preload argument. Importing it is safe without ``dask_gateway``:
:func:`dask_setup` then logs a warning and does nothing. ``dask_setup`` takes no click options
(only one preload per process may, and that is the gateway's).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Any

logger = logging.getLogger("distributed.scheduler.hybrid_gateway")

#: Environment variables read by the scheduler (seconds; 0 or unset: no limit).
MAX_LIFETIME_ENV = "HYBRID_GATEWAY_MAX_LIFETIME"
CLIENT_TIMEOUT_ENV = "HYBRID_GATEWAY_CLIENT_TIMEOUT"

_GATEWAY_WORKER_NAME = re.compile(r"^[0-9a-f]{32}$")
_FIRE_AND_FORGET_CLIENT = "fire-and-forget"

_service_class: type | None = None
_replaced: tuple[Any, Any] | None = None  # (stock module, its original service class)


def is_gateway_worker(name: Any) -> bool:
    """True for a worker the gateway started itself (its names are ``uuid4().hex``)."""
    return isinstance(name, str) and _GATEWAY_WORKER_NAME.match(name) is not None


def _seconds_from_env(name: str) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        logger.error("%s=%r is not a number of seconds; no limit is applied", name, raw)
        return 0.0
    return max(0.0, value)


def external_aware_service_class() -> type:
    """The gateway's scheduler service, made to ignore external workers (built once)."""
    global _service_class
    if _service_class is not None:
        return _service_class

    from dask_gateway.scheduler_preload import GatewaySchedulerService

    class ExternalAwareGatewayService(GatewaySchedulerService):
        """Reports and retires only the gateway's own workers; enforces hybrid's lifetimes."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _init_hybrid_state(self)

        def worker_added(self, worker_address: str) -> None:
            ws = self.scheduler.workers[worker_address]
            if not is_gateway_worker(ws.name):
                self.external_workers[worker_address] = ws.name
                logger.info("External worker %s joined (%s): the gateway leaves it alone",
                            ws.name, worker_address)
                return
            super().worker_added(worker_address)

        def worker_removed(self, worker_address: str) -> None:
            if self.external_workers.pop(worker_address, None) is not None:
                return
            if worker_address not in self.address_to_worker:
                return
            super().worker_removed(worker_address)

        async def heartbeat(self) -> None:
            # The stock heartbeat picks workers to close among *all* the scheduler's workers;
            # here only the gateway's own workers are counted and may be closed.
            gateway_workers = [ws for ws in self.address_to_worker.values()
                               if ws.name in self.active_workers]
            excess = len(gateway_workers) - self.count
            if excess > 0:
                idlest = sorted(gateway_workers, key=lambda ws: (len(ws.processing), ws.nbytes))
                closing_workers = [ws.name for ws in idlest[:excess]]
            else:
                closing_workers = []
            msg = {
                "scheduler_address": self.scheduler.address,
                "dashboard_address": self.dashboard_address,
                "api_address": self.api_address,
                "count": self.count,
                "active_workers": sorted(self.active_workers.difference(closing_workers)),
                "closing_workers": closing_workers,
                "closed_workers": sorted(self.closed_workers),
            }
            await self.gateway.heartbeat(msg)
            if closing_workers:
                self.closing_workers.update(closing_workers)
                try:
                    await self.scheduler.retire_workers(
                        names=closing_workers, remove=True, close_workers=True
                    )
                except Exception:
                    self.closing_workers.difference_update(closing_workers)
                    raise

        def listen(self, address: Any) -> None:
            super().listen(address)
            _start_lifetime_task(self)

        def stop(self) -> None:
            task = getattr(self, "lifetime_task", None)
            if task is not None:
                task.cancel()
                self.lifetime_task = None
            super().stop()

    _service_class = ExternalAwareGatewayService
    return _service_class


def _init_hybrid_state(service: Any) -> None:
    service.external_workers = {}
    service.max_lifetime = _seconds_from_env(MAX_LIFETIME_ENV)
    service.client_timeout = _seconds_from_env(CLIENT_TIMEOUT_ENV)
    service.lifetime_task = None


def _start_lifetime_task(service: Any) -> None:
    if (service.max_lifetime or service.client_timeout) and service.lifetime_task is None:
        service.lifetime_task = asyncio.ensure_future(_enforce_lifetimes(service))


def _connected_clients(scheduler: Any) -> int:
    return sum(1 for client in scheduler.clients if client != _FIRE_AND_FORGET_CLIENT)


async def _enforce_lifetimes(service: Any) -> None:
    """Shut the cluster down (through the gateway) when a lifetime limit is reached."""
    limits = [t for t in (service.max_lifetime, service.client_timeout) if t > 0]
    period = min(5.0, max(0.2, min(limits) / 4))
    loop = asyncio.get_running_loop()
    started = last_client_seen = loop.time()
    while True:
        await asyncio.sleep(period)
        now = loop.time()
        if _connected_clients(service.scheduler):
            last_client_seen = now
        reason = None
        if service.max_lifetime and now - started >= service.max_lifetime:
            reason = f"it reached its maximum lifetime of {service.max_lifetime:g} s"
        elif service.client_timeout and now - last_client_seen >= service.client_timeout:
            reason = f"no client was connected for {service.client_timeout:g} s"
        if reason is None:
            continue
        logger.warning("Shutting the cluster down: %s", reason)
        try:
            await service.gateway.shutdown()
            return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.warning("Asking the gateway to shut the cluster down failed: %s", error)


def _adopt(service: Any, cls: type) -> None:
    """Convert a service already created by the stock preload (ours ran after it)."""
    service.__class__ = cls
    _init_hybrid_state(service)
    for address, ws in list(service.address_to_worker.items()):
        if not is_gateway_worker(ws.name):
            del service.address_to_worker[address]
            service.active_workers.discard(ws.name)
            service.external_workers[address] = ws.name
    if service.server is not None:
        _start_lifetime_task(service)


def dask_setup(scheduler: Any) -> None:
    """Make the gateway's scheduler service (created next, by its own preload) ours."""
    global _replaced
    try:
        import dask_gateway.scheduler_preload as stock
    except ImportError:
        logger.warning("dask_gateway is not installed: hybrid.gateway.preload does nothing")
        return
    cls = external_aware_service_class()
    if stock.GatewaySchedulerService is not cls:
        _replaced = (stock, stock.GatewaySchedulerService)
        stock.GatewaySchedulerService = cls
    existing = scheduler.services.get("gateway")
    if existing is not None and not isinstance(existing, cls):
        _adopt(existing, cls)
    logger.info("hybrid gateway preload: workers not started by the gateway are kept")


def dask_teardown(scheduler: Any) -> None:
    """Give the stock module its own class back."""
    global _replaced
    if _replaced is not None:
        stock, original = _replaced
        stock.GatewaySchedulerService = original
        _replaced = None
