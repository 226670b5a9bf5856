"""``client.restart()`` and ``client.restart_workers()`` on a Kubernetes pool (the API server
TEST DOUBLE runs each pod as a real process): without a nanny a restarted worker's pod ends
and the pool starts a replacement, so the pool is back at its target (tests/batch/_restart.py
says what is checked; the batch systems' pools: tests/batch/test_restart_and_memory.py)."""

from __future__ import annotations

import dask
import pytest

from hybrid.cluster import HybridCluster
from hybrid.kubernetes import KubernetesPods
from tests.batch._restart import active_jobs, check_restarts
from tests.kubernetes.conftest import cpu_resources

pytestmark = pytest.mark.timeout(300)


def test_restart_without_a_nanny_refills_the_pool(kube) -> None:
    system = KubernetesPods(api_client=kube.api_client())
    with dask.config.set({"hybrid.batch.poll-interval": "0.5s"}), \
            HybridCluster(name="restart") as cluster:
        cluster.add_pool("cpu", system, cpu_resources(maximum=4), nanny=False)
        check_restarts(cluster, "cpu", nanny=False)
    assert active_jobs(cluster, "cpu") == set()
    assert not kube.live_processes()
