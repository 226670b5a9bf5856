"""Stopping always ends: the pool manager's reconciler, and a gateway cluster whose start
was interrupted.

Stopping the pool manager's reconciler always ends it (CI once hung a cluster's close for
300 s there): on Python 3.11, ``asyncio.wait_for`` returns its result and drops a cancellation
that lands in the loop step where the call it bounds finishes, so one ``cancel()`` of the
reconciler can be lost and the reconciler goes on forever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import dask
import pytest

from hybrid.manager import PoolManager
from hybrid.worker import Connection

pytestmark = pytest.mark.timeout(60)


class StopAsIdentityAnswers:
    """Test double for the scheduler's rpc: it answers ``identity`` at once and, the first
    time, starts ``manager.stop()`` in the same loop step, so the stop's cancellation reaches
    the reconciler while its bounded ``identity`` call has just finished (the race that a
    busy machine hits by chance)."""

    def __init__(self) -> None:
        self.manager: PoolManager | None = None
        self.stopping: asyncio.Future | None = None

    async def identity(self) -> dict[str, Any]:
        if self.stopping is None:
            self.stopping = asyncio.ensure_future(self.manager.stop())
        return {"workers": {}}

    async def get_metadata(self, keys: list[str], default: Any = None) -> Any:
        return default


def test_stop_ends_the_reconciler_even_when_its_cancel_meets_a_finished_call() -> None:
    async def scenario() -> tuple[bool, asyncio.Task]:
        scheduler = StopAsIdentityAnswers()
        manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), scheduler)
        scheduler.manager = manager
        manager.start()
        reconciler = manager._reconciler
        deadline = asyncio.get_running_loop().time() + 10
        while scheduler.stopping is None:  # the first reconcile round starts the stop
            assert asyncio.get_running_loop().time() < deadline, "no reconcile round came"
            await asyncio.sleep(0.01)
        done, _ = await asyncio.wait({scheduler.stopping}, timeout=10)
        return scheduler.stopping in done, reconciler

    with dask.config.set({"hybrid.batch.poll-interval": "0.1s"}):
        stopped, reconciler = asyncio.run(scenario())
    assert stopped, "stop() did not end the reconciler"  # (it waited for ever before)
    assert reconciler.done()


@pytest.mark.gateway
# dask_gateway's Gateway.__del__ closes again a gateway already closed: noise, not a fault
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_in_new_cluster_stops_the_cluster_when_the_loop_began_the_stop_first(
        lifecycle_gateway, monkeypatch, caplog) -> None:
    """Ctrl-C while ``new_cluster`` waits: the cancelled start stops the cluster on the
    event loop, and the interrupted thread's close may find it marked closed before the
    gateway answered the stop (CI saw it on a busy machine: the close then shut the HTTP
    session, and the stop failed with "Connector is closed"). Here the gateway answers the
    stop slowly, the cluster stays pending until the interrupt, and the close runs once the
    stop is under way: every time."""
    import signal
    import threading

    from hybrid.gateway.client import HTCGateway, HTCGatewayCluster
    from tests.gateway.helpers import wait_for

    stop_asked = threading.Event()
    real_stop, real_close = HTCGateway._stop_cluster, HTCGatewayCluster.close

    async def never_started(self: HTCGateway, cluster_name: str) -> None:
        await asyncio.Event().wait()  # a gateway whose cluster stays pending

    async def slow_stop(self: HTCGateway, cluster_name: str) -> None:
        stop_asked.set()
        await asyncio.sleep(1.0)  # a busy gateway server
        await real_stop(self, cluster_name)

    def close_once_the_stop_runs(self: HTCGatewayCluster, shutdown: Any = None) -> Any:
        if self.name is not None:
            assert stop_asked.wait(30), "the cancelled start did not stop the cluster"
        return real_close(self, shutdown)

    monkeypatch.setattr(HTCGateway, "_wait_for_start", never_started)
    monkeypatch.setattr(HTCGateway, "_stop_cluster", slow_stop)
    monkeypatch.setattr(HTCGatewayCluster, "close", close_once_the_stop_runs)
    watcher = lifecycle_gateway.gateway()
    try:
        before = {r.name for r in watcher.list_clusters()}

        def interrupt_once_listed() -> None:
            wait_for(lambda: {r.name for r in watcher.list_clusters()} - before, 60,
                     interval=0.05, message="the gateway to list the new cluster")
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        thread = threading.Thread(target=interrupt_once_listed, daemon=True)
        thread.start()
        gateway = lifecycle_gateway.gateway(HTCGateway)
        with pytest.raises(KeyboardInterrupt):
            gateway.new_cluster()  # waits for the start until interrupted
        thread.join(60)
        gateway.close()
        shut_down = [r for r in caplog.records if "while shutting down" in r.getMessage()]
        assert shut_down == [], shut_down[0].exc_text
        running = {r.name for r in watcher.list_clusters()} - before
        assert not running, f"{running} still running after the stop (not culled yet)"
    finally:
        watcher.close()
