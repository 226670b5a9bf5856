"""What a pool's ``worker_extra_args`` may say, read as ``dask worker`` reads them.

hybrid writes the worker's command line from the pool's options, then the extra arguments:
``dask worker`` (click) takes the LAST value of an option given twice, so an extra argument
that hybrid sets too would silently undo it (``--nthreads`` against the pool's cores, a
second ``--name`` against the one each job derives from its batch job id). Those are
refused, naming the pool option to use instead. ``--resources`` is the exception users
expect: its resources are added to hybrid's own GPU/CPU routing resources
(:mod:`hybrid.routing`), which it may not name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hybrid.routing import GPU, NOT_GPU

#: ``dask worker`` options hybrid sets itself -> what sets them instead.
OWN_OPTIONS: dict[str, str] = {
    "--nthreads": "the pool's cores (or its resources)",
    "--nworkers": "the pool's processes",
    "--nprocs": "the pool's processes",
    "--memory-limit": "the pool's memory",
    "--name": "nothing: each worker is named after its batch job, so that the pool can tell "
              "which job a worker runs in",
    "--nanny": "the pool's nanny option",
    "--no-nanny": "the pool's nanny option",
    "--worker-port": "the pool's worker_port",
    "--nanny-port": "the pool's nanny_port",
    "--contact-address": "the pool's contact_address",
    "--death-timeout": "the pool's death_timeout",
    "--tls-ca-file": "the cluster's security (its TLS files reach every job)",
    "--tls-cert": "the cluster's security (its TLS files reach every job)",
    "--tls-key": "the cluster's security (its TLS files reach every job)",
    "--scheduler-sni": "the cluster's scheduler_sni",
    "--scheduler-file": "nothing: hybrid gives each worker its scheduler's address",
}

#: One resource of ``--resources`` (distributed splits the value at spaces and commas).
_RESOURCE = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)=([0-9]+(\.[0-9]*)?|\.[0-9]+)", re.ASCII)


def _option(arg: str) -> str:
    return arg.split("=", 1)[0] if arg.startswith("--") else arg


def _words(value: str) -> list[str]:
    """The resources of one ``--resources`` value (distributed splits at spaces and commas)."""
    return value.replace(",", " ").split()


def _resources_arguments(args: Sequence[str]) -> list[tuple[int, int, str]]:
    """Each ``--resources`` argument: its index, the index past its value (attached with
    ``=``, or the next word) and the value."""
    found = []
    for index, arg in enumerate(args):
        if _option(arg) == "--resources":
            attached = "=" in arg
            value = arg.partition("=")[2] if attached else (
                args[index + 1] if index + 1 < len(args) else "")
            found.append((index, index + (1 if attached else 2), value))
    return found


def problem(args: Sequence[str]) -> tuple[str, str, str, str | None] | None:
    """The first extra argument hybrid cannot take, as ``(field, value, accepted, fix)``."""
    resources = {index: value for index, _, value in _resources_arguments(args)}
    for index, arg in enumerate(args):
        field, option = f"worker_extra_args[{index}]", _option(arg)
        if option in OWN_OPTIONS:
            return (field, arg, f"no {option}: hybrid sets it from {OWN_OPTIONS[option]}, "
                    "and the later one given would win",
                    f"Leave {option} out of worker_extra_args.")
        if index not in resources:
            continue
        for word in _words(resources[index]) or [""]:
            match = _RESOURCE.fullmatch(word)
            if match is None:
                return (field, arg, '--resources "NAME=amount [NAME=amount ...]" (e.g. '
                        f'"FPGA=1"), not {resources[index]!r}', None)
            if match[1] in (GPU, NOT_GPU):
                return (field, arg, f"resources other than {GPU} and {NOT_GPU}, which "
                        "hybrid gives each worker to route GPU and CPU tasks",
                        "Give the pool gpus=... for GPU workers.")
    return None


def split_resources(args: Sequence[str]) -> tuple[dict[str, float], tuple[str, ...]]:
    """The resources ``--resources`` arguments give (validated by :func:`problem`), and the
    other arguments."""
    resources: dict[str, float] = {}
    taken: set[int] = set()
    for index, end, value in _resources_arguments(args):
        taken.update(range(index, end))
        for word in _words(value):
            name, _, amount = word.partition("=")
            resources[name] = float(amount)
    return resources, tuple(arg for index, arg in enumerate(args) if index not in taken)
