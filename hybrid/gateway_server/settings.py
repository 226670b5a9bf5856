"""The gateway server's settings: a small YAML file, validated by :class:`GatewaySettings`.

The packaged dask-gateway configuration (``dask-gateway-config.py`` in this package) reads
these settings when the server starts: from the file named by :data:`SETTINGS_ENV`, else from
the YAML text in :data:`SETTINGS_TEXT_ENV` (the Helm chart's gateway pod), else from
:data:`SETTINGS_FILE` beside the configuration file. Every value is checked before the server
starts; a bad one is a :class:`~hybrid.errors.ConfigurationError` that names the YAML key,
what is accepted, and where to fix it.

No secret is ever a setting: the password and the database key are read from 0600 files
(``password_file``, ``db_key_file``), a JupyterHub token from ``JUPYTERHUB_API_TOKEN``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from hybrid.errors import ConfigurationError, warn_user
from hybrid.fields import (
    AbsolutePath,
    Environment,
    ImageReference,
    Memory,
    Seconds,
    Strings,
    count,
    listen_address,
    reject,
    seconds,
    strings,
    validate,
)
from hybrid.units import format_bytes

__all__ = [
    "DEFAULT_SCHEDULER_IMAGE",
    "SETTINGS_ENV",
    "SETTINGS_FILE",
    "SETTINGS_TEXT_ENV",
    "GatewaySettings",
    "load_settings",
    "parse_settings",
    "settings_yaml",
]

#: A path to the settings YAML.
SETTINGS_ENV = "HYBRID_GATEWAY_SETTINGS"
#: The settings YAML itself (for containers: the Helm values put it in the gateway's env).
SETTINGS_TEXT_ENV = "HYBRID_GATEWAY_SETTINGS_YAML"
#: The settings file looked for beside the configuration file.
SETTINGS_FILE = "hybrid-gateway.yaml"
#: The scheduler image offered by default: the dask-gateway project's image.
DEFAULT_SCHEDULER_IMAGE = "ghcr.io/dask/dask-gateway:2026.3.0"
#: What dask-gateway's ClusterConfig gives a scheduler by default (taken off the limits).
SCHEDULER_CORES = 1
SCHEDULER_MEMORY = 2 * 2**30
#: dask-gateway's default size of its own workers' memory.
DEFAULT_WORKER_MEMORY = 2 * 2**30

DATABASE_BACKENDS = ("local", "unsafe-local")


def _listen_address(value: Any) -> Any:
    return None if value is None else listen_address(
        value, 'a listen address "HOST:PORT" such as "127.0.0.1:8000" or ":8000" (port 1-65535)')


def _duration_or_zero(value: Any) -> Any:
    return seconds(value, allow_zero=True)


def _http_url(value: Any) -> Any:
    if value is None:
        return None
    parsed = urlparse(value) if isinstance(value, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc or any(
            c.isspace() for c in value):
        raise reject('an http(s) URL such as "http://hub:8081/hub/api"')
    return value


def _database_url(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str) or "://" not in value or any(c.isspace() for c in value):
        raise reject('an SQLAlchemy URL such as "sqlite:////var/lib/dask-gateway/db.sqlite"')
    return value


def _positive_cores(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            SCHEDULER_CORES <= value < 1e9):
        raise reject(f"a number of cores >= {SCHEDULER_CORES} (the scheduler's share "
                     "counts too)")
    return float(value)


ListenAddress = Annotated[str, BeforeValidator(_listen_address)]
#: A duration in seconds; 0 means "no limit".
Lifetime = Annotated[float, BeforeValidator(_duration_or_zero)]
HttpUrl = Annotated[str, BeforeValidator(_http_url)]
DatabaseUrl = Annotated[str, BeforeValidator(_database_url)]
Cores = Annotated[float, BeforeValidator(_positive_cores)]
Images = Annotated[tuple[ImageReference, ...], BeforeValidator(strings(True, "image references"))]


#: dask-gateway's heartbeat period (seconds) where none is set.
DEFAULT_HEARTBEAT_PERIOD = 15
#: Heartbeats a scheduler may miss before dask-gateway stops its cluster, where no
#: ``heartbeat_timeout`` is set (its default timeout: twice the period).
GATEWAY_MISSED_HEARTBEATS = 2


class GatewaySettings(BaseModel):
    """What a facility admin sets for hybrid's dask-gateway server (the settings YAML keys).

    Durations are seconds or strings such as ``"30 min"``; memories are strings with a unit
    such as ``"64 GiB"``.
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    # -- the server --------------------------------------------------------------------------
    backend: Literal["local", "unsafe-local", "kubernetes"] = Field(
        "local", description="``local`` (LocalBackend: schedulers run as the Unix user who "
        "logged in; the server runs as root), ``unsafe-local`` (as the server's own user) or "
        "``kubernetes`` (KubeBackend, the Helm chart).")
    authenticator: Literal["simple", "jupyterhub"] | None = Field(
        None, description="How users log in; unset: dask-gateway's default (simple) or, in "
        "Helm, the chart's ``gateway.auth``.")
    password_file: AbsolutePath | None = Field(
        None, description="simple: a file (mode 0600) holding the shared password.")
    jupyterhub_api_url: HttpUrl | None = Field(
        None, description="jupyterhub: the Hub's API URL (the token comes from the server's "
        "``JUPYTERHUB_API_TOKEN``).")
    address: ListenAddress | None = Field(
        None, description="The private API's listen address, ``HOST:PORT``.")
    proxy_address: ListenAddress | None = Field(
        None, description="The HTTP proxy's listen address (what users connect to).")
    tcp_proxy_address: ListenAddress | None = Field(
        None, description="The TCP proxy's listen address (schedulers, routed by SNI).")
    log_level: Literal["DEBUG", "INFO", "WARN", "ERROR", "CRITICAL"] | None = Field(
        None, description="The server's log level.")

    # -- the clusters ------------------------------------------------------------------------
    scheduler_command: Strings = Field(
        ("dask", "scheduler"), description="The scheduler command, without ``--preload`` "
        "(the gateway appends its own options).")
    worker_command: Strings = Field(
        ("dask", "worker"), description="The command of the gateway's own workers "
        "(``gateway_workers``).")
    preload: Literal["module", "inline", "none"] | None = Field(
        None, description="How schedulers load hybrid's scheduler plugin: ``module`` (hybrid "
        "installed where schedulers run), ``inline`` (its source as the argument: any image "
        "with dask_gateway) or ``none`` (the stock gateway, which retires batch workers: for "
        "comparison only). Unset: inline on kubernetes, module otherwise.")
    images: Images = Field(
        (DEFAULT_SCHEDULER_IMAGE,), description="Scheduler images users may choose with "
        "``new_cluster(image=...)``; the first is the default (Kubernetes runs it; the local "
        "backends show the option and ignore it).")
    allow_custom_image: bool = Field(
        False, description="Let users give any well-formed image reference.")
    gateway_workers: bool = Field(
        False, description="Whether the gateway starts workers itself (``scale``/``adapt`` of "
        "a cluster without a batch pool, as on a stock gateway). false: workers come only "
        "from batch jobs, and scale requests to the gateway are refused with a message.")
    worker_options: bool = Field(
        False, description="Offer ``worker_cores`` and ``worker_memory`` (GiB) as cluster "
        "options, as many facility gateways do; they size the gateway's own workers and the "
        "client's batch workers.")
    worker_cores: count(1, 4096) = Field(  # type: ignore[valid-type]
        1, description="Cores of a gateway worker (the default of the option).")
    worker_memory: Memory = Field(
        DEFAULT_WORKER_MEMORY,
        description="Memory of a gateway worker (the default of the option).")
    cluster_max_workers: count(0, 10**6) | None = Field(  # type: ignore[valid-type]
        None, description="At most this many workers in a cluster: the gateway's own and batch "
        "workers together. Unset: no limit (dask-gateway may derive one from the next two).")
    cluster_max_cores: Cores | None = Field(
        None, description="At most this many cores in a cluster, its scheduler's included "
        "(a batch worker counts its threads).")
    cluster_max_memory: Memory | None = Field(
        None, description="At most this much memory in a cluster, its scheduler's included "
        "(a batch worker counts its memory limit).")
    idle_timeout: Lifetime = Field(
        0.0, description="Shut a cluster down after it was idle this long (0: never).")
    max_lifetime: Lifetime = Field(
        0.0, description="Shut every cluster down after this long (0: never).")
    client_timeout: Lifetime = Field(
        0.0, description="Shut a cluster down when no client was connected for this long, "
        "counted from its start (0: never).")
    environment: Environment = Field(
        default_factory=dict, description="More environment variables for every scheduler "
        "and gateway worker.")

    # -- the database backends (local, unsafe-local) -----------------------------------------
    cluster_start_timeout: Seconds | None = Field(
        None, description="Local backends: a scheduler must be up within this long.")
    heartbeat_period: count(1, 3600) | None = Field(  # type: ignore[valid-type]
        None, description="Local backends: whole seconds between scheduler heartbeats.")
    heartbeat_timeout: Seconds | None = Field(
        None, description="Local backends: a cluster without heartbeat this long is stopped.")
    db_url: DatabaseUrl | None = Field(
        None, description="Local backends: the SQLAlchemy URL of the gateway's database "
        "(unset: in memory).")
    db_key_file: AbsolutePath | None = Field(
        None, description="Local backends: a 0600 file with the database key (``openssl rand "
        "-base64 32``); required for a database on disk.")
    clusters_directory: AbsolutePath | None = Field(
        None, description="Local backends: where the clusters' working directories go.")

    @model_validator(mode="after")
    def _consistent(self) -> GatewaySettings:
        if self.password_file is not None and self.authenticator == "jupyterhub":
            raise reject("no password_file with the jupyterhub authenticator",
                         "The Hub checks users; remove password_file.",
                         field="password_file", value=self.password_file)
        if self.jupyterhub_api_url is not None and self.authenticator != "jupyterhub":
            raise reject('jupyterhub_api_url only with authenticator: "jupyterhub"',
                         'Add authenticator: "jupyterhub" or remove jupyterhub_api_url.',
                         field="jupyterhub_api_url", value=self.jupyterhub_api_url)
        if not self.scheduler_command or any(a == "--preload" or a.startswith("--preload=")
                                             for a in self.scheduler_command):
            raise reject('a non-empty command without --preload, e.g. ["dask", "scheduler"]',
                         "hybrid adds its preload itself (see preload).",
                         field="scheduler_command", value=list(self.scheduler_command))
        if not self.worker_command:
            raise reject('a non-empty command, e.g. ["dask", "worker"]',
                         field="worker_command", value=list(self.worker_command))
        if not self.images or len(set(self.images)) != len(self.images):
            raise reject("a non-empty list of image references without duplicates; the first "
                         "is the default", field="images", value=list(self.images))
        if self.cluster_max_memory is not None and self.cluster_max_memory < SCHEDULER_MEMORY:
            raise reject(f"at least {format_bytes(SCHEDULER_MEMORY)} (the scheduler's share "
                         "counts too)", field="cluster_max_memory",
                         value=self.cluster_max_memory)
        self._check_database_settings()
        return self

    def _check_database_settings(self) -> None:
        database_only = ("cluster_start_timeout", "heartbeat_period", "heartbeat_timeout",
                         "db_url", "db_key_file", "clusters_directory")
        if self.backend not in DATABASE_BACKENDS:
            for name in database_only:
                if getattr(self, name) is not None:
                    raise reject(f"no {name} with backend {self.backend!r}",
                                 "dask-gateway-server's Kubernetes backend has no such setting; "
                                 "remove it.", field=name, value=getattr(self, name))
            return
        period = self.heartbeat_period or DEFAULT_HEARTBEAT_PERIOD
        if self.heartbeat_timeout is not None and self.heartbeat_timeout <= period:
            which = "" if self.heartbeat_period else ", its default"
            raise reject(f"a duration longer than heartbeat_period ({period:g} s{which})",
                         field="heartbeat_timeout", value=self.heartbeat_timeout)
        in_memory = self.db_url in (None, "sqlite://", "sqlite:///:memory:")
        if not in_memory and self.db_key_file is None:
            raise reject("a file holding a base64 32-byte key, for a database on disk",
                         "Make one with `openssl rand -base64 32 > FILE; chmod 600 FILE`.",
                         field="db_key_file", value=None)

    # -- derived -----------------------------------------------------------------------------
    @property
    def preload_mode(self) -> str:
        """``preload``, or its default for the backend."""
        if self.preload is not None:
            return self.preload
        return "inline" if self.backend == "kubernetes" else "module"

    @property
    def uses_database(self) -> bool:
        """True for the local backends (dask-gateway's database backends)."""
        return self.backend in DATABASE_BACKENDS

    def as_yaml_data(self) -> dict[str, Any]:
        """The settings as YAML data (only what differs from the defaults), re-readable."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        for name in ("worker_memory", "cluster_max_memory"):
            if name in data and data[name] is not None:
                data[name] = _memory_text(data[name])
        return {"backend": self.backend, **data}


def _memory_text(n: int) -> str:
    text = format_bytes(n)
    return text if "." not in text else f"{n}B"


def parse_settings(data: Any, *, source: str | None = None,
                   labels: Mapping[str, str] | None = None) -> GatewaySettings:
    """Validate settings data; a problem names the key (or its ``labels`` entry: a command
    line option), what is accepted and where to fix it."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigurationError(source or "settings", type(data).__name__,
                                 "a YAML mapping of setting names to values",
                                 "Write one `key: value` per line.")
    try:
        settings = validate(GatewaySettings, data, labels=labels)
    except ConfigurationError as error:
        if source is None:
            raise
        fix = f"{error.fix + ' ' if error.fix else ''}Fix `{error.field}` in {source}."
        raise ConfigurationError(error.field, error.value, error.accepted, fix) from None
    _warn_if_heartbeats_time_out_soon(settings, source, labels or {})
    return settings


