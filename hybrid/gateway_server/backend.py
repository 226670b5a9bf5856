"""Runs in the dask-gateway server: hybrid's backends and how the settings configure them.

dask-gateway-server's documented extension points carry everything the server side needs:

- ``c.DaskGateway.backend_class``: :class:`HybridBackend` subclasses of the stock backends
  (:class:`HybridLocalBackend`, :class:`HybridUnsafeLocalBackend`, ``HybridKubeBackend``).
  They put the cluster's limits and hybrid's lifetimes into its scheduler's environment
  (:meth:`HybridBackend.process_cluster_options`) and, unless ``gateway_workers`` is on,
  refuse scale/adapt requests for the gateway's own workers with a message.
- ``ClusterConfig`` traits: the scheduler command with hybrid's preload
  (:mod:`hybrid.gateway_server.scheduler`), limits, idle timeout, worker size.
- ``Backend.cluster_options``: the scheduler image and, with ``worker_options``, the worker
  size (:func:`cluster_options`).

:func:`configure` applies :class:`~hybrid.gateway_server.settings.GatewaySettings` to a
traitlets config ``c``; the packaged ``dask-gateway-config.py`` and the Helm snippet call
:func:`configure_from_environment`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from dask_gateway_server.backends.base import Backend, PublicException
from dask_gateway_server.backends.local import LocalBackend, UnsafeLocalBackend
from dask_gateway_server.options import Float, Integer, Options, Select, String
from traitlets import Bool
from traitlets import Float as FloatTrait

from hybrid.errors import ConfigurationError
from hybrid.fields import image_reference
from hybrid.gateway_server import PRELOAD_MODULE, preload_source
from hybrid.gateway_server.scheduler import CLIENT_TIMEOUT_ENV, LIMITS_ENV, MAX_LIFETIME_ENV
from hybrid.gateway_server.settings import GatewaySettings, load_settings

__all__ = [
    "BACKEND_CLASSES",
    "HybridBackend",
    "HybridLocalBackend",
    "HybridUnsafeLocalBackend",
    "cluster_options",
    "configure",
    "configure_from_environment",
    "scheduler_environment",
    "worker_limits",
]

_MODULE = __name__
#: ``backend`` setting -> the class ``c.DaskGateway.backend_class`` names.
BACKEND_CLASSES = {
    "local": f"{_MODULE}.HybridLocalBackend",
    "unsafe-local": f"{_MODULE}.HybridUnsafeLocalBackend",
    "kubernetes": f"{_MODULE}.HybridKubeBackend",
}
AUTHENTICATORS = {
    "simple": "dask_gateway_server.auth.SimpleAuthenticator",
    "jupyterhub": "dask_gateway_server.auth.JupyterHubAuthenticator",
}
#: What a scale request to a gateway that starts no worker itself answers.
NO_GATEWAY_WORKERS = (
    "This gateway starts no workers itself: workers come from batch jobs. Give the cluster a "
    "batch pool (new_cluster(pool=...), or hybrid.gateway.pool in your configuration) and "
    "scale that.")


def worker_limits(config: Any) -> dict[str, Any]:
    """What the workers of a cluster may add up to, from its ``ClusterConfig``.

    ``max_workers`` is dask-gateway's own resolved ``cluster_max_workers`` (it may derive one
    from the resource limits); cores and memory are the cluster's limits less its scheduler's
    share, as dask-gateway counts them for its own workers.
    """
    max_cores = config.cluster_max_cores
    max_memory = config.cluster_max_memory
    return {
        "max_workers": config.cluster_max_workers,
        "max_cores": None if max_cores is None else max(0.0, max_cores - config.scheduler_cores),
        "max_memory": None if max_memory is None else max(0, max_memory
                                                          - config.scheduler_memory),
    }


def scheduler_environment(config: Any, max_lifetime: float = 0,
                          client_timeout: float = 0) -> dict[str, str]:
    """The variables hybrid's scheduler plugin reads: limits and lifetimes."""
    env = {LIMITS_ENV: json.dumps(worker_limits(config), sort_keys=True)}
    if max_lifetime:
        env[MAX_LIFETIME_ENV] = f"{max_lifetime:g}"
    if client_timeout:
        env[CLIENT_TIMEOUT_ENV] = f"{client_timeout:g}"
    return env


