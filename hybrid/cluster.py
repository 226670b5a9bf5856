"""``HybridCluster``: one Dask cluster, many named pools of workers from different systems.

Each pool is a system (``"local"``, ``"htcondor"``, ``"slurm"``, ``"pbs"``, ``"lsf"``,
``"kubernetes"``, or a :class:`~hybrid.batch.BatchSystem` instance) plus the resources of
its workers. :meth:`HybridCluster.scale` sets a pool's target: it submits only the missing
workers (one transaction) or retires the surplus gracefully and removes exactly their jobs.
:meth:`HybridCluster.adapt` scales each pool on its own from the demand for its resource.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cloudpickle
from distributed import Scheduler
from distributed.core import rpc
from distributed.deploy.cluster import Cluster
from distributed.protocol.pickle import dumps
from distributed.security import Security
from distributed.utils import sync
from tqdm import tqdm

from hybrid import config, scheduler_probe
from hybrid.annotator import GPU, NOT_GPU, HybridClient, worker_resources
from hybrid.annotator import gpu_fraction as validated_gpu_fraction
from hybrid.batch import BatchPool, BatchSystem, JobSpec, JobState, get_system
from hybrid.batch.base import write_private
from hybrid.errors import ConfigurationError, HybridError, WorkersDidNotArrive
from hybrid.resources import ComputeResources, PodResources, QueueWorkerResources
from hybrid.units import parse_memory, parse_walltime, to_bytes
from hybrid.worker import (
    ContainerOptions,
    TLSFiles,
    WorkerOptions,
    check_name,
    default_worker_settings,
)

logger = logging.getLogger(__name__)

cloudpickle.register_pickle_by_value(scheduler_probe)


class Pool:
    """A named pool: its batch jobs, the resource it serves and its scaling target."""

    def __init__(self, name: str, batch: BatchPool, processes: int, threads: int, gpus: int,
                 serves_unannotated: bool, fraction: float):
        self.name = name
        self.batch = batch
        self.processes = processes
        self.threads = threads
        self.gpus = gpus
        self.serves_unannotated = serves_unannotated
        self.fraction = fraction
        self.target = 0
        self.adaptive: Any = None

    @property
    def system(self) -> BatchSystem:
        """The batch system the pool's jobs run on."""
        return self.batch.system

    @property
    def resource(self) -> str:
        """``"GPU"`` for a GPU pool, else ``"notGPU"``."""
        return GPU if self.gpus else NOT_GPU

    @property
    def tasks_per_job(self) -> int:
        """How many annotated tasks one job's workers can run at once."""
        if self.gpus:
            return max(1, int(self.gpus / self.fraction)) * self.processes
        return self.threads * self.processes

    def job_script(self, count: int = 1) -> str:
        """The job script this pool submits, for reading."""
        return self.batch.job_script(count)

    def __repr__(self) -> str:
        return (f"<Pool {self.name!r} on {self.system.name}: target {self.target}, "
                f"{len(self.batch.active())} active job(s)>")


