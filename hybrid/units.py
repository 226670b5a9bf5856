"""Units: one pint registry for the package, and parsers that accept any pint quantity.

openff-units quantities are pint quantities from another registry; they are accepted by
converting through their magnitude and unit name, never by identity of the registry.
"""

from __future__ import annotations

import datetime
import math
import re
import threading
from typing import TYPE_CHECKING, Any

from hybrid.errors import ConfigurationError

if TYPE_CHECKING:
    import pint

__all__ = ["Quantity", "format_bytes", "hhmm", "is_quantity", "parse_memory",  # noqa: F822
           "parse_walltime", "registry", "unit"]  # (Quantity and unit: made on first use)


_made: list[pint.UnitRegistry] = []
_making = threading.Lock()


def registry() -> pint.UnitRegistry:
    """The package's one pint registry (``hybrid.units.unit``), made when first needed:
    building it costs a quarter of a second, which a command that parses no unit does not
    pay. (Once, whichever threads ask: quantities of two registries do not mix.)"""
    if not _made:
        with _making:
            if not _made:
                import pint

                _made.append(pint.UnitRegistry())
    return _made[0]


def __getattr__(name: str) -> Any:
    """``unit`` (the registry) and ``Quantity`` (its quantity class), made on first use."""
    if name == "unit":
        return registry()
    if name == "Quantity":
        return registry().Quantity
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: No worker gets more memory than this: larger values are typing mistakes.
MAX_BYTES = 2**50

_HHMM = re.compile(r"^(\d{1,3}):([0-5]\d)(?::([0-5]\d))?$")
#: Slurm's days-hours forms: "D-HH", "D-HH:MM", "D-HH:MM:SS".
_DAYS = re.compile(r"^(\d{1,2})-([01]?\d|2[0-3])(?::([0-5]\d)(?::([0-5]\d))?)?$")
_BARE_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)\s*$")


def is_quantity(value: Any) -> bool:
    """True for a quantity of any pint registry (openff-units included)."""
    return all(hasattr(value, name) for name in ("magnitude", "units", "to")) and not isinstance(
        value, (str, bytes)
    )


def _as_own_quantity(value: Any, field: str, accepted: str) -> pint.Quantity:
    quantity = None
    try:
        if is_quantity(value):
            quantity = registry().Quantity(value.magnitude, str(value.units))
        elif isinstance(value, str) and re.search(r"[A-Za-z]", value) and "\0" not in value:
            quantity = registry().Quantity(value.strip())
    except Exception:  # pint raises many kinds (ZeroDivisionError for "1/0 GiB" among them)
        quantity = None
    if quantity is None or not is_quantity(quantity) or not _finite(quantity.magnitude):
        raise ConfigurationError(field, value, accepted)
    return quantity


def _finite(magnitude: Any) -> bool:
    try:
        return math.isfinite(float(magnitude))
    except (TypeError, ValueError, OverflowError):
        return False


def parse_memory(value: Any, field: str) -> pint.Quantity:
    """Return ``value`` as a quantity of bytes in :data:`unit`, or raise naming ``field``.

    Accepts pint quantities of any registry (``8 * unit.gigabytes``) and strings such as
    ``"8 GiB"`` or ``"512MB"``. Bare numbers are refused: a memory without units is ambiguous.
    """
    accepted = 'a quantity with a unit of information, e.g. 8 * unit.gigabytes or "8 GiB"'
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise ConfigurationError(field, value, accepted + " (a bare number has no unit)")
    if isinstance(value, str) and not _NUMBER_FIRST.match(value):
        raise ConfigurationError(field, value, accepted + " (a number, then its unit)")
    try:
        quantity = _as_own_quantity(value, field, accepted)
    except ConfigurationError:
        raise ConfigurationError(field, value, accepted, _memory_hint(value)) from None
    if quantity.dimensionality != registry().byte.dimensionality:
        raise ConfigurationError(field, value, accepted, _memory_hint(value))
    if quantity.magnitude < 0:
        raise ConfigurationError(field, value, accepted + " that is not negative")
    if quantity.to(registry().byte).magnitude > MAX_BYTES:
        raise ConfigurationError(field, value, accepted + " of at most 1 PiB")
    return quantity


_NUMBER_FIRST = re.compile(r"^\s*[+-]?(\d|\.\d)")
_SHORT_MEMORY = re.compile(r"^\s*([+-]?(?:\d+\.?\d*|\.\d+))\s*([kKmMgGtTpP])(i?)[bB]?\s*$")


def _memory_hint(value: Any) -> str | None:
    """What was likely meant by a memory such as ``"4G"`` (gauss to pint) or ``"4g"``."""
    match = _SHORT_MEMORY.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    number, prefix = match[1], match[2].upper()
    prefix = "k" if prefix == "K" and not match[3] else prefix
    return (f'Did you mean "{number} {prefix.upper()}iB" (binary, as batch systems count) or '
            f'"{number} {prefix}B"?')


