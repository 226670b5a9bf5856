"""The shared batch layer: a job described as data, a batch system interface, a tracked pool.

One module per batch system implements :class:`BatchSystem`; :class:`BatchPool` is what the
rest of hybrid uses: it stages the job files, renders the script (``job_script()``), submits
n workers in one transaction, reconciles their states by polling, removes exactly the jobs
asked for, and on :meth:`BatchPool.close` removes every job and checks none is left.
"""

from __future__ import annotations

import abc
import logging
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar

from hybrid import config
from hybrid.errors import BatchError, ConfigurationError
from hybrid.templates import render
from hybrid.units import parse_walltime
from hybrid.worker import TLSFiles, WorkerOptions, check_name

logger = logging.getLogger(__name__)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class JobState(str, Enum):
    """Where a job stands, in the same words for every batch system."""

    pending = "pending"
    running = "running"
    held = "held"
    finished = "finished"
    failed = "failed"
    removed = "removed"

    @property
    def active(self) -> bool:
        """Pending, running or held: the job still occupies the queue."""
        return self in (JobState.pending, JobState.running, JobState.held)


@dataclass(frozen=True)
class JobStatus:
    """One job as the batch system reports it."""

    job_id: str
    state: JobState
    reason: str | None = None
    cluster: str | None = None
    pool: str | None = None
    scheduler: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"job_id": self.job_id, "state": self.state.value, "reason": self.reason,
                "cluster": self.cluster, "pool": self.pool, "scheduler": self.scheduler}


@dataclass(frozen=True)
class JobSpec:
    """One worker job, as data: what the template renders and the system submits."""

    cluster: str
    pool: str
    worker: WorkerOptions
    cores: int = 1
    memory: int | None = None
    gpus: int = 0
    walltime: str | None = None
    queue: str | None = None
    account: str | None = None
    job_extra_directives: tuple[str, ...] = ()
    prologue: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    lease_seconds: int = 86400
    tls_source: TLSFiles | None = None

    def __post_init__(self) -> None:
        check_name(self.cluster, "cluster name")
        check_name(self.pool, "pool name")
        for name, value in self.env.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ConfigurationError(
                    "env", name, "environment variable names matching [A-Za-z_][A-Za-z0-9_]*"
                )
            if not isinstance(value, str):
                raise ConfigurationError(f"env[{name!r}]", value, "a string value")
        for label, value in (("queue", self.queue), ("account", self.account)):
            if value is not None:
                check_name(value, label)
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise ConfigurationError("cores", self.cores, "an integer >= 1")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 0:
            raise ConfigurationError("gpus", self.gpus, "an integer >= 0")
        if self.lease_seconds <= 0:
            raise ConfigurationError("hybrid.batch.lease", self.lease_seconds, "a duration > 0")
        if self.walltime is not None:
            object.__setattr__(self, "walltime", parse_walltime(self.walltime, "walltime"))
        if re.search(r"[\s,'\"\\]", self.worker.scheduler_address):
            # the address rides in every system's job tag (comment, -v variable, -Jd)
            raise ConfigurationError(
                "scheduler_address", self.worker.scheduler_address,
                "an address without white space, commas, quotes or backslashes",
            )

    @property
    def name_prefix(self) -> str:
        """Workers are named ``<cluster>-<pool>-<batch job id>``."""
        return f"{self.cluster}-{self.pool}"

    @property
    def job_name(self) -> str:
        """The batch job name: the tag prefix, the cluster and the pool."""
        return f"{tag_prefix()}-{self.cluster}-{self.pool}"


