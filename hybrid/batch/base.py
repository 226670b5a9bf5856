"""The batch system contract and the command-line skeleton systems share.

One module per system implements :class:`BatchSystem`: it renders its own files, submits n
workers in ONE transaction, queries and removes exactly our jobs, checks its own tools (for
``hybrid doctor``) and has its own configuration section ``hybrid.batch.<name>`` (its
:class:`BatchSystem.Settings`). Slurm, PBS and LSF share the command-line skeleton of
:class:`CommandLineSystem`. The job a system renders is :mod:`hybrid.batch.jobs`'s, its
files' directory :mod:`hybrid.batch.staging`'s. Tracking jobs over time is the pool
manager's (:mod:`hybrid.manager`); a system object holds no job state of its own (but the
local one, whose "batch system" is this process).
"""

from __future__ import annotations

import abc
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from hybrid import config
from hybrid.batch.jobs import (
    DEFAULT_TAG,
    JobState,
    JobStatus,
    WorkerJob,
    parse_tag,
    tag_prefix,
    worker_name_suffix,
)
from hybrid.batch.staging import Staging, staging_root, write_private
from hybrid.errors import BatchError, ToolMissing
from hybrid.fields import validate
from hybrid.gpusharing import starts_mps
from hybrid.units import hhmm
from hybrid.worker import TLSFiles, memory_watch, worker_commands

if TYPE_CHECKING:
    from hybrid.checks import CheckResult
    from hybrid.pools import PoolSpec

#: Names other modules import from here (their homes are :mod:`hybrid.batch.jobs` and
#: :mod:`hybrid.batch.staging`).
__all__ = [
    "DEFAULT_TAG", "BatchError", "BatchSystem", "CommandLineSystem", "JobState", "JobStatus",
    "ReservedOptions", "Staging", "SystemSettings", "ToolMissing", "WorkerJob", "parse_tag",
    "run_command", "staging_root", "tag_prefix", "worker_name_suffix", "write_private",
]

