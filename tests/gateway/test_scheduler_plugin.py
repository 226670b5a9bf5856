"""hybrid.gateway_server.scheduler against a real in-process distributed scheduler and workers.

The gateway's HTTP API is replaced by :class:`GatewayApiDouble` (an in-process scheduler has no
gateway server to heartbeat to); everything else (scheduler, workers, dask-gateway's own
scheduler service that the plugin filters) is the real software. The same pieces through
dask-gateway's real preload are in test_gateway_contract.py, through a real gateway in
test_dev_gateway.py.
"""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from dask_gateway.scheduler_preload import GatewaySchedulerService
from distributed import Client, Scheduler, Worker

import hybrid.gateway_server as gateway_server
from hybrid.gateway_server import scheduler as plugin_module
from hybrid.gateway_server.scheduler import (
    LIMITS_ENV,
    LIMITS_METADATA_KEY,
    HybridGatewayPlugin,
    Limits,
    is_gateway_worker,
)
from tests.gateway.helpers import until

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



async def _gateway_scheduler(plugin: HybridGatewayPlugin | None = None):
    """A scheduler with dask-gateway's service (as its preload builds it) and our plugin."""
    scheduler = await Scheduler(dashboard=False, host="127.0.0.1",
                                dashboard_address="127.0.0.1:0")
    api = GatewayApiDouble()
    service = GatewaySchedulerService(scheduler, gateway=api, heartbeat_period=3600)
    service.api_address = "http://127.0.0.1:0"  # listen() sets both; heartbeat() sends it,
    service.port = 0  # a client's identity() call reads it
    scheduler.services["gateway"] = service
    if plugin is not None:  # as dask_setup, then the scheduler's start, do
        scheduler.add_plugin(plugin, name=plugin.name)
        plugin.guard_registration(scheduler)
        await plugin.start(scheduler)
    return scheduler, api, service


async def _workers(scheduler, names: list[str], **kwargs) -> list[Worker]:
    return [await Worker(scheduler.address, name=name, nthreads=1, host="127.0.0.1", **kwargs)
            for name in names]


async def _close(scheduler, service, workers) -> None:
    service.stop()
    for worker in workers:
        await worker.close()
    await scheduler.close()


def _names(scheduler) -> set:
    return {ws.name for ws in scheduler.workers.values()}


def test_gateway_worker_names_are_recognised():
    cluster = uuid.uuid4().hex
    for name in (uuid.uuid4().hex, f"dask-worker-{cluster}-x7k2q"):
        assert is_gateway_worker(name), name
    for name in ("ext-0", f"{cluster}-cpu-1234.0", 7, None, uuid.uuid4().hex.upper(),
                 "a" * 31, f"dask-worker-{cluster}", f"dask-worker-{cluster}-x7k2q-1"):
        assert not is_gateway_worker(name), name


def test_stock_service_retires_external_workers():
    """The problem being solved: the stock heartbeat closes workers beyond its own count."""

    async def main():
        scheduler, api, service = await _gateway_scheduler()
        workers = await _workers(scheduler, ["ext-0", "ext-1"])
        try:
            assert service.active_workers == {"ext-0", "ext-1"}
            await service.heartbeat()
            assert set(api.heartbeats[-1]["closing_workers"]) == {"ext-0", "ext-1"}
            await until(lambda: not scheduler.workers, message="both workers retired")
            return _names(scheduler)
        finally:
            await _close(scheduler, service, workers)

    assert asyncio.run(main()) == set()