def _hhmm(seconds: int) -> str:
    minutes = -(-seconds // 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def tag_prefix() -> str:
    """The tag that marks our jobs (``hybrid.batch.tag``)."""
    return check_name(str(config.get("batch.tag")), "hybrid.batch.tag")


def parse_tag(value: str) -> tuple[str | None, str | None, str | None]:
    """``<tag>:<cluster>:<pool>[:<scheduler address>]`` -> (cluster, pool, scheduler).

    Slurm carries it in ``--comment``, PBS in a job variable, LSF in ``-Jd``.
    """
    parts = value.split(":", 3)
    if len(parts) >= 3 and parts[0] == tag_prefix():
        return parts[1], parts[2], parts[3] if len(parts) == 4 else None
    return None, None, None


def worker_name_suffix(job_id: str) -> str:
    """The part of a worker name the job derives from its id (as the shell wrapper does)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", job_id)


def run_command(argv: Sequence[str], *, input: str | None = None, timeout: float = 60,
                check: bool = True, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess:
    """Run a batch tool; a missing tool or a failure raises :class:`BatchError` with its words."""
    try:
        result = subprocess.run(
            list(argv), input=input, capture_output=True, text=True, timeout=timeout,
            env={**os.environ, **env} if env else None,
        )
    except FileNotFoundError:
        raise BatchError(
            f"{argv[0]!r} was not found: install the batch system's client tools on this node "
            "or add them to PATH"
        ) from None
    except subprocess.TimeoutExpired:
        raise BatchError(f"{' '.join(argv)} did not answer within {timeout:g} s") from None
    if check and result.returncode != 0:
        words = (result.stderr or result.stdout).strip()
        raise BatchError(f"{' '.join(argv[:2])} failed (exit {result.returncode}): {words}")
    return result


def staging_root() -> Path:
    """Where pools stage their job files (``hybrid.batch.staging-directory``)."""
    configured = config.get("batch.staging-directory", None)
    root = Path(str(configured)).expanduser() if configured else (
        Path.home() / ".cache" / "hybrid" / "jobs")
    if re.search(r"[\s,'\"\\$`]", str(root)):
        raise ConfigurationError(
            "hybrid.batch.staging-directory", str(root),
            "a path without spaces, commas, quotes, backslashes, $ or backticks (batch "
            "directives cannot quote them)",
        )
    return root


def write_private(path: Path, data: str | bytes, mode: int = 0o600) -> Path:
    """Write a file that only its owner can read: created with ``mode`` (never wider)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data.encode() if isinstance(data, str) else data)
    finally:
        os.close(fd)
    return path


