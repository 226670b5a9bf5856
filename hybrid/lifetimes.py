"""Worker lifetimes: how long a worker takes tasks before it drains, from the pool's options.

A pool with a walltime gives its workers a lifetime shorter than it (``"auto"``), spread
either way by a stagger (distributed's ``--lifetime`` and ``--lifetime-stagger``). At the end
of its lifetime the pool manager drains a worker: it takes no new task, finishes those it
runs and retires with its results moved to other workers; its replacement was submitted
ahead of time. As a safety net each worker also stops on its own (distributed's
``--lifetime``) shortly before the walltime. No walltime is longer than the lease (the
time after which every job removes itself), and a job's memory is split between its worker
processes. These are the pure rules :class:`PoolSpec <hybrid.pools.PoolSpec>` validates and
derives with.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import PydanticCustomError

from hybrid.fields import reject, seconds

#: What a lifetime must leave of the walltime for draining and moving results (seconds).
DRAIN_MINIMUM = 10


def has_lifetime_argument(args: tuple[str, ...] | list[str]) -> bool:
    """Whether ``worker_extra_args`` give distributed's own ``--lifetime``."""
    return any(a == "--lifetime" or a.startswith("--lifetime=") for a in args)


def lifetime_value(value: Any) -> Any:
    """The ``lifetime`` option: ``"auto"`` (also ``None``), ``"off"`` (also 0 and False) or
    whole seconds."""
    if value is None or value == "auto":
        return "auto"
    if value is False or value == "off" or (isinstance(value, (int, float))
                                            and not isinstance(value, bool) and value == 0):
        return "off"
    try:
        return math.ceil(seconds(value))
    except PydanticCustomError:
        raise reject('a duration such as "50 minutes", "auto" (from the walltime) or "off"'
                     ) from None


def stagger_value(value: Any) -> Any:
    """The ``lifetime_stagger`` option: ``"auto"`` (also ``None``) or whole seconds >= 0."""
    if value is None or value == "auto":
        return "auto"
    try:
        return math.ceil(seconds(value, allow_zero=True))
    except PydanticCustomError:
        raise reject('a duration such as "2 minutes", 0, or "auto"') from None


def walltime_seconds(walltime: str | None) -> int | None:
    """Seconds of a ``"HH:MM"`` walltime (``None`` for none)."""
    if walltime is None:
        return None
    hours, minutes = walltime.split(":")
    return int(hours) * 3600 + int(minutes) * 60


def lifetime_seconds(lifetime: Any, walltime: str | None,
                     extra_args: tuple[str, ...] = ()) -> float | None:
    """The lifetime in seconds: ``"auto"`` is the walltime less a margin (a tenth of it, at
    least 60 s, at most 15 minutes and at most half of it); none without a walltime, or
    when ``extra_args`` give distributed's own ``--lifetime``."""
    if lifetime == "off":
        return None
    if lifetime == "auto":
        wall = walltime_seconds(walltime)
        if wall is None or has_lifetime_argument(extra_args):
            return None
        return float(wall - min(max(0.1 * wall, 60.0), 900.0, wall / 2))
    return float(lifetime)


def stagger_seconds(stagger: Any, lifetime: float | None, walltime: str | None) -> float:
    """The stagger in seconds: ``"auto"`` is a twentieth of the lifetime, at most a quarter
    of what the lifetime leaves of the walltime."""
    if lifetime is None:
        return 0.0
    if stagger != "auto":
        return float(stagger)
    wall = walltime_seconds(walltime)
    room = (wall - lifetime) / 4 if wall is not None else lifetime
    return max(0.0, round(min(lifetime / 20, room), 1))


def worker_deadline(lifetime: float | None, stagger: float,
                    walltime: str | None) -> float | None:
    """When a worker stops on its own, from its start: half of what the latest lifetime
    leaves of the walltime before it, 5 to 60 s (``None`` without both)."""
    wall = walltime_seconds(walltime)
    if lifetime is None or wall is None:
        return None
    room = wall - lifetime - stagger
    return float(int(wall - min(60.0, max(5.0, room / 2))))


