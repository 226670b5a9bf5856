"""What a gateway cluster's options mean for its batch pools, and what jobs may carry.

The plain-data side of :mod:`hybrid.gateway.client` (no ``dask_gateway`` import): the
keywords of ``new_cluster`` that make batch pools, the metadata the pools are kept in, the
addresses batch workers dial (the gateway's TCP proxy, by SNI) and the environment a job may
be given (never a credential).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from hybrid import config
from hybrid.errors import ConfigurationError, warn_user

#: The gateway's TCP proxy routes TLS connections by this SNI prefix + the cluster name.
SNI_PREFIX = "daskgateway-"


def scheduler_sni(cluster_name: str) -> str:
    """The TLS server name a worker sends to reach ``cluster_name`` through the TCP proxy."""
    return SNI_PREFIX + cluster_name


#: The scheduler metadata key that holds the pools (JSON; no secret in it).
METADATA_KEY = "hybrid-pools"
#: Version of what :data:`METADATA_KEY` holds.
METADATA_FORMAT = 2
#: Where the gateway's scheduler publishes the admin's limits (hybrid.gateway_server).
LIMITS_KEY = "hybrid-limits"
#: Where an open cluster object beats (``{client id: count}``): the server's
#: ``client_timeout`` counts it as a client (``hybrid.gateway_server.scheduler``).
HEARTBEAT_KEY = "hybrid-client-heartbeat"
#: Seconds between two beats.
HEARTBEAT_SECONDS = 2.0

#: The single-pool keywords of ``new_cluster`` and the pool options they set.
POOL_KEYWORDS = {"worker_cores": "cores", "worker_memory": "memory", "worker_gpus": "gpus",
                 "worker_walltime": "walltime", "env": "env",
                 "container_image": "container_image", "pixi_project": "pixi_project",
                 "pixi_env": "pixi_env", "conda_env": "conda_env"}
#: Keywords only the client uses (sent to the gateway only if the gateway offers them).
CLIENT_KEYWORDS = ("pool", "pools", "annotate_resources", "gpu_fraction")

#: Environment variables that carry a credential: never given to a job.
_CREDENTIAL = re.compile(r"^(JUPYTERHUB_API_TOKEN|JPY_API_TOKEN|DASK_GATEWAY__AUTH__.*|"
                         r".*(_TOKEN|_SECRET|_PASSWORD|_PASSWD))$")
#: Shell session state that means nothing on a batch node.
_SESSION = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "PS1", "PS2", "PS4", "PROMPT_COMMAND",
                      "COLUMNS", "LINES", "TERM_SESSION_ID", "SSH_AUTH_SOCK", "SSH_CLIENT",
                      "SSH_CONNECTION", "SSH_TTY", "TMUX", "TMUX_PANE", "DISPLAY",
                      "XDG_SESSION_ID", "XDG_RUNTIME_DIR", "MAIL", "HISTFILE"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# ---------------------------------------------------------------------------------------------
# What a job may get from the user's environment
# ---------------------------------------------------------------------------------------------
def job_environment(env: Any, secrets: tuple[str, ...] = (), field: str = "env"
                    ) -> dict[str, str]:
    """``env`` as a job gets it: credentials dropped (one warning naming them), shell session
    noise dropped, names a shell cannot export dropped; then the facility's required
    variables (``hybrid.gateway.required-env``) checked."""
    if env is None:
        env = {}
    if not isinstance(env, Mapping):
        raise ConfigurationError(field, env, "a mapping of variable names to strings, e.g. "
                                 "dict(os.environ)", "Pass a dict, not a list or a string.")
    kept: dict[str, str] = {}
    dropped: list[str] = []
    unnamed: list[str] = []
    for name, value in env.items():
        if not isinstance(value, str):
            raise ConfigurationError(f"{field}[{name!r}]", value, "a string value",
                                     f"Give {field}[{name!r}] as a string, e.g. str(value).")
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            unnamed.append(repr(name))
        elif name in _SESSION:
            continue
        elif _CREDENTIAL.match(name) or any(len(s) >= 8 and s in value for s in secrets):
            dropped.append(name)
        else:
            kept[name] = value
    if dropped:
        warn_user(f"hybrid: not giving the batch jobs these variables, which carry "
                  f"credentials: {', '.join(sorted(dropped))} (workers need only the "
                  "cluster's certificate)")
    if unnamed:
        warn_user(f"hybrid: not giving the batch jobs these variables, whose names a shell "
                  f"cannot export: {', '.join(sorted(unnamed))}")
    return required_environment(kept, field)


def required_environment(env: dict[str, str], field: str = "env") -> dict[str, str]:
    """``env`` with every variable the facility requires (``hybrid.gateway.required-env``),
    taken from this process's environment where ``env`` lacks one."""
    required = config.get("gateway.required-env", []) or []
    if isinstance(required, str) or not isinstance(required, (list, tuple)):
        raise ConfigurationError("hybrid.gateway.required-env", required,
                                 "a list of environment variable names")
    out = dict(env)
    for name in required:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ConfigurationError("hybrid.gateway.required-env", name,
                                     "environment variable names")
        if name in out:
            continue
        if name in os.environ:
            out[name] = os.environ[name]
            continue
        raise ConfigurationError(
            f"{field}[{name!r}]", None,
            "a value: this facility requires it for every job (hybrid.gateway.required-env)",
            f"Pass {field}={{{name!r}: ...}} (or env=dict(os.environ)), or set {name} in this "
            "process's environment.")
    return out