class HybridCluster(Cluster):
    """A Dask cluster whose workers come from several pools at once.

    ``scheduler_address=None`` starts a scheduler in this process, listening on ``host``
    (default ``hybrid.scheduler.host``: every interface, so batch nodes can reach it); otherwise the
    cluster manages workers for an existing scheduler (a gateway cluster, for instance), and
    ``worker_scheduler_address``/``scheduler_sni`` say how workers reach it. ``security`` is a
    ``distributed.Security``; ``security=True`` makes a temporary TLS setup.
    """

    def __init__(
        self,
        scheduler_address: str | None = None,
        *,
        name: str | None = None,
        security: Security | bool | None = None,
        host: str | None = None,
        worker_scheduler_address: str | None = None,
        scheduler_sni: str | None = None,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        dashboard_address: str | None = ":0",
        loop: Any = None,
        quiet: bool = True,
    ):
        name = check_name(name or f"hybrid-{uuid.uuid4().hex[:8]}", "HybridCluster.name")
        if security is True:
            security = Security.temporary()
        elif security is False:
            security = None
        if security is not None and not isinstance(security, Security):
            raise ConfigurationError("HybridCluster.security", security,
                                     "a distributed.Security, True for temporary TLS, or None")
        self.security = security or Security()
        self.annotate_resources = annotate_resources
        self.gpu_fraction = gpu_fraction
        self._fraction = validated_gpu_fraction(gpu_fraction)
        self.pools: dict[str, Pool] = {}
        self._external_address = scheduler_address
        self._worker_scheduler_address = worker_scheduler_address
        self.scheduler_sni = scheduler_sni
        self._host = host if host is not None else (config.get("scheduler.host", "") or None)
        self._dashboard_address = dashboard_address
        self.scheduler: Scheduler | None = None
        self._tls_dir: Path | None = None
        self._tls_files: TLSFiles | None = None
        super().__init__(asynchronous=False, loop=loop, quiet=quiet, name=name)
        self._loop_runner.start()
        try:
            self.sync(self._start)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ start and stop
    async def _start(self) -> None:
        if self._external_address is None:
            self.scheduler = Scheduler(
                host=self._host, port=0, dashboard_address=self._dashboard_address,
                security=self.security, validate=False,
            )
            await self.scheduler
            address = self.scheduler.address
        else:
            address = self._external_address
        self._scheduler_address = address
        self.scheduler_comm = rpc(address, connection_args=self.security.get_connection_args(
            "client"))
        await super()._start()

    @property
    def scheduler_address(self) -> str:
        """The address clients connect to."""
        return self._scheduler_address

    @property
    def dashboard_link(self) -> str:
        """The scheduler's dashboard, when it has one."""
        try:
            return super().dashboard_link
        except (KeyError, TypeError):
            return ""

    @property
    def worker_scheduler_address(self) -> str:
        """The address workers dial (the gateway proxy, for instance)."""
        return self._worker_scheduler_address or self.scheduler_address

    def get_client(self) -> HybridClient:
        """A :class:`~hybrid.annotator.HybridClient` connected to this cluster."""
        return HybridClient(self, annotate_resources=self.annotate_resources,
                            gpu_fraction=self.gpu_fraction, set_as_default=False)

    def _stop_adaptive(self) -> None:
        for pool in list(getattr(self, "pools", {}).values()):
            if pool.adaptive is not None:
                pool.adaptive.stop()
                pool.adaptive = None

    def _release(self) -> None:
        """Drop this process's TLS copies and stop its event loop thread."""
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None
        if self._loop_runner is not None:
            self._loop_runner.stop()

    def detach(self, timeout: float | None = None) -> None:
        """Disconnect and leave the jobs running (another process may ``connect`` to them).

        Only for a cluster attached to an existing scheduler: one that runs its own
        scheduler takes it, and so its workers, down with it; use :meth:`close`.
        """
        if self._external_address is None:
            raise HybridError("this cluster runs its own scheduler: close() it instead")
        self._stop_adaptive()
        try:
            super().close(timeout)
        finally:
            self._release()

    def close(self, timeout: float | None = None) -> None:
        """Stop adaptivity, remove every job of every pool (checked), stop the scheduler."""
        errors: list[str] = []
        self._stop_adaptive()
        for pool in list(getattr(self, "pools", {}).values()):
            try:
                pool.batch.close()
                closed = getattr(pool.system, "cluster_closed", None)
                if closed is not None:
                    closed(self.name)  # what the system keeps per cluster (a TLS secret)
            except Exception as error:  # keep closing the other pools
                errors.append(f"pool {pool.name}: {error}")
        try:
            super().close(timeout)
        finally:
            if self.scheduler is not None and self.loop is not None:
                scheduler, self.scheduler = self.scheduler, None
                try:
                    sync(self.loop, scheduler.close)
                except Exception as error:
                    errors.append(f"scheduler: {error}")
            self._release()
        if errors:
            raise HybridError("closing left work behind: " + "; ".join(errors))

    # ------------------------------------------------------------------ pools
    def _worker_tls(self) -> TLSFiles | None:
        """The cluster's TLS files on disk (0600 in a 0700 directory), for staging."""
        if not self.security.require_encryption and not str(
                self.worker_scheduler_address).startswith("tls://"):
            return None
        if self._tls_files is None:
            sec = self.security
            ca, cert, key = sec.tls_ca_file, sec.tls_client_cert, sec.tls_client_key
            if not (ca and cert):
                raise ConfigurationError(
                    "HybridCluster.security", sec,
                    "a Security with tls_ca_file and tls_client_cert (and key) for TLS workers")
            self._tls_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-tls-"))
            os.chmod(self._tls_dir, 0o700)
            paths = []
            for label, value in (("ca.pem", ca), ("cert.pem", cert), ("key.pem", key or cert)):
                text = value if "-----BEGIN" in str(value) else Path(value).read_text()
                paths.append(str(write_private(self._tls_dir / label, text)))
            self._tls_files = TLSFiles(*paths)
        return self._tls_files

    def add_pool(
        self,
        name: str,
        system: str | BatchSystem = "local",
        resources: ComputeResources | PodResources | None = None,
        *,
        cores: int | None = None,
        memory: Any = None,
        processes: int = 1,
        walltime: Any = None,
        queue: str | None = None,
        account: str | None = None,
        job_extra_directives: Sequence[str] = (),
        worker_extra_args: Sequence[str] = (),
        job_script_prologue: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        container_image: str | None = None,
        container_binds: Sequence[str] = (),
        nanny: bool | None = None,
        lease: Any = None,
        serves_unannotated: bool | None = None,
        death_timeout: int | None = None,
        launcher: Sequence[str] = (),
        **system_options: Any,
    ) -> Pool:
        """Add a named pool and return it (nothing is submitted until :meth:`scale`).

        ``launcher`` words run the worker inside an environment (``pixi run ...``).
        ``serves_unannotated`` (default: True for CPU pools) makes the pool's workers take
        CPU tasks too; give it to a GPU pool that has no CPU pool beside it.
        ``resources`` gives threads, GPUs, memory and wall time; the dask-jobqueue keys
        ``cores``, ``memory``, ``processes``, ``walltime``, ``job_extra_directives``,
        ``worker_extra_args`` and ``job_script_prologue`` mean what they mean there.
        """
        check_name(name, "pool name")
        if name in self.pools:
            raise ConfigurationError("pool name", name, f"a name not in {sorted(self.pools)}")
        field = f"add_pool({name!r})"
        threads_total, gpus, memory_bytes, hhmm = _from_resources(resources, field)
        if cores is not None:
            if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
                raise ConfigurationError(f"{field}.cores", cores, "an integer >= 1")
            if resources is not None and cores != threads_total:
                raise ConfigurationError(f"{field}.cores", cores,
                                         f"the resources' number_of_threads ({threads_total}) "
                                         "or no cores at all")
            threads_total = cores
        if memory is not None:
            memory_bytes = to_bytes(parse_memory(memory, f"{field}.memory"))
        if walltime is not None:
            hhmm = parse_walltime(walltime, f"{field}.walltime")
        if isinstance(processes, bool) or not isinstance(processes, int) or not (
                1 <= processes <= threads_total):
            raise ConfigurationError(f"{field}.processes", processes,
                                     f"an integer from 1 to cores ({threads_total})")
        threads = threads_total // processes
        settings = default_worker_settings()
        if death_timeout is not None:
            settings["death_timeout"] = death_timeout
        if container_image:
            settings["container"] = ContainerOptions(container_image,
                                                     binds=tuple(container_binds))
        if nanny is not None:
            settings["nanny"] = nanny
        settings["extra_args"] = tuple(settings["extra_args"]) + tuple(worker_extra_args)
        if processes > 1:
            if not settings["nanny"] or self.scheduler_sni:
                raise ConfigurationError(
                    f"{field}.processes", processes,
                    "1 when workers run without a nanny (nanny=False, or an SNI, which a "
                    "nanny cannot pass): several worker processes per job need a nanny")
            settings["extra_args"] += ("--nworkers", str(processes))
        tls = self._worker_tls()
        worker = WorkerOptions(
            scheduler_address=self.worker_scheduler_address,
            nthreads=threads,
            memory_limit=memory_bytes // processes if memory_bytes else None,
            resources=worker_resources(gpus, threads, bool(serves_unannotated)),
            tls=tls,
            scheduler_sni=self.scheduler_sni,
            python=python,
            launcher=tuple(launcher),
            **settings,
        )
        lease_seconds = _lease_seconds(lease, f"{field}.lease")
        spec = JobSpec(
            cluster=self.name, pool=name, worker=worker, cores=threads_total,
            memory=memory_bytes or None, gpus=gpus, walltime=hhmm, queue=queue,
            account=account, job_extra_directives=tuple(job_extra_directives),
            prologue=tuple(job_script_prologue), env=dict(env or {}),
            lease_seconds=lease_seconds, tls_source=tls,
        )
        if isinstance(resources, PodResources) and not isinstance(system, BatchSystem) and str(
                system).lower() == "kubernetes":
            system_options.setdefault("pod_resources", resources)  # affinity, storage, ...
        batch_system = system if isinstance(system, BatchSystem) else get_system(
            system, **system_options)
        pool = Pool(name, BatchPool(batch_system, spec), processes, threads, gpus,
                    serves_unannotated if serves_unannotated is not None else not gpus,
                    self._fraction)
        self.pools[name] = pool
        return pool

    def pool(self, name: str | None = None) -> Pool:
        """The pool called ``name``; with one pool, ``None`` means that one."""
        if name is None:
            if len(self.pools) == 1:
                return next(iter(self.pools.values()))
            raise ConfigurationError(
                "pool", None,
                f"a pool name, one of {sorted(self.pools)}" if self.pools else
                "a pool: add one first with cluster.add_pool(name, system=...)")
        if name not in self.pools:
            raise ConfigurationError("pool", name, f"one of {sorted(self.pools)}")
        return self.pools[name]

    # ------------------------------------------------------------------ scaling
    def scale(self, n: int | None = None, pool: str | None = None, **kwargs: Any) -> None:
        """Set ``pool``'s target to ``n`` workers (jobs): submit the missing, retire the surplus.

        Pending jobs count toward the target, so repeating a call never over-submits.
        """
        if n is None:
            n = kwargs.pop("jobs", None)
        if kwargs:
            raise ConfigurationError("scale", sorted(kwargs), "scale(n, pool=None)")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigurationError("scale.n", n, "a whole number of workers >= 0")
        target = self.pool(pool)
        if target.adaptive is not None:
            target.adaptive.stop()
            target.adaptive = None
        self._scale_pool(target, n)

    def _scale_pool(self, pool: Pool, n: int, idle_only: bool = False) -> None:
        pool.target = n
        pool.batch.refresh()
        active = pool.batch.active()
        if len(active) < n:
            pool.batch.submit(n - len(active))
        elif len(active) > n:
            self._retire(pool, len(active) - n, idle_only=idle_only)

    def _live_workers(self) -> dict[str, dict[str, Any]]:
        """Worker address -> info, asked of the scheduler now.

        Not the pushed ``scheduler_info``: a second cluster manager on the same scheduler (a
        ``connect`` from another process) takes over that subscription.
        """
        return dict(self.sync(self.scheduler_comm.identity).get("workers", {}))

    def _pool_workers(self, pool: Pool) -> dict[str, str]:
        """Job id -> worker address, for the pool's connected workers."""
        out = {}
        for address, info in self._live_workers().items():
            name = str(info.get("name", ""))
            job_id = pool.batch.job_id_of_worker(_strip_process_index(name, pool.processes))
            if job_id is not None:
                out.setdefault(job_id, address)
        return out

    def _retire(self, pool: Pool, count: int, idle_only: bool = False,
                busy: Mapping[str, int] | None = None) -> list[str]:
        """Remove ``count`` jobs: first those with no worker yet, then retired workers."""
        connected = self._pool_workers(pool)
        active = pool.batch.active()
        unconnected = [j for j in active if j not in connected]
        unconnected.sort(key=lambda j: pool.batch.jobs[j].state != JobState.pending)
        chosen = unconnected[:count]
        removed = list(chosen)
        if chosen:
            pool.batch.remove(chosen)
        left = count - len(chosen)
        if left > 0 and connected:
            load = busy if busy is not None else self._busy()
            live = self._live_workers()
            names = {a: str(live[a].get("name")) for a in connected.values() if a in live}
            candidates = sorted(connected.items(), key=lambda kv: load.get(names.get(kv[1]), 0))
            if idle_only:
                candidates = [kv for kv in candidates if load.get(names.get(kv[1]), 0) == 0]
            candidates = candidates[:left]
            if candidates:
                addresses = [a for _, a in candidates]
                retired = self.sync(self.scheduler_comm.retire_workers, workers=addresses,
                                    close_workers=True, remove=True)
                jobs = [j for j, a in candidates if a in (retired or {})]
                if jobs:
                    pool.batch.refresh()
                    still = [j for j in jobs if pool.batch.jobs[j].state.active]
                    pool.batch.remove(still)
                    removed += jobs
        return removed

    def _busy(self) -> dict[str, int]:
        return self._probe()["busy"]

    def _probe(self) -> dict[str, Any]:
        """Demand per resource and per-worker load, computed on the scheduler."""
        response = self.sync(
            self.scheduler_comm.run_function,
            function=dumps(scheduler_probe.resource_demand), args=dumps(()),
            kwargs=dumps({"resource_names": (GPU, NOT_GPU)}), wait=True,
        )
        if response.get("status") != "OK":
            raise HybridError(f"the scheduler could not report its demand: {response}")
        return response["result"]

    def adapt(self, pool: str | None = None, minimum: int = 0, maximum: int = 10,
              interval: Any = "2s", wait_count: int = 3, pending_timeout: Any = "5 minutes",
              **kwargs: Any):
        """Scale ``pool`` between ``minimum`` and ``maximum`` from the demand for its resource."""
        from hybrid.adaptive import PoolAdaptive

        target = self.pool(pool)
        if target.adaptive is not None:
            target.adaptive.stop()
        target.adaptive = PoolAdaptive(self, target, minimum=minimum, maximum=maximum,
                                       interval=interval, wait_count=wait_count,
                                       pending_timeout=pending_timeout, **kwargs)
        target.adaptive.start()
        return target.adaptive

    # ------------------------------------------------------------------ waiting
    def connected_workers(self, pool: str | None = None) -> list[str]:
        """Names of the connected workers of ``pool`` (or of every pool)."""
        pools = [self.pool(pool)] if pool is not None else list(self.pools.values())
        names = []
        for info in self._live_workers().values():
            name = str(info.get("name", ""))
            if any(p.batch.job_id_of_worker(_strip_process_index(name, p.processes))
                   for p in pools):
                names.append(name)
        return names

    def wait_for_workers(self, n: int, pool: str | None = None, timeout: Any = None,
                         progress: bool = True) -> None:
        """Block until ``n`` workers of ``pool`` are connected.

        Raises :class:`~hybrid.errors.WorkersDidNotArrive` with the batch system's own reasons
        when jobs are held or failed, or when ``timeout`` passes.
        """
        from dask.utils import parse_timedelta

        pools = [self.pool(pool)] if pool is not None or len(self.pools) == 1 else list(
            self.pools.values())
        label = pools[0].name if len(pools) == 1 else "all pools"
        limit = parse_timedelta(timeout) if timeout is not None else None
        deadline = time.monotonic() + limit if limit is not None else None
        poll = parse_timedelta(config.get("batch.poll-interval"))
        last_refresh = 0.0
        with tqdm(total=n, desc=f"workers ({label})", unit="worker",
                  disable=not progress, leave=False, mininterval=1.0) as bar:
            while True:
                have = sum(len(self.connected_workers(p.name)) for p in pools)
                if min(have, n) != bar.n:
                    bar.update(min(have, n) - bar.n)
                if have >= n:
                    return
                now = time.monotonic()
                if now - last_refresh >= poll:
                    last_refresh = now
                    self._check_jobs(pools, n, have)
                if deadline is not None and now > deadline:
                    raise WorkersDidNotArrive(
                        f"{have} of {n} workers of {label} connected after {limit:g} s. "
                        + _job_report(pools))
                time.sleep(0.2)

    def _check_jobs(self, pools: Iterable[Pool], n: int, have: int) -> None:
        states = []
        for pool in pools:
            pool.batch.refresh()
            states += list(pool.batch.jobs.values())
        held = [s for s in states if s.state is JobState.held]
        if held:
            raise WorkersDidNotArrive(
                f"{len(held)} job(s) are held and will not start by themselves: "
                + "; ".join(f"{s.job_id}: {s.reason}" for s in held))
        active = [s for s in states if s.state.active]
        failed = [s for s in states if s.state is JobState.failed]
        if failed and len(active) < n:
            raise WorkersDidNotArrive(
                f"only {len(active)} job(s) are still queued or running for {n} workers "
                f"({have} connected); failed: "
                + "; ".join(f"{s.job_id}: {s.reason}" for s in failed))


