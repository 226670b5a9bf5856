"""Configuration, the Dask way: packaged ``hybrid.yaml`` defaults in ``dask.config``.

Importing hybrid adds the ``hybrid`` section's defaults (``dask.config.update_defaults``, as
every Dask extension does) and changes nothing else: no ``distributed`` setting of the
caller's process. The settings workers need (``hybrid.worker-dask-config``) reach the workers
as ``DASK_...`` variables in their job's environment. The user's own YAML files and
``DASK_HYBRID__...`` environment variables override the defaults, as for every Dask setting.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
import yaml

DEFAULTS_FILE = Path(__file__).with_name("hybrid.yaml")

_missing = object()
_KEY_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def _load_defaults() -> dict[str, Any]:
    with DEFAULTS_FILE.open() as f:
        defaults = yaml.safe_load(f)
    misplaced = list(_values_for_sections(dask.config.config, defaults))
    dask.config.update_defaults(defaults)
    for key, value in misplaced:  # (dask.config's merge replaced each with the section)
        import warnings

        variable = "DASK_" + "__".join(part.upper().replace("-", "_")
                                       for part in key.split("."))
        warnings.warn(
            f"{key} is {value!r} in your Dask configuration, where a section of settings "
            f"belongs (a mapping such as `poll-interval: 5s` under it): it is ignored, and "
            f"the packaged defaults of {key} apply. Indent the settings under it in your "
            f"YAML (~/.config/dask/hybrid.yaml, or a file in DASK_CONFIG), or set one "
            f"setting of it ({variable}__<SETTING>), not {variable}.", UserWarning,
            stacklevel=2)
    return defaults


def _values_for_sections(given: Any, defaults: dict[str, Any], prefix: str = ""
                         ) -> Any:
    """``(key, value)`` for each value of the user's configuration ``given`` (before the
    defaults are merged in) where ``defaults`` has a section; ``None`` is an empty section."""
    if not isinstance(given, dict):
        return
    for name, section in defaults.items():
        if not isinstance(section, dict):
            continue
        key = dask.config.canonical_name(name, given)
        value = given.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            yield f"{prefix}{name}", value
        else:
            yield from _values_for_sections(value, section, f"{prefix}{name}.")


def get(key: str, default: Any = _missing) -> Any:
    """``dask.config.get("hybrid." + key)``, checked when it is a setting of
    :func:`setting_types` (a bad value is a :class:`~hybrid.errors.ConfigurationError`
    naming ``hybrid.<key>``, whoever reads it)."""
    value = dask.config.get(f"hybrid.{key}", default=_missing)
    if value is _missing:
        if default is _missing:
            return dask.config.get(f"hybrid.{key}")  # dask's own KeyError
        return default
    kind = setting_types().get(key)
    if kind is None:
        return value
    try:  # the same value is checked once (the pool manager reads some every poll)
        return _checked[(key, type(value), value)]
    except (KeyError, TypeError):
        pass
    from hybrid.fields import validate_value

    checked = validate_value(kind, value, f"hybrid.{key}")
    result = value if checked == value else checked
    try:
        if len(_checked) < 256:
            _checked[(key, type(value), value)] = result
    except TypeError:  # an unhashable value (a list): checked every time
        pass
    return result


#: Checked values of settings, by (key, type, value as configured): the type too, as
#: ``True == 1 == 1.0`` and one may be valid where the other is not.
_checked: dict[tuple[str, type, Any], Any] = {}


def _duration(value: Any) -> Any:
    """Seconds > 0 (at most a year), as given when ``dask.utils.parse_timedelta`` reads
    it the same (the readers of these settings use it), else as seconds."""
    from dask.utils import parse_timedelta

    from hybrid.fields import seconds

    result = seconds(value)
    try:
        same = parse_timedelta(value) == result
    except Exception:
        same = False
    return value if same else result


def _host(value: Any) -> Any:
    """A host name or IP address to listen on, or ``""`` (every interface)."""
    from hybrid.fields import is_host, reject

    if value is None or value == "" or is_host(value):
        return value
    raise reject('a host name or IP address of this machine, or "" (every interface)')


def _dashboard(value: Any) -> Any:
    """Where a dashboard listens: ``"HOST:PORT"`` or ``":PORT"`` (every interface), or
    ``None`` (no dashboard)."""
    from hybrid.fields import listen_address

    return None if value is None else listen_address(
        value, 'a listen address "HOST:PORT" (e.g. "127.0.0.1:8787"), ":PORT" for every '
        "interface, or null for no dashboard", lowest_port=0)


def _credentials_directory(value: Any) -> Any:
    """Where clusters' credentials are kept: an absolute path (``~`` is the home), or null
    (``~/.cache/hybrid/clusters``). A relative one would be another directory for each
    working directory: the user's other processes would not find their clusters."""
    from hybrid.fields import reject

    if value is None or value == "":
        return value
    if not isinstance(value, (str, os.PathLike)) or not Path(value).expanduser().is_absolute():
        raise reject("an absolute path (each of your processes, whatever its working "
                     "directory, finds its clusters there), or null for ~/.cache/hybrid/clusters",
                     "Give the whole path, e.g. ~/.cache/hybrid/clusters.")
    return value