def _gateway_secrets(auth: Any) -> tuple[str, ...]:
    """The credential strings of a dask-gateway auth object (never to be sent to a job)."""
    values = (getattr(auth, attribute, None) for attribute in ("password", "api_token", "token"))
    return tuple(v for v in values if isinstance(v, str) and v)


def worker_address(value: Any, field_name: str) -> str:
    """``tls://HOST:PORT`` (what batch workers dial) from ``tls://``, ``gateway://`` or
    ``HOST:PORT``."""
    from hybrid.fields import address

    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.startswith("gateway://"):
        text = "tls://" + text[len("gateway://"):]
    try:
        return address(text, schemes=("tls",), default_scheme="tls")
    except Exception:
        raise ConfigurationError(field_name, value, "the gateway's TCP proxy as "
                                 "tls://HOST:PORT (or HOST:PORT)") from None


def batch_worker_address(proxy_address: str, worker_proxy_address: str | None) -> str:
    """What batch workers dial: ``worker_proxy_address``, else
    ``hybrid.gateway.worker-proxy-address``, else the host and port of ``proxy_address``."""
    configured = worker_proxy_address or config.get("gateway.worker-proxy-address", None)
    if configured:
        return worker_address(configured, "hybrid.gateway.worker-proxy-address")
    return worker_address(proxy_address, "proxy_address")


