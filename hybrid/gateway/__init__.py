"""hybrid and dask-gateway: the server side (configuration, scheduler preload, dev server).

Kept light on purpose: importing :mod:`hybrid.gateway` imports neither ``dask_gateway`` nor
``dask_gateway_server``. The pieces live in submodules:

- :mod:`hybrid.gateway.preload`: the scheduler preload that keeps external (batch) workers.
- :mod:`hybrid.gateway.server_config`: ``dask_gateway_config.py`` and Helm values for admins.
- :mod:`hybrid.gateway.dev`: a real dask-gateway-server on loopback (``hybrid gateway dev``).
"""

from __future__ import annotations

#: The module a gateway scheduler preloads (``dask scheduler --preload hybrid.gateway.preload``).
PRELOAD_MODULE = "hybrid.gateway.preload"

#: The gateway's TCP proxy routes TLS connections by this SNI prefix + the cluster name.
SNI_PREFIX = "daskgateway-"


def scheduler_sni(cluster_name: str) -> str:
    """The TLS server name a worker sends to reach ``cluster_name`` through the TCP proxy."""
    return SNI_PREFIX + cluster_name


__all__ = ["PRELOAD_MODULE", "SNI_PREFIX", "scheduler_sni"]
