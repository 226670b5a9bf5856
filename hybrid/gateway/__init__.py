"""The analyst's side of hybrid and dask-gateway: :class:`~hybrid.gateway.client.HTCGateway`.

Kept light on purpose: importing :mod:`hybrid.gateway` imports no ``dask_gateway``; the
client lives in :mod:`hybrid.gateway.client`. What runs in the gateway server and its
schedulers is :mod:`hybrid.gateway_server` (for admins); both share only the SNI rule below.
"""

from __future__ import annotations

from typing import Any

#: The gateway's TCP proxy routes TLS connections by this SNI prefix + the cluster name.
SNI_PREFIX = "daskgateway-"


def scheduler_sni(cluster_name: str) -> str:
    """The TLS server name a worker sends to reach ``cluster_name`` through the TCP proxy."""
    return SNI_PREFIX + cluster_name


def __getattr__(name: str) -> Any:
    if name in ("HTCGateway", "HTCGatewayCluster"):
        from hybrid.gateway import client

        return getattr(client, name)
    raise AttributeError(f"module 'hybrid.gateway' has no attribute {name!r}")


__all__ = ["SNI_PREFIX", "HTCGateway", "HTCGatewayCluster", "scheduler_sni"]
