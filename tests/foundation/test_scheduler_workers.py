"""The tests' view of a scheduler's workers is never the client's stale cache."""

from __future__ import annotations

import dask
from distributed import Client, LocalCluster

from tests.scheduler_workers import scheduler_workers, worker_names


def test_every_read_sees_every_worker_while_the_client_refreshes_its_cache() -> None:
    """The client's periodic refresh overwrites ``scheduler_info()``'s cache with no workers;
    made very frequent here, it lands between a fetch and its return (as a busy machine made
    it in CI): each of many reads must still see both workers."""
    with dask.config.set({"distributed.client.scheduler-info-interval": "2ms"}), \
            LocalCluster(n_workers=2, processes=False, protocol="tcp://", host="127.0.0.1",
                         dashboard_address=None,
                         scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        seen = [len(scheduler_workers(client)) for _ in range(1000)]
        assert set(seen) == {2}
        assert len(worker_names(client)) == 2