def _asks_for_workers(msg: dict[str, Any]) -> bool:
    if msg.get("op") == "scale":
        return bool(msg.get("count"))
    if msg.get("op") == "adapt":
        return bool(msg.get("active", True))
    return False


class HybridBackend(Backend):
    """What hybrid adds to a stock backend (a mixin: see the concrete classes).

    Configured as ``c.HybridBackend.<trait>`` (the settings do it).
    """

    gateway_workers = Bool(
        False, config=True,
        help="Whether the gateway starts workers itself; false: scale/adapt requests that ask "
             "the gateway for workers are refused with a message naming batch pools.")
    max_lifetime = FloatTrait(
        0, min=0, config=True, help="Seconds after which a cluster is shut down (0: never).")
    client_timeout = FloatTrait(
        0, min=0, config=True,
        help="Seconds without a connected client after which a cluster is shut down (0: never).")

    async def process_cluster_options(self, user: Any, request: Any) -> tuple[Any, Any]:
        """The stock options and config, with the cluster's limits in its environment."""
        options, config = await super().process_cluster_options(user, request)
        config.environment = {**config.environment, **scheduler_environment(
            config, self.max_lifetime, self.client_timeout)}
        return options, config

    async def forward_message_to_scheduler(self, cluster: Any, msg: dict[str, Any]) -> None:
        """Refuse to scale the gateway's own workers where it starts none."""
        if not self.gateway_workers and _asks_for_workers(msg):
            raise PublicException(NO_GATEWAY_WORKERS)
        await super().forward_message_to_scheduler(cluster, msg)


class HybridLocalBackend(HybridBackend, LocalBackend):
    """``LocalBackend`` (schedulers run as the Unix user who logged in) with hybrid's parts."""


class HybridUnsafeLocalBackend(HybridBackend, UnsafeLocalBackend):
    """``UnsafeLocalBackend`` (schedulers run as the server's user) with hybrid's parts."""


def __getattr__(name: str) -> Any:
    # KubeBackend needs kubernetes_asyncio, which only the Helm chart's gateway image has.
    if name == "HybridKubeBackend":
        from dask_gateway_server.backends.kubernetes import KubeBackend

        cls = type(name, (HybridBackend, KubeBackend), {
            "__module__": _MODULE,
            "__doc__": "``KubeBackend`` (the Helm chart) with hybrid's parts.",
        })
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {_MODULE!r} has no attribute {name!r}")


# ------------------------------------------------------------------------- cluster options
def cluster_options(settings: GatewaySettings) -> Options:
    """The options users give ``new_cluster``: the scheduler image, optionally worker size."""
    images = list(settings.images)
    if settings.allow_custom_image:
        fields: list[Any] = [String("image", default=images[0], label="Scheduler image")]
    else:
        fields = [Select("image", images, default=images[0], label="Scheduler image")]
    if settings.worker_options:
        fields += [
            Integer("worker_cores", default=settings.worker_cores, min=1,
                    label="Cores per worker"),
            Float("worker_memory", default=settings.worker_memory / 2**30, min=0.125,
                  label="Memory per worker (GiB)"),
        ]
    kubernetes = settings.backend == "kubernetes"
    worker_options = settings.worker_options

    def handler(options: Any) -> dict[str, Any]:
        overrides: dict[str, Any] = {}
        if settings.allow_custom_image:
            try:
                image_reference(options.image)
            except Exception:
                raise ValueError(f"image must be a container image reference such as "
                                 f"ghcr.io/org/image:tag, got {options.image!r}") from None
        if kubernetes:  # the local backends run the scheduler as a process: no image
            overrides["image"] = options.image
        if worker_options:
            overrides["worker_cores"] = int(options.worker_cores)
            overrides["worker_memory"] = int(options.worker_memory * 2**30)
        return overrides

    return Options(*fields, handler=handler)


