"""The registry of batch systems: each name users give, and where its class lives.

The ground floor of the package: configuration and the pool model learn the names here
and look a system's class up by name (imported on first use: most systems' bindings are
optional), so neither imports a system module. A system's own module defines it; adding a
batch system is one module in :mod:`hybrid.batch` and one line here (or a call to
:func:`register` from a plugin).
"""

from __future__ import annotations

import importlib
from typing import Any

from hybrid.errors import ConfigurationError, ToolMissing

__all__ = ["EXTRAS", "SYSTEMS", "register", "system_choices", "system_class"]

#: Batch system name -> ``"module:Class"``.
SYSTEMS: dict[str, str] = {
    "htcondor": "hybrid.batch.htcondor:HTCondor",
    "slurm": "hybrid.batch.slurm:Slurm",
    "pbs": "hybrid.batch.pbs:PBS",
    "lsf": "hybrid.batch.lsf:LSF",
    "sge": "hybrid.batch.sge:SGE",
    "local": "hybrid.batch.local:LocalProcesses",
    "kubernetes": "hybrid.kubernetes.pods:KubernetesPods",
}


#: The optional extra a system's module needs: ``pip install 'hybrid[<extra>]'``.
EXTRAS: dict[str, str] = {"htcondor": "htcondor", "kubernetes": "kubernetes"}


def register(name: str, where: str) -> None:
    """Make the system class at ``where`` (``"module:Class"``) available as ``name``."""
    module, _, cls = where.partition(":")
    if not (name.isidentifier() and name == name.lower() and module and cls):
        raise ConfigurationError("systems.register", (name, where),
                                 'a lower-case name and "package.module:Class"')
    SYSTEMS[name] = where


def system_choices() -> str:
    """``one of htcondor, kubernetes, ...`` for error messages."""
    return f"one of {', '.join(sorted(SYSTEMS))}"


def system_class(name: Any, field: str = "system") -> type:
    """The :class:`~hybrid.batch.BatchSystem` subclass called ``name`` (any case)."""
    key = name.lower() if isinstance(name, str) else None
    if key not in SYSTEMS:
        raise ConfigurationError(field, name, system_choices())
    module, cls = SYSTEMS[key].split(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if not missing or missing == "hybrid":
            raise
        extra = EXTRAS.get(key)
        raise ToolMissing(
            f"the {key} system needs the Python package {missing!r}, which is not installed "
            "here: " + (f"pip install 'hybrid[{extra}]'" if extra else f"pip install {missing}")
        ) from None
