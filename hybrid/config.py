"""Configuration, the Dask way: packaged ``hybrid.yaml`` defaults in ``dask.config``.

The user's own YAML files and ``DASK_HYBRID__...`` environment variables override them, as
for every Dask setting. Read values with :func:`get`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dask.config
import distributed  # noqa: F401  (its defaults first, so that ours replace them)
import yaml

DEFAULTS_FILE = Path(__file__).with_name("hybrid.yaml")

_missing = object()


def _load_defaults() -> dict[str, Any]:
    with DEFAULTS_FILE.open() as f:
        defaults = yaml.safe_load(f)
    # Values already set by the user's YAML or DASK_HYBRID__... variables are kept; values
    # still at another package's default (distributed's) take ours.
    dask.config.update_defaults(defaults)
    # The user's YAML files and DASK_* variables win, even where they equal distributed's own
    # defaults (which update_defaults would otherwise replace by ours).
    dask.config.update(dask.config.config, dask.config.collect(), priority="new")
    return defaults


def get(key: str, default: Any = _missing) -> Any:
    """``dask.config.get("hybrid." + key)``."""
    if default is _missing:
        return dask.config.get(f"hybrid.{key}")
    return dask.config.get(f"hybrid.{key}", default=default)


def worker_dask_environment() -> dict[str, str]:
    """The dask settings batch workers need, as ``DASK_...`` environment variables."""
    settings = get("worker-dask-config", {}) or {}
    env = {}
    for dotted, value in settings.items():
        name = "DASK_" + "__".join(part.upper().replace("-", "_") for part in dotted.split("."))
        env[name] = str(value)
    return env


def config_directory() -> Path:
    """Where the user's dask YAML files live (``DASK_CONFIG`` or ``~/.config/dask``)."""
    return Path(os.environ.get("DASK_CONFIG", Path.home() / ".config" / "dask"))


_load_defaults()
