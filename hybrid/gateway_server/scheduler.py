"""Runs in a gateway cluster's scheduler: keeps batch workers, applies the admin's limits.

A distributed scheduler preload, named in ``ClusterConfig.scheduler_cmd``::

    dask scheduler --preload hybrid.gateway_server.scheduler ...

(the gateway appends ``--preload dask_gateway.scheduler_preload`` and its options itself).
:func:`dask_setup` adds one scheduler plugin, :class:`HybridGatewayPlugin`, which

- keeps workers the gateway did not start (*external* workers: batch jobs) out of the
  gateway's worker accounting, so the gateway's heartbeat never retires them, while the
  gateway's own workers are scaled and retired exactly as on a stock gateway;
- refuses, when it registers, an external worker that would take the cluster beyond the
  admin's ``cluster_max_workers`` / ``cluster_max_cores`` / ``cluster_max_memory`` (a log
  line names the limit; the worker's own log says the same), and publishes these limits in
  the scheduler's metadata under :data:`LIMITS_METADATA_KEY` for clients;
- shuts the cluster down (through the gateway) at ``max_lifetime`` or after
  ``client_timeout`` without a client (dask-gateway-server has neither setting): a client is
  a connected ``Client``, or a hybrid cluster object whose heartbeat
  (``CLIENT_HEARTBEAT_KEY``) moved; a process killed outright stops beating.

dask-gateway has no public hook for the first point, nor distributed for the second; what
this module relies on, and the tests that pin it, are listed in docs/gateway-server.md
("What hybrid relies on").

The settings come from the scheduler's environment, set by hybrid's gateway backend
(:mod:`hybrid.gateway_server.backend`): :data:`LIMITS_ENV`, :data:`MAX_LIFETIME_ENV`,
:data:`CLIENT_TIMEOUT_ENV`. The module imports only ``distributed`` (and ``dask_gateway``
when it is there), nothing of hybrid, so its source can also be given inline as the
``--preload`` argument on a scheduler image without hybrid. :func:`dask_setup` takes no click
options (only one preload per process may, and that one is the gateway's).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

logger = logging.getLogger("distributed.scheduler.hybrid_gateway")

#: The cluster's worker limits, JSON: {"max_workers": int|null, "max_cores": float|null,
#: "max_memory": int bytes|null} (what workers may use; the scheduler's share taken off).
LIMITS_ENV = "HYBRID_GATEWAY_LIMITS"
#: Seconds after which the cluster is shut down (0 or unset: no limit).
MAX_LIFETIME_ENV = "HYBRID_GATEWAY_MAX_LIFETIME"
#: Seconds without any connected client, counted from the scheduler's start (0 or unset: none).
CLIENT_TIMEOUT_ENV = "HYBRID_GATEWAY_CLIENT_TIMEOUT"
#: Where clients find the limits: ``client.get_metadata(LIMITS_METADATA_KEY)``.
LIMITS_METADATA_KEY = "hybrid-limits"
#: Where hybrid's cluster objects beat: ``{client id: count}``, counted up every few seconds
#: while an ``HTCGatewayCluster`` is open (it is no ``Client``, yet someone is using it).
CLIENT_HEARTBEAT_KEY = "hybrid-client-heartbeat"
#: The name of the plugin in ``scheduler.plugins``.
PLUGIN_NAME = "hybrid-gateway"

# The names dask-gateway-server gives the workers it starts: ``uuid4().hex`` (database
# backends), ``dask-worker-<cluster>-<5 characters>`` (Kubernetes pods, generateName).
_GATEWAY_WORKER_NAME = re.compile(r"[0-9a-f]{32}|dask-worker-[0-9a-f]{32}-[a-z0-9]{5}")
_FIRE_AND_FORGET_CLIENT = "fire-and-forget"


def is_gateway_worker(name: Any) -> bool:
    """True for a worker the gateway started itself (by the names the gateway gives them)."""
    return isinstance(name, str) and _GATEWAY_WORKER_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Limits:
    """What the workers of one cluster may add up to (``None``: no limit)."""

    max_workers: int | None = None
    max_cores: float | None = None
    max_memory: int | None = None

    @classmethod
    def from_json(cls, text: str) -> Limits:
        """Parse :data:`LIMITS_ENV`'s value; ValueError names what is wrong."""
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) - {"max_workers", "max_cores",
                                                       "max_memory"}:
            raise ValueError("expected an object with max_workers, max_cores, max_memory")
        values = {}
        for key, kind in (("max_workers", int), ("max_cores", float), ("max_memory", int)):
            value = data.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not math.isfinite(value) or value < 0):
                raise ValueError(f"{key} must be a number >= 0 or null, got {value!r}")
            values[key] = None if value is None else kind(value)
        return cls(**values)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Limits:
        """The limits in :data:`LIMITS_ENV`; unreadable limits refuse every external worker."""
        text = environ.get(LIMITS_ENV, "").strip()
        if not text:
            return cls()
        try:
            return cls.from_json(text)
        except ValueError as error:
            logger.error("%s=%r is not valid (%s): every external worker is refused until "
                         "the gateway sets it right", LIMITS_ENV, text, error)
            return cls(max_workers=0)

    def as_metadata(self) -> dict[str, Any]:
        """The value published under :data:`LIMITS_METADATA_KEY`."""
        return {"max_workers": self.max_workers, "max_cores": self.max_cores,
                "max_memory": self.max_memory}

    def exceeded(self, workers: Iterable[Any]) -> str | None:
        """Which limit these workers (``WorkerState``-like) exceed together, or None."""
        workers = list(workers)
        if self.max_workers is not None and len(workers) > self.max_workers:
            return (f"cluster_max_workers = {self.max_workers} (the cluster would have "
                    f"{len(workers)} workers)")
        cores = sum(ws.nthreads for ws in workers)
        if self.max_cores is not None and cores > self.max_cores:
            return (f"cluster_max_cores = {self.max_cores:g} for the workers (they would have "
                    f"{cores} threads)")
        if self.max_memory is not None:
            if any(not ws.memory_limit for ws in workers):
                return (f"cluster_max_memory = {self.max_memory} bytes for the workers (a "
                        "worker without a memory limit counts as unlimited)")
            memory = sum(ws.memory_limit for ws in workers)
            if memory > self.max_memory:
                return (f"cluster_max_memory = {self.max_memory} bytes for the workers (they "
                        f"would have {memory} bytes)")
        return None


