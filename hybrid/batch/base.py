"""The batch system contract, the job a system renders, and what every system shares.

One module per system implements :class:`BatchSystem`: it renders its own files, submits n
workers in ONE transaction, queries and removes exactly our jobs, checks its own tools (for
``hybrid doctor``) and has its own configuration section ``hybrid.batch.<name>`` (its
:class:`BatchSystem.Settings`). Slurm, PBS and LSF share the command-line skeleton of
:class:`CommandLineSystem`. Tracking jobs over time is the pool manager's
(:mod:`hybrid.manager`); a system object holds no job state of its own (but the local one,
whose "batch system" is this process).
"""

from __future__ import annotations

import abc
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from hybrid import config
from hybrid.errors import BatchError, ConfigurationError, ToolMissing
from hybrid.fields import validate
from hybrid.worker import Connection, TLSFiles, read_pem, worker_command

if TYPE_CHECKING:
    from hybrid.admin.doctor import CheckResult
    from hybrid.pools import PoolSpec


class JobState(str, Enum):
    """Where a job stands, in the same words for every batch system."""

    pending = "pending"
    running = "running"
    held = "held"
    #: Asked to go, still in the queue (its processes may still be stopping).
    removing = "removing"
    finished = "finished"
    failed = "failed"
    removed = "removed"

    @property
    def active(self) -> bool:
        """Pending, running, held or being removed: the job still occupies the queue."""
        return self in (JobState.pending, JobState.running, JobState.held, JobState.removing)


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


#: The tag of ``hybrid.yaml`` (staging directories recorded before tags were recorded).
DEFAULT_TAG = "HybridCluster"


def tag_prefix() -> str:
    """The tag that marks our jobs (``hybrid.batch.tag``): it names a job attribute."""
    tag = config.get("batch.tag")
    if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", tag):
        raise ConfigurationError("hybrid.batch.tag", tag,
                                 "1-63 characters from A-Z a-z 0-9 _, not starting with a "
                                 "digit (it names an HTCondor job attribute)")
    return tag


@dataclass(frozen=True)
class WorkerJob:
    """One pool's worker job in one cluster: what a system renders and submits."""

    cluster: str
    spec: PoolSpec
    connection: Connection

    @property
    def pool(self) -> str:
        """The pool's name."""
        return self.spec.name

    @property
    def tag(self) -> str:
        """``hybrid.batch.tag``."""
        return tag_prefix()

    @property
    def name_prefix(self) -> str:
        """Workers are named ``<cluster>-<pool>-<batch job id>``."""
        return f"{self.cluster}-{self.spec.name}"

    @property
    def job_name(self) -> str:
        """The batch job name: the tag, the cluster and the pool."""
        return f"{self.tag}-{self.cluster}-{self.spec.name}"

    @property
    def tag_value(self) -> str:
        """``<tag>:<cluster>:<pool>:<scheduler address>``, read back by :func:`parse_tag`."""
        return f"{self.tag}:{self.cluster}:{self.spec.name}:{self.connection.scheduler_address}"


def parse_tag(value: str, tag: str | None = None) -> tuple[str | None, str | None, str | None]:
    """``<tag>:<cluster>:<pool>[:<scheduler address>]`` -> (cluster, pool, scheduler);
    ``tag``: :func:`tag_prefix`, when the caller already has it."""
    parts = value.split(":", 3)
    if len(parts) >= 3 and parts[0] == (tag or tag_prefix()):
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
        raise ToolMissing(
            f"{argv[0]!r} was not found: install the batch system's client tools on this node "
            "or add them to PATH (`hybrid doctor --system ...` checks them)"
        ) from None
    except subprocess.TimeoutExpired:
        raise BatchError(f"{' '.join(argv)} did not answer within {timeout:g} s") from None
    if check and result.returncode != 0:
        words = (result.stderr or result.stdout).strip()
        raise BatchError(f"{' '.join(argv[:2])} failed (exit {result.returncode}): {words}")
    return result


# --------------------------------------------------------------------------- staging
STAGING_RECORD = "hybrid-staging.json"


def staging_root() -> Path:
    """Where pools stage their job files (``hybrid.batch.staging-directory``)."""
    configured = config.get("batch.staging-directory", None)
    root = Path(str(configured)).expanduser() if configured else (
        Path.home() / ".cache" / "hybrid" / "jobs")
    if re.search(r"[\s,'\"\\$`%]", str(root)):
        raise ConfigurationError(
            "hybrid.batch.staging-directory", str(root),
            "a path without spaces, commas, quotes, backslashes, $, backticks or % (batch "
            "directives cannot quote them; Slurm reads %j in a log path as the job id)",
            "Choose a plain directory, e.g. ~/.cache/hybrid/jobs.",
        )
    return root