# ---------------------------------------------------------------------------------------------
# The pools of a cluster, as kept in the scheduler's metadata
# ---------------------------------------------------------------------------------------------
def pool_specs(options: Mapping[str, Any], env: Mapping[str, str],
               secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    """Validate the batch side of ``new_cluster``: ``{name: PoolSpec}`` (maybe empty).

    ``env`` is the top-level ``env`` as jobs get it (:func:`job_environment`)."""
    from hybrid.pools import PoolSpec

    pools = options.get("pools")
    if options.get("pool") is not None and not options["pool"]:
        raise ConfigurationError("pool", options["pool"], "a batch system's name, e.g. 'slurm' "
                                 "(or pool=None: a cluster of the gateway's own workers)")
    system = options.get("pool") or config.get("gateway.pool", None)
    single = {k: options[k] for k in POOL_KEYWORDS if options.get(k) is not None}
    single.pop("env", None)
    if pools is not None:
        if not isinstance(pools, Mapping) or not pools:
            raise ConfigurationError("pools", pools,
                                     "a non-empty mapping {name: {system: ..., ...}}")
        beside = [k for k in ("worker_cores", "worker_memory", "worker_gpus", "worker_walltime")
                  if k in single]  # (a container or environment applies to every entry)
        if "pool" in options or beside:
            key = "pool" if "pool" in options else beside[0]
            raise ConfigurationError(key, options.get(key, single.get(key)),
                                     "nothing beside pools=",
                                     "Set it inside each pools entry instead.")
        entries = {}
        for name, entry in pools.items():
            if not isinstance(entry, Mapping):
                raise ConfigurationError(f"pools[{name!r}]", entry, "a mapping of pool options")
            entry = dict(entry)
            for key in ("container_image", "pixi_project", "pixi_env", "conda_env"):
                if key in single and key not in entry and not any(
                        k in entry for k in ("container_image", "pixi_project", "conda_env")):
                    entry[key] = single[key]  # the top-level environment, unless its own
            entry["env"] = {**env, **job_environment(entry.get("env"), secrets,
                                                     f"pools[{name!r}].env")}
            entries[name] = entry
    elif system is None:
        if "env" in options and options["env"] is not None:
            single["env"] = options["env"]
        if single:
            key = next(iter(single))
            raise ConfigurationError(key, single[key], "a batch pool to apply to",
                                     "Give pool='slurm' (or htcondor, sge, pbs, lsf, local, "
                                     "kubernetes) or set hybrid.gateway.pool; this gateway "
                                     "does not offer the option itself.")
        return {}
    else:
        entry: dict[str, Any] = {"system": system}
        for keyword, option in POOL_KEYWORDS.items():
            if keyword in single:
                entry[option] = single[keyword]
        entry["memory"] = _gib(entry.get("memory"), "worker_memory")
        if entry.get("gpus"):
            entry.setdefault("serves_unannotated", True)  # a lone GPU pool runs CPU tasks too
        entry["env"] = dict(env)
        entries = {str(system): entry}
    specs = {}
    for name, entry in entries.items():
        entry = dict(entry)
        system_name = entry.pop("system", None)
        if system_name is None:
            raise ConfigurationError(f"pools[{name!r}].system", None,
                                     "the batch system of the pool")
        labels = ({option: keyword for keyword, option in POOL_KEYWORDS.items()}
                  if pools is None else {})
        if pools is not None:
            entry["memory"] = _gib(entry.get("memory"), f"pools[{name!r}].memory")
        specs[name] = PoolSpec.build(name, system_name,
                                     prefix="" if pools is None else f"pools[{name!r}].",
                                     labels={**labels, "system": "pool"} if pools is None
                                     else None, **entry)
    return specs


def offered_value(keyword: str, value: Any, default: Any) -> Any:
    """``value`` of an option the gateway offers, as its field reads it: a memory with its
    unit (``"8 GiB"``, a quantity) becomes GiB where the gateway's default is a number
    (dask-gateway's ``worker_memory`` is a ``Float`` of GiB); anything else as given."""
    numeric = isinstance(default, (int, float)) and not isinstance(default, bool)
    if keyword != "worker_memory" or not numeric or value is None or (
            isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    from hybrid.units import parse_memory, to_bytes

    return to_bytes(parse_memory(value, keyword)) / 2**30


def changed_options(options: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The values of a dask-gateway ``Options`` object that differ from the gateway's
    defaults: what its user chose (``{}`` without one)."""
    if not isinstance(options, Mapping):
        return {}
    return {key: value for key, value in options.items()
            if key in defaults and value != defaults[key]}


def _gib(memory: Any, field: str) -> Any:
    """dask-gateway's ``worker_memory`` unit: a bare number is GiB (anything else as given)."""
    if not isinstance(memory, (int, float)) or isinstance(memory, bool):
        return memory
    if not math.isfinite(memory) or memory <= 0:
        raise ConfigurationError(field, memory, 'GiB as a number > 0, or a memory such as '
                                 '"4 GiB"')
    return f"{memory} GiB"


def _settings_dict(worker_address_: str, specs: Mapping[str, Any], options: Mapping[str, Any],
                   submitted: set[str]) -> dict[str, Any]:
    return {"format": METADATA_FORMAT, "worker_scheduler_address": worker_address_,
            "annotate_resources": options.get("annotate_resources"),
            "gpu_fraction": options.get("gpu_fraction"),
            "pools": {name: spec.to_dict() for name, spec in specs.items()},
            "submitted": sorted(submitted)}


# ---------------------------------------------------------------------------------------------
# The gateway client and its clusters
# ---------------------------------------------------------------------------------------------


def wait_timeout(timeout: Any) -> float | None:
    """``wait_for_workers``' timeout in seconds (``None``: no limit), checked as
    :class:`~hybrid.HybridCluster`'s is."""
    from hybrid.fields import Interval, validate_value

    return None if timeout is None else validate_value(Interval, timeout,
                                                       "wait_for_workers.timeout")
