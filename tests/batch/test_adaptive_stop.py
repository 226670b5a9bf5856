"""Adaptivity stopped while one of its steps is under way (``scale(n)`` or a new ``adapt``
right after ``adapt``: the first step starts at once) changes nothing after it stopped.

Before, the step went on: it submitted for its bounds and set the pool's target to its own
count after the user's ``scale(0)``, so the pool kept a job (and refilled it) that nobody
asked for. Seen in the widget's test: ``adapt(minimum=1)``, then ``scale(1)``, ``scale(0)``
left the target at 1.

A real local pool and the real ``PoolAdaptive``; the test holds the step at its start (its
``target``, the demand it reads first) until the user's call is done.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from hybrid import HybridCluster
from hybrid.adaptive import PoolAdaptive
from tests.batch.test_real_pools import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("then", ["scale", "adapt"])
def test_a_step_under_way_when_adaptivity_stops_changes_nothing(staging, monkeypatch, then):
    gate = threading.Event()
    original = PoolAdaptive.target

    async def held(self):  # (the step waits here until the user's call is done)
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return await original(self)

    monkeypatch.setattr(PoolAdaptive, "target", held)
    with HybridCluster() as cluster:
        pool = cluster.add_pool("cpu", "local", nanny=False)
        first = cluster.adapt(pool="cpu", minimum=1, maximum=4, interval="1 hour")
        wait_for(lambda: first.steps == 1, 30, "the first step to start")
        if then == "scale":
            cluster.scale(0, pool="cpu")
        else:
            second = cluster.adapt(pool="cpu", minimum=0, maximum=2, interval="1 hour")
        gate.set()
        wait_for(lambda: first._first_step.done(), 30, "the first step to end")
        if then == "adapt":
            wait_for(lambda: second.steps == 1 and second._first_step.done(), 30,
                     "the second adaptivity's first step")
            assert pool.adaptive is second
        assert first.errors == []
        assert (pool.target, pool.submit_calls, dict(pool.jobs)) == (0, 0, {})
