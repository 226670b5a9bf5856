"""The pools on the Dask dashboard: a "Pools" page served by the scheduler's own dashboard.

- :mod:`hybrid.dashboard.page`: the page (runs in the scheduler; reads the scheduler's
  metadata, imports nothing of hybrid, so it is sent to the scheduler by value);
- :mod:`hybrid.dashboard.publish`: what the cluster's process writes there every
  ``hybrid.batch.poll-interval``, and the page's installation.
"""

from hybrid.dashboard.page import PAGE, POOLS_METADATA_KEY
from hybrid.dashboard.publish import PoolsPublisher, publish_pools

__all__ = ["PAGE", "POOLS_METADATA_KEY", "PoolsPublisher", "publish_pools"]
