"""hybrid.gateway.preload against a real in-process distributed scheduler and real workers.

The gateway's HTTP API is replaced by :class:`GatewayApiDouble` (an in-process scheduler has no
gateway to heartbeat to); everything else (scheduler, workers, the stock service the preload
changes) is the real software. The end-to-end proof through a real gateway is in
test_dev_gateway.py.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest
from dask_gateway.scheduler_preload import GatewaySchedulerService
from distributed import Scheduler, Worker

from hybrid.gateway import preload

pytestmark = pytest.mark.timeout(60)


class GatewayApiDouble:
    """Test double of the gateway API client (``GatewayClient``): records what it is sent.

    Stands in for the HTTP calls a gateway scheduler makes to its gateway server, which does
    not exist for an in-process scheduler.
    """

    token = "double-token"

    def __init__(self) -> None:
        self.heartbeats: list[dict] = []
        self.shutdowns = 0

    async def heartbeat(self, msg: dict) -> None:
        self.heartbeats.append(msg)

    async def shutdown(self) -> None:
        self.shutdowns += 1


async def _scheduler_with_workers(service_class: type, worker_names: list[str], **service_kw):
    scheduler = await Scheduler(dashboard_address=":0", host="127.0.0.1")
    api = GatewayApiDouble()
    service = service_class(scheduler, gateway=api, heartbeat_period=3600, **service_kw)
    service.api_address = "http://127.0.0.1:0"  # listen() sets it; heartbeat() sends it
    workers = [await Worker(scheduler.address, name=name, nthreads=1) for name in worker_names]
    return scheduler, api, service, workers


async def _close(scheduler, service, workers) -> None:
    service.stop()
    for worker in workers:
        await worker.close()
    await scheduler.close()


def _names(scheduler) -> set:
    return {ws.name for ws in scheduler.workers.values()}


def test_gateway_worker_names_are_recognised():
    assert preload.is_gateway_worker(uuid.uuid4().hex)
    for name in ("ext-0", "cluster-cpu-1234", 7, None, uuid.uuid4().hex.upper(), "a" * 31):
        assert not preload.is_gateway_worker(name)


def test_stock_service_retires_external_workers():
    """The problem being fixed: the stock heartbeat closes workers beyond its own count."""

    async def main():
        scheduler, api, service, workers = await _scheduler_with_workers(
            GatewaySchedulerService, ["ext-0", "ext-1"])
        try:
            assert service.active_workers == {"ext-0", "ext-1"}
            await service.heartbeat()
            assert set(api.heartbeats[-1]["closing_workers"]) == {"ext-0", "ext-1"}
            await asyncio.sleep(0.5)
            return _names(scheduler)
        finally:
            await _close(scheduler, service, workers)

    assert asyncio.run(main()) == set()


def test_external_workers_are_neither_reported_nor_retired():
    gateway_worker = uuid.uuid4().hex

    async def main():
        cls = preload.external_aware_service_class()
        scheduler, api, service, workers = await _scheduler_with_workers(
            cls, ["ext-0", gateway_worker, "ext-1"])
        try:
            assert service.active_workers == {gateway_worker}
            assert sorted(service.external_workers.values()) == ["ext-0", "ext-1"]
            # count 1: the gateway wants its one worker; nothing to close
            service.count = 1
            await service.heartbeat()
            first = api.heartbeats[-1]
            assert first["active_workers"] == [gateway_worker]
            assert first["closing_workers"] == []
            # count 0: only the gateway's worker is closed, never an external one
            service.count = 0
            await service.heartbeat()
            second = api.heartbeats[-1]
            assert second["closing_workers"] == [gateway_worker]
            assert "ext-0" not in second["active_workers"]
            for _ in range(50):
                if gateway_worker not in _names(scheduler):
                    break
                await asyncio.sleep(0.1)
            remaining = _names(scheduler)
            # an external worker leaving is not reported as a failed gateway worker
            await workers[0].close()
            await asyncio.sleep(0.2)
            await service.heartbeat()
            return remaining, api.heartbeats[-1]
        finally:
            await _close(scheduler, service, workers)

    remaining, last = asyncio.run(main())
    assert remaining == {"ext-0", "ext-1"}
    assert last["closed_workers"] == [gateway_worker]
    assert last["active_workers"] == []


def test_preload_swaps_the_stock_class_and_adopts_an_existing_service():
    """dask_setup first (the normal order) swaps the class; after the stock one, it adopts."""
    import dask_gateway.scheduler_preload as stock

    original = stock.GatewaySchedulerService

    async def main():
        scheduler = await Scheduler(dashboard_address=":0", host="127.0.0.1")
        # ours after the stock preload: the existing service is converted
        service = original(scheduler, gateway=GatewayApiDouble(), heartbeat_period=3600)
        service.api_address = "http://127.0.0.1:0"
        scheduler.services["gateway"] = service
        worker = await Worker(scheduler.address, name="ext-late", nthreads=1)
        try:
            assert service.active_workers == {"ext-late"}
            preload.dask_setup(scheduler)
            adopted = (type(service) is preload.external_aware_service_class(),
                       set(service.active_workers), set(service.external_workers.values()),
                       stock.GatewaySchedulerService is preload.external_aware_service_class())
            service.stop()
            preload.dask_teardown(scheduler)
            return adopted, stock.GatewaySchedulerService
        finally:
            await worker.close()
            await scheduler.close()

    adopted, restored = asyncio.run(main())
    assert adopted == (True, set(), {"ext-late"}, True)
    assert restored is original


def test_preload_is_a_no_op_without_dask_gateway(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "dask_gateway.scheduler_preload", None)

    class SchedulerStandIn:
        services: dict = {}

    with caplog.at_level("WARNING"):
        preload.dask_setup(SchedulerStandIn())
    assert "dask_gateway is not installed" in caplog.text


@pytest.mark.parametrize(("variable", "connect_client"), [
    (preload.MAX_LIFETIME_ENV, True),
    (preload.CLIENT_TIMEOUT_ENV, False),
])
def test_lifetime_limits_shut_the_cluster_down(monkeypatch, variable, connect_client):
    from distributed import Client

    monkeypatch.setenv(variable, "1")

    async def main():
        cls = preload.external_aware_service_class()
        scheduler, api, service, workers = await _scheduler_with_workers(cls, [])
        client = None
        try:
            if connect_client:
                client = await Client(scheduler.address, asynchronous=True)
            service.listen(("127.0.0.1", 0))
            await asyncio.sleep(0.5)
            early = api.shutdowns
            for _ in range(40):
                if api.shutdowns:
                    break
                await asyncio.sleep(0.1)
            return early, api.shutdowns
        finally:
            if client is not None:
                await client.close()
            await _close(scheduler, service, workers)

    early, final = asyncio.run(main())
    assert early == 0
    assert final == 1


def test_connected_client_keeps_cluster_alive(monkeypatch):
    from distributed import Client

    monkeypatch.setenv(preload.CLIENT_TIMEOUT_ENV, "1")

    async def main():
        cls = preload.external_aware_service_class()
        scheduler, api, service, workers = await _scheduler_with_workers(cls, [])
        client = await Client(scheduler.address, asynchronous=True)
        try:
            service.listen(("127.0.0.1", 0))
            await asyncio.sleep(2.5)
            return api.shutdowns
        finally:
            await client.close()
            await _close(scheduler, service, workers)

    assert asyncio.run(main()) == 0


def test_importing_the_package_and_cli_stays_light():
    """hybrid.gateway and its CLI import neither dask_gateway_server nor dask_gateway."""
    import subprocess

    code = ("import sys, hybrid.gateway, hybrid.gateway.cli, hybrid.gateway.preload; "
            "print(sorted(m for m in sys.modules if m.startswith('dask_gateway')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"
