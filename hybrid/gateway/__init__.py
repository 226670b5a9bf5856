"""The analyst's side of hybrid and dask-gateway: :class:`~hybrid.gateway.client.HTCGateway`.

Kept light on purpose: importing :mod:`hybrid.gateway` imports no ``dask_gateway``; the
gateway client lives in :mod:`hybrid.gateway.gateway`, its clusters in
:mod:`hybrid.gateway.client`, what their options mean in :mod:`hybrid.gateway.options`.
What runs in the gateway server and its schedulers is :mod:`hybrid.gateway_server` (for
admins); both share only the SNI rule (:func:`scheduler_sni`).
"""

from __future__ import annotations

from typing import Any

from hybrid.gateway.options import SNI_PREFIX, scheduler_sni


def __getattr__(name: str) -> Any:
    if name in ("HTCGateway", "HTCGatewayCluster"):
        from hybrid.gateway import client

        return getattr(client, name)
    raise AttributeError(f"module 'hybrid.gateway' has no attribute {name!r}")


__all__ = ["SNI_PREFIX", "HTCGateway", "HTCGatewayCluster", "scheduler_sni"]
