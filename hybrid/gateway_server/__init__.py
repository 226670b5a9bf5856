"""hybrid and dask-gateway: what runs in the gateway server or in a cluster's scheduler.

The facility admin's side (the analyst's client is :mod:`hybrid.gateway`; neither imports the
other). Importing this package imports neither ``dask_gateway`` nor ``dask_gateway_server``.

- :mod:`hybrid.gateway_server.scheduler`: the scheduler preload (runs in each scheduler):
  keeps batch workers, applies the admin's limits, publishes them, enforces lifetimes.
- :mod:`hybrid.gateway_server.settings`: the settings YAML and its model.
- :mod:`hybrid.gateway_server.backend`: hybrid's dask-gateway backends and the configuration
  the packaged ``dask-gateway-config.py`` applies (runs in the gateway server).
- :mod:`hybrid.gateway_server.helm`: values for the dask-gateway Helm chart.
- :mod:`hybrid.gateway_server.dev`: a real dask-gateway-server on loopback
  (``hybrid gateway dev``), :mod:`hybrid.gateway_server.cli` its command.
"""

from __future__ import annotations

from pathlib import Path

#: The module a gateway scheduler preloads (``dask scheduler --preload ...``).
PRELOAD_MODULE = "hybrid.gateway_server.scheduler"
#: The packaged, static dask-gateway configuration file (``dask-gateway-server -f``).
CONFIG_FILE = Path(__file__).with_name("dask-gateway-config.py")


def config_file() -> Path:
    """The path of the packaged ``dask-gateway-config.py`` (the same for every site)."""
    return CONFIG_FILE


def preload_source() -> str:
    """The source of :mod:`hybrid.gateway_server.scheduler`, as an inline ``--preload``."""
    return Path(__file__).with_name("scheduler.py").read_text()


__all__ = ["CONFIG_FILE", "PRELOAD_MODULE", "config_file", "preload_source"]
