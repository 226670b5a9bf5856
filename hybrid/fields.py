"""One validator per kind of value, as pydantic types, and the one way their errors reach users.

Every model of hybrid (:class:`~hybrid.pools.PoolSpec`, the clusters' and systems' settings)
declares its fields with these types, so a kind of value (a duration, an address, a name, an
environment variable, a path...) is checked by exactly one function, with exactly one wording
of what is accepted. :func:`validate` runs a model and turns pydantic's first error into a
:class:`~hybrid.errors.ConfigurationError` that names the field (as the user gave it: an
argument, or the ``hybrid.yaml`` key it came from), the value, what is accepted and the fix.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import math
import numbers
import os
import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from hybrid.errors import ConfigurationError, did_you_mean

__all__ = ["AbsolutePath", "Address", "BatchWord", "EnvName", "Environment", "Fraction",
           "ImageReference", "Lines", "ListenPort", "Memory", "Name", "Port", "PortRange",
           "ResourceLimits", "ResourceName", "ResourceNames", "ResourceRequests", "Seconds",
           "Strings", "Tag", "Walltime", "absolute_path", "boolean", "count", "reject",
           "strings", "validate", "validate_value"]

#: Line breaks as YAML, Python and the shells read them: none may enter a one-line value.
LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029")
#: Bounds that keep absurd sizes out of job files (a job never gets more than these).
MAX_SECONDS = 366 * 86400  # a year
_UNSET: Any = object()


def reject(accepted: str, fix: str | None = None, *, field: str | None = None,
           value: Any = _UNSET) -> PydanticCustomError:
    """The error a validator raises: what is accepted and, when it helps, the fix.

    A rule that spans fields (raised by a model validator) names the ``field`` and ``value``
    it blames.
    """
    context: dict[str, Any] = {"accepted": accepted, "fix": fix or ""}
    if field is not None:
        context.update(field=field, value=value)
    return PydanticCustomError("hybrid", "expected {accepted}", context)


def _no_nul(text: str, accepted: str) -> str:
    if "\0" in text:
        raise reject(accepted + " (without NUL bytes)")
    return text


def _one_line(text: str, accepted: str) -> str:
    _no_nul(text, accepted)
    if any(mark in text for mark in LINE_BREAKS):
        raise reject(accepted + " on one line (no line breaks)",
                     "Give each line as its own list item.")
    return text


def _pattern(regex: str, accepted: str) -> Callable[[Any], Any]:
    compiled = re.compile(regex)

    def check(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or not compiled.fullmatch(value):
            raise reject(accepted)
        return value

    return check


# --------------------------------------------------------------------------- names
NAME_RULE = ("1-63 characters from A-Z a-z 0-9 . _ -, starting and ending with a letter or "
             "digit")
#: Cluster and pool names: they land in job names, tags, worker names and Kubernetes labels.
Name = Annotated[str, BeforeValidator(_pattern(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}"
                                               r"[A-Za-z0-9])?", NAME_RULE))]
#: The tag of our jobs (``hybrid.batch.tag``), strict enough for every system that carries it:
#: an HTCondor job attribute name, a Kubernetes label value, a prefix of job names.
Tag = Annotated[str, BeforeValidator(_pattern(
    r"[A-Za-z](?:[A-Za-z0-9_]{0,61}[A-Za-z0-9])?",
    "1-63 characters from A-Z a-z 0-9 _, starting with a letter and ending with a letter or "
    "digit (it names an HTCondor job attribute and is a Kubernetes label value)"))]


def _whole_number(value: Any) -> Any:
    """Any whole number (``numbers.Integral``: ``np.int64`` too) as ``int``; else as it is."""
    whole = isinstance(value, float) and value.is_integer()
    return int(value) if whole or (isinstance(value, numbers.Integral)
                                   and not isinstance(value, bool)) else value


#: Queues, partitions, accounts, projects: one word on a directive line. A whole number (an
#: unquoted ``account: 12345`` in YAML or a ``DASK_...=12345`` variable) is its decimal text.
BatchWord = Annotated[str, BeforeValidator(_pattern(
    r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}",
    "one word from A-Z a-z 0-9 . _ @ + -, starting with a letter or digit")),
    BeforeValidator(lambda v: str(int(v)) if isinstance(v, numbers.Integral) and not (
        isinstance(v, bool)) else v)]
#: A Grid Engine resource (complex) or parallel environment name: ``h_vmem``, ``smp``.
_RESOURCE_RULE = ("a name from A-Z a-z 0-9 _ . -, starting with a letter or _ (a Grid Engine "
                  "resource or parallel environment)")
ResourceName = Annotated[str, BeforeValidator(_pattern(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}",
                                                       _RESOURCE_RULE))]


def _resource_names(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # one name
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise reject(f'a list of names, e.g. ["h_vmem"] or [] for none: {_RESOURCE_RULE}')
    check = _pattern(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", f"a list of names: {_RESOURCE_RULE}")
    return tuple(check(item) for item in value)


#: Grid Engine resource names, ``["h_vmem", "mem_free"]`` (one bare name is a list of one).
ResourceNames = Annotated[tuple[str, ...], BeforeValidator(_resource_names)]
#: Grid Engine resource requests, ``name=value[,name=value...]`` (``qsub -l``): no spaces,
#: quotes or shell characters, which a directive line would read otherwise.
ResourceRequests = Annotated[str, BeforeValidator(_pattern(
    r"[A-Za-z_][A-Za-z0-9_.-]*=[A-Za-z0-9_.:*|!&()@/+-]+"
    r"(,[A-Za-z_][A-Za-z0-9_.-]*=[A-Za-z0-9_.:*|!&()@/+-]+)*",
    'resource requests "name=value[,name=value...]" such as "h_vmem=4G,arch=lx-amd64" (no '
    "spaces, quotes, $ or ;)"))]
#: An environment variable name.
EnvName = Annotated[str, BeforeValidator(_pattern(
    r"[A-Za-z_][A-Za-z0-9_]{0,254}", "an environment variable name matching "
    "[A-Za-z_][A-Za-z0-9_]*"))]


#: Variables a job script sets or reads itself (its own are also ``hybrid_*``), and the
#: shell's word splitting, which its reads depend on.
_SCRIPT_NAMES = ("HYBRID_JOB_ID", "HYBRID_TAG", "HYBRID_WORKER_NAME", "IFS")
#: Linux's limit on one variable, ``NAME=value`` and its NUL (MAX_ARG_STRLEN).
_LONGEST_VARIABLE = 128 * 1024


def _environment(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise reject("a mapping of variable names to strings, e.g. {'OMP_NUM_THREADS': '1'}",
                     "Pass a dict, not a list or a string.")
    out: dict[str, str] = {}
    for name, text in value.items():
        _pattern(r"[A-Za-z_][A-Za-z0-9_]{0,254}", f"variable names matching "
                 f"[A-Za-z_][A-Za-z0-9_]* (not {name!r})")(name)
        if not isinstance(text, str):
            raise reject(f"string values (env[{name!r}] is {type(text).__name__})",
                         f"Give env[{name!r}] as a string, e.g. str(value).")
        if name in _SCRIPT_NAMES or name.startswith("hybrid_"):
            raise reject(f"names the job script does not use itself (not {name!r}: it sets "
                         "HYBRID_JOB_ID, HYBRID_TAG, HYBRID_WORKER_NAME and hybrid_*, and its "
                         "reads split words at IFS)", "Choose another name.")
        if len(name.encode()) + len(text.encode()) + 2 > _LONGEST_VARIABLE:
            raise reject(f"values under 128 KiB (env[{name!r}] is longer: Linux refuses it "
                         "to the worker's process)", "Put the data in a file the workers read.")
        out[name] = _no_nul(text, f"env[{name!r}] as a string")
    return out


#: Environment variables for a job: names checked, values any string without NUL.
Environment = Annotated[dict[str, str], BeforeValidator(_environment)]


# --------------------------------------------------------------------------- Kubernetes names
#: A DNS-1123 subdomain, and the name part of a qualified name (Kubernetes' label keys and
#: resource names, ``[PREFIX/]NAME``).
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
#: A Kubernetes quantity a resource may have: ``"1"``, ``"500m"``, ``"2Gi"``, ``"1e3"`` (ASCII
#: digits, not negative: the API server refuses a negative request).
QUANTITY = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
                      r"([eE][+-]?[0-9]{1,2}|[numkMGTPE]|[KMGTPE]i)?")
#: A pod's resources that come from its pool's numbers, never from further limits.
OWN_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def is_qualified_name(value: Any) -> bool:
    """Whether ``value`` is a Kubernetes qualified name ``[PREFIX/]NAME``."""
    if not isinstance(value, str) or value.count("/") > 1:
        return False
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(QUALIFIED_NAME_PART.fullmatch(name))


def resource_limits(value: Any) -> Any:
    """Further resources of a Kubernetes pod, ``{resource name: quantity}`` (numbers written
    as quantities; ``None``: none)."""
    accepted = ('a mapping of Kubernetes resource names to quantities, e.g. '
                '{"nvidia.com/mig-1g.5gb": 1}')
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise reject(accepted)
    limits = {}
    for name, amount in value.items():
        if name in OWN_RESOURCES:
            raise reject(f"resource names other than {', '.join(OWN_RESOURCES)} (not {name!r}:"
                         " the pool's cores, memory and ephemeral storage set them: "
                         "number_of_threads, memory_limit, ephemeral_storage_limit)")
        text = str(amount) if isinstance(amount, (int, float, str)) and not isinstance(
            amount, bool) else ""
        if not is_qualified_name(name) or not QUANTITY.fullmatch(text):
            raise reject(f"{accepted} (not {name!r}: {amount!r})")
        limits[name] = text
    return limits


#: Further resources of a pod's requests and limits: resource names to quantities.
ResourceLimits = Annotated[dict[str, str], BeforeValidator(resource_limits)]


# --------------------------------------------------------------------------- lists
def strings(one_line: bool, what: str) -> Callable[[Any], Any]:
    """A validator of a list of strings (a bare string is refused, not split)."""
    def check(value: Any) -> tuple[str, ...]:
        if value is None:
            return ()
        if isinstance(value, (str, bytes)):
            raise reject(f"a list of {what}, not one string",
                         f"Wrap it in a list: [{value!r}].")
        if isinstance(value, Mapping) or not hasattr(value, "__iter__"):
            raise reject(f"a list of {what}")
        items = tuple(value)
        for item in items:
            if not isinstance(item, str):
                raise reject(f"a list of {what} (found {type(item).__name__} {item!r})")
            (_one_line if one_line else _no_nul)(item, what)
        return items

    return check


def _lines(value: Any) -> tuple[str, ...]:
    items = strings(True, "one-line strings")(value)
    for item in items:
        if item.rstrip().endswith("\\"):
            raise reject("lines that do not end in a backslash (an HTCondor submit "
                         "description reads one as continuing onto the next line: hybrid's "
                         f"own; not {item!r})", "Remove the trailing backslash.")
    return items


#: Lines of a job file (directives): each one line, not continued onto the next.
Lines = Annotated[tuple[str, ...], BeforeValidator(_lines)]
#: Free strings (arguments, shell commands): anything but NUL.
Strings = Annotated[tuple[str, ...], BeforeValidator(strings(False, "strings"))]


# --------------------------------------------------------------------------- numbers
@functools.cache
def count(minimum: int, maximum: int | None = None, accepted: str | None = None) -> Any:
    """A whole number ``>= minimum`` (and ``<= maximum``): booleans and fractions refused, a
    whole float and any ``numbers.Integral`` (``np.int64``) taken; ``accepted``: the words
    of an error, where a caller's are fixed."""
    accepted = accepted or (f"a whole number from {minimum} to {maximum}" if maximum is not None
                            else f"a whole number >= {minimum}")

    def check(value: Any) -> Any:
        value = _whole_number(value)  # (np.int64 too: numbers.Integral)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
                maximum is not None and value > maximum):
            raise reject(accepted)
        return value

    check.whole_number = True  # type: ignore[attr-defined]  (command lines parse it as int)
    return Annotated[int, BeforeValidator(check)]