def test_external_workers_are_neither_reported_nor_retired():
    gateway_worker = uuid.uuid4().hex

    async def main():
        plugin = HybridGatewayPlugin()
        scheduler, api, service = await _gateway_scheduler(plugin)
        workers = await _workers(scheduler, ["ext-0", gateway_worker, "ext-1"])
        try:
            assert plugin.service is service
            assert service.active_workers == {gateway_worker}
            service.count = 1  # the gateway wants its one worker: nothing to close
            await service.heartbeat()
            first = api.heartbeats[-1]
            assert (first["active_workers"], first["closing_workers"]) == ([gateway_worker], [])
            service.count = 0  # only the gateway's worker is closed, never an external one
            await service.heartbeat()
            assert api.heartbeats[-1]["closing_workers"] == [gateway_worker]
            await until(lambda: gateway_worker not in _names(scheduler),
                        message="the gateway's worker retired")
            remaining = _names(scheduler)
            await workers[0].close()  # an external worker leaving is not a failed gateway worker
            await until(lambda: "ext-0" not in _names(scheduler), message="ext-0 gone")
            await service.heartbeat()
            return remaining, api.heartbeats[-1]
        finally:
            await _close(scheduler, service, workers)

    remaining, last = asyncio.run(main())
    assert remaining == {"ext-0", "ext-1"}
    assert (last["closed_workers"], last["active_workers"]) == ([gateway_worker], [])


def test_scale_down_in_a_mixed_cluster_retires_exactly_the_gateways_surplus():
    own = [uuid.uuid4().hex for _ in range(3)]

    async def main():
        plugin = HybridGatewayPlugin()
        scheduler, api, service = await _gateway_scheduler(plugin)
        workers = await _workers(scheduler, [*own, "ext-0", "ext-1"])
        try:
            service.count = 1
            await service.heartbeat()
            closing = api.heartbeats[-1]["closing_workers"]
            await until(lambda: len(_names(scheduler)) == 3, message="two workers retired")
            return closing, _names(scheduler)
        finally:
            await _close(scheduler, service, workers)

    closing, remaining = asyncio.run(main())
    assert len(closing) == 2 and set(closing) <= set(own)
    assert {"ext-0", "ext-1"} <= remaining and len(remaining & set(own)) == 1


@pytest.mark.parametrize(("limits", "workers", "reason"), [
    (Limits(max_workers=2), [(1, 2**30)] * 3, "cluster_max_workers = 2"),
    (Limits(max_cores=2.0), [(1, 2**30), (2, 2**30)], "cluster_max_cores = 2"),
    (Limits(max_memory=3 * 2**30), [(1, 2**30), (1, 2**31), (1, 1)],
     "cluster_max_memory = 3221225472"),
    (Limits(max_memory=2**40), [(1, 0)], "without a memory limit"),
])
def test_limits_name_the_limit_a_set_of_workers_exceeds(limits, workers, reason):
    states = [SimpleNamespace(nthreads=n, memory_limit=m) for n, m in workers]
    assert limits.exceeded(states[:-1]) is None
    assert reason in limits.exceeded(states)
    assert Limits().exceeded(states) is None


@pytest.mark.parametrize(("text", "expected"), [
    ('{"max_workers": 4, "max_cores": 6, "max_memory": 1024}', Limits(4, 6.0, 1024)),
    ('{"max_workers": null, "max_cores": null, "max_memory": null}', Limits()),
    ("", Limits()),
    ("not json", Limits(max_workers=0)),  # unreadable limits refuse, never allow
    ('{"max_workers": -1}', Limits(max_workers=0)),
    ('{"max_nodes": 3}', Limits(max_workers=0)),
])
def test_limits_from_the_environment(text, expected, caplog):
    with caplog.at_level("ERROR", logger="distributed.scheduler.hybrid_gateway"):
        assert Limits.from_environment({LIMITS_ENV: text}) == expected
    assert (LIMITS_ENV in caplog.text) is (expected == Limits(max_workers=0))


def test_an_external_worker_beyond_the_limits_is_refused_when_it_registers(caplog):
    gateway_worker = uuid.uuid4().hex

    async def main():
        plugin = HybridGatewayPlugin(Limits(max_workers=2))
        scheduler, _, service = await _gateway_scheduler(plugin)
        workers = await _workers(scheduler, [gateway_worker, "ext-0"])
        try:
            with pytest.raises(Exception) as refused:
                await Worker(scheduler.address, name="ext-1", nthreads=1, host="127.0.0.1")
            kept = _names(scheduler)
            workers.append(await Worker(scheduler.address, name=uuid.uuid4().hex, nthreads=1,
                                        host="127.0.0.1"))
            return str(refused.value.__cause__), kept, _names(scheduler)
        finally:
            await _close(scheduler, service, workers)

    with caplog.at_level("WARNING", logger="distributed.scheduler.hybrid_gateway"):
        refusal, kept, later = asyncio.run(main())
    assert "hybrid: this cluster refuses the worker: it would exceed cluster_max_workers = 2" \
        in refusal
    assert kept == {gateway_worker, "ext-0"}
    assert len(later) == 3  # a gateway worker is never refused: the gateway limits its own
    assert "Refusing external worker ext-1" in caplog.text
    assert "cluster_max_workers = 2 (the cluster would have 3 workers)" in caplog.text