def write_private(path: Path, data: str | bytes, mode: int = 0o600) -> Path:
    """Write a file that only its owner can read: created with ``mode`` (never wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data.encode() if isinstance(data, str) else data)
    finally:
        os.close(fd)
    return path


class Staging:
    """A pool's private staging directory (0700): job files and the TLS copies jobs read.

    It records who made it (``hybrid-staging.json``: cluster, pool, system, scheduler), so
    ``hybrid gc`` can remove it once its jobs are gone, even when no process closed it.
    """

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, job: WorkerJob) -> Staging:
        """A new directory ``<cluster>-<pool>-<random>`` under :func:`staging_root`."""
        root = staging_root()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = root / f"{job.cluster}-{job.pool}-{secrets.token_hex(4)}"
        path.mkdir(mode=0o700)
        staging = cls(path)
        try:
            write_private(path / STAGING_RECORD, json.dumps({
                "cluster": job.cluster, "pool": job.pool, "system": job.spec.system,
                "tag": tag_prefix(), "scheduler": job.connection.scheduler_address,
                "created": time.time()}))
            staging.stage_tls(job.connection.tls)
        except BaseException:
            staging.remove()
            raise
        return staging

    @staticmethod
    def would_be(job: WorkerJob) -> Path:
        """The kind of path :meth:`create` makes, for showing scripts (nothing is made)."""
        return staging_root() / f"{job.cluster}-{job.pool}-XXXXXXXX"

    def stage_tls(self, tls: TLSFiles | None) -> None:
        """Write the cluster's TLS material in, 0600."""
        if tls is None:
            return
        for name, source in (("ca.pem", tls.ca), ("cert.pem", tls.cert), ("key.pem", tls.key)):
            write_private(self.path / name, read_pem(source))

    def remove(self) -> None:
        """Delete the directory and everything in it."""
        shutil.rmtree(self.path, ignore_errors=True)

    @staticmethod
    def record(path: Path) -> dict[str, Any] | None:
        """What a staging directory says about itself (``None`` if unreadable)."""
        try:
            return json.loads((path / STAGING_RECORD).read_text())
        except (OSError, ValueError):
            return None


def staging_directories(cluster: str | None = None) -> list[Path]:
    """Staging directories under :func:`staging_root` (of one ``cluster``, if given)."""
    root = staging_root()
    if not root.is_dir():
        return []
    pattern = f"{cluster}-*-*" if cluster else "*"
    return sorted(p for p in root.glob(pattern) if p.is_dir())


def remove_staging_of(cluster: str) -> list[Path]:
    """Delete every staging directory of ``cluster`` (after its jobs are gone)."""
    removed = []
    for path in staging_directories(cluster):
        record = Staging.record(path)
        if record is None or record.get("cluster") == cluster:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


# --------------------------------------------------------------------------- orphans
def scheduler_reachable(address: str | None, timeout: float = 3.0) -> bool:
    """True when something accepts TCP connections at the scheduler address (or when the
    address is unknown: never remove what cannot be judged)."""
    import socket

    from distributed.comm.addressing import get_address_host_port

    if not address:
        return True
    try:
        host, port = get_address_host_port(address)
    except (ValueError, TypeError):
        return True
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def find_orphans(system: BatchSystem, timeout: float = 3.0) -> list[JobStatus]:
    """Active jobs of ours whose scheduler no longer answers."""
    verdict: dict[str | None, bool] = {}
    orphans = []
    for job in system.query():
        if not job.state.active or job.state is JobState.removing:
            continue
        if job.scheduler not in verdict:
            verdict[job.scheduler] = scheduler_reachable(job.scheduler, timeout)
        if not verdict[job.scheduler]:
            orphans.append(job)
    return orphans