# ------------------------------------------------------------------------- configuration
def read_secret(path: str, field: str) -> str:
    """A secret from a file only its owner may read; never from the settings themselves."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text().strip()
    except OSError as error:
        raise ConfigurationError(field, path, "a readable file holding the secret",
                                 f"{error.strerror}.") from None
    if stat.S_IMODE(mode) & 0o077:
        raise ConfigurationError(field, path, "a file only its owner can read (mode 0600)",
                                 f"Run `chmod 600 {path}`.")
    if not text:
        raise ConfigurationError(field, path, "a file holding the secret (it is empty)")
    return text


def _scheduler_command(settings: GatewaySettings) -> list[str]:
    command = list(settings.scheduler_command)
    if settings.preload_mode == "module":
        command += ["--preload", PRELOAD_MODULE]
    elif settings.preload_mode == "inline":
        command += ["--preload", preload_source()]
    return command


def _configure_server(c: Any, settings: GatewaySettings, environ: dict[str, str]) -> None:
    """What the Helm chart sets itself: authentication, addresses, log level, database."""
    if settings.authenticator:
        c.DaskGateway.authenticator_class = AUTHENTICATORS[settings.authenticator]
    if settings.password_file:
        c.SimpleAuthenticator.password = read_secret(settings.password_file, "password_file")
    if settings.authenticator == "jupyterhub":
        if not environ.get("JUPYTERHUB_API_TOKEN"):
            raise ConfigurationError("JUPYTERHUB_API_TOKEN", None, "the Hub's API token in the "
                                     "server's environment", "Export it before starting the "
                                     "server (never put it in the settings).")
        if settings.jupyterhub_api_url:
            c.JupyterHubAuthenticator.jupyterhub_api_url = settings.jupyterhub_api_url
    for value, section, name in ((settings.address, c.DaskGateway, "address"),
                                 (settings.proxy_address, c.Proxy, "address"),
                                 (settings.tcp_proxy_address, c.Proxy, "tcp_address"),
                                 (settings.log_level, c.DaskGateway, "log_level")):
        if value is not None:
            section[name] = value
    if not settings.uses_database:
        return
    database = c.DBBackendBase
    for name, trait in (("cluster_start_timeout", "cluster_start_timeout"),
                        ("heartbeat_period", "cluster_heartbeat_period"),
                        ("heartbeat_timeout", "cluster_heartbeat_timeout"),
                        ("db_url", "db_url")):
        if getattr(settings, name) is not None:
            database[trait] = getattr(settings, name)
    if settings.db_key_file:
        database.db_encrypt_keys = [read_secret(settings.db_key_file, "db_key_file")]
    if settings.clusters_directory:
        c.LocalBackend.clusters_directory = settings.clusters_directory


def configure(c: Any, settings: GatewaySettings, *, helm: bool = False,
              environ: dict[str, str] | None = None) -> None:
    """Apply ``settings`` to the traitlets config ``c`` of dask-gateway-server.

    With ``helm``, what the dask-gateway Helm chart sets itself (authentication, addresses,
    log level) is left to the chart.
    """
    environ = dict(os.environ if environ is None else environ)
    c.DaskGateway.backend_class = BACKEND_CLASSES[settings.backend]
    if not helm:
        _configure_server(c, settings, environ)
    c.HybridBackend.gateway_workers = settings.gateway_workers
    c.HybridBackend.max_lifetime = settings.max_lifetime
    c.HybridBackend.client_timeout = settings.client_timeout
    cluster = c.KubeClusterConfig if settings.backend == "kubernetes" else c.ClusterConfig
    cluster.scheduler_cmd = _scheduler_command(settings)
    cluster.worker_cmd = list(settings.worker_command)
    cluster.idle_timeout = settings.idle_timeout
    for name in ("cluster_max_workers", "cluster_max_cores", "cluster_max_memory"):
        if getattr(settings, name) is not None:
            cluster[name] = getattr(settings, name)
    for name in ("worker_cores", "worker_memory"):  # else: the chart's or dask-gateway's
        if name in settings.model_fields_set:
            cluster[name] = getattr(settings, name)
    if settings.environment:
        cluster.environment.update(settings.environment)
    c.Backend.cluster_options = cluster_options(settings)


def configure_from_environment(c: Any, *, beside: str | None = None, helm: bool = False) -> None:
    """:func:`configure` with the settings YAML found as :func:`load_settings` says."""
    configure(c, load_settings(beside=beside), helm=helm)