def problem(lifetime: Any, stagger: Any, restart: bool, walltime: str | None,
            extra_args: tuple[str, ...], nanny: bool) -> tuple[str, str, str | None] | None:
    """What is wrong with a pool's lifetime options: ``(field, accepted, fix)``, or None."""
    if has_lifetime_argument(extra_args) and lifetime not in ("auto", "off"):
        return ("lifetime", "no lifetime when worker_extra_args give --lifetime",
                "Give one of them: lifetime (hybrid drains the worker first) or --lifetime "
                "(distributed's own, which may cut a running task).")
    seconds_ = lifetime_seconds(lifetime, walltime, extra_args)
    if restart:
        if not nanny:
            return ("lifetime_restart", "a nanny (nanny=True) to restart the worker in its "
                    "job", None)
        if walltime is not None:
            return ("lifetime_restart", "no walltime: a worker restarted in its job would "
                    f"still be killed at the walltime ({walltime})",
                    "Leave lifetime_restart out: each worker is then replaced by a new job "
                    "before its walltime.")
        if seconds_ is None:
            return ("lifetime_restart", "a lifetime to restart after (lifetime=...)", None)
    if seconds_ is None:
        return None
    spread = stagger_seconds(stagger, seconds_, walltime)
    if stagger != "auto" and spread >= seconds_:
        return ("lifetime_stagger", f"less than the lifetime ({seconds_:g} s)", None)
    wall = walltime_seconds(walltime)
    if wall is not None and seconds_ + spread + DRAIN_MINIMUM > wall:
        return ("lifetime" if lifetime != "auto" else "lifetime_stagger",
                f"a lifetime ({seconds_:g} s) plus stagger ({spread:g} s) that leaves at "
                f"least {DRAIN_MINIMUM} s of the walltime ({walltime} = {wall} s) for the "
                "worker to finish its tasks and move its results",
                "Shorten the lifetime or the stagger, or lengthen the walltime.")
    return None


def stretched_lease(walltime: Any, lease: Any, given: bool = False) -> Any:
    """The lease a pool takes: one ``given`` for it as it is; else the configured one,
    stretched to a longer walltime (a job that may run 48 h is not removed by a 24 h lease
    before it); ``lease`` as it is when either does not read (validation then says why)."""
    from hybrid.errors import ConfigurationError
    from hybrid.units import parse_walltime

    if given:
        return lease
    try:
        wall = walltime_seconds(parse_walltime(walltime, "walltime")) if walltime else None
        return max(wall, seconds(lease)) if wall is not None else lease
    except (ConfigurationError, PydanticCustomError, TypeError, ValueError):
        return lease


def lease_problem(walltime: str | None, lease: int) -> tuple[str, str, str | None] | None:
    """A walltime longer than the lease given for the pool: the job would be removed
    by its lease (HTCondor's ``periodic_remove``) before the walltime its workers' lifetimes
    and draining are planned from, or on other systems outlive the lease it promises."""
    wall = walltime_seconds(walltime)
    if wall is None or wall <= lease:
        return None
    hours = f"{lease // 3600:02d}:{lease % 3600 // 60:02d}" + (
        f":{lease % 60:02d}" if lease % 60 else "")
    return ("walltime", f"a walltime no longer than the pool's lease ({hours}, {lease} s), "
            "at which every job removes itself",
            f"Give a lease at least as long (lease='{-(-wall // 3600)}h' or more), leave the "
            "lease out (the configured one, hybrid.batch.lease, stretches to the walltime), "
            "or shorten the walltime.")


def split_problem(memory: int | None, processes: int) -> tuple[str, str, str | None] | None:
    """A job's memory that leaves its worker processes nothing each (floored to 0 bytes, a
    worker gets no ``--memory-limit``: Dask's ``auto``, the whole node's memory)."""
    if memory is None or memory // processes > 0:
        return None
    return ("memory", f"at least 1 byte for each of the {processes} processes of a job "
            f"({memory} B over {processes} processes is 0 B each)",
            "Give more memory, e.g. \"4 GiB\", or fewer processes.")


def spec_problem(spec: Any) -> tuple[str, str, str | None] | None:
    """What is wrong with a pool's lifetime, lease and memory split: ``(field, accepted,
    fix)``, or None."""
    return (problem(spec.lifetime, spec.lifetime_stagger, spec.lifetime_restart, spec.walltime,
                    spec.worker_extra_args, spec.uses_nanny)
            or lease_problem(spec.walltime, spec.lease)
            or split_problem(spec.memory, spec.max_processes))