def to_bytes(quantity: pint.Quantity) -> int:
    """Whole bytes in a memory quantity."""
    return round(quantity.to(registry().byte).magnitude)


def format_bytes(n: int) -> str:
    """``8589934592`` -> ``"8GiB"``, the form batch systems and dask both read."""
    for suffix, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    for suffix, size in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.2f}{suffix}"
    return f"{n}B"


def parse_walltime(value: Any, field: str, *, hh_mm_only: bool = False) -> str:
    """Return a wall time as ``"HH:MM"``.

    Accepts ``"HH:MM"``, ``"HH:MM:SS"``, a time quantity or a ``datetime.timedelta``, or
    (unless ``hh_mm_only``, as openff-evaluator's ``wallclock_time_limit``) Slurm's
    ``"D-HH:MM:SS"`` (``"D-HH"``, ``"D-HH:MM"``) and a duration with its unit as Dask reads
    one (``"6h"``, ``"90 minutes"``). A bare number is refused: Slurm reads ``--time=90`` as
    minutes, Dask reads 90 as seconds (and YAML reads an unquoted ``12:00`` as 720: the
    error says to quote it). Seconds round up to the next minute.
    """
    accepted = ('a wall time "HH:MM" (e.g. "05:59")' if hh_mm_only else
                'a wall time "HH:MM" (e.g. "05:59") or "D-HH:MM:SS", a duration with its unit '
                'such as "6h" or "90 minutes",') + " or a time quantity such as 6 * unit.hour"
    minutes: float | None = None
    if is_quantity(value) or isinstance(value, datetime.timedelta):
        duration = duration_seconds(value)
        minutes = None if duration is None else duration / 60
    elif isinstance(value, str):
        match = _HHMM.match(value.strip())
        days = None if hh_mm_only else _DAYS.match(value.strip())
        if match:
            hours, whole, seconds = int(match[1]), int(match[2]), int(match[3] or 0)
            minutes = hours * 60 + whole + (1 if seconds else 0)
        elif days:
            day, hours, whole, seconds = (int(part or 0) for part in days.groups())
            minutes = (day * 24 + hours) * 60 + whole + (1 if seconds else 0)
        elif not hh_mm_only and re.search(r"[A-Za-z]", value):
            duration = duration_seconds(value.strip())
            minutes = None if duration is None else duration / 60
        elif not hh_mm_only and _BARE_NUMBER.match(value):
            raise ConfigurationError(field, value, accepted + " (a bare number has no unit)")
    if minutes is None and isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ConfigurationError(field, value, accepted + ("" if hh_mm_only else " (a bare "
                                 "number has no unit)"), yaml_hint(value, not hh_mm_only))
    if minutes is None or not math.isfinite(minutes):
        raise ConfigurationError(field, value, accepted)
    if minutes > 999 * 60:
        raise ConfigurationError(field, value, accepted + " of at most 999 hours")
    if minutes <= 0:
        raise ConfigurationError(field, value, accepted + " longer than zero")
    return hhmm(math.ceil(minutes))


def yaml_hint(value: Any, durations: bool = True) -> str | None:
    """The fix for a whole number where a wall time was expected: YAML (1.1, as PyYAML and
    so Dask read a user's file) reads an unquoted ``HH:MM`` as a base-60 number."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return None
    return (f"An unquoted HH:MM in YAML is read as a number ({value // 60}:{value % 60:02d} "
            f'arrives as {value}): quote it, e.g. "{value // 60:02d}:{value % 60:02d}"'
            + (', or give a duration with its unit such as "6h".' if durations else "."))


def duration_seconds(value: Any) -> float | None:
    """Seconds in a duration: a number of seconds, a string such as ``"6h"`` (Dask's
    ``parse_timedelta``) or ``"1.5 hours"`` (pint, for the units Dask does not know), a
    ``datetime.timedelta`` (as ``parse_timedelta`` takes one) or a pint time quantity;
    ``None`` if none of them reads it (:func:`hybrid.fields.seconds`
    checks the range and says what is accepted)."""
    from dask.utils import parse_timedelta

    if isinstance(value, bool):
        return None
    try:
        if is_quantity(value):
            own = registry().Quantity(value.magnitude, str(value.units))
            return float(own.to(registry().second).magnitude)
        if isinstance(value, (int, float, str, datetime.timedelta)):
            return float(parse_timedelta(value))
    except Exception:
        pass
    if isinstance(value, str) and re.search(r"[A-Za-z]", value):
        try:  # units dask does not know, e.g. "30 min", "1.5 hours"
            return float(registry().Quantity(value.strip()).to(registry().second).magnitude)
        except Exception:
            return None
    return None


def hhmm(minutes: int) -> str:
    """A wall time ``"HH:MM"`` of ``minutes``."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def walltime_seconds(walltime: str) -> int:
    """Seconds in a ``"HH:MM"`` wall time."""
    hours, minutes = walltime.split(":")
    return int(hours) * 3600 + int(minutes) * 60
