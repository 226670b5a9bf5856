"""What ``client.restart()`` and ``client.restart_workers()`` must do on a pool of any kind,
checked against the scheduler and the batch system (tests/batch/test_restart_and_memory.py,
tests/kubernetes/test_k8s_restart.py).

Without a nanny (hybrid's default) a restarted worker's process exits, its job ends, and the
pool submits a replacement: the pool comes back to its target with new jobs. With a nanny the
nanny restarts the worker inside the same job.
"""

from __future__ import annotations

import os
from typing import Any

from hybrid import HybridCluster
from tests.batch._tasks import square
from tests.batch.test_real_pools import wait_for
from tests.scheduler_workers import scheduler_workers

#: Seconds a pool may take to replace its jobs (HTCondor waits for a negotiation cycle).
REFILL = 180


def worker_addresses(client: Any) -> set[str]:
    return set(scheduler_workers(client))


def worker_processes(client: Any) -> set[int]:
    """The process ids of the connected workers (a restarted worker may reuse its port)."""
    return set(client.run(os.getpid).values())


def active_jobs(cluster: HybridCluster, pool: str) -> set[str]:
    """The pool's jobs that the batch system itself lists as pending or running."""
    return {s.job_id for s in cluster.pools[pool].system.query(cluster=cluster.name)
            if s.state.active and s.pool == pool and s.state.value != "removing"}


def check_restarts(cluster: HybridCluster, pool: str, nanny: bool, n: int = 2) -> None:
    """``client.restart()``, then ``client.restart_workers([one])``, on a pool scaled to
    ``n``: both return once n workers are connected again, every restarted worker is new,
    and the pool holds its target (new jobs without a nanny, the same ones with)."""
    managed = cluster.pools[pool]
    cluster.scale(n, pool=pool)
    cluster.wait_for_workers(n, pool=pool, timeout=REFILL, progress=False)
    with cluster.get_client() as client:
        jobs = active_jobs(cluster, pool)
        assert len(jobs) == n
        before = worker_processes(client)
        submits = managed.submit_calls

        client.restart(timeout=REFILL)
        after = worker_processes(client)
        assert len(after) >= n and not after & before, (before, after)
        assert client.gather(client.map(square, range(10))) == [x * x for x in range(10)]
        if nanny:
            assert active_jobs(cluster, pool) == jobs and managed.submit_calls == submits
        else:  # the jobs ended and the pool replaced them: new jobs, as many
            wait_for(lambda: len(active_jobs(cluster, pool)) == n, 60, f"{n} jobs")
            assert not active_jobs(cluster, pool) & jobs
            assert managed.submit_calls > submits

        jobs = active_jobs(cluster, pool)
        name = sorted(cluster.connected_workers(pool))[0]
        address = next(a for a, w in scheduler_workers(client).items()
                       if w["name"] == name)
        pid = client.run(os.getpid, workers=[address])[address]
        answer = client.restart_workers([name], timeout=REFILL)
        assert answer == {name: "OK" if nanny else "removed"}
        wait_for(lambda: len(worker_addresses(client)) >= n, 60, f"{n} workers")
        assert pid not in worker_processes(client)
        assert client.submit(square, 7).result() == 49
        if nanny:
            assert active_jobs(cluster, pool) == jobs
        else:
            wait_for(lambda: len(active_jobs(cluster, pool)) == n, 60, f"{n} jobs")
            assert len(active_jobs(cluster, pool) & jobs) == n - 1
    # none of it counted as a failure of the pool
    assert managed.failures == 0 and managed.failed is None