def _warn_if_heartbeats_time_out_soon(settings: GatewaySettings, source: str | None,
                                      labels: Mapping[str, str]) -> None:
    """A short ``heartbeat_period`` without ``heartbeat_timeout`` gets dask-gateway's own
    timeout, two periods: a scheduler a busy machine holds up that long loses its cluster."""
    period = settings.heartbeat_period
    if period is None or settings.heartbeat_timeout is not None or (
            period >= DEFAULT_HEARTBEAT_PERIOD):
        return
    period_name = labels.get("heartbeat_period", "heartbeat_period")
    timeout_name = labels.get("heartbeat_timeout", "heartbeat_timeout")
    where = f" in {source}" if source else ""
    warn_user(f"{period_name}: {period} s and no {timeout_name}{where}: dask-gateway then "
              f"stops a cluster whose scheduler sent no heartbeat for "
              f"{GATEWAY_MISSED_HEARTBEATS * period} s ({GATEWAY_MISSED_HEARTBEATS} periods), "
              "so a scheduler that a busy machine holds up that long loses its cluster and "
              f"its workers. Set {timeout_name} (e.g. \"1 minute\") to give it longer.")


def _read_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigurationError(source, "<unreadable YAML>", "a YAML mapping",
                                 f"Fix the syntax: {error}") from None


