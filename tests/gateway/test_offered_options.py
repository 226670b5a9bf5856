"""The options a gateway offers itself (``worker_cores``, ``worker_memory``), as the stock
client sends them, and as hybrid's batch pools read them: a REAL dev gateway that offers both.

Each case was a report: ``new_cluster(worker_cores=2)`` with no batch pool was refused (the
stock client sends it), ``worker_memory="8 GiB"`` with a pool reached dask-gateway's own
``Float`` unconverted, and an ``Options`` object's sizes never reached the batch pool.
"""

from __future__ import annotations

import pytest

from hybrid.gateway.client import HTCGateway
from hybrid.units import unit

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]


def _options_of(gateway: HTCGateway, name: str) -> dict:
    return dict(gateway.get_cluster(name).options)


def test_offered_sizes_without_a_batch_pool_go_to_the_gateway_as_the_stock_client_sends_them(
        htc_gateway) -> None:
    cluster = htc_gateway.new_cluster(worker_cores=2, worker_memory=3)
    try:
        options = _options_of(htc_gateway, cluster.name)
        assert options["worker_cores"] == 2 and options["worker_memory"] == 3
        assert cluster.pools == {}
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("memory", ["3 GiB", "3072 MiB", 3 * unit.GiB, 3])
def test_an_offered_memory_with_its_unit_reaches_the_gateway_in_its_unit(
        htc_gateway, staging, memory) -> None:
    cluster = htc_gateway.new_cluster(pool="local", worker_cores=2, worker_memory=memory)
    try:
        options = _options_of(htc_gateway, cluster.name)
        assert options["worker_memory"] == 3.0 and options["worker_cores"] == 2
        spec = cluster.pools["local"].spec
        assert spec.memory == 3 * 2**30 and spec.cores == 2
    finally:
        cluster.shutdown()


def test_the_sizes_an_options_object_changes_size_the_batch_pool_too(
        htc_gateway, staging) -> None:
    options = htc_gateway.cluster_options()
    options.worker_cores = 2
    cluster = htc_gateway.new_cluster(options, pool="local")
    try:
        spec = cluster.pools["local"].spec
        assert spec.cores == 2
        assert spec.memory is None  # left at the gateway's default: not the pool's size
        assert _options_of(htc_gateway, cluster.name)["worker_cores"] == 2
    finally:
        cluster.shutdown()
    # a keyword beside it wins, as the stock client's keywords win over the object
    options.worker_memory = 5
    cluster = htc_gateway.new_cluster(cluster_options=options, pool="local", worker_memory=4)
    try:
        assert cluster.pools["local"].spec.memory == 4 * 2**30
        assert cluster.pools["local"].spec.cores == 2
        assert _options_of(htc_gateway, cluster.name)["worker_memory"] == 4
    finally:
        cluster.shutdown()


def test_adapt_of_a_gateway_pool_is_bounded_by_ten_unless_given_as_a_hybrid_cluster(
        htc_gateway, staging) -> None:
    """The page said "10 by default"; ``adapt(minimum=0)`` raised for want of a maximum."""
    from hybrid.errors import ConfigurationError

    cluster = htc_gateway.new_cluster(pool="local")
    try:
        adaptive = cluster.adapt(minimum=0, interval="0.5s")
        assert (adaptive.minimum, adaptive.maximum) == (0, 10)
        with pytest.raises(ConfigurationError) as caught:
            cluster.adapt(maximum=2, target_duration="5s")
        assert caught.value.field == "adapt.target_duration"
        assert cluster.adapt(active=False) is None
        assert cluster.pools["local"].adaptive is None
        assert cluster.jobs() == []
    finally:
        cluster.shutdown()


def test_adapt_without_a_maximum_under_the_admin_s_limits(start_gateway, staging) -> None:
    """The default maximum reached the limits check as ``None`` (a TypeError) on a gateway
    whose admin set limits."""
    dev = start_gateway(cluster_max_workers=20)
    gateway = dev.gateway(HTCGateway)
    try:
        cluster = gateway.new_cluster(pool="local")
        try:
            adaptive = cluster.adapt(minimum=0, interval="0.5s")
            assert (adaptive.minimum, adaptive.maximum) == (0, 10)
        finally:
            cluster.shutdown()
    finally:
        gateway.close()