def remove_orphaned_staging(system: BatchSystem, timeout: float = 3.0,
                            dry_run: bool = False, removed: Iterable[str] = ()) -> list[Path]:
    """Staging directories of ``system``'s clusters that no job needs any more: none of the
    cluster's jobs is in the queue (jobs being removed, and the ``removed`` ids, e.g. the
    orphans ``hybrid gc`` just removed, do not count while they stop) and its scheduler does
    not answer. Removed unless ``dry_run``; returns them."""
    found = []
    live: set[str] | None = None
    gone = set(removed)
    tag = tag_prefix()
    for path in staging_directories():
        record = Staging.record(path)
        if record is None or record.get("system") != system.name:
            continue
        if record.get("tag", DEFAULT_TAG) != tag:
            continue  # another tag's (another user's): its jobs are not in this query
        if live is None:
            live = {j.cluster for j in system.query() if j.state.active and j.cluster
                    and j.state is not JobState.removing and j.job_id not in gone}
        if record.get("cluster") in live or scheduler_reachable(record.get("scheduler"),
                                                                timeout):
            continue
        found.append(path)
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
    return found


def remove_orphaned_clusters(system: BatchSystem, timeout: float = 3.0,
                             dry_run: bool = False, removed: Iterable[str] = ()) -> list[str]:
    """Clusters whose leftovers besides jobs (a Kubernetes cluster's Secret) no job needs
    any more: none of the cluster's jobs is active (the ``removed`` ids do not count) and its
    scheduler does not answer. Their leftovers are dropped unless ``dry_run``."""
    kept = system.kept_clusters()
    if not kept:
        return []
    gone = set(removed)
    live = {j.cluster for j in system.query() if j.state.active and j.cluster
            and j.state is not JobState.removing and j.job_id not in gone}
    found = [name for name, scheduler in sorted(kept.items())
             if name not in live and not scheduler_reachable(scheduler, timeout)]
    if not dry_run:
        for name in found:
            system.cluster_closed(name)
    return found