def _job_report(pools: Iterable[Pool]) -> str:
    lines = []
    for pool in pools:
        for status in pool.batch.refresh().values():
            reason = f" ({status.reason})" if status.reason else ""
            lines.append(f"{pool.name} job {status.job_id}: {status.state.value}{reason}")
    return "Jobs: " + ("; ".join(lines) if lines else "none submitted (call scale first)")


def _strip_process_index(name: str, processes: int) -> str:
    """``dask worker --nworkers k --name N`` names its workers ``N-0 .. N-(k-1)``."""
    if processes > 1 and "-" in name:
        return name.rsplit("-", 1)[0]
    return name


def _from_resources(resources: Any, field: str) -> tuple[int, int, int, str | None]:
    """(threads, gpus, memory bytes, wall time) from a resource object."""
    if resources is None:
        return 1, 0, 0, None
    if isinstance(resources, QueueWorkerResources):
        return (resources.number_of_threads, resources.number_of_gpus, resources.memory_bytes,
                resources.wallclock_time_limit)
    if isinstance(resources, PodResources):
        return resources.number_of_threads, resources.number_of_gpus, resources.memory_bytes, None
    if isinstance(resources, ComputeResources):
        return resources.number_of_threads, resources.number_of_gpus, 0, None
    raise ConfigurationError(f"{field}.resources", resources,
                             "ComputeResources, QueueWorkerResources or PodResources")


def _lease_seconds(value: Any, field: str) -> int:
    from dask.utils import parse_timedelta

    raw = config.get("batch.lease") if value is None else value
    try:
        seconds = parse_timedelta(raw)
    except (ValueError, TypeError, KeyError):
        raise ConfigurationError(field, raw, 'a duration such as "24h" or 3600') from None
    if not seconds or seconds <= 0:
        raise ConfigurationError(field, raw, "a duration > 0")
    return math.ceil(seconds)