@dataclass(frozen=True)
class _Registering:
    """The size of a worker that is registering (what :meth:`Limits.exceeded` reads)."""

    nthreads: int
    memory_limit: int


def _seconds_from_env(environ: Mapping[str, str], name: str) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        logger.error("%s=%r is not a number of seconds; no limit is applied", name, raw)
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


class GatewayWorkersOnly(SchedulerPlugin):
    """The gateway service's own plugin, shown only the workers the gateway started.

    dask-gateway's scheduler service learns the scheduler's workers through its plugin
    (``dask_gateway.scheduler_preload.GatewayPlugin``); behind this filter it counts, reports
    and retires only its own workers.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.forwarded: set[str] = set()

    def add_worker(self, scheduler: Any, worker: str) -> Any:
        ws = scheduler.workers.get(worker)
        if ws is None or not is_gateway_worker(ws.name):
            return None
        self.forwarded.add(worker)
        return self.inner.add_worker(scheduler, worker)

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> Any:
        if worker not in self.forwarded:
            return None
        self.forwarded.discard(worker)
        return self.inner.remove_worker(scheduler, worker, **kwargs)


def _stock_gateway_plugin_class() -> type | None:
    try:
        from dask_gateway.scheduler_preload import GatewayPlugin
    except ImportError:
        return None
    return GatewayPlugin


def _make_gateway_client() -> Any:
    from dask_gateway.scheduler_preload import make_gateway_client

    return make_gateway_client()


class HybridGatewayPlugin(SchedulerPlugin):
    """Keeps external workers, refuses those beyond the limits, enforces lifetimes.

    Parameters
    ----------
    limits
        The cluster's worker limits.
    max_lifetime, client_timeout
        Seconds (0: no limit); see the module's docstring.
    gateway_client
        Returns the object whose ``shutdown()`` coroutine stops the cluster through the
        gateway (default: dask-gateway's own client, from the scheduler's environment).
    """

    name = PLUGIN_NAME

    def __init__(self, limits: Limits | None = None, *, max_lifetime: float = 0,
                 client_timeout: float = 0,
                 gateway_client: Callable[[], Any] = _make_gateway_client) -> None:
        self.limits = limits or Limits()
        self.max_lifetime = max_lifetime
        self.client_timeout = client_timeout
        self.gateway_client = gateway_client
        self.scheduler: Any = None
        self.service: Any = None
        self.lifetime_task: asyncio.Task | None = None
        #: How many times the lifetimes were checked (tests count them).
        self.lifetime_checks = 0

    # -- scheduler plugin hooks -------------------------------------------------------------
    async def start(self, scheduler: Any) -> None:
        """Filter the gateway service's view of the workers; start the lifetime watch.

        Plugins start after every preload ran, so the gateway's service exists by now.
        """
        self.scheduler = scheduler
        self.adopt_gateway_service(scheduler)
        if (self.max_lifetime or self.client_timeout) and self.lifetime_task is None:
            self.lifetime_task = asyncio.ensure_future(self._enforce_lifetimes())

    def adopt_gateway_service(self, scheduler: Any) -> bool:
        """Put :class:`GatewayWorkersOnly` in front of the gateway service's plugin."""
        service = scheduler.services.get("gateway")
        stock = _stock_gateway_plugin_class()
        if service is None or stock is None:
            logger.warning("No dask-gateway service in this scheduler: hybrid only applies "
                           "the limits and lifetimes")
            return False
        for name, plugin in list(scheduler.plugins.items()):
            if isinstance(plugin, stock) and getattr(plugin, "service", None) is service:
                scheduler.remove_plugin(name=name)
                scheduler.add_plugin(GatewayWorkersOnly(plugin), name=name)
                self.service = service
                logger.info("The gateway counts and retires only its own workers; external "
                            "workers are kept")
                return True
        logger.error("dask-gateway's scheduler service has no GatewayPlugin: external workers "
                     "may be retired (an unsupported dask-gateway release?)")
        return False

    def guard_registration(self, scheduler: Any) -> None:
        """Refuse, when it registers, an external worker that would exceed the limits.

        The refused worker gets the scheduler's own registration error (as for a duplicate
        name), so it never joins: no task can reach it, and its log says which limit.
        """
        register = scheduler.handlers["register-worker"]

        async def register_worker(comm: Any, **worker: Any) -> Any:
            reason = self.refusal(scheduler, worker)
            if reason is None:
                return await register(comm, **worker)
            logger.warning("Refusing external worker %s (%s): it would exceed %s",
                           worker.get("name"), worker.get("address"), reason)
            await comm.write({"status": "error", "time": time.time(),
                              "message": f"hybrid: this cluster refuses the worker: it would "
                                         f"exceed {reason}"})
            return None

        scheduler.handlers["register-worker"] = register_worker

    def refusal(self, scheduler: Any, worker: Mapping[str, Any]) -> str | None:
        """Why a registering worker (its registration message) is refused; None: accepted."""
        if is_gateway_worker(worker.get("name")):
            return None  # the gateway limits its own workers
        newcomer = _Registering(nthreads=worker.get("nthreads") or 0,
                                memory_limit=worker.get("memory_limit") or 0)
        return self.limits.exceeded([*scheduler.workers.values(), newcomer])

    def add_worker(self, scheduler: Any, worker: str) -> None:
        ws = scheduler.workers.get(worker)
        if ws is not None and not is_gateway_worker(ws.name):
            logger.info("External worker %s joined (%s): kept, the gateway leaves it alone",
                        ws.name, worker)

    def valid_workers_downscaling(self, scheduler: Any, workers: list[Any]) -> list[Any]:
        """Only the gateway's surplus workers may be picked (never an external worker).
        Workers already being retired (by an earlier heartbeat: the gateway asks again
        while they leave) do not count as staying, so they are not replaced by more."""
        from distributed.core import Status

        own = [ws for ws in workers if is_gateway_worker(ws.name)]
        if self.service is None:
            return own
        leaving = getattr(self.service, "closing_workers", ())
        staying = sum(1 for ws in scheduler.workers.values() if is_gateway_worker(ws.name)
                      and ws.status in (Status.running, Status.paused)
                      and ws.name not in leaving)
        surplus = staying - self.service.count
        own = [ws for ws in own if ws.name not in leaving]
        idlest = sorted(own, key=lambda ws: (bool(ws.processing), ws.nbytes))
        return idlest[:max(0, surplus)]

    async def before_close(self) -> None:
        self._stop_lifetime_task()

    async def close(self) -> None:
        self._stop_lifetime_task()

    # -- lifetimes --------------------------------------------------------------------------
    def _stop_lifetime_task(self) -> None:
        if self.lifetime_task is not None:
            self.lifetime_task.cancel()
            self.lifetime_task = None

    def _connected_clients(self) -> int:
        return sum(1 for client in self.scheduler.clients if client != _FIRE_AND_FORGET_CLIENT)

    def _client_beats(self) -> dict[str, Any]:
        """A copy of the heartbeats of hybrid's cluster objects (``{}``: none)."""
        try:
            beats = self.scheduler.get_metadata(keys=[CLIENT_HEARTBEAT_KEY], default=None)
        except Exception:  # a scheduler without metadata: no beat
            return {}
        return dict(beats) if isinstance(beats, Mapping) else {}

    def lifetime_reason(self, now: float, started: float, last_client_seen: float) -> str | None:
        """Why the cluster must stop at ``now`` (None: it may go on)."""
        if self.max_lifetime and now - started >= self.max_lifetime:
            return f"it reached its maximum lifetime of {self.max_lifetime:g} s"
        if self.client_timeout and now - last_client_seen >= self.client_timeout:
            return f"no client was connected for {self.client_timeout:g} s"
        return None

    async def _enforce_lifetimes(self) -> None:
        limits = [t for t in (self.max_lifetime, self.client_timeout) if t > 0]
        period = min(5.0, max(0.2, min(limits) / 4))
        loop = asyncio.get_running_loop()
        started = last_client_seen = loop.time()
        beats = self._client_beats()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            self.lifetime_checks += 1
            previous, beats = beats, self._client_beats()
            if self._connected_clients() or (beats and beats != previous):
                last_client_seen = now
            reason = self.lifetime_reason(now, started, last_client_seen)
            if reason is None:
                continue
            logger.warning("Shutting the cluster down: %s", reason)
            try:
                await self.gateway_client().shutdown()
                return
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.warning("Asking the gateway to shut the cluster down failed: %s", error)


def plugin_from_environment(environ: Mapping[str, str] | None = None) -> HybridGatewayPlugin:
    """The plugin with the limits and lifetimes of the scheduler's environment."""
    environ = os.environ if environ is None else environ
    return HybridGatewayPlugin(Limits.from_environment(environ),
                               max_lifetime=_seconds_from_env(environ, MAX_LIFETIME_ENV),
                               client_timeout=_seconds_from_env(environ, CLIENT_TIMEOUT_ENV))


def dask_setup(scheduler: Any) -> None:
    """Add :class:`HybridGatewayPlugin`, guard registrations, publish the limits (preload)."""
    plugin = plugin_from_environment()
    scheduler.add_plugin(plugin, name=PLUGIN_NAME)
    plugin.guard_registration(scheduler)
    scheduler.set_metadata(keys=[LIMITS_METADATA_KEY], value=plugin.limits.as_metadata())
    logger.info("hybrid gateway plugin: external workers kept, limits %s",
                plugin.limits.as_metadata())
