"""``HTCGateway``: clusters from a dask-gateway server whose workers are batch jobs.

The gateway starts only the scheduler (see :mod:`hybrid.gateway.server_config`); the workers
are batch jobs (HTCondor, Slurm, PBS, LSF) or pods that this client submits itself, through a
:class:`~hybrid.cluster.HybridCluster` attached to the gateway's scheduler. The workers dial the
gateway's TCP proxy (``tls://PROXY``, SNI ``daskgateway-<cluster>``) with the cluster's own
certificate and key; the gateway API token never leaves this process.

``scale(n)`` and ``adapt(...)`` submit and remove batch jobs (never gateway workers).
``close(shutdown=False)`` only disconnects: the cluster and its jobs keep running, and a later
``gateway.connect(name)`` (in any process of the same user) finds the jobs again by their
tag, because the pool settings are kept in the scheduler's metadata (``"hybrid-pools"``).
``shutdown()`` removes every job, confirms it with the batch system, then stops the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

from dask_gateway import Gateway, GatewayCluster
from dask_gateway.client import ClusterReport
from dask_gateway.options import Options
from distributed.security import Security

from hybrid import config
from hybrid.annotator import HybridClient
from hybrid.batch import SYSTEMS, BatchSystem, JobStatus, get_system
from hybrid.batch.base import remove_staging_of
from hybrid.cluster import HybridCluster, Pool
from hybrid.errors import BatchError, ConfigurationError, HybridError
from hybrid.gateway import scheduler_sni
from hybrid.resources import ComputeResources, PodResources, QueueWorkerResources
from hybrid.units import is_quantity, parse_memory, parse_walltime, to_bytes, unit
from hybrid.worker import ContainerOptions, check_name

logger = logging.getLogger(__name__)

#: The scheduler metadata key that holds the pool settings (JSON; no secret in it).
METADATA_KEY = "hybrid-pools"
#: Version of what :data:`METADATA_KEY` holds.
METADATA_FORMAT = 1

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PIXI_ENV_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_CONDA_ENV_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*$")
#: Environment variables that carry a dask-gateway credential: never sent to a job.
_CREDENTIAL_ENV = re.compile(r"^(JUPYTERHUB_API_TOKEN|DASK_GATEWAY__AUTH__.*)$")

#: Keys a ``pools={name: {...}}`` entry may have.
POOL_KEYS = (
    "system", "resources", "cores", "memory", "gpus", "walltime", "processes", "queue",
    "account", "job_extra_directives", "worker_extra_args", "job_script_prologue", "env",
    "python", "container_image", "container_binds", "pixi_project", "pixi_env", "conda_env",
    "nanny", "serves_unannotated", "death_timeout", "lease", "system_options",
)


# ---------------------------------------------------------------------------------------------
# Worker environments: container, pixi or conda
# ---------------------------------------------------------------------------------------------
def _text(value: Any, field_name: str, accepted: str) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigurationError(field_name, value, accepted)
    text = os.fspath(value)
    if not text.strip() or any(ch in text for ch in "\n\r\0"):
        raise ConfigurationError(field_name, value, accepted)
    return text


def _absolute_path(value: Any, field_name: str, what: str) -> str:
    accepted = f"an absolute path of {what} as the batch nodes see it, without newlines"
    text = _text(value, field_name, accepted)
    if not PurePosixPath(text).is_absolute():
        raise ConfigurationError(field_name, value, accepted,
                                 "Jobs start in their own directory: give the full path.")
    return text


def environment_launcher(field_prefix: str, *, container_image: Any = None,
                         pixi_project: Any = None, pixi_env: Any = None,
                         conda_env: Any = None) -> tuple[str | None, tuple[str, ...]]:
    """Validate the worker environment; return ``(container image, launcher words)``.

    At most one of ``container_image``, ``pixi_project`` and ``conda_env``; ``pixi_env``
    only with ``pixi_project``. pixi runs the worker with ``pixi run --manifest-path PROJECT
    [--environment ENV] --executable python ...``; conda with ``conda run --no-capture-output
    -n NAME`` (or ``-p PATH`` for a path) ``python ...``.
    """
    sources = {"container_image": container_image, "pixi_project": pixi_project,
               "conda_env": conda_env}
    given = {name: value for name, value in sources.items() if value is not None}
    if len(given) > 1:
        raise ConfigurationError(
            f"{field_prefix}{list(given)[1]}", given,
            "at most one worker environment: container_image, pixi_project or conda_env",
            f"Choose one of {', '.join(given)}.")
    if pixi_env is not None and pixi_project is None:
        raise ConfigurationError(f"{field_prefix}pixi_env", pixi_env,
                                 "pixi_env only together with pixi_project",
                                 "Give pixi_project (the pixi.toml or its directory) too.")
    if container_image is not None:
        image = _text(container_image, f"{field_prefix}container_image",
                      "an Apptainer image path or URI (a non-empty string)")
        return image, ()
    if pixi_project is not None:
        project = _absolute_path(pixi_project, f"{field_prefix}pixi_project",
                                 "a pixi.toml (or its directory)")
        words = ["pixi", "run", "--manifest-path", project]
        if pixi_env is not None:
            if not isinstance(pixi_env, str) or not _PIXI_ENV_NAME.match(pixi_env):
                raise ConfigurationError(f"{field_prefix}pixi_env", pixi_env,
                                         "a pixi environment name (a-z, 0-9 and -)")
            words += ["--environment", pixi_env]
        return None, (*words, "--executable")
    if conda_env is not None:
        text = _text(conda_env, f"{field_prefix}conda_env",
                     "a conda environment name or an absolute path")
        if "/" in text:
            path = _absolute_path(conda_env, f"{field_prefix}conda_env",
                                  "a conda environment")
            return None, ("conda", "run", "--no-capture-output", "-p", path)
        if not _CONDA_ENV_NAME.match(text):
            raise ConfigurationError(f"{field_prefix}conda_env", conda_env,
                                     "a conda environment name or an absolute path")
        return None, ("conda", "run", "--no-capture-output", "-n", text)
    return None, ()


# ---------------------------------------------------------------------------------------------
# Pool settings: validated, JSON-able, kept in the scheduler's metadata
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolSettings:
    """One pool of batch workers, as plain data (what a second process needs to rebuild it)."""

    system: str
    threads: int = 1
    gpus: int = 0
    memory: int | None = None
    walltime: str | None = None
    processes: int = 1
    queue: str | None = None
    account: str | None = None
    job_extra_directives: tuple[str, ...] = ()
    worker_extra_args: tuple[str, ...] = ()
    job_script_prologue: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    container_image: str | None = None
    container_binds: tuple[str, ...] = ()
    launcher: tuple[str, ...] = ()
    nanny: bool | None = None
    serves_unannotated: bool | None = None
    death_timeout: int | None = None
    lease: int | None = None
    system_options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PoolSettings:
        """Back from :meth:`to_dict` (unknown keys are an error)."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise HybridError(f"the cluster's pool settings have unknown keys {unknown}: "
                              "they were written by another version of hybrid")
        values = dict(data)
        for key in ("job_extra_directives", "worker_extra_args", "job_script_prologue",
                    "container_binds", "launcher"):
            values[key] = tuple(values.get(key) or ())
        return cls(**values)

    def add_to(self, cluster: HybridCluster, name: str) -> Pool:
        """Add this pool to ``cluster`` (nothing is submitted)."""
        resources = ComputeResources(number_of_threads=self.threads, number_of_gpus=self.gpus)
        pool = cluster.add_pool(
            name, self.system, resources,
            memory=self.memory * unit.byte if self.memory else None,
            processes=self.processes, walltime=self.walltime, queue=self.queue,
            account=self.account, job_extra_directives=self.job_extra_directives,
            worker_extra_args=self.worker_extra_args,
            job_script_prologue=self.job_script_prologue, env=self.env,
            python=self.python or ("python" if self.launcher else None),
            container_image=self.container_image, container_binds=self.container_binds,
            nanny=self.nanny, serves_unannotated=self.serves_unannotated,
            death_timeout=self.death_timeout, lease=self.lease, launcher=self.launcher,
            **self.system_options,
        )
        return pool


