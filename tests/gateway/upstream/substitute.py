"""A pytest plugin that runs dask-gateway's own client tests with hybrid's classes.

Loaded with ``-p substitute`` before any test module is imported, it puts
:class:`hybrid.gateway.client.HTCGateway` and :class:`~hybrid.gateway.client.HTCGatewayCluster`
where the tests (and dask-gateway's own code) find ``Gateway`` and ``GatewayCluster``, so every
``Gateway(...)``, ``GatewayCluster(...)``, ``gateway.new_cluster()`` and ``connect()`` in the
tests makes ours. At the end of the session it checks that the tests really used them.
"""

from __future__ import annotations

import dask_gateway
import dask_gateway.client
import pytest

from hybrid.gateway.client import HTCGateway, HTCGatewayCluster

ORIGINAL_GATEWAY = dask_gateway.client.Gateway
ORIGINAL_CLUSTER = dask_gateway.client.GatewayCluster
made: dict[str, int] = {"gateways": 0, "clusters": 0}


def _count(cls: type, key: str) -> None:
    original = cls.__init__

    def counted(self, *args, **kwargs):
        made[key] += 1
        original(self, *args, **kwargs)

    cls.__init__ = counted


def pytest_configure(config: pytest.Config) -> None:
    for module in (dask_gateway, dask_gateway.client):
        module.Gateway = HTCGateway
        module.GatewayCluster = HTCGatewayCluster
    _count(HTCGateway, "gateways")
    original_init = HTCGatewayCluster._init_internal

    def counted_init(self, *args, **kwargs):
        made["clusters"] += 1
        return original_init(self, *args, **kwargs)

    HTCGatewayCluster._init_internal = counted_init


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    terminalreporter.write_line(
        f"hybrid substitution: {made['gateways']} HTCGateway and {made['clusters']} "
        "HTCGatewayCluster objects made by dask-gateway's tests")
