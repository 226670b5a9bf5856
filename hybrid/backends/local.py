"""Local processes: the embedded default, with a GPU pool and a CPU pool side by side.

The scheduler listens on loopback and, as every scheduler hybrid starts, speaks TLS with a
certificate made for it (:mod:`hybrid.security`): other users of the machine reach loopback
too. The worker processes get the files' paths in their environment.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from distributed import SpecCluster
from distributed.deploy.subprocess import SubprocessWorker
from distributed.security import Security

from hybrid.annotator import worker_resources
from hybrid.backends.base import BaseDaskBackend
from hybrid.errors import ConfigurationError, warn_user
from hybrid.fields import count, validate_value
from hybrid.gpusharing import detect_gpus
from hybrid.resources import ComputeResources
from hybrid.security import (
    ClusterCredentials,
    dashboard_link,
    dashboard_listen,
    dashboard_ssl_context,
    own_security,
    remove_credentials,
    scheduler_class,
    store_credentials,
)


class NoGPUWarning(UserWarning):
    """A GPU pool was started on a machine where no GPU device was found."""


class LocalWorkerProcess(SubprocessWorker):
    """distributed's ``SubprocessWorker`` whose process logs at ``logging_level`` (its
    console messages go to this process's stderr), with ``environment`` added to its
    environment (the TLS files' paths: never their contents on a command line)."""

    def __init__(self, scheduler: str, *, logging_level: str = "warning",
                 environment: Mapping[str, str] | None = None, **kwargs: Any):
        super().__init__(scheduler, **kwargs)
        self.logging_level = logging_level
        self.environment = dict(environment or {})

    async def _start(self) -> None:
        import asyncio
        import json
        import sys

        env = {**os.environ, "DASK_LOGGING__DISTRIBUTED": self.logging_level,
               **self.environment}
        spec = json.dumps({"cls": self.worker_class, "opts": dict(self.worker_kwargs)})
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dask", "spec", self.scheduler, "--spec", spec, env=env)


def local_worker_specs(
    pool: str, count: int, resources: ComputeResources, devices: list[str] | None = None,
    serves_cpu_tasks: bool = False,
) -> dict[str, dict[str, Any]]:
    """``SpecCluster`` worker specs for ``count`` local workers of one pool.

    GPU worker ``i`` sees only its own devices through ``CUDA_VISIBLE_DEVICES``; with too
    few devices (or none) the ids wrap around, and a :class:`NoGPUWarning` says so.
    """
    specs: dict[str, dict[str, Any]] = {}
    gpus = resources.number_of_gpus
    if gpus and count:
        devices = detect_gpus() if devices is None else devices
        if not devices:
            warn_user(
                f"pool {pool!r}: no GPU device was found (no nvidia-smi, or CUDA_VISIBLE_DEVICES "
                "is empty); its workers advertise the GPU resource for routing, but tasks run "
                "on the CPU",
                NoGPUWarning,
            )
        elif len(devices) < gpus * count:
            warn_user(
                f"pool {pool!r} asks for {gpus * count} GPUs but {len(devices)} are visible: "
                "workers will share devices",
                NoGPUWarning,
            )
    for i in range(count):
        env: dict[str, str] = {}
        if gpus:
            if devices:
                ids = [devices[(i * gpus + j) % len(devices)] for j in range(gpus)]
                env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
            else:
                env["CUDA_VISIBLE_DEVICES"] = ""
        # A subprocess of its own (``python -m dask spec``), not a multiprocessing child of
        # this process: a script without ``if __name__ == "__main__":`` (openff-evaluator's
        # examples) is never imported again by a worker's start.
        specs[f"{pool}-{i}"] = {
            "cls": LocalWorkerProcess,
            "options": {
                "worker_class": "distributed.Nanny",
                "name": f"{pool}-{i}",
                "worker_kwargs": {
                    "nthreads": resources.number_of_threads,
                    "resources": worker_resources(gpus, resources.number_of_threads,
                                                  serves_cpu_tasks),
                    "env": env,
                    "name": f"{pool}-{i}",
                },
            },
        }
    return specs


class LocalSpecCluster(SpecCluster):
    """``SpecCluster`` whose ``dashboard_link`` says where the dashboard really is
    (``https`` when it is served over TLS)."""

    hybrid_dashboard: str | None = None

    @property
    def dashboard_link(self) -> str:
        """The dashboard's address."""
        if self.hybrid_dashboard is not None:
            return self.hybrid_dashboard
        return super().dashboard_link


def tls_environment(credentials: ClusterCredentials) -> dict[str, str]:
    """The ``DASK_...`` variables that make a worker (and its nanny) speak TLS with the
    cluster's files."""
    files = credentials.files
    return {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": files.ca,
            "DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT": files.cert,
            "DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY": files.key}


class DaskLocalCluster(BaseDaskBackend):
    """Workers as local processes (openff-evaluator's ``DaskLocalCluster`` arguments).

    ``pools`` adds named pools beside the first one, e.g.
    ``pools={"cpu": (2, ComputeResources(number_of_threads=1))}``; the first pool is named
    ``"gpu"`` when its workers have GPUs, else ``"cpu"``. The scheduler listens on loopback
    with TLS (``security=False``, or ``hybrid.scheduler.tls: false``: plain TCP); the
    dashboard where ``dashboard_address`` says (``True``: ``hybrid.scheduler.dashboard-address``,
    loopback by default; ``None``: none).
    """

    def __init__(
        self,
        number_of_workers: int = 1,
        resources_per_worker: ComputeResources | None = None,
        *,
        annotate_resources: bool | None = None,
        pools: Mapping[str, tuple[int, ComputeResources]] | None = None,
        gpu_fraction: float | None = None,
        dashboard_address: str | bool | None = True,
        silence_logs: int | str = logging.WARNING,
        security: Security | bool | None = None,
    ):
        resources_per_worker = resources_per_worker or ComputeResources()
        super().__init__(number_of_workers, resources_per_worker,
                         annotate_resources=annotate_resources, gpu_fraction=gpu_fraction)
        validate_value(count(0, None, "an integer >= 0"), number_of_workers,
                       "DaskLocalCluster.number_of_workers")
        if not isinstance(resources_per_worker, ComputeResources):
            raise ConfigurationError(
                "DaskLocalCluster.resources_per_worker",
                resources_per_worker,
                "a hybrid.resources.ComputeResources",
            )
        first = "gpu" if resources_per_worker.is_gpu else "cpu"
        self.pools: dict[str, tuple[int, ComputeResources]] = {}
        if number_of_workers:
            self.pools[first] = (number_of_workers, resources_per_worker)
        for name, spec in (pools or {}).items():
            if name in self.pools:
                raise ConfigurationError(
                    f"DaskLocalCluster.pools[{name!r}]", spec,
                    f"a pool name other than {sorted(self.pools)}",
                )
            if not (
                isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], int)
                and not isinstance(spec[0], bool) and spec[0] >= 0
                and isinstance(spec[1], ComputeResources)
            ):
                raise ConfigurationError(
                    f"DaskLocalCluster.pools[{name!r}]", spec,
                    "a tuple (number_of_workers >= 0, ComputeResources(...))",
                )
            self.pools[name] = spec
        if not self.pools:
            raise ConfigurationError(
                "DaskLocalCluster.number_of_workers", number_of_workers,
                "at least one worker in some pool",
            )
        dashboard_listen(dashboard_address)  # a bad value fails here
        self.dashboard_address = dashboard_address
        if security is not None and not isinstance(security, (bool, Security)):
            raise ConfigurationError("DaskLocalCluster.security", security,
                                     "a distributed.Security, True (TLS, the default) or "
                                     "False (plain TCP on loopback)")
        self.security = security
        self._credentials: ClusterCredentials | None = None
        self.silence_logs = (
            silence_logs if isinstance(silence_logs, int)
            else logging.getLevelName(str(silence_logs).upper())
        )

    def worker_specs(self) -> dict[str, dict[str, Any]]:
        """The workers this cluster starts, as ``SpecCluster`` specs (data, not processes)."""
        specs: dict[str, dict[str, Any]] = {}
        devices = None
        offset = 0
        # With no CPU pool at all, GPU workers take CPU tasks too, or those would never run.
        only_gpu = all(resources.is_gpu for _, resources in self.pools.values())
        for name, (workers, resources) in self.pools.items():
            if resources.is_gpu and devices is None:
                devices = detect_gpus()
            pool_devices = devices[offset:] if devices else devices
            pool_specs = local_worker_specs(name, workers, resources, pool_devices, only_gpu)
            for spec in pool_specs.values():
                spec["options"]["worker_kwargs"]["silence_logs"] = self.silence_logs
                spec["options"]["logging_level"] = logging.getLevelName(self.silence_logs)
            specs.update(pool_specs)
            if resources.is_gpu and devices:
                offset += workers * resources.number_of_gpus
        return specs

    def _start_cluster(self) -> SpecCluster:
        import uuid

        security = own_security(self.security, "DaskLocalCluster.security")
        listen, show = dashboard_listen(self.dashboard_address)
        credentials = None
        if security is not None:
            credentials = self._credentials = store_credentials(
                f"hybrid-local-{uuid.uuid4().hex[:8]}", security)
        tls = credentials is not None and credentials.tls
        specs = self.worker_specs()
        for spec in specs.values():
            spec["options"]["environment"] = tls_environment(credentials) if tls else {}
        scheduler = {
            "cls": scheduler_class(),
            "options": {"dashboard_address": listen, "dashboard": show, "host": "127.0.0.1",
                        "security": security or Security(),
                        "dashboard_ssl": dashboard_ssl_context(credentials.files.cert,
                                                               credentials.files.key)
                        if tls and show else None},
        }
        cluster = LocalSpecCluster(
            workers=specs, scheduler=scheduler, name="hybrid-local",
            silence_logs=self.silence_logs, security=security or Security(),
        )
        cluster.hybrid_dashboard = dashboard_link(cluster.scheduler, tls) if show else ""
        if credentials is not None:
            self._credentials = credentials.record(
                scheduler_address=cluster.scheduler_address,
                worker_scheduler_address=cluster.scheduler_address,
                dashboard_link=cluster.hybrid_dashboard or None)
        return cluster

    def stop(self) -> None:
        """Close the client and the cluster, then delete the cluster's stored credentials;
        safe to call more than once."""
        try:
            super().stop()
        finally:
            credentials, self._credentials = self._credentials, None
            if credentials is not None:
                remove_credentials(credentials)