@dataclass(frozen=True)
class ClusterSettings:
    """Everything a cluster's pools need, shared by every process that connects."""

    worker_scheduler_address: str
    pools: dict[str, PoolSettings]
    annotate_resources: bool | None = None
    gpu_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """What goes into the scheduler's metadata."""
        return {
            "format": METADATA_FORMAT,
            "worker_scheduler_address": self.worker_scheduler_address,
            "annotate_resources": self.annotate_resources,
            "gpu_fraction": self.gpu_fraction,
            "pools": {name: pool.to_dict() for name, pool in self.pools.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterSettings:
        """Back from :meth:`to_dict`."""
        if data.get("format") != METADATA_FORMAT:
            raise HybridError(f"the cluster's pool settings have format {data.get('format')!r}; "
                              f"this hybrid reads format {METADATA_FORMAT}")
        return cls(
            worker_scheduler_address=data["worker_scheduler_address"],
            pools={name: PoolSettings.from_dict(pool)
                   for name, pool in (data.get("pools") or {}).items()},
            annotate_resources=data.get("annotate_resources"),
            gpu_fraction=data.get("gpu_fraction"),
        )


def _count(value: Any, field_name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(field_name, value, f"a whole number >= {minimum}")
    return value


def _memory_bytes(value: Any, field_name: str, gib_numbers: bool) -> int | None:
    """A memory in bytes; numbers are GiB (dask-gateway's ``worker_memory``) if allowed."""
    if value is None:
        return None
    if gib_numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise ConfigurationError(field_name, value,
                                     'GiB as a number > 0, or a memory such as "4 GiB"')
        return round(value * 2**30)
    accepted = 'a memory such as "4 GiB" or 4 * unit.GiB' + (
        " (or GiB as a number)" if gib_numbers else "")
    if not (isinstance(value, str) or is_quantity(value)):
        raise ConfigurationError(field_name, value, accepted)
    memory = to_bytes(parse_memory(value, field_name))
    if memory <= 0:
        raise ConfigurationError(field_name, value, accepted + ", larger than zero")
    return memory


def _strings(value: Any, field_name: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigurationError(field_name, value, "a list of strings")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or "\0" in item:
            raise ConfigurationError(field_name, item, "strings without NUL characters")
    return items


def _system_name(value: Any, field_name: str) -> str:
    if isinstance(value, BatchSystem):
        raise ConfigurationError(
            field_name, value, f"a system name, one of {', '.join(sorted(SYSTEMS))}",
            "A system object cannot be recorded for a later connect(); give its name and "
            "its settings as system_options.")
    if not isinstance(value, str) or value.lower() not in SYSTEMS:
        raise ConfigurationError(field_name, value, f"one of {', '.join(sorted(SYSTEMS))}")
    return value.lower()


def _check_env(env: Any, field_name: str) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise ConfigurationError(field_name, env, "a mapping of variable names to strings")
    checked = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ConfigurationError(field_name, name,
                                     "variable names matching [A-Za-z_][A-Za-z0-9_]*")
        if not isinstance(value, str) or "\0" in value:
            raise ConfigurationError(f"{field_name}[{name!r}]", value,
                                     "a string value without NUL characters")
        if _CREDENTIAL_ENV.match(name):
            raise ConfigurationError(f"{field_name}[{name!r}]", "<hidden>",
                                     "no dask-gateway credential in a job",
                                     "Workers need only the cluster's certificate.")
        checked[name] = value
    return checked


def required_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with every variable the facility requires (``hybrid.gateway.required-env``).

    A variable missing from ``env`` is taken from this process's environment (batch jobs do
    not inherit it); missing from both, it is a :class:`ConfigurationError`.
    """
    required = config.get("gateway.required-env", []) or []
    if isinstance(required, str) or not isinstance(required, Iterable):
        raise ConfigurationError("hybrid.gateway.required-env", required,
                                 "a list of environment variable names")
    out = dict(env)
    for name in required:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ConfigurationError("hybrid.gateway.required-env", name,
                                     "environment variable names")
        if name in out:
            continue
        if name in os.environ:
            out[name] = os.environ[name]
            continue
        raise ConfigurationError(
            f"env[{name!r}]", None,
            "a value: this facility requires it for every job (hybrid.gateway.required-env)",
            f"Pass env={{{name!r}: ...}} to new_cluster, or set {name} in this process's "
            "environment.")
    return out


def _gateway_secrets(auth: Any) -> list[str]:
    """The credential strings of a dask-gateway auth object (never to be sent to a job)."""
    secrets = []
    for attribute in ("password", "api_token", "token"):
        value = getattr(auth, attribute, None)
        if isinstance(value, str) and value:
            secrets.append(value)
    return secrets


def _refuse_secrets(pools: Mapping[str, PoolSettings], secrets: list[str],
                    top_level: bool = False) -> None:
    """No gateway credential in what a job gets (``top_level``: name the fields as the
    single-pool arguments of ``new_cluster``)."""
    for name, pool in pools.items():
        texts = {**{f"env[{k!r}]": v for k, v in pool.env.items()},
                 **{f"job_script_prologue[{i}]": v
                    for i, v in enumerate(pool.job_script_prologue)},
                 **{f"job_extra_directives[{i}]": v
                    for i, v in enumerate(pool.job_extra_directives)},
                 **{f"worker_extra_args[{i}]": v for i, v in enumerate(pool.worker_extra_args)}}
        for label, text in texts.items():
            if any(s == text or (len(s) >= 8 and s in text) for s in secrets):
                raise ConfigurationError(label if top_level else f"pools[{name!r}].{label}",
                                         "<hidden>",
                                         "no dask-gateway credential in a job",
                                         "Workers need only the cluster's certificate.")


def pool_settings(name: str, options: Mapping[str, Any], *, base_env: Mapping[str, str],
                  environment: Mapping[str, Any]) -> PoolSettings:
    """Validate one ``pools={name: {...}}`` entry (top-level environment choices apply
    unless the entry gives its own)."""
    prefix = f"pools[{name!r}]."
    check_name(name, "pools name")
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"pools[{name!r}]", options, "a mapping of pool settings")
    unknown = sorted(set(options) - set(POOL_KEYS))
    if unknown:
        raise ConfigurationError(f"{prefix}{unknown[0]}", options[unknown[0]],
                                 f"a pool setting, one of {', '.join(POOL_KEYS)}")
    if "system" not in options:
        raise ConfigurationError(f"{prefix}system", None,
                                 f"one of {', '.join(sorted(SYSTEMS))}")
    system = _system_name(options["system"], f"{prefix}system")
    threads, gpus, memory, walltime = 1, 0, None, None
    resources = options.get("resources")
    if resources is not None:
        if isinstance(resources, PodResources):
            threads, gpus, memory = (resources.number_of_threads, resources.number_of_gpus,
                                     resources.memory_bytes or None)
        elif isinstance(resources, QueueWorkerResources):
            threads, gpus, memory, walltime = (
                resources.number_of_threads, resources.number_of_gpus,
                resources.memory_bytes, resources.wallclock_time_limit)
        elif isinstance(resources, ComputeResources):
            threads, gpus = resources.number_of_threads, resources.number_of_gpus
        else:
            raise ConfigurationError(f"{prefix}resources", resources,
                                     "ComputeResources, QueueWorkerResources or PodResources")
    if options.get("cores") is not None:
        threads = _count(options["cores"], f"{prefix}cores", 1)
    if options.get("gpus") is not None:
        gpus = _count(options["gpus"], f"{prefix}gpus", 0)
    if options.get("memory") is not None:
        memory = _memory_bytes(options["memory"], f"{prefix}memory", gib_numbers=True)
    if options.get("walltime") is not None:
        walltime = parse_walltime(options["walltime"], f"{prefix}walltime")
    processes = _count(options.get("processes", 1), f"{prefix}processes", 1)
    if processes > threads:
        raise ConfigurationError(f"{prefix}processes", processes,
                                 f"at most cores ({threads}): each process gets a thread")
    for key in ("queue", "account"):
        if options.get(key) is not None:
            check_name(options[key], f"{prefix}{key}")
    env = {**base_env, **_check_env(options.get("env"), f"{prefix}env")}
    env_choice = {k: options.get(k, environment.get(k))
                  for k in ("container_image", "pixi_project", "pixi_env", "conda_env")}
    if any(k in options for k in ("container_image", "pixi_project", "conda_env")):
        # the entry chose its own environment: the top-level one does not apply
        env_choice = {k: options.get(k) for k in env_choice}
    image, launcher = environment_launcher(prefix, **env_choice)
    python = options.get("python")
    if python is not None:
        python = _text(python, f"{prefix}python", "a python command or path")
        if launcher:
            raise ConfigurationError(f"{prefix}python", python,
                                     "no python with pixi_project or conda_env",
                                     "The environment's own python runs the worker.")
    binds = _strings(options.get("container_binds", ()), f"{prefix}container_binds")
    if binds and image is None:
        raise ConfigurationError(f"{prefix}container_binds", list(binds),
                                 "binds only together with container_image")
    if image is not None:
        ContainerOptions(image, binds=binds)  # validates the binds
    for key in ("nanny", "serves_unannotated"):
        if options.get(key) is not None and not isinstance(options[key], bool):
            raise ConfigurationError(f"{prefix}{key}", options[key], "True or False")
    death_timeout = options.get("death_timeout")
    if death_timeout is not None:
        death_timeout = _count(death_timeout, f"{prefix}death_timeout", 1)
    lease = options.get("lease")
    if lease is not None:
        from dask.utils import parse_timedelta

        try:
            lease = math.ceil(parse_timedelta(lease))
        except (ValueError, TypeError, KeyError):
            raise ConfigurationError(f"{prefix}lease", lease,
                                     'a duration such as "24h" or 3600') from None
        if lease <= 0:
            raise ConfigurationError(f"{prefix}lease", lease, "a duration > 0")
    system_options = options.get("system_options") or {}
    if not isinstance(system_options, Mapping) or not all(
            isinstance(k, str) for k in system_options):
        raise ConfigurationError(f"{prefix}system_options", system_options,
                                 "a mapping of the batch system's settings")
    try:
        get_system(system, **system_options)  # builds the client object; contacts nothing
    except TypeError as error:
        raise ConfigurationError(f"{prefix}system_options", dict(system_options),
                                 f"settings that system {system!r} takes ({error})") from None
    return PoolSettings(
        system=system, threads=threads, gpus=gpus, memory=memory, walltime=walltime,
        processes=processes, queue=options.get("queue"), account=options.get("account"),
        job_extra_directives=_strings(options.get("job_extra_directives", ()),
                                      f"{prefix}job_extra_directives"),
        worker_extra_args=_strings(options.get("worker_extra_args", ()),
                                   f"{prefix}worker_extra_args"),
        job_script_prologue=_strings(options.get("job_script_prologue", ()),
                                     f"{prefix}job_script_prologue"),
        env=env, python=python, container_image=image, container_binds=binds,
        launcher=launcher, nanny=options.get("nanny"),
        serves_unannotated=options.get("serves_unannotated"), death_timeout=death_timeout,
        lease=lease, system_options=dict(system_options),
    )


def worker_address(value: Any, field_name: str) -> str:
    """``tls://HOST:PORT`` (what batch workers dial) from ``tls://``, ``gateway://`` or
    ``HOST:PORT``."""
    accepted = "the gateway's TCP proxy as tls://HOST:PORT (or HOST:PORT)"
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(field_name, value, accepted)
    text = value.strip()
    parsed = urlparse(text if "://" in text else f"tls://{text}")
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme not in ("tls", "gateway") or not parsed.hostname or not port or (
            parsed.path not in ("", "/")):
        raise ConfigurationError(field_name, value, accepted)
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"tls://{host}:{port}"


def _distributed_security(security: Any) -> Security:
    """A ``distributed.Security`` from a gateway cluster's certificate and key (in memory).

    One self-signed keypair serves as CA, certificate and key for the scheduler and workers.
    """
    return Security(tls_ca_file=security.tls_cert, tls_client_cert=security.tls_cert,
                    tls_client_key=security.tls_key, require_encryption=True)


# ---------------------------------------------------------------------------------------------
# The gateway client and its clusters
# ---------------------------------------------------------------------------------------------
class HTCClusterReport(ClusterReport):
    """A :class:`dask_gateway.ClusterReport` that connects with :class:`HTCGateway`."""

    __slots__ = ("_gateway",)

    @classmethod
    def from_report(cls, report: ClusterReport, gateway: HTCGateway) -> HTCClusterReport:
        """Wrap a report of ``gateway``."""
        out = cls(name=report.name, options=report.options, status=report.status,
                  scheduler_address=report.scheduler_address,
                  dashboard_link=report.dashboard_link, start_time=report.start_time,
                  stop_time=report.stop_time, tls_cert=report.tls_cert, tls_key=report.tls_key)
        out._gateway = gateway
        return out

    def connect(self, shutdown_on_close: bool = False) -> HTCGatewayCluster:
        """``gateway.connect(report.name)``: an :class:`HTCGatewayCluster`."""
        return self._gateway.connect(self.name, shutdown_on_close=shutdown_on_close)

    def __repr__(self) -> str:
        return f"HTCClusterReport<name={self.name}, status={self.status.name}>"


class HTCGateway(Gateway):
    """A dask-gateway client whose clusters get their workers from batch systems.

    Same constructor and authentication as :class:`dask_gateway.Gateway`, plus
    ``worker_proxy_address``: the gateway's TCP proxy as batch nodes reach it (default
    ``hybrid.gateway.worker-proxy-address``, else the host and port of ``proxy_address``).
    """

    def __init__(self, address: str | None = None, proxy_address: str | int | None = None,
                 public_address: str | None = None, auth: Any = None,
                 asynchronous: bool = False, loop: Any = None, *,
                 worker_proxy_address: str | None = None):
        if asynchronous:
            raise ConfigurationError("asynchronous", asynchronous,
                                     "False: HTCGateway clusters are synchronous")
        if worker_proxy_address is not None:
            worker_address(worker_proxy_address, "worker_proxy_address")
        super().__init__(address=address, proxy_address=proxy_address,
                         public_address=public_address, auth=auth, asynchronous=False,
                         loop=loop)
        self._worker_proxy_address = worker_proxy_address

    @property
    def worker_scheduler_address(self) -> str:
        """What batch workers dial: ``tls://PROXY_HOST:PROXY_PORT``."""
        configured = self._worker_proxy_address or config.get(
            "gateway.worker-proxy-address", None)
        if configured:
            return worker_address(configured, "hybrid.gateway.worker-proxy-address")
        return worker_address(self.proxy_address, "proxy_address")

    def _cluster_kwargs(self) -> dict[str, Any]:
        return {"address": self.address, "proxy_address": self.proxy_address,
                "public_address": self._public_address, "auth": self.auth,
                "asynchronous": False, "loop": self.loop}

    def cluster_settings(
        self,
        *,
        pool: str = "htcondor",
        worker_cores: int = 1,
        worker_memory: Any = None,
        worker_gpus: int = 0,
        worker_walltime: Any = None,
        env: Mapping[str, str] | None = None,
        container_image: str | None = None,
        pixi_project: Any = None,
        pixi_env: str | None = None,
        conda_env: Any = None,
        pools: Mapping[str, Mapping[str, Any]] | None = None,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
    ) -> ClusterSettings:
        """Validate the worker side of :meth:`new_cluster` (contacts nothing)."""
        base_env = required_environment(_check_env(env, "env"))
        environment = {"container_image": container_image, "pixi_project": pixi_project,
                       "pixi_env": pixi_env, "conda_env": conda_env}
        environment_launcher("", **environment)  # the top level alone must be consistent
        if pools is not None:
            if not isinstance(pools, Mapping) or not pools:
                raise ConfigurationError("pools", pools,
                                         "a non-empty mapping {name: {system: ..., ...}}")
            simple = {"pool": (pool, "htcondor"), "worker_cores": (worker_cores, 1),
                      "worker_memory": (worker_memory, None), "worker_gpus": (worker_gpus, 0),
                      "worker_walltime": (worker_walltime, None)}
            for key, (value, default) in simple.items():
                if value != default:
                    raise ConfigurationError(
                        key, value, f"the default ({default!r}) when pools is given",
                        f"Set {key.replace('worker_', '')} inside each pools entry.")
            definitions = {name: pool_settings(name, options, base_env=base_env,
                                               environment=environment)
                           for name, options in pools.items()}
        else:
            system = _system_name(pool, "pool")
            cores = _count(worker_cores, "worker_cores", 1)
            gpus = _count(worker_gpus, "worker_gpus", 0)
            memory = _memory_bytes(worker_memory, "worker_memory", gib_numbers=True)
            walltime = (parse_walltime(worker_walltime, "worker_walltime")
                        if worker_walltime is not None else None)
            definitions = {system: pool_settings(
                system, {"system": system, "cores": cores, "gpus": gpus,
                         "memory": memory * unit.byte if memory else None,
                         "walltime": walltime,
                         # a lone GPU pool must run the CPU tasks as well
                         "serves_unannotated": True if gpus else None},
                base_env=base_env, environment=environment)}
        _refuse_secrets(definitions, _gateway_secrets(self.auth), top_level=pools is None)
        if annotate_resources is not None and not isinstance(annotate_resources, bool):
            raise ConfigurationError("annotate_resources", annotate_resources,
                                     "True, False or None (the configured default)")
        if gpu_fraction is not None:
            from hybrid.annotator import gpu_fraction as check_fraction

            check_fraction(gpu_fraction)
        return ClusterSettings(worker_scheduler_address=self.worker_scheduler_address,
                               pools=definitions, annotate_resources=annotate_resources,
                               gpu_fraction=gpu_fraction)

    def _scheduler_options(self, image: str | None, cluster_options: Options | None,
                           kwargs: Mapping[str, Any]) -> Options:
        """The gateway's cluster options with ``image`` and ``kwargs`` set (checked by the
        server's option specification; nothing is created)."""
        if cluster_options is not None and not isinstance(cluster_options, Options):
            raise ConfigurationError("cluster_options", cluster_options,
                                     "a dask_gateway Options from gateway.cluster_options()")
        options = cluster_options if cluster_options is not None else self.cluster_options()
        wanted = dict(kwargs)
        if image is not None:
            if "image" not in options:
                raise ConfigurationError("image", image,
                                         "no image: this gateway offers no image option "
                                         f"(its options: {sorted(options) or 'none'})")
            wanted["image"] = image
        for key, value in wanted.items():
            if key not in options:
                raise ConfigurationError(key, value,
                                         "an option this gateway offers: "
                                         + (", ".join(sorted(options)) or "none"))
            try:
                options[key] = value
            except (ValueError, TypeError, AttributeError, KeyError) as error:
                raise ConfigurationError(key, value, f"a value the gateway accepts ({error})"
                                         ) from None
        return options

    def new_cluster(  # type: ignore[override]
        self,
        cluster_options: Options | None = None,
        shutdown_on_close: bool = True,
        *,
        image: str | None = None,
        container_image: str | None = None,
        pool: str = "htcondor",
        worker_cores: int = 1,
        worker_memory: Any = None,
        worker_gpus: int = 0,
        worker_walltime: Any = None,
        env: Mapping[str, str] | None = None,
        pixi_project: Any = None,
        pixi_env: str | None = None,
        conda_env: Any = None,
        pools: Mapping[str, Mapping[str, Any]] | None = None,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        **kwargs: Any,
    ) -> HTCGatewayCluster:
        """Start a scheduler-only cluster on the gateway; its workers are batch jobs.

        ``image`` is the scheduler's image (a gateway option). The workers: ``pool`` (a
        batch system: htcondor, slurm, pbs, lsf, local, kubernetes), ``worker_cores``,
        ``worker_memory`` (GiB as a number, or ``"4 GiB"``), ``worker_gpus``,
        ``worker_walltime`` (``"HH:MM"``; default: the job lease), ``env``, and
        at most one environment: ``container_image`` (Apptainer), ``pixi_project`` (+
        ``pixi_env``) or ``conda_env``. ``pools={name: {system: ..., cores: ..., ...}}``
        defines several pools instead. Every setting is checked before the gateway is asked
        for anything; no worker is submitted until :meth:`HTCGatewayCluster.scale` or
        :meth:`HTCGatewayCluster.adapt`. ``kwargs`` are further gateway options.
        """
        if not isinstance(shutdown_on_close, bool):
            raise ConfigurationError("shutdown_on_close", shutdown_on_close, "True or False")
        settings = self.cluster_settings(
            pool=pool, worker_cores=worker_cores, worker_memory=worker_memory,
            worker_gpus=worker_gpus, worker_walltime=worker_walltime, env=env,
            container_image=container_image,
            pixi_project=pixi_project, pixi_env=pixi_env, conda_env=conda_env, pools=pools,
            annotate_resources=annotate_resources, gpu_fraction=gpu_fraction)
        options = self._scheduler_options(image, cluster_options, kwargs)
        return HTCGatewayCluster(cluster_options=options, shutdown_on_close=shutdown_on_close,
                                 settings=settings, **self._cluster_kwargs())

    def connect(self, cluster_name: str,  # type: ignore[override]
                shutdown_on_close: bool = False) -> HTCGatewayCluster:
        """Connect to a running cluster (this process's or another's): its pools and jobs
        are found again (pool settings from the scheduler, jobs by their tag)."""
        if not isinstance(cluster_name, str) or not cluster_name:
            raise ConfigurationError("cluster_name", cluster_name, "a cluster name")
        cluster = HTCGatewayCluster.from_name(cluster_name, shutdown_on_close=shutdown_on_close,
                                              **self._cluster_kwargs())
        cluster._fallback_worker_address = self.worker_scheduler_address
        try:
            cluster._hybrid_cluster()
        except BaseException:
            cluster.close(shutdown=False)
            raise
        return cluster

    def list_clusters(self, status: Any = None, **kwargs: Any) -> list[HTCClusterReport]:
        """This user's clusters; ``report.connect()`` gives an :class:`HTCGatewayCluster`."""
        return [HTCClusterReport.from_report(report, self)
                for report in super().list_clusters(status=status, **kwargs)]

    def get_cluster(self, cluster_name: str, **kwargs: Any) -> HTCClusterReport:
        """One cluster's report (connectable with ``report.connect()``)."""
        return HTCClusterReport.from_report(super().get_cluster(cluster_name, **kwargs), self)

    def close(self) -> None:
        """Close the client (its clusters keep running unless they were shut down)."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        super().close()

    def __del__(self) -> None:
        # dask_gateway's Gateway.__del__ closes again, failing once the loop has stopped
        if not getattr(self, "_closed", False):
            super().__del__()

    def __repr__(self) -> str:
        return f"HTCGateway<{self.address}>"


class _ClosedGateway(Gateway):
    """A closed gateway client: collecting it does not close it again (dask_gateway's
    ``Gateway.__del__`` would, and fail once the shared event loop has stopped)."""

    def __del__(self) -> None:
        pass


class HTCGatewayCluster(GatewayCluster):
    """A gateway cluster whose workers are batch jobs managed from this client.

    Made by :meth:`HTCGateway.new_cluster` or :meth:`HTCGateway.connect` (through
    ``from_name``, which skips ``__init__``: the batch side is then built on first use).
    """

    def __init__(self, address: str | None = None, proxy_address: Any = None,
                 public_address: str | None = None, auth: Any = None,
                 cluster_options: Options | None = None, shutdown_on_close: bool = True,
                 asynchronous: bool = False, loop: Any = None, *,
                 settings: ClusterSettings | None = None, **kwargs: Any):
        if asynchronous:
            raise ConfigurationError("asynchronous", asynchronous,
                                     "False: HTCGatewayCluster is synchronous")
        if settings is None:
            helper = HTCGateway(address=address, proxy_address=proxy_address,
                                public_address=public_address, auth=auth, loop=loop)
            try:
                settings = helper.cluster_settings()
            finally:
                helper.close()
        self._settings: ClusterSettings | None = settings
        self._hybrid: HybridCluster | None = None
        super().__init__(address=address, proxy_address=proxy_address,
                         public_address=public_address, auth=auth,
                         cluster_options=cluster_options, shutdown_on_close=shutdown_on_close,
                         asynchronous=False, loop=loop, **kwargs)
        try:
            self._hybrid_cluster(fresh=True)
        except BaseException:
            self._stop_gateway_cluster()
            raise

    # ---------------------------------------------------------------- the batch side
    def _read_settings(self) -> ClusterSettings:
        data = self.gateway.sync(self.scheduler_comm.get_metadata, keys=[METADATA_KEY],
                                 default=None)
        if data is None:
            fallback = getattr(self, "_fallback_worker_address", None)
            if fallback is None:
                raise HybridError(f"cluster {self.name} has no pool settings")
            logger.info("cluster %s has no pool settings (not made by HTCGateway): add pools "
                        "with add_pool()", self.name)
            return ClusterSettings(worker_scheduler_address=fallback, pools={})
        return ClusterSettings.from_dict(data)

    def _write_settings(self, hybrid: HybridCluster, settings: ClusterSettings) -> None:
        hybrid.sync(hybrid.scheduler_comm.set_metadata, keys=[METADATA_KEY],
                    value=settings.to_dict())

    def _hybrid_cluster(self, fresh: bool = False) -> HybridCluster:
        """The :class:`HybridCluster` attached to this gateway cluster (built on first use)."""
        hybrid = getattr(self, "_hybrid", None)
        if hybrid is not None:
            return hybrid
        if self.status != "running":
            raise HybridError(
                f"cluster {self.name} is {self.status} here: connect again with "
                f"gateway.connect({self.name!r})")
        settings = getattr(self, "_settings", None)
        if settings is None:
            settings = self._read_settings()
        hybrid = HybridCluster(
            self.scheduler_address, name=self.name, security=_distributed_security(
                self.security),
            worker_scheduler_address=settings.worker_scheduler_address,
            scheduler_sni=scheduler_sni(self.name),
            annotate_resources=settings.annotate_resources,
            gpu_fraction=settings.gpu_fraction, dashboard_address=None, loop=None)
        try:
            for name, pool in settings.pools.items():
                pool.add_to(hybrid, name)
            if fresh:
                self._write_settings(hybrid, settings)
            else:
                _adopt_jobs(hybrid)
        except BaseException:
            hybrid.detach()
            raise
        self._settings = settings
        self._hybrid = hybrid
        return hybrid

    @property
    def hybrid(self) -> HybridCluster:
        """The :class:`~hybrid.cluster.HybridCluster` that manages the batch workers."""
        return self._hybrid_cluster()

    @property
    def settings(self) -> ClusterSettings:
        """The pool settings (as kept in the scheduler's metadata)."""
        self._hybrid_cluster()
        assert self._settings is not None
        return self._settings

    @property
    def pools(self) -> dict[str, Pool]:
        """The pools of batch workers, by name."""
        return dict(self._hybrid_cluster().pools)

    def add_pool(self, name: str, system: str, **options: Any) -> Pool:
        """Add a pool (keys as in ``new_cluster(pools={name: {...}})``); nothing is submitted.

        The pool is recorded in the scheduler's metadata, so later connects see it too.
        """
        hybrid = self._hybrid_cluster()
        settings = self.settings
        if name in settings.pools:
            raise ConfigurationError("pool name", name, f"a name not in {sorted(settings.pools)}")
        definition = pool_settings(name, {"system": system, **options},
                                   base_env=required_environment({}), environment={})
        _refuse_secrets({name: definition}, _gateway_secrets(self.gateway.auth))
        pool = definition.add_to(hybrid, name)
        updated = replace(settings, pools={**settings.pools, name: definition})
        self._write_settings(hybrid, updated)
        self._settings = updated
        return pool

    def job_script(self, pool: str | None = None) -> str:
        """The job script (or submit description) a pool submits, for reading."""
        return self._hybrid_cluster().pool(pool).job_script()

    def scale(self, n: int, pool: str | None = None, **kwargs: Any) -> None:  # type: ignore[override]
        """Set ``pool``'s target to ``n`` batch jobs: submit the missing, remove the surplus
        (graceful retirement first). With one pool, ``pool`` may be left out."""
        if kwargs:
            raise ConfigurationError("scale", sorted(kwargs), "scale(n, pool=None)")
        self._hybrid_cluster().scale(n, pool=pool)

    def adapt(self, minimum: int | None = 0, maximum: int | None = 10,  # type: ignore[override]
              active: bool = True, pool: str | None = None, **kwargs: Any) -> Any:
        """Scale ``pool``'s batch jobs between ``minimum`` and ``maximum`` from the demand
        for its resource (GPU or CPU tasks); ``active=False`` stops it. Adaptivity runs in
        this process: it stops when this process closes the cluster or exits."""
        hybrid = self._hybrid_cluster()
        if not active:
            targets = [hybrid.pool(pool)] if pool is not None else list(hybrid.pools.values())
            for target in targets:
                if target.adaptive is not None:
                    target.adaptive.stop()
                    target.adaptive = None
            return None
        if maximum is None:
            raise ConfigurationError("adapt.maximum", None,
                                     "a whole number of workers: batch jobs need a bound")
        return hybrid.adapt(pool, minimum=0 if minimum is None else minimum, maximum=maximum,
                            **kwargs)

    def connected_workers(self, pool: str | None = None) -> list[str]:
        """Names of the connected batch workers of ``pool`` (or of every pool)."""
        return self._hybrid_cluster().connected_workers(pool)

    def wait_for_workers(self, n: int, pool: str | None = None, timeout: Any = None,
                         progress: bool = True) -> None:
        """Block until ``n`` workers of ``pool`` joined; held or failed jobs raise
        :class:`~hybrid.errors.WorkersDidNotArrive` with the batch system's reasons."""
        self._hybrid_cluster().wait_for_workers(n, pool=pool, timeout=timeout,
                                                progress=progress)

    def jobs(self) -> list[JobStatus]:
        """This cluster's active batch jobs, asked of each pool's batch system now."""
        hybrid = self._hybrid_cluster()
        found: dict[str, JobStatus] = {}
        for system in _systems(hybrid):
            for status in system.query(cluster=self.name):
                if status.state.active:
                    found[f"{system.name}:{status.job_id}"] = status
        return list(found.values())

    def get_client(self, set_as_default: bool = True) -> HybridClient:  # type: ignore[override]
        """A :class:`~hybrid.annotator.HybridClient` (GPU/CPU annotation) of this cluster."""
        settings = self.settings
        client = HybridClient(self, security=self.security, set_as_default=set_as_default,
                              asynchronous=False, loop=self.loop,
                              annotate_resources=settings.annotate_resources,
                              gpu_fraction=settings.gpu_fraction)
        self._clients.add(client)
        return client

    # ---------------------------------------------------------------- closing
    def close(self, shutdown: bool | None = None) -> None:  # type: ignore[override]
        """Close this client's view. ``shutdown=False``: the cluster and its batch jobs keep
        running (adaptivity stops); ``shutdown=True``: :meth:`shutdown`. The default is the
        ``shutdown_on_close`` the cluster was made or connected with."""
        if getattr(self, "status", "closed") == "closed":
            return
        if shutdown is None:
            shutdown = bool(self.shutdown_on_close)
        if shutdown:
            self.shutdown()
            return
        hybrid, self._hybrid = getattr(self, "_hybrid", None), None
        try:
            if hybrid is not None:
                hybrid.detach()
        finally:
            try:
                super().close(shutdown=False)
            finally:
                _mark_closed(self.gateway)

    def shutdown(self) -> None:  # type: ignore[override]
        """Remove every batch job of the cluster (confirmed by the batch systems), then stop
        the cluster on the gateway. Leftover jobs raise :class:`~hybrid.errors.HybridError`
        after the cluster is stopped (their workers then end by themselves: death timeout)."""
        if getattr(self, "status", "closed") == "closed":
            raise HybridError(f"this view of cluster {self.name} is closed: connect again with "
                              f"gateway.connect({self.name!r}) and call shutdown() on that")
        errors: list[str] = []
        try:
            hybrid = self._hybrid_cluster()
        except Exception as error:
            hybrid = None
            errors.append(f"could not attach to the cluster's batch jobs: {error}")
        if hybrid is not None:
            self._hybrid = None
            systems = _systems(hybrid)
            try:
                hybrid.close()  # every pool's jobs removed and checked gone; staging removed
            except Exception as error:
                errors.append(str(error))
            for system in systems:  # jobs of this cluster that no pool here tracks
                try:
                    left = system.remove_cluster(self.name)
                    if left:
                        errors.append(f"{system.name} still had jobs {left}; removed now")
                except (BatchError, OSError) as error:
                    errors.append(f"{system.name}: {error}")
            remove_staging_of(self.name)
        self._stop_gateway_cluster()
        if errors:
            raise HybridError(f"cluster {self.name} stopped, but: " + "; ".join(errors)
                              + f". `hybrid status --system SYSTEM` lists leftover jobs and "
                              f"`hybrid cancel --system SYSTEM --cluster {self.name}` removes "
                              "them.")

    def _stop_gateway_cluster(self) -> None:
        try:
            GatewayCluster.close(self, shutdown=True)
        finally:
            _mark_closed(self.gateway)

    def __del__(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            super().__del__()  # closes as close() would (shutdown_on_close decides)
        # collected inside an event loop's thread: waiting on a loop here could hang it

    # ---------------------------------------------------------------- display
    def _widget_status(self) -> Any:
        hybrid = getattr(self, "_hybrid", None)
        if hybrid is not None and hybrid.scheduler_info.get("workers") is not None:
            saved = self.scheduler_info
            self.scheduler_info = hybrid.scheduler_info
            try:
                return super()._widget_status()
            finally:
                self.scheduler_info = saved
        return super()._widget_status()

    def __repr__(self) -> str:
        settings = getattr(self, "_settings", None)
        pools = sorted(settings.pools) if settings is not None else "?"
        return f"HTCGatewayCluster<{self.name}, status={self.status}, pools={pools}>"


def _mark_closed(gateway: Gateway) -> None:
    """After ``GatewayCluster.close`` closed its own gateway client: never close it again."""
    if type(gateway) is Gateway:
        gateway.__class__ = _ClosedGateway


def _systems(hybrid: HybridCluster) -> list[BatchSystem]:
    """The batch system objects of a cluster's pools, each once."""
    seen: dict[int, BatchSystem] = {}
    for pool in hybrid.pools.values():
        seen.setdefault(id(pool.system), pool.system)
    return list(seen.values())


def _adopt_jobs(hybrid: HybridCluster) -> None:
    """Track the cluster's jobs that the batch systems list (submitted by any process)."""
    for name, pool in hybrid.pools.items():
        for status in pool.system.query(cluster=hybrid.name):
            if status.pool == name and status.state.active:
                pool.batch.jobs[status.job_id] = status


__all__ = [
    "METADATA_KEY",
    "ClusterSettings",
    "HTCClusterReport",
    "HTCGateway",
    "HTCGatewayCluster",
    "PoolSettings",
]
