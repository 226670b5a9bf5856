"""What hybrid relies on in dask-gateway and distributed, pinned: these fail the day it changes.

docs/gateway-server.md ("What hybrid relies on") lists each point; every test here names the
point it pins. The scheduler side runs dask-gateway's REAL preload
(``dask_gateway.scheduler_preload``) with hybrid's in a real distributed scheduler, as
``dask scheduler --preload hybrid.gateway_server.scheduler --preload
dask_gateway.scheduler_preload --dg-...`` does in a gateway cluster. The gateway server's
internal API that the scheduler calls (heartbeats, shutdown) is :class:`GatewayServerApiDouble`,
a test double on 127.0.0.1; the whole chain through a real gateway server is in
test_dev_gateway.py.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from pathlib import Path

import dask_gateway_server
import pytest
from dask_gateway.scheduler_preload import GatewayPlugin, GatewaySchedulerService
from dask_gateway_server.backends.base import Backend
from dask_gateway_server.backends.db_base import DataManager, DBBackendBase
from distributed import Client, Scheduler, Worker
from distributed.diagnostics.plugin import SchedulerPlugin
from tornado import httpclient, netutil, web
from tornado.httpserver import HTTPServer

from hybrid.gateway_server import PRELOAD_MODULE
from hybrid.gateway_server.scheduler import (
    LIMITS_ENV,
    LIMITS_METADATA_KEY,
    MAX_LIFETIME_ENV,
    PLUGIN_NAME,
    GatewayWorkersOnly,
    is_gateway_worker,
)
from tests.gateway.helpers import until

pytestmark = pytest.mark.timeout(90)

TOKEN = uuid.uuid4().hex
SERVER_SOURCE = Path(dask_gateway_server.__file__).parent


class GatewayServerApiDouble:
    """Test double of the gateway server's internal API, on 127.0.0.1.

    Answers what a gateway scheduler calls: ``POST .../clusters/NAME/heartbeat`` (recorded)
    and ``DELETE .../clusters/NAME`` (a shutdown, counted). Checks the cluster's token.
    """

    def __init__(self) -> None:
        self.heartbeats: list[dict] = []
        self.shutdowns = 0
        double = self

        class Heartbeat(web.RequestHandler):
            def post(self, name: str) -> None:
                assert self.request.headers["Authorization"] == f"token {TOKEN}"
                double.heartbeats.append(json.loads(self.request.body))

        class Cluster(web.RequestHandler):
            def delete(self, name: str) -> None:
                assert self.request.headers["Authorization"] == f"token {TOKEN}"
                double.shutdowns += 1

        app = web.Application([(r"/api/v1/clusters/([^/]+)/heartbeat", Heartbeat),
                               (r"/api/v1/clusters/([^/]+)", Cluster)])
        sockets = netutil.bind_sockets(0, "127.0.0.1")
        self.server = HTTPServer(app)
        self.server.add_sockets(sockets)
        self.url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/api"

    def stop(self) -> None:
        self.server.stop()



async def gateway_cluster_scheduler(monkeypatch, **environment: str):
    """A scheduler started as a gateway starts one: hybrid's preload, then the gateway's."""
    api = GatewayServerApiDouble()
    for name, value in {"DASK_GATEWAY_CLUSTER_NAME": uuid.uuid4().hex,
                        "DASK_GATEWAY_API_URL": api.url, "DASK_GATEWAY_API_TOKEN": TOKEN,
                        **environment}.items():
        monkeypatch.setenv(name, value)
    scheduler = await Scheduler(
        host="127.0.0.1", dashboard=False, dashboard_address="127.0.0.1:0",
        preload=[PRELOAD_MODULE, "dask_gateway.scheduler_preload"],
        preload_argv=["--dg-api-address", "127.0.0.1:0", "--dg-heartbeat-period", "1"])
    return scheduler, api


async def send_to_scheduler(service, msg: dict) -> None:
    """What the gateway server does for a user's scale/adapt: POST the scheduler's API."""
    await httpclient.AsyncHTTPClient().fetch(
        service.api_address + "/api/comm", method="POST", body=json.dumps(msg),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})


def test_pin_1_the_gateway_service_learns_workers_only_through_its_plugin(monkeypatch):
    """Pin 1: dask_gateway.scheduler_preload registers its service as
    ``scheduler.services["gateway"]`` and one ``GatewayPlugin`` holding ``.service``;
    hybrid puts its filter in front of exactly that plugin."""

    async def main():
        scheduler, api = await gateway_cluster_scheduler(monkeypatch)
        try:
            service = scheduler.services["gateway"]
            ours = [p for p in scheduler.plugins.values() if isinstance(p, GatewayWorkersOnly)]
            stock = [p for p in scheduler.plugins.values() if isinstance(p, GatewayPlugin)]
            return service, ours, stock, scheduler.plugins.get(PLUGIN_NAME)
        finally:
            await scheduler.close()
            api.stop()

    service, ours, stock, plugin = asyncio.run(main())
    assert isinstance(service, GatewaySchedulerService)
    assert stock == []  # replaced by the filter...
    assert len(ours) == 1 and ours[0].inner.service is service  # ...which holds it
    assert plugin is not None and plugin.service is service
    source = inspect.getsource(GatewaySchedulerService.__init__)
    assert "add_plugin(GatewayPlugin(self))" in source, "pin 1: see docs/gateway-server.md"


def test_pin_2_scale_down_retires_only_the_gateways_surplus(monkeypatch):
    """Pin 2: the service's heartbeat retires workers picked by ``Scheduler.workers_to_close``
    (which asks plugins' ``valid_workers_downscaling``), its ``count`` is the gateway's
    target, and its heartbeat reports what it was shown. Run through the real preload."""
    own = [uuid.uuid4().hex for _ in range(3)]

    async def main():
        scheduler, api = await gateway_cluster_scheduler(monkeypatch)
        service = scheduler.services["gateway"]
        workers: list[Worker] = []
        try:
            # the gateway's count first, as a gateway starts its workers only after a scale:
            # a heartbeat (every second) while the count is still 0 retires every gateway
            # worker already there (all three, in two fresh-clone runs on a loaded machine)
            await send_to_scheduler(service, {"op": "scale", "count": 3})
            await until(lambda: service.count == 3, message="count 3")
            workers += [await Worker(scheduler.address, name=name, nthreads=1,
                                     host="127.0.0.1") for name in [*own, "ext-0", "ext-1"]]
            await send_to_scheduler(service, {"op": "scale", "count": 1})
            # The deadline is for a busy machine; the state says where a stall happened
            # (a fresh-clone run once timed out here at 30 s; it passes in ~2 s alone).
            await until(lambda: sum(is_gateway_worker(ws.name) for ws in
                                    scheduler.workers.values()) == 1, timeout=60,
                        message="surplus retired", state=lambda: {
                            "count": service.count, "heartbeats": len(api.heartbeats),
                            "last heartbeat": api.heartbeats[-1:],
                            "closing": sorted(service.closing_workers),
                            "heartbeat task": service.heartbeat_task,
                            "workers": {ws.name: ws.status.name
                                        for ws in scheduler.workers.values()}})
            await until(lambda: api.heartbeats, message="a heartbeat")
            names = {ws.name for ws in scheduler.workers.values()}
            return names, api.heartbeats
        finally:
            for worker in workers:
                await worker.close()
            await scheduler.close()
            api.stop()

    names, heartbeats = asyncio.run(main())
    assert {"ext-0", "ext-1"} <= names and len(names & set(own)) == 1
    reported = set().union(*(set(h["active_workers"]) | set(h["closing_workers"])
                             for h in heartbeats))
    assert reported <= set(own)  # external workers are never reported to the gateway
    assert "workers_to_close" in inspect.getsource(GatewaySchedulerService.heartbeat), (
        "pin 2: see docs/gateway-server.md")
    assert "valid_workers_downscaling" in inspect.getsource(Scheduler.workers_to_close)
    assert hasattr(SchedulerPlugin, "valid_workers_downscaling")


def test_pin_3_make_gateway_client_stops_the_cluster(monkeypatch):
    """Pin 3: ``dask_gateway.scheduler_preload.make_gateway_client()`` (from the scheduler's
    environment) has a ``shutdown()`` that asks the gateway to stop the cluster; hybrid's
    lifetimes use it."""

    async def main():
        scheduler, api = await gateway_cluster_scheduler(monkeypatch, **{MAX_LIFETIME_ENV: "1"})
        try:
            await until(lambda: api.shutdowns, message="the gateway asked to stop the cluster")
            return api.shutdowns
        finally:
            await scheduler.close()
            api.stop()

    assert asyncio.run(main()) == 1


def test_pin_4_registration_goes_through_the_schedulers_register_worker_handler(monkeypatch):
    """Pin 4 (distributed): a worker registers through ``scheduler.handlers
    ["register-worker"]`` with its name, nthreads and memory_limit, and an answer
    ``{"status": "error", "message": ...}`` makes it fail to start with that message."""
    limits = json.dumps({"max_workers": 1, "max_cores": None, "max_memory": None})

    async def main():
        scheduler, api = await gateway_cluster_scheduler(monkeypatch, **{LIMITS_ENV: limits})
        first = await Worker(scheduler.address, name="ext-0", nthreads=1, host="127.0.0.1")
        try:
            with pytest.raises(Exception) as refused:
                await Worker(scheduler.address, name="ext-1", nthreads=1, host="127.0.0.1")
            async with Client(scheduler.address, asynchronous=True) as client:
                published = await client.get_metadata(LIMITS_METADATA_KEY, None)
            return str(refused.value.__cause__), published, len(scheduler.workers)
        finally:
            await first.close()
            await scheduler.close()
            api.stop()

    refusal, published, count = asyncio.run(main())
    assert "it would exceed cluster_max_workers = 1" in refusal
    assert published == {"max_workers": 1, "max_cores": None, "max_memory": None}
    assert count == 1
    parameters = inspect.signature(Scheduler.add_worker).parameters
    assert {"comm", "name", "nthreads", "memory_limit"} <= set(parameters)


def test_pin_5_the_gateway_names_its_workers_as_hybrid_recognises_them():
    """Pin 5: database backends name workers ``uuid4().hex``; the Kubernetes controller names
    pods ``dask-worker-<cluster>-<5 characters>`` with cluster names ``uuid4().hex``."""
    from cryptography.fernet import Fernet

    async def main():  # the data manager's objects want a running event loop
        data = DataManager(encrypt_keys=[Fernet.generate_key()])
        return data.create_worker(data.create_cluster("alice", {}, {})).name

    assert is_gateway_worker(asyncio.run(main()))
    controller = (SERVER_SOURCE / "backends/kubernetes/controller.py").read_text()
    assert 'pod["metadata"]["generateName"] = f"dask-worker-{cluster_name}-"' in controller
    assert '"$(DASK_GATEWAY_WORKER_NAME)"' in controller and '"metadata.name"' in controller
    backend = (SERVER_SOURCE / "backends/kubernetes/backend.py").read_text()
    assert "cluster_name = uuid.uuid4().hex" in backend
    assert is_gateway_worker(f"dask-worker-{uuid.uuid4().hex}-b5x9z")  # Kubernetes' suffix


def test_pin_6_the_server_hooks_hybrids_backend_overrides():
    """Pin 6 (server side): ``Backend.process_cluster_options(user, request)`` makes the
    cluster's config (start_cluster uses it, then ``config.to_dict()``), whose
    ``environment`` reaches the scheduler; scale and adapt requests go through
    ``Backend.forward_message_to_scheduler(cluster, msg)``; the scheduler command starts
    with ``ClusterConfig.scheduler_cmd``."""
    from dask_gateway_server import routes

    assert list(inspect.signature(Backend.process_cluster_options).parameters) == [
        "self", "user", "request"]
    assert list(inspect.signature(Backend.forward_message_to_scheduler).parameters) == [
        "self", "cluster", "msg"]
    for source in (inspect.getsource(DBBackendBase.start_cluster),
                   (SERVER_SOURCE / "backends/kubernetes/backend.py").read_text()):
        assert "await self.process_cluster_options(user, cluster_options)" in source
        assert "config.to_dict()" in source
    assert inspect.getsource(routes).count("backend.forward_message_to_scheduler(") == 2
    assert "cluster.config.scheduler_cmd + [" in inspect.getsource(
        DBBackendBase.get_scheduler_command)
    assert "return config.scheduler_cmd + [" in (
        SERVER_SOURCE / "backends/kubernetes/controller.py").read_text()
    assert 'env = dict(config.environment)' in (
        SERVER_SOURCE / "backends/kubernetes/controller.py").read_text()