def test_workers_registering_together_cannot_pass_the_limit_together():
    async def main():
        plugin = HybridGatewayPlugin(Limits(max_cores=3))
        scheduler, _, service = await _gateway_scheduler(plugin)
        started = await asyncio.gather(*(Worker(scheduler.address, name=f"ext-{i}", nthreads=1,
                                                host="127.0.0.1")
                                         for i in range(5)), return_exceptions=True)
        workers = [w for w in started if isinstance(w, Worker)]
        try:
            return len(workers), sum(ws.nthreads for ws in scheduler.workers.values())
        finally:
            await _close(scheduler, service, workers)

    assert asyncio.run(main()) == (3, 3)


def test_dask_setup_publishes_the_limits_for_clients(monkeypatch):
    monkeypatch.setenv(LIMITS_ENV, '{"max_workers": 3, "max_cores": 7.5, "max_memory": 4096}')

    async def main():
        scheduler = await Scheduler(dashboard=False, host="127.0.0.1",
                                dashboard_address="127.0.0.1:0")
        try:
            plugin_module.dask_setup(scheduler)
            async with Client(scheduler.address, asynchronous=True) as client:
                seen = await client.get_metadata(LIMITS_METADATA_KEY, None)
            return seen, scheduler.plugins[plugin_module.PLUGIN_NAME].limits
        finally:
            await scheduler.close()

    seen, limits = asyncio.run(main())
    assert seen == {"max_workers": 3, "max_cores": 7.5, "max_memory": 4096}
    assert limits == Limits(3, 7.5, 4096)


def test_without_a_gateway_service_the_plugin_says_so(caplog):
    async def main():
        scheduler = await Scheduler(dashboard=False, host="127.0.0.1",
                                dashboard_address="127.0.0.1:0")
        try:
            return HybridGatewayPlugin().adopt_gateway_service(scheduler)
        finally:
            await scheduler.close()

    with caplog.at_level("WARNING", logger="distributed.scheduler.hybrid_gateway"):
        assert asyncio.run(main()) is False
    assert "No dask-gateway service in this scheduler" in caplog.text


@pytest.mark.parametrize(("settings", "connect_client"), [
    ({"max_lifetime": 1}, True),
    ({"client_timeout": 1}, False),
])
def test_lifetime_limits_shut_the_cluster_down(settings, connect_client):
    async def main():
        api = GatewayApiDouble()
        plugin = HybridGatewayPlugin(gateway_client=lambda: api, **settings)
        scheduler, _, service = await _gateway_scheduler(plugin)
        client = None
        try:
            if connect_client:
                client = await Client(scheduler.address, asynchronous=True)
            await until(lambda: api.shutdowns, message="shutdown asked")
            return plugin.lifetime_checks, api.shutdowns
        finally:
            if client is not None:
                await client.close()
            await _close(scheduler, service, [])

    checks, shutdowns = asyncio.run(main())
    assert shutdowns == 1
    assert checks >= 4  # period 0.25 s: the limit of 1 s is not reached at the first checks


def test_a_connected_client_keeps_the_cluster_alive():
    async def main():
        api = GatewayApiDouble()
        plugin = HybridGatewayPlugin(gateway_client=lambda: api, client_timeout=1)
        scheduler, _, service = await _gateway_scheduler(plugin)
        client = await Client(scheduler.address, asynchronous=True)
        try:
            # 12 checks, 0.25 s apart: three times the timeout with a client connected
            await until(lambda: plugin.lifetime_checks >= 12, message="12 lifetime checks")
            return api.shutdowns
        finally:
            await client.close()
            await _close(scheduler, service, [])

    assert asyncio.run(main()) == 0