def _system(value: Any) -> Any:
    from hybrid.fields import reject
    from hybrid.systems import SYSTEMS, system_choices

    if value is None or (isinstance(value, str) and value.lower() in SYSTEMS):
        return value
    raise reject(f"{system_choices()}, or null (the gateway's own workers)")


@functools.lru_cache(maxsize=1)
def setting_types() -> dict[str, Any]:
    """The type of each scalar setting read outside the pool model (whose own settings
    :class:`~hybrid.pools.PoolSpec` checks), by key under ``hybrid.``."""
    from typing import Annotated, Literal

    from pydantic import BeforeValidator, StrictBool

    from hybrid.fields import EnvName, Fraction, Tag, count, strings

    def checked(function: Any) -> Any:
        return Annotated[Any, BeforeValidator(function)]

    return {
        "scheduler.host": checked(_host),
        "scheduler.tls": StrictBool,
        "scheduler.dashboard-address": checked(_dashboard),
        "scheduler.credentials-directory": checked(_credentials_directory),
        "annotator.enabled": StrictBool,
        "annotator.gpu-fraction": Fraction,
        "annotator.feed-priority": count(0, None, "a whole number >= 0 (0 turns feeding the "
                                         "GPU first off)"),
        "logging.verbose": StrictBool,
        "lifecycle.sigterm": StrictBool,
        "lifecycle.sighup": StrictBool,
        "worker.nanny": StrictBool | None,
        "worker.check-paths": StrictBool,
        "worker.lifetime-restart": StrictBool,
        "adaptive.fallback-after": checked(_duration),
        "batch.poll-interval": checked(_duration),
        "batch.poll-interval-max": checked(_duration),
        "batch.stuck-timeout": checked(_duration),
        "batch.lease": checked(_duration),
        "batch.tag": Tag,
        "batch.max-failures": count(1, 1000),
        "batch.held-jobs": Literal["report", "replace"],
        "gateway.pool": checked(_system),
        "gateway.required-env": Annotated[list[EnvName], BeforeValidator(
            lambda v: list(strings(True, "environment variable names")(v)))],
    }


#: Settings whose keys are the user's own (Dask keys, variable names, a system's options).
_OPEN_MAPPINGS = frozenset({"worker-dask-config", "env", "system-options"})


def unknown_settings() -> list[tuple[str, str | None]]:
    """Keys set under ``hybrid.`` that no setting of the packaged ``hybrid.yaml`` has (an
    admin's typo, which Dask itself ignores), each with the closest known key (or ``None``).
    Mappings of the user's own keys (``worker-dask-config``, ``env``, ``system-options``)
    are not looked into, nor a system's section (``hybrid.batch.slurm``), whose keys the
    pool model checks (``hybrid doctor --system`` builds its pool)."""
    import difflib

    found: list[tuple[str, str | None]] = []

    def walk(prefix: str, given: Any, defaults: Any) -> None:
        if (not isinstance(given, dict) or not isinstance(defaults, dict) or not defaults
                or prefix.rsplit(".", 1)[-1] in _OPEN_MAPPINGS):
            return
        names = {str(k).replace("_", "-"): k for k in defaults}
        for key, value in given.items():
            name = str(key).replace("_", "-")
            if name in names:
                if prefix != "hybrid.batch":  # (a system's section: the pool model's keys)
                    walk(f"{prefix}.{name}", value, defaults[names[name]])
            else:
                close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.75)
                found.append((f"{prefix}.{name}", f"{prefix}.{close[0]}" if close else None))

    walk("hybrid", dask.config.get("hybrid", {}), PACKAGED["hybrid"])
    return found