def load_settings(path: str | os.PathLike | None = None, *, beside: str | os.PathLike | None = None,
                  environ: Mapping[str, str] | None = None) -> GatewaySettings:
    """The settings: ``path``, else :data:`SETTINGS_ENV`'s file, else :data:`SETTINGS_TEXT_ENV`,
    else :data:`SETTINGS_FILE` in the directory of ``beside`` (the configuration file)."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(SETTINGS_ENV):
        path = environ[SETTINGS_ENV]
    if path is None and environ.get(SETTINGS_TEXT_ENV):
        return parse_settings(_read_yaml(environ[SETTINGS_TEXT_ENV], SETTINGS_TEXT_ENV),
                              source=f"the {SETTINGS_TEXT_ENV} environment variable")
    if path is None and beside is not None:
        path = Path(beside).absolute().parent / SETTINGS_FILE
    if path is None:
        raise ConfigurationError(SETTINGS_ENV, None, "the path of hybrid's gateway settings "
                                 "YAML", f"Set {SETTINGS_ENV}=/etc/dask-gateway/{SETTINGS_FILE} "
                                 "(`hybrid admin gateway-config` writes one).")
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigurationError(SETTINGS_ENV, str(path), "a readable settings YAML file",
                                 f"{error.strerror}: write it with `hybrid admin gateway-config "
                                 f"> {path}` or point {SETTINGS_ENV} at it.") from None
    return parse_settings(_read_yaml(text, str(path)), source=str(path))


def settings_yaml(settings: GatewaySettings, header: str = "") -> str:
    """The settings as a YAML document (``header`` lines become comments)."""
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + yaml.safe_dump(settings.as_yaml_data(), sort_keys=False,
                                    default_flow_style=False, width=100)
