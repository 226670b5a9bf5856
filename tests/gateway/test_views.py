"""A gateway cluster's shutdown ends with nothing listed, whatever happens meanwhile.

Seed 003 keeps the cluster it made and then shuts the cluster down through a second view
(``gateway.connect(name).shutdown()``); a notebook may hold the cluster while a script on
the submit node shuts it down. Both views manage the same jobs: the first used to replace
the jobs the second removed, and CI's seed 003 test met it now and then ("5 job(s) still
listed after removal"). A batch system may also lose a removal it acknowledged. REAL dev
gateway, REAL local worker processes (a gateway cluster removes its jobs while its scheduler
still runs, so the workers stay until their jobs go); the TEST DOUBLES below only arrange
*when* things happen, so that what CI met now and then happens every time.
"""

from __future__ import annotations

import time
from typing import Any

import dask
import pytest

from hybrid.batch import get_system
from tests.gateway._client_tasks import square
from tests.gateway.helpers import wait_for

pytestmark = [pytest.mark.gateway, pytest.mark.timeout(180)]


class RemovalThenPause:
    """A TEST DOUBLE around a real batch system's ``remove``: it removes for real, then
    holds the removing view until the other view's manager has reconciled twice, the window
    in which, on a busy machine, the other view used to see its jobs gone and replace them."""

    def __init__(self, system: Any, other_manager: Any):
        self.system = system
        self.other = other_manager
        self.calls = 0
        self.real_remove = system.remove

    def __call__(self, job_ids: Any) -> None:
        self.real_remove(job_ids)
        self.calls += 1
        if self.calls == 1:
            goal = self.other.passes + 2
            deadline = time.monotonic() + 30
            while self.other.passes < goal and time.monotonic() < deadline:
                time.sleep(0.05)


class LostFirstRemoval:
    """A TEST DOUBLE around a real system's ``remove``: the first call is acknowledged and
    does nothing (as a batch system that loses it); later calls remove for real."""

    def __init__(self, system: Any):
        self.real_remove = system.remove
        self.calls: list[list[str]] = []

    def __call__(self, job_ids: Any) -> None:
        self.calls.append(sorted(job_ids))
        if len(self.calls) > 1:
            self.real_remove(job_ids)


def _active(name: str) -> list[Any]:
    return [s for s in get_system("local").query(cluster=name) if s.state.active]


def test_a_shutdown_through_a_second_view_is_not_undone_by_the_first(
        dev_gateway, staging) -> None:
    from hybrid import HTCGateway

    gateway = dev_gateway.gateway(HTCGateway)
    name = None
    try:
        with dask.config.set({"hybrid.gateway.pool": "local",
                              "hybrid.batch.poll-interval": "0.2s"}):
            first = gateway.new_cluster()
            name = first.name
            first.scale(2)
            client = first.get_client(set_as_default=False)
            client.wait_for_workers(2, 90)
            assert client.gather(client.map(square, range(4))) == [0, 1, 4, 9]
            pool = first.pools["local"]
            submissions = pool.submit_calls
            second = gateway.connect(name)
            system = second.pools["local"].system
            pause = RemovalThenPause(system, first._pools)
            system.remove = pause
            try:
                second.shutdown()  # raised CleanupFailed: the first view's replacements
            finally:
                del system.remove  # the real one again (the system may be shared)
            assert pause.calls >= 1
            assert pool.submit_calls == submissions, "the first view replaced removed jobs"
            assert _active(name) == []
            client.close()
            first.close()
    finally:
        if name is not None:
            get_system("local").remove_cluster(name)
            wait_for(lambda: not _active(name), 30, message="the cluster's jobs gone")
        gateway.close()


def test_a_removal_the_batch_system_loses_is_asked_again(dev_gateway, staging) -> None:
    from hybrid import HTCGateway

    gateway = dev_gateway.gateway(HTCGateway)
    name = None
    try:
        with dask.config.set({"hybrid.gateway.pool": "local"}):
            cluster = gateway.new_cluster()
            name = cluster.name
            cluster.scale(2)
            cluster.wait_for_workers(2, 90, progress=False)
            ids = sorted(s.job_id for s in cluster.jobs())
            system = cluster.pools["local"].system
            lost = LostFirstRemoval(system)
            system.remove = lost
            try:
                cluster.shutdown()  # raised CleanupFailed: 2 job(s) still listed after removal
            finally:
                del system.remove
            assert lost.calls[:2] == [ids, ids], lost.calls
            assert _active(name) == []
    finally:
        if name is not None:
            get_system("local").remove_cluster(name)
            wait_for(lambda: not _active(name), 30, message="the cluster's jobs gone")
        gateway.close()