def test_lifetime_reasons():
    plugin = HybridGatewayPlugin(max_lifetime=10, client_timeout=3)
    assert plugin.lifetime_reason(now=5, started=0, last_client_seen=4) is None
    assert "maximum lifetime of 10 s" in plugin.lifetime_reason(10, 0, 9)
    assert "no client was connected for 3 s" in plugin.lifetime_reason(7, 0, 4)
    assert HybridGatewayPlugin().lifetime_reason(10**6, 0, 0) is None


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_scheduler_module_is_self_contained_for_inline_use():
    """Its source runs as an inline preload on an image without hybid: no hybrid import."""
    imported = _imports(Path(gateway_server.__file__).with_name("scheduler.py"))
    assert not any(name.startswith("hybrid") for name in imported), imported
    assert {"distributed.diagnostics.plugin", "dask_gateway.scheduler_preload"} <= imported


def test_the_import_graph_shows_who_runs_what():
    """The server side never imports the analyst's client, nor the client the server side."""
    package = Path(gateway_server.__file__).parent
    for path in package.glob("*.py"):
        imported = _imports(path)
        assert not any(name.startswith("hybrid.gateway.client") for name in imported), path
        light = {name for name in imported if name.startswith("hybrid.gateway.")
                 and not name.startswith("hybrid.gateway_server")}
        assert light <= {"hybrid.gateway.SNI_PREFIX", "hybrid.gateway.scheduler_sni"}, path
    client_package = package.parent / "gateway"
    for path in client_package.glob("*.py"):
        assert not any(name.startswith("hybrid.gateway_server") for name in _imports(path)), path


def test_importing_the_package_and_cli_stays_light():
    """hybrid.gateway_server, its CLI and its plugin import neither dask_gateway package."""
    code = ("import sys, hybrid.gateway_server, hybrid.gateway_server.cli, "
            "hybrid.gateway_server.scheduler, hybrid.gateway_server.settings; "
            "print(sorted(m for m in sys.modules if m.startswith('dask_gateway') "
            "or m.startswith('hybrid.gateway.client')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_a_second_scale_down_pass_does_not_retire_workers_beyond_the_surplus() -> None:
    """dask-gateway's heartbeat asks ``workers_to_close`` again while the workers it picked
    last time are still being retired (a busy scheduler: found as a fresh-clone run where
    scale 3 -> 1 retired all three). Those no longer count as staying, so the second pass
    picks none: the gateway keeps its one worker."""
    from types import SimpleNamespace

    from distributed.core import Status

    from hybrid.gateway_server.scheduler import HybridGatewayPlugin

    names = [uuid.uuid4().hex for _ in range(3)]
    workers = {f"tcp://127.0.0.1:{n}": SimpleNamespace(
        name=name, status=Status.running, processing=set(), nbytes=0)
        for n, name in enumerate(names, start=9000)}
    workers["tcp://127.0.0.1:9100"] = SimpleNamespace(
        name="ext-0", status=Status.running, processing=set(), nbytes=0)
    scheduler = SimpleNamespace(workers=workers)
    plugin = HybridGatewayPlugin()
    plugin.service = SimpleNamespace(count=1, closing_workers=set())
    workers["tcp://127.0.0.1:9000"].status = Status.paused  # (paused: it stays all the same)
    first = plugin.valid_workers_downscaling(scheduler, list(workers.values()))
    assert len(first) == 2 and all(ws.name in names for ws in first)
    # the first pass's workers are being retired: the service marks them, then the
    # scheduler (their status); a second pass offers the workers still running
    plugin.service.closing_workers.update(ws.name for ws in first)
    running = [ws for ws in workers.values() if ws not in first]
    assert plugin.valid_workers_downscaling(scheduler, running) == []
    for ws in first:
        ws.status = Status.closing_gracefully
    plugin.service.closing_workers.clear()  # (the service forgets them as they leave)
    assert plugin.valid_workers_downscaling(scheduler, running) == []
