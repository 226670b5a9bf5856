"""Fixtures of the lifecycle tests: a REAL dev gateway on 127.0.0.1 that reclaims clusters
whose client is gone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hybrid.gateway_server.dev import DevGateway, start_dev_gateway
from tests.gateway.helpers import TEST_GATEWAY_SETTINGS

#: The dev gateway culls a cluster after this many seconds without a client: a cluster
#: object's heartbeat counts as one, so only a killed process's cluster goes.
CLIENT_TIMEOUT = 15


@pytest.fixture(scope="module")
def lifecycle_gateway() -> Iterator[DevGateway]:
    """A real dev gateway whose ``client_timeout`` reclaims clusters nobody uses."""
    gateway = start_dev_gateway(**TEST_GATEWAY_SETTINGS, client_timeout=CLIENT_TIMEOUT)
    try:
        yield gateway
    finally:
        gateway.stop()