#: A TCP port; one to listen on, where 0 picks a free one.
Port = count(1, 65535, "a TCP port number from 1 to 65535")
ListenPort = count(0, 65535, "a port 1-65535, or 0 to pick a free one")


def _fraction(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise reject("a number in (0, 1], e.g. 0.5")
    return float(value)


Fraction = Annotated[float, BeforeValidator(_fraction)]  #: A share (of a GPU), in (0, 1].


def boolean(value: Any, field: str, default: str | None = None) -> bool | None:
    """A switch: ``True`` or ``False`` as the configuration's switches take them (no text or
    number stands for one: ``"false"`` is true in Python), or ``None`` where ``default``
    names the setting it then takes."""
    if isinstance(value, bool) or (value is None and default is not None):
        return value
    accepted = "True or False" + (f", or None ({default})" if default else "")
    raise ConfigurationError(field, value, accepted, (
        f"Give the Python value True or False, not the text {value!r}." if isinstance(
            value, str) else "Give the Python value True or False."))


def seconds(value: Any, *, allow_zero: bool = False) -> float:
    """Seconds from a number, a string such as ``"24h"`` or a pint time quantity."""
    from hybrid.units import duration_seconds

    accepted = ('a duration: seconds, or a string such as "90s", "5 minutes" or "24h"'
                + ("" if not allow_zero else " (0: none)"))
    result = duration_seconds(value)
    if result is None or not math.isfinite(result) or result < 0:
        raise reject(accepted)
    if result == 0 and not allow_zero:
        raise reject(accepted + " longer than zero")
    if result > MAX_SECONDS:
        raise reject(accepted + " of at most a year")
    return result


def _whole_seconds(value: Any) -> Any:
    return None if value is None else math.ceil(seconds(value))


#: A duration > 0, as whole seconds (rounded up).
Seconds = Annotated[int, BeforeValidator(_whole_seconds)]
#: A duration > 0, as seconds.
Interval = Annotated[float, BeforeValidator(lambda v: None if v is None else seconds(v))]


def _memory(value: Any) -> Any:
    from hybrid.units import parse_memory, to_bytes

    if value is None:
        return None
    accepted = 'a memory with a unit, such as "4 GiB", "512MB" or 4 * unit.GiB, up to 1 PiB'
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise reject(accepted + " (a bare number has no unit)",
                     f'Write it with its unit, e.g. "{value} GiB".')
    try:
        quantity = parse_memory(value, "memory")
        n = to_bytes(quantity)
    except (ConfigurationError, ValueError, OverflowError, TypeError) as error:
        said = re.search(r" \([^()]*\)$", getattr(error, "accepted", ""))  # what is missing
        raise reject(accepted + (said[0] if said else ""), getattr(error, "fix", None)) from None
    if n <= 0:
        raise reject(accepted + ", larger than zero")
    return n


#: A memory, as bytes (> 0, at most 1 PiB).
Memory = Annotated[int, BeforeValidator(_memory)]


def _walltime(value: Any) -> Any:
    from hybrid.units import parse_walltime

    if value is None:
        return None
    try:
        return parse_walltime(value, "walltime")
    except ConfigurationError as error:
        raise reject(error.accepted, error.fix) from None


#: A wall time, as ``"HH:MM"``, from ``"HH:MM"``, a duration such as ``"6h"`` or a quantity.
Walltime = Annotated[str, BeforeValidator(_walltime)]


def _port_range(value: Any) -> Any:
    if value is None:
        return None
    accepted = 'a port "N" or a range "FIRST:LAST" with 1024 <= FIRST <= LAST <= 65535'
    text = str(value).strip() if isinstance(value, (str, int)) and not isinstance(
        value, bool) else ""
    match = re.fullmatch(r"(\d{1,5})(?::(\d{1,5}))?", text)
    if not match:
        raise reject(accepted)
    first, last = int(match[1]), int(match[2] or match[1])
    if not 1024 <= first <= last <= 65535:
        raise reject(accepted)
    return f"{first}:{last}" if first != last else str(first)


#: A port or a port range, normalised to ``"FIRST:LAST"`` (or ``"N"``).
PortRange = Annotated[str, BeforeValidator(_port_range)]


def port_range_bounds(text: str) -> tuple[int, int]:
    """``"10000:10070"`` -> ``(10000, 10070)`` for a validated :data:`PortRange`."""
    first, _, last = text.partition(":")
    return int(first), int(last or first)


# --------------------------------------------------------------------------- addresses
def address(value: Any, schemes: tuple[str, ...] = ("tcp", "tls", "ws", "wss", "ucx"),
            default_scheme: str = "tcp") -> str:
    """A Dask address ``scheme://host:port`` (parsed by ``distributed.comm.addressing``)."""
    from distributed.comm.addressing import parse_address, parse_host_port, unparse_host_port

    accepted = (f"an address {'/'.join(schemes)}://HOST:PORT with a port from 1 to 65535, "
                "e.g. tls://203.0.113.5:8786")
    if not isinstance(value, str) or not value.strip():
        raise reject(accepted)
    text = value.strip()
    _one_line(text, accepted)
    if re.search(r"[\s,'\"\\`$;]", text):
        raise reject(accepted + " (no spaces, commas, quotes, backslashes, $ or ;)")
    try:
        scheme, location = parse_address(text if "://" in text else
                                         f"{default_scheme}://{text}")
        host, port = parse_host_port(location)
    except Exception:
        raise reject(accepted) from None
    if scheme not in schemes or not host or not isinstance(port, int) or not (
            1 <= port <= 65535):
        raise reject(accepted)
    return f"{scheme}://{unparse_host_port(host, port)}"


#: A Dask address with a port, normalised to ``scheme://host:port``.
Address = Annotated[str, BeforeValidator(lambda v: None if v is None else address(v))]

_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")


def is_host(value: Any) -> bool:
    """Whether ``value`` is a host name or an IP address (IPv6 without brackets)."""
    with contextlib.suppress(ValueError):
        return isinstance(value, str) and bool(ipaddress.ip_address(value))
    return bool(_HOSTNAME.fullmatch(value))


def listen_address(value: Any, accepted: str, lowest_port: int = 1) -> Any:
    """``HOST:PORT`` or ``:PORT`` (every interface), as distributed's ``parse_host_port``
    reads it (IPv6 in brackets), with a port from ``lowest_port``."""
    from distributed.comm.addressing import parse_host_port

    host, port = "", -1
    if isinstance(value, str) and re.fullmatch(r"[^/]*:\d{1,5}", value):
        with contextlib.suppress(ValueError):
            host, port = parse_host_port(value)
    if (host and not is_host(host)) or not lowest_port <= port <= 65535:
        raise reject(accepted)
    return value


#: ``[registry[:port]/]name[:tag][@algorithm:digest]`` as Docker and containerd read it, strict
#: on purpose: what they refuse would leave a pod waiting in InvalidImageName, not an error.
image_reference = _pattern(
    r"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    'a container image reference such as "ghcr.io/org/image:tag" (lower-case name, no spaces)')
ImageReference = Annotated[str, BeforeValidator(image_reference)]


# --------------------------------------------------------------------------- paths
def text(value: Any, accepted: str) -> Any:
    """A non-empty one-line string (``os.PathLike`` taken as its path; ``None`` passes)."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise reject(accepted)
    return _one_line(value, accepted)


def one_line(accepted: str) -> Any:
    """The validator of :func:`text` with its wording of what is accepted."""
    return BeforeValidator(lambda value: text(value, accepted))


def absolute_path(value: Any) -> Any:
    """An absolute POSIX path as a string (``None`` passes)."""
    accepted = "an absolute path as the batch nodes see it, e.g. /depot/me/env"
    value = text(value, accepted)
    if value is None:
        return None
    if not PurePosixPath(value).is_absolute():
        raise reject(accepted, "Jobs start in their own directory: give the full path.")
    return value


#: An absolute POSIX path (str or ``os.PathLike``), one line.
AbsolutePath = Annotated[str, BeforeValidator(absolute_path)]


# --------------------------------------------------------------------------- errors
#: Pydantic's own error types in the words of this package.
_ACCEPTED = {
    "bool_type": "True or False",
    "bool_parsing": "True or False",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "dict_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
    "literal_error": "one of {expected}",
    "missing": "a value (it is required)",
    "is_instance_of": "{class}",
}

M = TypeVar("M", bound=BaseModel)


def _head(field: str, labels: Mapping[str, str], prefix: str) -> str:
    """A field as the user gave it: its label, else ``prefix + field`` (a configuration
    key's words joined by ``-``, as ``hybrid.yaml`` writes them)."""
    if field in labels:
        return labels[field]
    if prefix.startswith("hybrid."):
        field = field.replace("_", "-")
    return f"{prefix}{field}"


def _field_name(loc: tuple[Any, ...], labels: Mapping[str, str], prefix: str) -> str:
    if loc and isinstance(loc[0], str):
        head, rest = _head(loc[0], labels, prefix), loc[1:]
    else:  # a whole value (no location), or an item of a list given as one value
        head, rest = prefix.rstrip("."), loc
    for part in rest:
        head += f"[{part!r}]" if not isinstance(part, str) or not part.isidentifier() else (
            f".{part}")
    return head


def _blamed_field(field: str, labels: Mapping[str, str], prefix: str) -> str:
    """The field a cross-field rule blames (``"job_extra_directives[0]"``), as the user
    gave it: the label of its first word, then the rest (``"--job-extra-directive[0]"``)."""
    word = re.match(r"[A-Za-z_][A-Za-z0-9_]*", field)
    if word is None:
        return f"{prefix}{field}"
    return _head(word[0], labels, prefix) + field[word.end():]


def configuration_error(error: ValidationError, *, prefix: str = "",
                        labels: Mapping[str, str] | None = None,
                        fields: tuple[str, ...] = ()) -> ConfigurationError:
    """The first problem of a pydantic ``ValidationError`` as a :class:`ConfigurationError`.

    ``labels`` names fields as the user gave them (``{"death_timeout":
    "hybrid.worker.death-timeout"}`` for a value from configuration); other fields are named
    ``prefix + field``. ``fields`` lists the accepted names, for unknown ones.
    """
    first = error.errors(include_url=False)[0]
    loc = tuple(part for part in first["loc"] if not (isinstance(part, str) and "[" in part
                                                        and part.startswith("function-")))
    name = _field_name(loc, labels or {}, prefix)
    context = first.get("ctx") or {}
    kind = first["type"]
    value = first.get("input")
    if kind == "hybrid":
        if "field" in context:
            name = _blamed_field(context["field"], labels or {}, prefix)
            value = context["value"]
        return ConfigurationError(name, value, context["accepted"], context.get("fix") or None)
    if kind == "extra_forbidden":
        if not fields:
            return ConfigurationError(name, value, "no option here: this takes none")
        return ConfigurationError(name, value, f"a known option, one of {', '.join(fields)}",
                                  did_you_mean(str(loc[-1]) if loc else "", fields))
    if kind == "value_error":
        return ConfigurationError(name, value, str(context.get("error", first["msg"])))
    template = _ACCEPTED.get(kind)
    accepted = template.format(**context) if template else first["msg"]
    return ConfigurationError(name, value, accepted)


@functools.lru_cache(maxsize=64)
def _adapter(kind: Any) -> TypeAdapter:
    return TypeAdapter(kind)


def validate_value(kind: Any, value: Any, field: str) -> Any:
    """One value of one of these types; a problem is a :class:`ConfigurationError`."""
    try:
        return _adapter(kind).validate_python(value)
    except ValidationError as error:
        raise configuration_error(error, prefix=field) from None


def validate(model: type[M], data: Mapping[str, Any], *, prefix: str = "",
             labels: Mapping[str, str] | None = None) -> M:
    """``model.model_validate(data)``; a problem is a :class:`ConfigurationError`."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as error:
        raise configuration_error(error, prefix=prefix, labels=labels,
                                  fields=tuple(model.model_fields)) from None
