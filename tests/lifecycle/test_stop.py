"""Stopping the pool manager's reconciler always ends it (CI once hung a cluster's close for
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
