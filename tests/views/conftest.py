"""The dev gateway fixtures of tests/gateway, for the gateway cluster's views."""

from tests.gateway.conftest import (  # noqa: F401  (fixtures)
    _collect_client_objects_in_the_main_thread,
    dev_gateway,
)