#: Listings of a cluster's jobs that may fail in a row (a busy controller's timeouts)
#: before what needs them gives up: ``hybrid cancel --cluster``, a pool's close.
LISTING_TRIES = 3


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
    #: True when the job script makes its worker a temporary directory of its own, removed
    #: when the job ends (a worker killed at work leaves its scratch space behind).
    makes_job_tmpdir: ClassVar[bool] = True
    #: The client tools this system needs on the submit node (``hybrid doctor``).
    tools: ClassVar[tuple[str, ...]] = ()
    #: ``(pattern, what hybrid sets with it)``: extra directives matching a pattern are
    #: refused, since they would override what hybrid relies on.
    reserved_directives: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The system's own settings.
    Settings: ClassVar[type[SystemSettings]] = SystemSettings
    #: True for a system whose calls return at once without blocking (the pool manager
    #: then calls them on its event loop, not in its threads).
    answers_at_once: ClassVar[bool] = False
    #: What to check when the system's tools are there but do not answer (``hybrid doctor``).
    unreachable_fix: ClassVar[str] = ("Check that the batch system's client tools work from "
                                      "this node (configuration, credentials, network).")

    def __init__(self, **settings: Any):
        self.settings = validate(self.Settings, settings, prefix=f"{self.name}.")

    # ------------------------------------------------------------------ settings
    @classmethod
    def configured_settings(cls) -> dict[str, Any]:
        """The system's own keys of its section ``hybrid.batch.<name>`` (not the pool
        defaults that section may also hold); ``null`` is kept where it is a choice (where
        the packaged ``hybrid.yaml`` does not say ``null``: "the default")."""
        packaged = config.PACKAGED["hybrid"]["batch"].get(cls.name) or {}
        return {k: v for k, v in config.section(f"batch.{cls.name}").items()
                if k in cls.Settings.model_fields and (
                    v is not None or packaged.get(k.replace("_", "-")) is not None)}

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
    #: The queue names this system's submit tool takes, where narrower than any word
    #: (a pattern and its words for the error), e.g. qsub's ``-q queue@server``.
    queue_names: ClassVar[tuple[str, str] | None] = None

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

        if cls.queue_names and spec.queue is not None and not re.fullmatch(
                cls.queue_names[0], spec.queue):
            raise reject(f"a {cls.name} queue: {cls.queue_names[1]}",
                         "Give the queue's name as the batch system lists it.",
                         field="queue", value=spec.queue)
        for index, directive in enumerate(spec.job_extra_directives):
            if not directive.strip():
                raise reject("a directive, not an empty line", "Leave the empty item out.",
                             field=f"job_extra_directives[{index}]", value=directive)
            what = cls.refused_directive(directive)
            if what is not None:
                raise reject(f"a directive that does not set {what} (hybrid sets it)",
                             "Leave it out: hybrid sets it for each submission.",
                             field=f"job_extra_directives[{index}]", value=directive)

    # ------------------------------------------------------------------ rendering
    def ships_files_for(self, staging: Path) -> bool:
        """Whether a submission from ``staging`` sends its files with the job
        (:attr:`ships_files`; HTCondor decides per staging directory)."""
        return self.ships_files

    def job_paths(self, staging: Path) -> TLSFiles:
        """Where the worker finds the TLS files."""
        if self.ships_files_for(staging):
            return TLSFiles("ca.pem", "cert.pem", "key.pem")
        return TLSFiles(str(staging / "ca.pem"), str(staging / "cert.pem"),
                        str(staging / "key.pem"))

    def walltime(self, job: WorkerJob) -> str:
        """The job's wall time ``"HH:MM"``: the pool's, else the lease's."""
        if job.spec.walltime:
            return job.spec.walltime
        return hhmm(int(-(-job.spec.lease // 60)))

    def worker_listen_host(self, job: WorkerJob) -> str | None:
        """Where the job's worker listens (``None``: the rule of
        :func:`hybrid.worker.worker_command`, loopback for a scheduler on loopback)."""
        return None

    def context(self, job: WorkerJob, staging: Path, count: int) -> dict[str, Any]:
        """Template variables shared by every system."""
        tls = self.job_paths(staging) if job.connection.tls is not None else None
        hhmm = self.walltime(job)
        worker, worker_mps = worker_commands(job.spec, job.connection, tls,
                                             self.worker_listen_host(job))
        # a nanny watches the memory where the command has one (GPU sharing's processes too)
        nannies = any("--nanny" in c.arguments for c in (worker, worker_mps) if c is not None)
        process = config.process_environment(job.spec.env)
        watch = None if nannies else memory_watch(job.spec, job.connection)
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
            "env": {**config.worker_dask_environment(), **process.always, **job.spec.env},
            "env_unless_set": process.unless_set,
            "prologue": list(job.spec.job_script_prologue),
            "worker": worker,
            # a GPU pool's CUDA MPS ("auto"/"on"), and its worker command under the daemon
            "mps": starts_mps(job.spec),
            "worker_mps": worker_mps,
            "name_prefix": job.name_prefix,
            # shipped files may arrive with the execute side's modes; staged ones are 0600
            "secret_files": ([tls.ca, tls.cert, tls.key]
                             if tls and self.ships_files_for(staging) else []),
            "extra_directives": list(job.spec.job_extra_directives),
            "scheduler": job.connection.scheduler_address,
            "walltime": f"{hhmm}:00",
            "walltime_hhmm": hhmm,
            "walltime_seconds": job.spec.walltime_seconds() or job.spec.lease,
            "lease_seconds": job.spec.lease,
            # without a nanny the job script watches the worker's memory (hybrid/worker.py)
            "memory_watch_kib": watch[0] if watch else None,
            "memory_watch_share": watch[1] if watch else None,
            # shared filesystem: the job appends its output to worker-<id>.log in staging
            "log_directory": None if self.ships_files_for(staging) else str(staging),
            # a TMPDIR of the job's own, removed with it (a local job gets one from hybrid)
            "job_tmpdir": self.makes_job_tmpdir,
        }

    def render(self, job: WorkerJob, staging: Path, count: int = 1) -> str:
        """The job script or submit description for ``count`` workers."""
        from hybrid.templates import render

        return render(self.template, **self.context(job, staging, count))

    def job_files(self, job: WorkerJob, staging: Path, count: int = 1) -> dict[str, str]:
        """Every file a submission writes or sends, by name (for ``job_script()``)."""
        return {self.template.removesuffix(".j2"): self.render(job, staging, count)}

    def prepare(self, job: WorkerJob, staging: Path) -> None:
        """Before a pool is accepted: render its job files once (a template that cannot
        render is an error of ``add_pool``, not of the first ``scale``, and the first
        submission does not pay for compiling the templates). Systems add what else their
        first submission would load."""
        self.job_files(job, staging)

    def submission_sizes(self, count: int) -> list[int]:
        """The workers of each submission of ``count``: one submission, or one per
        ``max_array_size`` workers where the system has that limit."""
        size = getattr(self.settings, "max_array_size", None) or max(count, 1)
        return [min(size, count - first) for first in range(0, count, size)]

    def job_script(self, job: WorkerJob, staging: Path, count: int = 1) -> str:
        """The job's files as one text, for reading before anything is submitted; where
        ``count`` goes out as several submissions, each different one with its header."""
        sizes = self.submission_sizes(count)
        if len(sizes) > 1:
            parts, first = [], 1
            for size in dict.fromkeys(sizes):  # at most two: the full ones, then the rest
                many = sizes.count(size)
                which, each = (f"s {first}-{first + many - 1}", " each") if many > 1 else (
                    f" {first}", "")
                parts.append(f"# === submission{which} of {len(sizes)}: {size} worker(s){each} "
                             f"(hybrid.batch.{self.name}.max-array-size) ===\n"
                             + self.job_script(job, staging, size))
                first += many
            return "".join(parts)
        files = self.job_files(job, staging, count)
        if len(files) == 1:
            return next(iter(files.values()))
        return "".join(f"# --- {name} ---\n{text}" for name, text in files.items())

    def log_path(self, staging: Path, job_id: str) -> Path | None:
        """Where a job's output lands (``None`` when it cannot be read from here)."""
        if self.ships_files_for(staging):
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
        """Remove every active job of ``cluster``; return their ids. The jobs are found by
        listing them: a listing that fails (a busy controller's timeout) is asked again, up
        to ``LISTING_TRIES`` times, before nothing is removed, with why and what to do."""
        for attempt in range(1, LISTING_TRIES + 1):
            try:
                listed = self.query(cluster=cluster)
                break
            except (BatchError, OSError) as error:
                if attempt == LISTING_TRIES:
                    raise BatchError(
                        f"listing the jobs of cluster {cluster} failed {LISTING_TRIES} times in "
                        f"a row, so none was removed (the last time: {error}). Once "
                        f"{self.name} answers, run this again, or list them (`hybrid status "
                        f"--system {self.name} --cluster {cluster}`) and remove them by id "
                        f"(`hybrid cancel --system {self.name} JOB_ID ...`).") from error
                time.sleep(attempt)  # (1 s, then 2 s)
        ids = [j.job_id for j in listed if j.state.active]
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
        from hybrid.checks import fail, ok

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
    #: Reasons of :meth:`parse_query` that say the system evicted (preempted) the job.
    evicted_reasons: ClassVar[tuple[str, ...]] = ()
    #: The reason of a suspended job the query gives none for.
    suspended_reason: ClassVar[str] = "suspended"

    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        """Submit the rendered script once (once per ``max_array_size`` workers where the system
        has that limit); a later array failing removes the earlier ones, none is left behind."""
        ids: list[str] = []
        try:
            for size in self.submission_sizes(count):
                script = self.render(job, staging, size)
                out = run_command(list(self.submit_command), input=script, timeout=120).stdout
                ids += self.parse_submit(out, size)
        except BatchError:
            if ids:
                self.remove(ids)
            raise
        return ids

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
            if reason is None and state is JobState.suspended:
                reason = self.suspended_reason
            found[job_id] = JobStatus(job_id, state, reason, owner, pool, scheduler,
                                      evicted=reason in self.evicted_reasons)
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

