"""dask-gateway-server configuration for scheduler-only clusters (for facility admins).

A hybrid cluster behind a gateway is a *scheduler only*: the gateway starts its scheduler and
never a worker (``cluster_max_workers = 0``); workers come from batch jobs and join through the
gateway's TCP proxy. :func:`render_gateway_config` writes a complete ``dask_gateway_config.py``
for that; :func:`render_helm_values` writes the equivalent values for the dask-gateway Helm
chart. Both validate every input first (:class:`~hybrid.errors.ConfigurationError`).

What the rendered configuration sets, and why:

- ``scheduler_cmd``: ``dask scheduler`` (distributed 2026 has no ``dask-scheduler``) with
  hybrid's preload (:mod:`hybrid.gateway.preload`) *before* the gateway's own, so that the
  gateway's heartbeat does not retire external workers.
- ``cluster_max_workers = 0``.
- a scheduler image option (``image``) users choose with ``new_cluster(image=...)``; on
  Kubernetes it sets ``KubeClusterConfig.image``; the local backends show it and ignore it.
- lifetimes: the gateway's ``idle_timeout`` (all backends) and, on the database backends
  (local), ``cluster_start_timeout`` and the heartbeat period/timeout; hybrid's preload adds
  ``max_lifetime`` and ``client_timeout`` (dask-gateway-server has neither).

The rendered Python needs only ``dask_gateway_server`` (not hybrid) on the server. Secrets are
never written into it: the password and the database key are read from files when the server
starts, a JupyterHub token from ``JUPYTERHUB_API_TOKEN``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from hybrid.errors import ConfigurationError
from hybrid.gateway import PRELOAD_MODULE
from hybrid.gateway.preload import CLIENT_TIMEOUT_ENV, MAX_LIFETIME_ENV

#: ``backend`` names and the dask-gateway-server classes they select.
BACKENDS: dict[str, str] = {
    "local": "dask_gateway_server.backends.local.LocalBackend",
    "unsafe-local": "dask_gateway_server.backends.local.UnsafeLocalBackend",
    "kubernetes": "dask_gateway_server.backends.kubernetes.KubeBackend",
}
#: The cluster configuration class (traitlets section) of each backend.
CLUSTER_CONFIG_SECTIONS: dict[str, str] = {
    "local": "ClusterConfig",
    "unsafe-local": "ClusterConfig",
    "kubernetes": "KubeClusterConfig",
}
#: ``authenticator`` names and their classes.
AUTHENTICATORS: dict[str, str] = {
    "simple": "dask_gateway_server.auth.SimpleAuthenticator",
    "jupyterhub": "dask_gateway_server.auth.JupyterHubAuthenticator",
}
#: How the scheduler gets hybrid's preload: by module name (hybrid installed in the scheduler's
#: environment), inline (its source as the ``--preload`` argument: any image with dask_gateway
#: works), or not at all (the stock gateway: external workers are retired; for comparison only).
PRELOAD_MODES = ("module", "inline", "none")

#: The scheduler image offered by default: the dask-gateway project's image.
DEFAULT_SCHEDULER_IMAGE = "ghcr.io/dask/dask-gateway:2026.3.0"

_DB_BACKENDS = ("local", "unsafe-local")
_ADDRESS = re.compile(r"^(?P<host>[A-Za-z0-9.\-]*|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")
_IMAGE = (
    r"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
_IMAGE_RE = re.compile(_IMAGE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _choice(value: Any, field_name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ConfigurationError(field_name, value, "one of " + ", ".join(map(repr, choices)))
    return value


def parse_seconds(value: Any, field_name: str, *, allow_zero: bool = True) -> float:
    """A duration in seconds from a number, a time quantity or a string such as ``"10 min"``."""
    from hybrid.units import is_quantity, unit

    accepted = ('a duration: seconds as a number, a time quantity or a string such as "10 min"'
                + (" (0: no limit)" if allow_zero else " longer than 0"))
    seconds: float | None = None
    try:
        if isinstance(value, bool):
            seconds = None
        elif isinstance(value, (int, float)):
            seconds = float(value)
        elif is_quantity(value):
            seconds = float(unit.Quantity(value.magnitude, str(value.units)).to(unit.second)
                            .magnitude)
        elif isinstance(value, str) and re.search(r"[A-Za-z]", value):
            seconds = float(unit.Quantity(value.strip()).to(unit.second).magnitude)
        elif isinstance(value, str):
            seconds = float(value)
    except Exception:
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds < 0 or (
            seconds == 0 and not allow_zero):
        raise ConfigurationError(field_name, value, accepted)
    return seconds


def check_address(value: Any, field_name: str) -> str:
    """A listen address ``HOST:PORT`` (port 0-65535)."""
    accepted = 'an address "HOST:PORT" such as "127.0.0.1:8000" (port 0-65535)'
    if not isinstance(value, str):
        raise ConfigurationError(field_name, value, accepted)
    match = _ADDRESS.match(value)
    if not match or int(match["port"]) > 65535:
        raise ConfigurationError(field_name, value, accepted)
    return value


def check_image(value: Any, field_name: str) -> str:
    """A container image reference (``registry/name:tag`` or ``name@sha256:...``)."""
    if not isinstance(value, str) or not _IMAGE_RE.match(value):
        raise ConfigurationError(field_name, value,
                                 'a container image reference such as "ghcr.io/org/image:tag"')
    return value


def preload_source() -> str:
    """The source of :mod:`hybrid.gateway.preload`, as an inline ``--preload`` argument."""
    from hybrid.gateway import preload

    return Path(preload.__file__).read_text()


@dataclass(frozen=True)
class GatewayServerConfig:
    """Everything a scheduler-only dask-gateway-server needs, validated on creation.

    Durations are seconds (numbers), time quantities or strings such as ``"10 min"``.
    ``None`` leaves the server's own default.
    """

    backend: str = "local"
    authenticator: str = "simple"
    #: simple: a file holding the shared password (read when the server starts).
    password_file: str | None = None
    #: jupyterhub: the Hub's API URL (else the server's ``JUPYTERHUB_API_URL``).
    jupyterhub_api_url: str | None = None
    #: Listen addresses: private API, HTTP proxy (what users connect to), TCP proxy (schedulers).
    address: str | None = None
    proxy_address: str | None = None
    tcp_proxy_address: str | None = None
    scheduler_command: Sequence[str] = ("dask", "scheduler")
    preload: str | None = None  # None: "inline" on Kubernetes, "module" otherwise
    images: Sequence[str] = (DEFAULT_SCHEDULER_IMAGE,)
    allow_custom_image: bool = False
    idle_timeout: Any = 0
    max_lifetime: Any = 0
    client_timeout: Any = 0
    cluster_start_timeout: Any = None
    heartbeat_period: Any = None
    heartbeat_timeout: Any = None
    db_url: str | None = None
    db_key_file: str | None = None
    clusters_directory: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    log_level: str | None = None

    def __post_init__(self) -> None:
        _choice(self.backend, "backend", tuple(BACKENDS))
        _choice(self.authenticator, "authenticator", tuple(AUTHENTICATORS))
        if self.preload is None:
            object.__setattr__(self, "preload",
                               "inline" if self.backend == "kubernetes" else "module")
        _choice(self.preload, "preload", PRELOAD_MODES)
        self._check_auth()
        for name in ("address", "proxy_address", "tcp_proxy_address"):
            if getattr(self, name) is not None:
                check_address(getattr(self, name), name)
        self._check_command()
        self._check_images()
        for name in ("idle_timeout", "max_lifetime", "client_timeout"):
            object.__setattr__(self, name, parse_seconds(getattr(self, name), name))
        self._check_database_backend_settings()
        env = dict(self.environment or {})
        for key, value in env.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                raise ConfigurationError("environment", key,
                                         "variable names matching [A-Za-z_][A-Za-z0-9_]*")
            if not isinstance(value, str):
                raise ConfigurationError(f"environment[{key!r}]", value, "a string")
        object.__setattr__(self, "environment", env)
        if self.log_level is not None:
            _choice(self.log_level, "log_level", ("DEBUG", "INFO", "WARN", "ERROR", "CRITICAL"))

    # -- validation -----------------------------------------------------------------------
    def _check_auth(self) -> None:
        if self.authenticator == "simple":
            if self.password_file is not None and (
                    not isinstance(self.password_file, str) or not self.password_file):
                raise ConfigurationError("password_file", self.password_file, "a file path")
        elif self.password_file is not None:
            raise ConfigurationError("password_file", self.password_file,
                                     "None with the jupyterhub authenticator",
                                     "The Hub checks users; no password is used.")
        if self.jupyterhub_api_url is not None:
            parsed = urlparse(str(self.jupyterhub_api_url))
            if self.authenticator != "jupyterhub" or parsed.scheme not in ("http", "https") \
                    or not parsed.netloc:
                raise ConfigurationError(
                    "jupyterhub_api_url", self.jupyterhub_api_url,
                    'an http(s) URL such as "http://hub:8081/hub/api", with '
                    'authenticator="jupyterhub"')

    def _check_command(self) -> None:
        command = self.scheduler_command
        if isinstance(command, str) or not isinstance(command, Sequence) or not command or any(
                not isinstance(a, str) or not a or "\0" in a for a in command):
            raise ConfigurationError("scheduler_command", command,
                                     'a list of non-empty strings, e.g. ["dask", "scheduler"]')
        if any(a == "--preload" or a.startswith("--preload=") for a in command):
            raise ConfigurationError("scheduler_command", command,
                                     "a command without --preload",
                                     "hybrid adds its preload itself (see preload=).")
        object.__setattr__(self, "scheduler_command", tuple(command))

    def _check_images(self) -> None:
        images = self.images
        if isinstance(images, str) or not isinstance(images, Sequence) or not images:
            raise ConfigurationError("images", images,
                                     "a non-empty list of image references; the first is the "
                                     "default")
        for image in images:
            check_image(image, "images")
        if len(set(images)) != len(images):
            raise ConfigurationError("images", images, "a list without duplicates")
        if not isinstance(self.allow_custom_image, bool):
            raise ConfigurationError("allow_custom_image", self.allow_custom_image, "True or False")
        object.__setattr__(self, "images", tuple(images))

    def _check_database_backend_settings(self) -> None:
        db_only = ("cluster_start_timeout", "heartbeat_period", "heartbeat_timeout", "db_url",
                   "db_key_file", "clusters_directory")
        if self.backend not in _DB_BACKENDS:
            for name in db_only:
                if getattr(self, name) is not None:
                    raise ConfigurationError(
                        name, getattr(self, name), f"None with backend={self.backend!r}",
                        "dask-gateway-server's Kubernetes backend has no such setting.")
            return
        if self.cluster_start_timeout is not None:
            object.__setattr__(self, "cluster_start_timeout", parse_seconds(
                self.cluster_start_timeout, "cluster_start_timeout", allow_zero=False))
        if self.heartbeat_period is not None:
            period = self.heartbeat_period
            if isinstance(period, bool) or not isinstance(period, int) or period < 1:
                raise ConfigurationError("heartbeat_period", period,
                                         "a whole number of seconds >= 1")
        if self.heartbeat_timeout is not None:
            timeout = parse_seconds(self.heartbeat_timeout, "heartbeat_timeout",
                                    allow_zero=False)
            if timeout <= (self.heartbeat_period or 15):
                raise ConfigurationError("heartbeat_timeout", self.heartbeat_timeout,
                                         "a duration longer than heartbeat_period")
            object.__setattr__(self, "heartbeat_timeout", timeout)
        if self.db_url is not None:
            if not isinstance(self.db_url, str) or "://" not in self.db_url:
                raise ConfigurationError("db_url", self.db_url,
                                         'an SQLAlchemy URL such as "sqlite:////var/lib/dg.db"')
            in_memory = self.db_url in ("sqlite://", "sqlite:///:memory:")
            if not in_memory and not self.db_key_file:
                raise ConfigurationError("db_key_file", self.db_key_file,
                                         "a file holding a base64 32-byte key",
                                         "A database on disk must be encrypted; make one with "
                                         "`openssl rand -base64 32`, stored 0600.")
        for name in ("db_key_file", "clusters_directory"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(name, value, "a path")

    # -- rendering ------------------------------------------------------------------------
    @property
    def scheduler_cmd(self) -> list[str]:
        """The scheduler command the gateway runs (it appends its own preload and options)."""
        command = list(self.scheduler_command)
        if self.preload == "module":
            command += ["--preload", PRELOAD_MODULE]
        elif self.preload == "inline":
            command += ["--preload", preload_source()]
        return command

    @property
    def scheduler_environment(self) -> dict[str, str]:
        """Environment of every scheduler: the admin's and hybrid's lifetime limits."""
        env = dict(self.environment)
        if self.max_lifetime:
            env[MAX_LIFETIME_ENV] = f"{self.max_lifetime:g}"
        if self.client_timeout:
            env[CLIENT_TIMEOUT_ENV] = f"{self.client_timeout:g}"
        return env

    def cluster_section(self) -> str:
        """The scheduler-only part: command, limits, lifetimes, image option (Helm extraConfig)."""
        section = CLUSTER_CONFIG_SECTIONS[self.backend]
        lines = [
            "# --- hybrid: scheduler-only clusters (workers come from batch jobs) ---",
            "import re as _hybrid_re",
            "",
            "from dask_gateway_server.options import Options as _HybridOptions",
            "from dask_gateway_server.options import Select as _HybridSelect",
            "from dask_gateway_server.options import String as _HybridString",
            "",
            "# The gateway never starts a worker.",
            f"c.{section}.cluster_max_workers = 0",
            "# `dask scheduler` with hybrid's preload first; the gateway appends",
            "# `--preload dask_gateway.scheduler_preload` and its options itself.",
        ]
        if self.preload == "inline":
            lines.append("# (hybrid.gateway.preload is given inline: the image needs no hybrid.)")
        elif self.preload == "none":
            lines.append("# WITHOUT hybrid's preload: the gateway retires external workers.")
        lines += [
            f"c.{section}.scheduler_cmd = {self.scheduler_cmd!r}",
            "# Shut a cluster down after this many idle seconds (0: never).",
            f"c.{section}.idle_timeout = {self.idle_timeout!r}",
        ]
        env = self.scheduler_environment
        if env:
            lines += [
                f"# {MAX_LIFETIME_ENV} / {CLIENT_TIMEOUT_ENV}: hybrid's lifetime limits (s).",
                f"c.{section}.environment.update({env!r})",
            ]
        lines += ["", *self._image_option_lines()]
        return "\n".join(lines) + "\n"

    def _image_option_lines(self) -> list[str]:
        images = list(self.images)
        if self.backend == "kubernetes":
            handler_body = ['    return {"image": options.image}']
            comment = "# The scheduler image users choose: sets KubeClusterConfig.image."
        else:
            handler_body = [
                "    # The local backends run the scheduler as a process: no image to set.",
                "    return {}",
            ]
            comment = "# The scheduler image option (shown; the local backends ignore it)."
        if self.allow_custom_image:
            field_line = (f'    _HybridString("image", default={images[0]!r}, '
                          'label="Scheduler image"),')
            check = [
                f"    if not _hybrid_re.match({_IMAGE!r}, options.image):",
                '        raise ValueError("image must be a container image reference, got %r"'
                " % (options.image,))",
            ]
        else:
            field_line = (f'    _HybridSelect("image", {images!r}, default={images[0]!r}, '
                          'label="Scheduler image"),')
            check = []
        return [
            comment,
            "def _hybrid_cluster_options(options):",
            *check,
            *handler_body,
            "",
            "",
            "c.Backend.cluster_options = _HybridOptions(",
            field_line,
            "    handler=_hybrid_cluster_options,",
            ")",
        ]

    def render(self) -> str:
        """A complete ``dask_gateway_config.py``."""
        from hybrid import __version__

        lines = [
            f"# dask_gateway_config.py rendered by hybrid {__version__}"
            " (hybrid.gateway.server_config).",
            "# Scheduler-only clusters: the gateway starts one scheduler per cluster and no",
            "# worker; workers from batch jobs join through the TCP proxy over TLS (SNI).",
            "from pathlib import Path as _HybridPath",
            "",
            "",
            "def _hybrid_read_secret(path):",
            '    """A secret kept in a 0600 file, never in this configuration."""',
            "    return _HybridPath(path).read_text().strip()",
            "",
            "",
            f"c.DaskGateway.backend_class = {BACKENDS[self.backend]!r}",
            f"c.DaskGateway.authenticator_class = {AUTHENTICATORS[self.authenticator]!r}",
        ]
        if self.log_level:
            lines.append(f"c.DaskGateway.log_level = {self.log_level!r}")
        if self.authenticator == "simple":
            if self.password_file:
                lines.append("c.SimpleAuthenticator.password = "
                             f"_hybrid_read_secret({self.password_file!r})")
            else:
                lines.append("# No password: any password is accepted (SimpleAuthenticator).")
        else:
            lines.append("# The Hub API token comes from JUPYTERHUB_API_TOKEN.")
            if self.jupyterhub_api_url:
                lines.append("c.JupyterHubAuthenticator.jupyterhub_api_url = "
                             f"{self.jupyterhub_api_url!r}")
        lines.append("")
        if self.address:
            lines.append(f"c.DaskGateway.address = {self.address!r}  # private API")
        if self.proxy_address:
            lines.append(f"c.Proxy.address = {self.proxy_address!r}  # HTTP: API, dashboards")
        if self.tcp_proxy_address:
            lines.append(f"c.Proxy.tcp_address = {self.tcp_proxy_address!r}"
                         "  # TCP: schedulers, by SNI")
        if self.backend in _DB_BACKENDS:
            lines += self._database_backend_lines()
        lines += ["", self.cluster_section()]
        return "\n".join(lines)

    def _database_backend_lines(self) -> list[str]:
        lines = ["", "# Lifetimes handled by the gateway's database backend."]
        if self.cluster_start_timeout is not None:
            lines.append("c.DBBackendBase.cluster_start_timeout = "
                         f"{self.cluster_start_timeout!r}  # s until the scheduler must be up")
        if self.heartbeat_period is not None:
            lines.append(f"c.DBBackendBase.cluster_heartbeat_period = {self.heartbeat_period!r}")
        if self.heartbeat_timeout is not None:
            lines.append("c.DBBackendBase.cluster_heartbeat_timeout = "
                         f"{self.heartbeat_timeout!r}  # s without heartbeat: cluster stopped")
        if self.db_url is not None:
            lines.append(f"c.DBBackendBase.db_url = {self.db_url!r}")
        if self.db_key_file is not None:
            lines.append("c.DBBackendBase.db_encrypt_keys = "
                         f"[_hybrid_read_secret({self.db_key_file!r})]")
        if self.clusters_directory is not None:
            lines.append(f"c.LocalBackend.clusters_directory = {self.clusters_directory!r}")
        return lines


def render_gateway_config(**settings: Any) -> str:
    """A complete ``dask_gateway_config.py`` (see :class:`GatewayServerConfig` for settings)."""
    return GatewayServerConfig(**settings).render()


def _split_image(image: str) -> dict[str, str]:
    if "@" in image:
        return {"name": image, "tag": ""}
    name, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return {"name": name, "tag": tag}
    return {"name": image, "tag": ""}


def render_helm_values(
    *,
    images: Sequence[str] = (DEFAULT_SCHEDULER_IMAGE,),
    allow_custom_image: bool = False,
    authenticator: str = "jupyterhub",
    jupyterhub_api_url: str | None = None,
    scheduler_command: Sequence[str] = ("dask", "scheduler"),
    preload: str = "inline",
    idle_timeout: Any = 0,
    max_lifetime: Any = 0,
    client_timeout: Any = 0,
    environment: Mapping[str, str] | None = None,
    scheduler_extra_pod_config: Mapping[str, Any] | None = None,
) -> str:
    """Values for the dask-gateway Helm chart giving the same scheduler-only clusters.

    The chart itself sets the backend (Kubernetes), the addresses and the authenticator;
    ``gateway.extraConfig.hybrid`` carries the scheduler-only section. With the simple
    authenticator no password is rendered: set ``gateway.auth.simple.password`` from a secret.
    """
    settings = GatewayServerConfig(
        backend="kubernetes", authenticator=authenticator, jupyterhub_api_url=jupyterhub_api_url,
        scheduler_command=scheduler_command, preload=preload, images=images,
        allow_custom_image=allow_custom_image, idle_timeout=idle_timeout,
        max_lifetime=max_lifetime, client_timeout=client_timeout,
        environment=environment or {},
    )
    if scheduler_extra_pod_config is not None and not isinstance(scheduler_extra_pod_config,
                                                                 Mapping):
        raise ConfigurationError("scheduler_extra_pod_config", scheduler_extra_pod_config,
                                 "a mapping merged into the scheduler pod spec")
    auth: dict[str, Any] = {"type": authenticator}
    if jupyterhub_api_url:
        auth["jupyterhub"] = {"apiUrl": jupyterhub_api_url}
    scheduler: dict[str, Any] = {}
    if scheduler_extra_pod_config:
        scheduler["extraPodConfig"] = dict(scheduler_extra_pod_config)
    backend: dict[str, Any] = {"image": _split_image(settings.images[0])}
    if scheduler:
        backend["scheduler"] = scheduler
    values = {
        "gateway": {
            "auth": auth,
            "backend": backend,
            "extraConfig": {"hybrid": settings.cluster_section()},
        }
    }
    return yaml.dump(values, Dumper=_BlockStyleDumper, sort_keys=False,
                     default_flow_style=False, width=10000)


class _BlockStyleDumper(yaml.SafeDumper):
    """Writes multi-line strings (the Python snippet) as YAML literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockStyleDumper.add_representer(str, _represent_str)