class BatchSystem(abc.ABC):
    """One batch system: render, submit n in one transaction, query, remove."""

    #: The name users give (``system="slurm"``).
    name: ClassVar[str]
    #: The template in ``jobtemplates/`` for the job script or submit description.
    template: ClassVar[str]
    #: True when job files travel with the job (HTCondor file transfer); False when the
    #: execute side reads them from the staging directory on a shared filesystem.
    ships_files: ClassVar[bool] = False

    def job_paths(self, staging: Path) -> TLSFiles:
        """Where the worker finds the TLS files."""
        if self.ships_files:
            return TLSFiles("ca.pem", "cert.pem", "key.pem")
        return TLSFiles(str(staging / "ca.pem"), str(staging / "cert.pem"),
                        str(staging / "key.pem"))

    def context(self, spec: JobSpec, staging: Path, count: int) -> dict[str, Any]:
        """Template variables shared by every system."""
        env = {**config.worker_dask_environment(), **spec.env}
        worker = spec.worker
        secret_files = []
        if spec.tls_source is not None:
            paths = self.job_paths(staging)
            worker = replace(worker, tls=paths)
            secret_files = [paths.ca, paths.cert, paths.key]
        hhmm = spec.walltime or _hhmm(spec.lease_seconds)
        return {
            "spec": spec,
            "cluster": spec.cluster,
            "pool": spec.pool,
            "job_name": spec.job_name,
            "tag": tag_prefix(),
            "count": count,
            "staging": str(staging),
            "env": env,
            "prologue": list(spec.prologue),
            "command": worker.argv(),
            "name_prefix": spec.name_prefix,
            "secret_files": secret_files,
            "extra_directives": list(spec.job_extra_directives),
            "scheduler": spec.worker.scheduler_address,
            "walltime": f"{hhmm}:00",
            "walltime_hhmm": hhmm,
            "lease_seconds": spec.lease_seconds,
            "vacate_seconds": int(config.get("batch.job-max-vacate-time", 10)),
        }

    def render(self, spec: JobSpec, staging: Path, count: int = 1) -> str:
        """The job script or submit description for ``count`` workers."""
        return render(self.template, **self.context(spec, staging, count))

    @abc.abstractmethod
    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """Submit ``count`` workers in ONE transaction; return every worker's job id."""

    @abc.abstractmethod
    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs (those carrying the tag), optionally of one cluster or these ids.

        With ``history`` also jobs that have left the queue, where the system remembers them.
        """

    @abc.abstractmethod
    def remove(self, job_ids: Iterable[str]) -> None:
        """Remove exactly these jobs."""

    def remove_cluster(self, cluster: str) -> list[str]:
        """Remove every active job of ``cluster``; return their ids."""
        ids = [j.job_id for j in self.query(cluster=cluster) if j.state.active]
        if ids:
            self.remove(ids)
        return ids


class BatchPool:
    """The jobs of one pool of one cluster on one batch system, tracked by id."""

    def __init__(self, system: BatchSystem, spec: JobSpec):
        self.system = system
        self.spec = spec
        self.jobs: dict[str, JobStatus] = {}
        self.submit_calls = 0
        self.remove_calls = 0
        self._staging: Path | None = None

    @property
    def staging(self) -> Path:
        """The pool's private staging directory (created on first use, mode 0700)."""
        if self._staging is None:
            root = staging_root()
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = root / f"{self.spec.cluster}-{self.spec.pool}-{secrets.token_hex(4)}"
            path.mkdir(mode=0o700)
            self._staging = path
            self._stage_secrets(path)
        return self._staging

    def _stage_secrets(self, path: Path) -> None:
        source = self.spec.tls_source
        if source is None:
            return
        for name, src in (("ca.pem", source.ca), ("cert.pem", source.cert),
                          ("key.pem", source.key)):
            try:
                data = Path(src).read_bytes()
            except OSError as error:
                raise ConfigurationError(
                    "tls", src, f"a readable certificate or key file ({error.strerror})"
                ) from None
            write_private(path / name, data)

    def job_script(self, count: int = 1) -> str:
        """The job script (or submit description) as it would be submitted, for reading."""
        return self.system.render(self.spec, self.staging, count)

    def submit(self, count: int) -> list[str]:
        """Submit ``count`` workers in one transaction and start tracking them."""
        if count <= 0:
            return []
        self.submit_calls += 1
        ids = self.system.submit(self.spec, self.staging, count)
        for job_id in ids:
            self.jobs[job_id] = JobStatus(job_id, JobState.pending, cluster=self.spec.cluster,
                                          pool=self.spec.pool)
        logger.info("pool %s: submitted %d worker job(s): %s", self.spec.pool, len(ids), ids)
        return ids

    def refresh(self) -> dict[str, JobStatus]:
        """Reconcile tracked jobs with the batch system; jobs it no longer lists are finished."""
        if not self.jobs:
            return {}
        tracked = [j for j, s in self.jobs.items() if s.state.active]
        if not tracked:
            return dict(self.jobs)
        seen = {s.job_id: s for s in self.system.query(job_ids=tracked)}
        missing = [j for j in tracked if j not in seen]
        if missing:
            seen.update({s.job_id: s for s in self.system.query(job_ids=missing, history=True)})
        for job_id in tracked:
            self.jobs[job_id] = seen.get(
                job_id, JobStatus(job_id, JobState.finished, "no longer in the queue",
                                  self.spec.cluster, self.spec.pool))
        return dict(self.jobs)

    def active(self) -> list[str]:
        """Ids of jobs still pending, running or held (as of the last refresh)."""
        return [j for j, s in self.jobs.items() if s.state.active]

    def by_state(self, *states: JobState) -> list[JobStatus]:
        """Tracked jobs in these states."""
        return [s for s in self.jobs.values() if s.state in states]

    def remove(self, job_ids: Iterable[str]) -> None:
        """Remove exactly these jobs and mark them removed."""
        ids = [j for j in job_ids]
        if not ids:
            return
        self.remove_calls += 1
        self.system.remove(ids)
        for job_id in ids:
            old = self.jobs.get(job_id)
            self.jobs[job_id] = JobStatus(job_id, JobState.removed, "removed by hybrid",
                                          self.spec.cluster, self.spec.pool,
                                          old.scheduler if old else None)

    def job_id_of_worker(self, worker_name: str) -> str | None:
        """The job id behind a worker name ``<cluster>-<pool>-<id>``, if it is ours."""
        prefix = self.spec.name_prefix + "-"
        if not worker_name.startswith(prefix):
            return None
        suffix = worker_name[len(prefix):]
        for job_id in self.jobs:
            if worker_name_suffix(job_id) == suffix:
                return job_id
        return None

    def close(self, timeout: float = 60) -> None:
        """Remove every job of this pool, wait until the system lists none, drop staging.

        A pool that never submitted and tracks no job (it only rendered scripts) has
        nothing to remove and does not ask the batch system.
        """
        if self.submit_calls == 0 and not self.jobs:
            self.close_staging()
            return
        try:
            active = [s.job_id for s in self.system.query(cluster=self.spec.cluster)
                      if s.state.active and s.pool == self.spec.pool]
            tracked = self.active()
            ids = sorted(set(active) | set(tracked))
            if ids:
                self.remove(ids)
            deadline = time.monotonic() + timeout
            while True:
                left = [s for s in self.system.query(cluster=self.spec.cluster)
                        if s.state.active and s.pool == self.spec.pool]
                if not left:
                    break
                if time.monotonic() > deadline:
                    raise BatchError(
                        f"pool {self.spec.pool}: {len(left)} job(s) still listed after removal: "
                        + ", ".join(f"{s.job_id} ({s.state.value})" for s in left)
                    )
                time.sleep(0.5)
        finally:
            self.close_staging()

    def close_staging(self) -> None:
        """Delete the staging directory (job files, TLS copies)."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None


def remove_staging_of(cluster: str) -> list[Path]:
    """Delete every staging directory of ``cluster`` (after its jobs are gone)."""
    root = staging_root()
    removed = []
    if root.is_dir():
        for path in root.glob(f"{cluster}-*-*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