def section(key: str) -> dict[str, Any]:
    """A configuration section as a dict with ``_`` for ``-`` in its keys (``{}`` if unset)."""
    value = get(key, None) or {}
    if not isinstance(value, dict):
        from hybrid.errors import ConfigurationError

        raise ConfigurationError(f"hybrid.{key}", value, "a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in value.items()}


def worker_dask_environment() -> dict[str, str]:
    """The dask settings batch workers need, as ``DASK_...`` environment variables.

    Keys are dotted dask settings (``distributed.worker.daemon``); each part must be a plain
    word, so no key can become anything but a variable name in a job script.
    """
    from hybrid.errors import ConfigurationError
    from hybrid.fields import LINE_BREAKS

    settings = get("worker-dask-config", {}) or {}
    if not isinstance(settings, dict):
        raise ConfigurationError("hybrid.worker-dask-config", settings,
                                 "a mapping of dotted dask settings to values")
    env = {}
    for dotted, value in settings.items():
        parts = str(dotted).split(".")
        if not isinstance(dotted, str) or not all(_KEY_PART.fullmatch(p) and "__" not in p
                                                  for p in parts):
            raise ConfigurationError(
                "hybrid.worker-dask-config", dotted,
                "dotted dask setting names made of letters, digits, - and _, no __ (which "
                "a DASK_ variable reads as a dot; e.g. distributed.worker.daemon)")
        if isinstance(value, (dict, list)) or "\0" in str(value) or any(
                mark in str(value) for mark in LINE_BREAKS):
            raise ConfigurationError(f"hybrid.worker-dask-config[{dotted!r}]", value,
                                     "a plain value on one line (string, number or boolean)")
        name = "DASK_" + "__".join(part.upper().replace("-", "_") for part in parts)
        env[name] = str(value)
    return env


#: The hash seed a nanny gives its worker (distributed's own, dask/distributed#8400).
NANNY_HASH_SEED = "6640"


@dataclass(frozen=True)
class ProcessEnvironment:
    """What a nanny sets in its worker's environment before starting it, which every job
    sets for its worker itself, so that workers without a nanny (hybrid's default) behave as
    Dask's nanny workers do: ``always`` is exported as is; ``unless_set`` only where the job's
    environment (the batch system, the site) has not set the variable, as the nanny does."""

    always: dict[str, str]
    unless_set: dict[str, str]


def process_environment(given: dict[str, str] | None = None) -> ProcessEnvironment:
    """The environment of :class:`ProcessEnvironment`, from Dask's
    ``distributed.nanny.pre-spawn-environ`` (trim freed memory, one BLAS/OpenMP thread per
    task thread) and the nanny's ``PYTHONHASHSEED``: without it each worker hashes strings
    its own way, and what a user's code partitions by ``hash`` differs between workers.
    Names in ``given`` (the pool's ``env``) are left to it."""
    import dask

    from hybrid.errors import ConfigurationError
    from hybrid.fields import LINE_BREAKS, Environment, validate_value

    key = "distributed.nanny.pre-spawn-environ"
    given = given or {}
    configured = dask.config.get(key, {}) or {}
    if isinstance(configured, dict):  # Dask's own values are numbers; None: not set
        configured = {k: str(v) for k, v in configured.items() if v is not None}
    configured = validate_value(Environment, configured, key)  # the pool env's own rules
    for name, value in configured.items():
        if any(mark in value for mark in LINE_BREAKS):
            raise ConfigurationError(f"{key}[{name!r}]", value, "a value on one line")
    unless_set = {k: v for k, v in configured.items()
                  if k != "PYTHONHASHSEED" and k not in given}
    seed = configured.get("PYTHONHASHSEED")
    seed = NANNY_HASH_SEED if seed in (None, "0") else seed
    always = {} if "PYTHONHASHSEED" in given else {"PYTHONHASHSEED": seed}
    return ProcessEnvironment(always, unless_set)


def staging_root() -> Path:
    """Where pools stage their job files (``hybrid.batch.staging-directory``)."""
    configured = get("batch.staging-directory", None)
    root = Path(str(configured)).expanduser() if configured else (
        Path.home() / ".cache" / "hybrid" / "jobs")
    if not root.is_absolute():
        from hybrid.errors import ConfigurationError

        raise ConfigurationError("hybrid.batch.staging-directory", str(root),
                                 "an absolute path (each job starts in a directory of its own)",
                                 "Give the whole path, e.g. ~/.cache/hybrid/jobs.")
    if re.search(r"[\s,'\"\\$`%]", str(root)):
        from hybrid.errors import ConfigurationError

        raise ConfigurationError(
            "hybrid.batch.staging-directory", str(root),
            "a path without spaces, commas, quotes, backslashes, $, backticks or % (batch "
            "directives cannot quote them; Slurm reads %j in a log path as the job id)",
            "Choose a plain directory, e.g. ~/.cache/hybrid/jobs.",
        )
    _check_shared_root(root)
    return root


def _check_shared_root(root: Path) -> None:
    """A staging root that exists is yours (or root's), and one other users may write to has
    the sticky bit, as ``/tmp`` has: else another user could move a pool's directory away
    and put their own in its place, and be handed the cluster's TLS key."""
    import stat

    from hybrid.errors import ConfigurationError

    try:
        info = root.stat()
    except OSError:
        return  # (made 0700 when the first pool stages its files)
    field, mode = "hybrid.batch.staging-directory", stat.S_IMODE(info.st_mode)
    if info.st_uid not in (os.geteuid(), 0):
        raise ConfigurationError(field, str(root), f"a directory owned by you (uid "
                                 f"{os.geteuid()}) or root, not by uid {info.st_uid}",
                                 "Set it to a directory of your own, e.g. ~/.cache/hybrid/jobs.")
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise ConfigurationError(
            field, str(root), f"a directory other users cannot write to, or one with the "
            f"sticky bit as /tmp has (it has mode {mode:04o})",
            f"chmod go-w {root}; or, if it is shared on purpose, chmod +t {root}.")


def config_directory() -> Path:
    """Where the user's dask YAML files live (``DASK_CONFIG`` or ``~/.config/dask``)."""
    return Path(os.environ.get("DASK_CONFIG", Path.home() / ".config" / "dask"))


#: The packaged hybrid.yaml, as read once (dask.config holds it as defaults).
PACKAGED = _load_defaults()
