"""Fixtures that run a REAL dask-gateway-server on 127.0.0.1 (hybrid.gateway_server.dev).

- ``dev_gateway`` (session): one dev gateway, heartbeat every second, hybrid's preload.
- ``start_gateway`` (function): a factory for more gateways with other settings, all stopped
  at the end of the test.
- ``gateway`` (function): a ``dask_gateway.Gateway`` client of ``dev_gateway``; the clusters
  it made are stopped at the end of the test.
- ``external_workers`` (function): starts ``dask worker`` processes as batch jobs do; all
  stopped at the end of the test.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hybrid.gateway_server.dev import DevGateway, start_dev_gateway
from tests.gateway.helpers import TEST_GATEWAY_SETTINGS, ExternalWorkers, gateway_client


@pytest.fixture(autouse=True)
def _collect_client_objects_in_the_main_thread() -> Iterator[None]:
    """Collect leftover dask_gateway objects here, after each test.

    ``dask_gateway.Gateway.__del__`` closes synchronously on the client's event loop; when
    the garbage collector runs it *in* that loop's thread (an object left by a failed
    ``new_cluster``), the loop waits for itself and every later call hangs.
    """
    yield
    gc.collect()


@pytest.fixture(scope="session")
def dev_gateway() -> Iterator[DevGateway]:
    """A real dev gateway for the whole session (stopped, with its clusters, at the end)."""
    gateway = start_dev_gateway(**TEST_GATEWAY_SETTINGS)
    try:
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture
def start_gateway() -> Iterator[Callable[..., DevGateway]]:
    """``start_gateway(**settings)`` -> a further real dev gateway, stopped after the test."""
    started: list[DevGateway] = []

    def start(**settings: Any) -> DevGateway:
        gateway = start_dev_gateway(**{**TEST_GATEWAY_SETTINGS, **settings})
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture
def htc_gateway(dev_gateway: DevGateway) -> Iterator[Any]:
    """An HTCGateway client of the session's dev gateway, closed after the test."""
    from hybrid.gateway.client import HTCGateway

    gateway = dev_gateway.gateway(HTCGateway)
    try:
        yield gateway
    finally:
        gateway.close()


@pytest.fixture
def gateway(dev_gateway: DevGateway) -> Iterator[Any]:
    """A ``dask_gateway.Gateway`` of the session's dev gateway; its clusters end with the test."""
    with gateway_client(dev_gateway) as client:
        yield client


@pytest.fixture
def external_workers(tmp_path: Any) -> Iterator[ExternalWorkers]:
    """Start external ``dask worker`` processes; every one is stopped after the test."""
    workers = ExternalWorkers(tmp_path)
    try:
        yield workers
    finally:
        workers.close()