# --------------------------------------------------------------------------- systems
class SystemSettings(BaseModel):
    """A system's own settings (its section ``hybrid.batch.<name>``, minus pool options)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


@dataclass(frozen=True)
class ReservedOptions:
    """Options of a system's directive lines that hybrid sets itself, read the way the
    system's own option parser reads them: every option of the line, a short option with its
    value attached (``-a3``) or after flags grouped with it, a long option by any prefix
    (``--arr`` is ``--array``) or with ``=value``, a whole-word option (LSF's ``-Jd``)."""

    #: The directive's own prefix a line may start with (``#SBATCH``).
    prefix: str
    #: Short option letter -> what hybrid sets with it.
    short: Mapping[str, str]
    #: Long option name (no dashes) -> what hybrid sets with it.
    long: Mapping[str, str] = dataclass_field(default_factory=dict)
    #: Short options that take no value (a line may group them: ``-vJ name``).
    flags: str = ""
    #: Whole single-dash words -> what (for systems whose options are words: LSF).
    words: Mapping[str, str] = dataclass_field(default_factory=dict)

    def find(self, line: str) -> str | None:
        """What an option of ``line`` would override, or ``None``."""
        import shlex

        try:
            tokens = shlex.split(line)
        except ValueError:
            tokens = line.split()
        if tokens and tokens[0] == self.prefix:
            tokens = tokens[1:]
        for token in tokens:
            if token in self.words:
                return self.words[token]
            if token.startswith("--") and len(token) > 2:
                name = token[2:].split("=", 1)[0]
                for option, what in self.long.items():
                    if option.startswith(name):
                        return what
            elif token.startswith("-") and len(token) > 1 and not self.words:
                for letter in token[1:]:
                    if letter in self.short:
                        return self.short[letter]
                    if letter not in self.flags:
                        break
        return None


class BatchSystem(abc.ABC):
    """One batch system: render, submit n in one transaction, query, remove, check."""

    #: The name users give (``system="slurm"``).
    name: ClassVar[str]
    #: The template in ``jobtemplates/`` for the job script or submit description.
    template: ClassVar[str]
    #: True when job files travel with the job (HTCondor file transfer, pod secrets); False
    #: when the execute side reads them from the staging directory on a shared filesystem.
    ships_files: ClassVar[bool] = False
    #: The client tools this system needs on the submit node (``hybrid doctor``).
    tools: ClassVar[tuple[str, ...]] = ()
    #: ``(pattern, what hybrid sets with it)``: extra directives matching a pattern are
    #: refused, since they would override what hybrid relies on.
    reserved_directives: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The system's own settings.
    Settings: ClassVar[type[SystemSettings]] = SystemSettings
    #: What to check when the system's tools are there but do not answer (``hybrid doctor``).
    unreachable_fix: ClassVar[str] = ("Check that the batch system's client tools work from "
                                      "this node (configuration, credentials, network).")

    def __init__(self, **settings: Any):
        self.settings = validate(self.Settings, settings, prefix=f"{self.name}.")

    # ------------------------------------------------------------------ settings
    @classmethod
    def settings_from(cls, data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """Validated settings as plain data (what a pool records to rebuild the system)."""
        return validate(cls.Settings, data, prefix=prefix).model_dump(mode="json",
                                                                       exclude_defaults=True)

    def options(self) -> dict[str, Any]:
        """This system's settings as plain data (``system_options`` of a pool)."""
        return self.settings.model_dump(mode="json", exclude_defaults=True)

    @classmethod
    def options_from_resources(cls, resources: Any) -> dict[str, Any]:
        """System settings a resource object implies (Kubernetes: affinity, storage...)."""
        return {}

    #: The command-line options of this system's directives that hybrid sets itself.
    reserved_options: ClassVar[ReservedOptions | None] = None

    @classmethod
    def reserved(cls) -> tuple[tuple[str, str], ...]:
        """The directive patterns refused in ``job_extra_directives``."""
        return cls.reserved_directives

    @classmethod
    def refused_directive(cls, directive: str) -> str | None:
        """What hybrid sets itself that ``directive`` would override (``None``: nothing)."""
        for pattern, what in cls.reserved():
            if re.search(pattern, directive):
                return what
        return cls.reserved_options.find(directive) if cls.reserved_options else None

    @classmethod
    def check_spec(cls, spec: PoolSpec) -> None:
        """Refuse what this system cannot carry: directives that override hybrid's own."""
        from hybrid.fields import reject

        for index, directive in enumerate(spec.job_extra_directives):
            what = cls.refused_directive(directive)
            if what is not None:
                raise reject(f"a directive that does not set {what} (hybrid sets it)",
                             "Leave it out: hybrid sets it for each submission.",
                             field=f"job_extra_directives[{index}]", value=directive)

    # ------------------------------------------------------------------ rendering
    def job_paths(self, staging: Path) -> TLSFiles:
        """Where the worker finds the TLS files."""
        if self.ships_files:
            return TLSFiles("ca.pem", "cert.pem", "key.pem")
        return TLSFiles(str(staging / "ca.pem"), str(staging / "cert.pem"),
                        str(staging / "key.pem"))

    def walltime(self, job: WorkerJob) -> str:
        """The job's wall time ``"HH:MM"``: the pool's, else the lease's."""
        if job.spec.walltime:
            return job.spec.walltime
        minutes = -(-job.spec.lease // 60)
        return f"{minutes // 60:02d}:{minutes % 60:02d}"

    def context(self, job: WorkerJob, staging: Path, count: int) -> dict[str, Any]:
        """Template variables shared by every system."""
        tls = self.job_paths(staging) if job.connection.tls is not None else None
        hhmm = self.walltime(job)
        return {
            "job": job,
            "spec": job.spec,
            "cluster": job.cluster,
            "pool": job.pool,
            "job_name": job.job_name,
            "tag": job.tag,
            "tag_value": job.tag_value,
            "count": count,
            "staging": str(staging),
            "env": {**config.worker_dask_environment(), **job.spec.env},
            "prologue": list(job.spec.job_script_prologue),
            "worker": worker_command(job.spec, job.connection, tls),
            "name_prefix": job.name_prefix,
            "secret_files": [tls.ca, tls.cert, tls.key] if tls else [],
            "extra_directives": list(job.spec.job_extra_directives),
            "scheduler": job.connection.scheduler_address,
            "walltime": f"{hhmm}:00",
            "walltime_hhmm": hhmm,
            "lease_seconds": job.spec.lease,
            # shared filesystem: the job appends its output to worker-<id>.log in staging
            "log_directory": None if self.ships_files else str(staging),
        }

    def render(self, job: WorkerJob, staging: Path, count: int = 1) -> str:
        """The job script or submit description for ``count`` workers."""
        from hybrid.templates import render

        return render(self.template, **self.context(job, staging, count))

    def job_files(self, job: WorkerJob, staging: Path, count: int = 1) -> dict[str, str]:
        """Every file a submission writes or sends, by name (for ``job_script()``)."""
        return {self.template.removesuffix(".j2"): self.render(job, staging, count)}

    def job_script(self, job: WorkerJob, staging: Path, count: int = 1) -> str:
        """The job's files as one text, for reading before anything is submitted."""
        files = self.job_files(job, staging, count)
        if len(files) == 1:
            return next(iter(files.values()))
        return "".join(f"# --- {name} ---\n{text}" for name, text in files.items())

    def log_path(self, staging: Path, job_id: str) -> Path | None:
        """Where a job's output lands (``None`` when it cannot be read from here)."""
        if self.ships_files:
            return None
        return staging / f"worker-{worker_name_suffix(job_id)}.log"

    # ------------------------------------------------------------------ operations
    @abc.abstractmethod
    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
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

    def cluster_closed(self, cluster: str) -> None:  # noqa: B027 - most systems keep nothing
        """After a cluster's pools are closed: drop what the system keeps per cluster."""

    def kept_clusters(self) -> dict[str, str | None]:
        """Clusters for which the system keeps something besides jobs (what
        :meth:`cluster_closed` drops), with their scheduler's address; most keep nothing."""
        return {}

    def check(self, timeout: float = 20.0) -> CheckResult:
        """Whether this node can use the system (``hybrid doctor``): tools, then a query."""
        from hybrid.admin.doctor import fail, ok

        name = f"batch system ({self.name})"
        missing = [tool for tool in self.tools if shutil.which(tool) is None]
        if missing:
            return fail(name, f"{', '.join(missing)} not found on PATH",
                        f"Install the {self.name} client tools on this node or add them to "
                        "PATH.")
        try:
            self.query()
        except BatchError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            query_tool = self.query_argv(None, False)[0] if isinstance(
                self, CommandLineSystem) else self.name
            return fail(name, f"{query_tool} present but not answering: {first}",
                        self.unreachable_fix)
        return ok(name, (", ".join(self.tools) + " present; " if self.tools else "")
                  + "a query of our jobs answers")


class CommandLineSystem(BatchSystem):
    """The skeleton Slurm, PBS and LSF share: a script on stdin, a query tool, a remove tool.

    A subclass gives its commands and how to read their answers; the query filters our jobs
    by the tag, whatever the tool.
    """

    #: The submit command; the rendered script goes to its standard input.
    submit_command: ClassVar[tuple[str, ...]]
    #: The remove command (job ids follow).
    remove_command: ClassVar[str]
    #: Words in a tool's stderr meaning "that job is no longer there", not a failure.
    gone_words: ClassVar[tuple[str, ...]] = ()

    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        """Submit the rendered script once; the ids come from the tool's answer."""
        script = self.render(job, staging, count)
        out = run_command(list(self.submit_command), input=script, timeout=120).stdout
        return self.parse_submit(out, count)

    @abc.abstractmethod
    def parse_submit(self, out: str, count: int) -> list[str]:
        """The worker job ids in the submit tool's answer."""

    @abc.abstractmethod
    def query_argv(self, job_ids: list[str] | None, history: bool) -> list[str]:
        """The query command for these ids (``None``: all of this user's jobs)."""

    @abc.abstractmethod
    def parse_query(self, out: str) -> Iterable[tuple[str, str, JobState, str | None]]:
        """``(job id, tag value, state, reason)`` for each job in the query's answer."""

    def harmless(self, stderr: str) -> bool:
        """True when every line of a tool's stderr only says a job is gone."""
        lines = [line for line in stderr.splitlines() if line.strip()]
        return bool(lines) and all(any(w in line for w in self.gone_words) for line in lines)

    def history(self, job_ids: list[str]) -> list[tuple[str, str, JobState, str | None]]:
        """Records of jobs that left the queue (a second query; none by default)."""
        return []

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs from the query tool, filtered by the tag (and ``cluster``)."""
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        argv = self.query_argv(ids, history)
        result = run_command(argv, check=False)
        if result.returncode != 0 and not self.harmless(result.stderr):
            raise BatchError(f"{argv[0]} failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
        records = list(self.parse_query(result.stdout))
        if history and ids is not None:
            seen = {record[0] for record in records}
            missing = [j for j in ids if j not in seen]
            if missing:
                records += self.history(missing)
        found: dict[str, JobStatus] = {}
        ours = tag_prefix()
        for job_id, tag, state, reason in records:
            owner, pool, scheduler = parse_tag(tag, ours)
            if owner is None or (cluster is not None and owner != cluster):
                continue
            found[job_id] = JobStatus(job_id, state, reason, owner, pool, scheduler)
        if ids is not None:
            return [found[j] for j in ids if j in found]
        return list(found.values())

    def remove(self, job_ids: Iterable[str]) -> None:
        """The remove tool on exactly these jobs; ones already gone are not an error."""
        ids = list(job_ids)
        if not ids:
            return
        result = run_command([self.remove_command, *ids], check=False)
        if result.returncode != 0 and not self.harmless(result.stderr):
            raise BatchError(f"{self.remove_command} failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")

