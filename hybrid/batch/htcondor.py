"""HTCondor through the ``htcondor2`` Python bindings (no shelling out to ``condor_submit``).

n workers are n procs of ONE cluster: ``Schedd.submit(Submit(description))`` with ``queue n``
in the rendered description. How the job's files (its executable ``worker.sh`` and the TLS
files) reach the job is the setting ``job_files``:

- ``spool``: ``submit(..., spool=True)``, then ``Schedd.spool`` uploads them through the schedd
  and each job transfers them to its scratch directory (no shared filesystem needed).
- ``transfer``: ``submit(...)`` only; the schedd on this node reads them from the staging
  directory when each job starts and transfers them to its scratch directory (what
  ``condor_submit`` does without ``-spool``): no spooling, no shared filesystem needed.
- ``shared``: the job reads them in place from the staging directory, which the execute nodes
  see at the same path (a shared filesystem): no spooling, no file transfer.
- ``auto`` (the default): ``shared`` when the staging directory lies under one of
  ``shared_directories`` (the site's declaration), else ``spool``.

Jobs carry ``My.<tag> = "<cluster>"`` (and ``<tag>Pool``, ``<tag>Scheduler``) so ``hybrid gc``
and ``connect`` find them again, and ``periodic_remove`` on a lease so none outlives it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from hybrid.batch.base import (
    BatchSystem,
    JobState,
    JobStatus,
    SystemSettings,
    WorkerJob,
    tag_prefix,
    write_private,
)
from hybrid.errors import BatchError, ConfigurationError, ToolMissing
from hybrid.fields import Seconds, absolute_path, seconds, strings

logger = logging.getLogger("hybrid")

_SPOOLING_HOLD_CODE = 16  # held while input files are being spooled: not a failure
_SUSPENDED_REASON = "its machine's SUSPEND policy, or condor_suspend"


def _bindings():
    try:
        import htcondor2
    except ImportError:  # pragma: no cover - depends on the install
        raise ToolMissing(
            "the HTCondor Python bindings are missing: pip install 'hybrid[htcondor]' "
            "(the 'htcondor' package, module htcondor2)"
        ) from None
    return htcondor2


def ad_text(ad: Any, key: str) -> str:
    """A job ad's string attribute, stripped; ``""`` where it is missing or not a string
    (``classad2.Value.Undefined`` is an int enum that is true and reads as "2": a policy's
    hold reason that does not evaluate leaves ``HoldReason`` undefined)."""
    value = ad.get(key)
    return value.strip() if isinstance(value, str) else ""


def condor_state(ad: Any, in_queue: bool = True) -> tuple[JobState, str | None]:
    """Map a job ad's JobStatus (and hold/remove/exit details) to a state and a reason."""
    status, named = int(ad.get("JobStatus", 0)), _bindings().JobStatus
    if status == named.HELD:
        code = int(ad.get("HoldReasonCode", 0) or 0)
        if code == _SPOOLING_HOLD_CODE:
            return JobState.pending, "spooling input files"
        return JobState.held, ad_text(ad, "HoldReason") or (  # (empty: a hold without one)
            "held by a user (condor_hold), no reason given" if code == 1  # UserRequest
            else "held, no reason given")
    if status == named.SUSPENDED:
        return JobState.suspended, _SUSPENDED_REASON
    if status == named.IDLE:
        # the negotiator's word on why it did not match ("concurrency limit ... reached")
        return JobState.pending, ad_text(ad, "LastRejMatchReason") or None
    if status in (named.RUNNING, named.TRANSFERRING_OUTPUT):
        return JobState.running, None
    if status == named.REMOVED:  # still in the queue, its processes may still be stopping
        return (JobState.removing if in_queue else JobState.removed,
                ad_text(ad, "RemoveReason") or "removed")
    if status == named.COMPLETED:
        code = ad.get("ExitCode")
        if ad.get("ExitBySignal"):
            return JobState.failed, f"killed by signal {ad.get('ExitSignal')}"
        if code not in (None, 0):
            return JobState.failed, f"exit code {code}"
        return JobState.finished, None
    return JobState.pending, None


# --------------------------------------------------------------------------- doctor
_HTCONDOR_PROBE = r"""
import json, os, sys
try:
    import htcondor2
except ImportError as error:
    print(json.dumps({"import_error": str(error)})); sys.exit(0)
p = htcondor2.param
methods = p.get("SEC_CLIENT_AUTHENTICATION_METHODS") or p.get("SEC_DEFAULT_AUTHENTICATION_METHODS")
dirs = [p.get("SEC_TOKEN_DIRECTORY") or os.path.expanduser("~/.condor/tokens.d")]
system_dir = p.get("SEC_TOKEN_SYSTEM_DIRECTORY") or "/etc/condor/tokens.d"
if os.geteuid() == 0 and os.path.isdir(system_dir) and system_dir not in dirs:
    dirs.append(system_dir)
out = {"methods": methods, "token_dirs": dirs}
if sys.argv[1] == "query":
    try:
        htcondor2.Schedd().query(constraint="false", projection=["ClusterId"], limit=1)
    except Exception as error:
        out["query_error"] = f"{error.__class__.__name__}: {error}"
print(json.dumps(out))
"""


def _htcondor_probe(step: str, timeout: float) -> dict[str, Any]:
    """Run the bindings in a child: they read ``CONDOR_CONFIG`` afresh and may block."""
    try:
        result = subprocess.run([sys.executable, "-c", _HTCONDOR_PROBE, step],
                                capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        return {"query_error": (result.stderr.strip().splitlines() or ["no output"])[-1]}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"query_error": lines[-1]}


def _token_files(directories: list[str]) -> tuple[list[Path], list[Path]]:
    """Token files HTCondor would use (mode 0600) and those it ignores (wider modes)."""
    usable, ignored = [], []
    for directory in directories:
        folder = Path(directory)
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not path.is_file() or path.name.startswith(".") or path.stat().st_size == 0:
                continue
            (usable if path.stat().st_mode & 0o077 == 0 else ignored).append(path)
    return usable, ignored


def check_htcondor(timeout: float = 20.0) -> Any:
    """``htcondor2`` imports, an IDTOKENS token is there when required, the schedd answers."""
    from hybrid.checks import fail, ok, warn

    name = "batch system (htcondor)"
    config_file = os.environ.get("CONDOR_CONFIG")
    # (a path that exists but is no regular file, e.g. /dev/null, which the bindings set
    # themselves where they find no configuration, is HTCondor's "no configuration")
    if config_file and config_file.upper() != "ONLY_ENV" and not Path(config_file).exists():
        return fail(name, f"CONDOR_CONFIG={config_file} does not exist",
                     "Point CONDOR_CONFIG at the pool's client configuration, or unset it.")
    probe = _htcondor_probe("config", timeout)
    if "import_error" in probe:
        return fail(name, f"the HTCondor bindings are missing: {probe['import_error']}",
                     "pip install 'hybrid[htcondor]' (the htcondor package, module htcondor2).")
    if "timeout" in probe or "query_error" in probe:
        return fail(name, f"the HTCondor bindings cannot read their configuration: "
                           f"{probe.get('query_error', 'timed out')}",
                     "Check CONDOR_CONFIG.")
    methods = [m.strip().upper() for m in (probe.get("methods") or "").split(",") if m.strip()]
    token_problem: tuple[str, str] | None = None
    if "IDTOKENS" in methods:
        token_problem = _token_problem(probe["token_dirs"])
        if token_problem and methods == ["IDTOKENS"]:
            return fail(name, *token_problem)
    probe = _htcondor_probe("query", timeout)
    also = f"; also {token_problem[0]}" if token_problem else ""
    if "timeout" in probe:
        return fail(name, f"the schedd query did not answer within {timeout:g} s{also}",
                     "Check COLLECTOR_HOST/CONDOR_HOST in CONDOR_CONFIG and the firewall.")
    if "query_error" in probe:
        return fail(name, f"the schedd refused or cannot be reached: {probe['query_error']}"
                           f"{also}",
                     "Check CONDOR_CONFIG, your authorisation (token) and that the pool is up.")
    if token_problem:
        others = ", ".join(m for m in methods if m != "IDTOKENS")
        return warn(name, f"schedd answers through {others}, but {token_problem[0]}",
                     token_problem[1])
    return ok(name, f"htcondor2 present, schedd answers (authentication: "
                     f"{', '.join(methods) or 'default'})")


def _token_problem(token_dirs: list[str]) -> tuple[str, str] | None:
    """What is wrong with the IDTOKENS token files (message, fix), or None."""
    usable, ignored = _token_files(token_dirs)
    if usable:
        return None
    if ignored:
        return (f"IDTOKENS token file(s) ignored, mode not 0600: "
                f"{', '.join(map(str, ignored))}", "chmod 600 the token file(s).")
    return (f"IDTOKENS is configured but no token file is in {', '.join(token_dirs)}",
            "Ask the pool admin for a token (condor_token_fetch, or condor_token_create "
            f"-identity USER@DOMAIN) and save it 0600 in {token_dirs[0]}.")



#: Up to this many job ids, a query names each one (ClusterId and ProcId); beyond, their
#: clusters (the schedd then sends every job of them, and the others are dropped here).
_EXACT_IDS = 200


def _clusters_of(ids: list[str] | None) -> str:
    """`` && (...)`` selecting these job ids, or their clusters (nothing for ``None``)."""
    if ids is None:
        return ""
    procs: dict[int, set[int]] = {}
    for job_id in ids:
        cluster, _, proc = job_id.partition(".")
        procs.setdefault(int(cluster), set()).add(int(proc or 0))
    if len(ids) > _EXACT_IDS:
        return " && (" + " || ".join(f"ClusterId == {c}" for c in sorted(procs)) + ")"
    return " && (" + " || ".join(
        f"(ClusterId == {c} && (" + " || ".join(f"ProcId == {p}" for p in sorted(ps)) + "))"
        for c, ps in sorted(procs.items())) + ")"


def _directories(value: Any) -> tuple[str, ...]:
    return tuple(absolute_path(item) for item in strings(True, "absolute paths")(value))


#: When this process last asked each schedd to reschedule (``reschedule_interval``).
_rescheduled: dict[tuple[str | None, str | None], float] = {}
_rescheduled_lock = threading.Lock()


class HTCondorSettings(SystemSettings):
    """``hybrid.batch.htcondor``: which schedd, how the job's files reach it, and how long a
    removed job may take to stop."""

    schedd_name: str | None = Field(None, description="The schedd to submit to; ``None``: "
                                    "the local one.")
    collector: str | None = Field(None, description="The collector that locates "
                                  "``schedd_name``.")
    job_max_vacate_time: Seconds = Field(10, description="Between SIGTERM and SIGKILL when a "
                                         "job is removed.")
    job_files: Literal["auto", "spool", "transfer", "shared"] = Field(
        "auto", description="How the job's executable and TLS files reach it: ``spool`` "
        "(uploaded through the schedd, transferred to each job: no shared filesystem needed), "
        "``transfer`` (not uploaded: the schedd on this node reads them from the staging "
        "directory when a job starts and transfers them to it; the schedd must be the local "
        "one and the jobs run as this user), "
        "``shared`` (read in place from the staging directory, which the execute nodes see at "
        "the same path: no spooling, no file transfer; the jobs must run as this user), "
        "``auto``: ``shared`` when the staging directory is under one of "
        "``shared_directories``, else ``spool``.")
    reschedule_interval: Annotated[float, BeforeValidator(
        lambda v: seconds(v, allow_zero=True))] = Field(
        10.0, description="After a submission, ask the schedd to send its idle jobs to the "
        "negotiator at once (as ``condor_submit`` does) instead of at its next update, at most "
        "once per this many seconds per schedd from this process, so an adaptive pool that "
        "submits often does not keep asking; 0: never.")
    shared_directories: Annotated[tuple[str, ...], BeforeValidator(_directories)] = Field(
        (), description="Directories the execute nodes see at the same path as this node "
        "(the site's shared filesystem, e.g. ``/home``); with ``job_files: auto`` a staging "
        "directory under one of them is read in place.")


class HTCondor(BatchSystem):
    """An HTCondor pool reached through the schedd named by the local configuration."""

    name = "htcondor"
    template = "htcondor.sub.j2"
    ships_files = True
    Settings = HTCondorSettings
    reserved_directives: ClassVar = (
        (r"(?i)^\s*queue\b", "the number of jobs (queue)"),
        (r"(?i)^\s*(executable|arguments|initial_?dir|transfer_input_files|output|error|"
         r"leave_in_queue|periodic_remove|job_max_vacate_time|should_transfer_files|"
         r"transfer_executable|when_to_transfer_output)\s*=",
         "the job's executable, files, log and lifetime"),
        # the job attributes those commands set, given directly (+Attr, My.Attr)
        (r"(?i)^\s*(\+|my\.)\s*(cmd|args|arguments|iwd|transferinput|out|err|"
         r"leavejobinqueue|periodicremove|jobmaxvacatetime|shouldtransferfiles|"
         r"transferexecutable|whentotransferoutput|requestcpus|requestmemory|requestgpus)\s*=",
         "the job's executable, files, log, lifetime and resources"),
        (r"(?i)^\s*request_(cpus|memory|gpus)\s*=",
         "the job's cores, memory or GPUs (give cores, memory and gpus: the worker's threads "
         "and memory limit follow them)"),
    )
    #: What a directive may be: one submit command or job attribute, ``name = value``
    #: (not ``include``, ``if``/``else`` or a multi-line ``name @=END`` block).
    _statement = re.compile(r"\s*(\+|(?i:my)\.)?[A-Za-z_][A-Za-z0-9_.]*\s*=.*", re.DOTALL)

    @classmethod
    def reserved(cls) -> tuple[tuple[str, str], ...]:
        """Also the tag's job attributes (``My.<tag>``, ``+<tag>``)."""
        tag = re.escape(tag_prefix())
        return (*cls.reserved_directives,
                (rf"(?i)^\s*(\+|my\.){tag}", "hybrid's tag attributes"))

    def check(self, timeout: float = 20.0) -> Any:
        """Bindings, token files and a schedd query, each in a child process; where all
        answer, also how the jobs would get their files from this node (:meth:`files_line`)."""
        import dataclasses

        from hybrid.checks import Status
        from hybrid.config import staging_root

        result = check_htcondor(timeout)
        if result.status is not Status.ok:
            return result
        return dataclasses.replace(
            result, message=f"{result.message}; {self.files_line(staging_root())}")

    def files_line(self, staging: Path) -> str:
        """How jobs submitted from ``staging`` get their files, and why (``job_files``)."""
        mode, setting = self.job_files_mode(staging), self.settings.job_files
        if setting != "auto":
            return f"job files: {mode} (job-files: {setting})"
        if mode == "shared":
            return (f"job files: shared (job-files: auto; the staging directory {staging} "
                    f"is under shared-directories)")
        why = ("running as root" if os.geteuid() == 0 else
               f"the staging directory {staging} is under none of shared-directories")
        hint = ("; where this node's schedd sees it at the same path, job-files: transfer "
                "submits without spooling") if self._files_problem("transfer") is None else ""
        return f"job files: spool (job-files: auto; {why}){hint}"

    def schedd(self):
        """The ``htcondor2.Schedd`` (the local one unless a name/collector was given)."""
        htcondor2 = _bindings()
        settings = self.settings
        try:
            if settings.schedd_name is None and settings.collector is None:
                return htcondor2.Schedd()
            collector = htcondor2.Collector(settings.collector)
            ad = collector.locate(htcondor2.DaemonType.Schedd, settings.schedd_name)
            return htcondor2.Schedd(ad)
        except Exception as error:
            raise BatchError(f"cannot reach the HTCondor schedd: {error}. Check CONDOR_CONFIG "
                             "and that `condor_q` works on this node") from None

    # ------------------------------------------------------------------ job files
    def job_files_mode(self, staging: Path) -> str:
        """``"spool"``, ``"transfer"`` or ``"shared"``: how a submission from ``staging`` ships
        its files (``job_files``, with ``auto`` resolved for this staging directory)."""
        mode = self.settings.job_files
        if mode != "auto":
            return mode
        path = PurePosixPath(os.path.abspath(staging))
        shared = any(path.is_relative_to(directory)
                     for directory in self.settings.shared_directories)
        # jobs run as the user the schedd maps this process to: never root, so a staging
        # directory of root's is unreadable to them however shared it is
        return "shared" if shared and os.geteuid() != 0 else "spool"

    def ships_files_for(self, staging: Path) -> bool:
        """Whether the files travel with the job (spool and transfer modes) for this staging
        directory."""
        return self.job_files_mode(staging) != "shared"

    def log_path(self, staging: Path, job_id: str) -> Path | None:
        """The job's output lands in the staging directory, readable here: in shared mode as
        it runs, in transfer mode when the job ends (spooled jobs keep it in the spool)."""
        if self.job_files_mode(staging) == "spool":
            return None
        return staging / f"worker-{job_id}.log"

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        """Also refuse ``job_files: shared`` or ``transfer`` where it cannot work (see
        :meth:`files_problem`)."""
        from hybrid.fields import reject

        super().check_spec(spec)
        for index, directive in enumerate(spec.job_extra_directives):
            if not cls._statement.fullmatch(directive):
                raise reject('a submit command "name = value" (or a job attribute, "+Name = '
                             'value" or "My.Name = value")', "Give one command per item; "
                             "include, if/else and @= blocks are not taken.",
                             field=f"job_extra_directives[{index}]", value=directive)
        mode = spec.system_options.get("job_files")
        if mode in ("shared", "transfer"):
            settings = {**cls.configured_settings(), **spec.system_options}
            problem = cls.files_problem(mode, settings.get("schedd_name"),
                                        settings.get("collector"))
            if problem:
                raise reject(*problem, field="system_options.job_files", value=mode)

    @staticmethod
    def files_problem(mode: str, schedd_name: str | None = None,
                      collector: str | None = None) -> tuple[str, str] | None:
        """Why ``job_files`` ``mode`` cannot work from this process (what is accepted, the
        fix), or ``None`` (``spool`` always works; ``auto`` resolves to a mode that does)."""
        if mode in ("spool", "auto"):
            return None
        if mode == "transfer" and (schedd_name is not None or collector is not None):
            return ("'spool' or 'shared' with a schedd found through schedd_name or "
                    "collector: with 'transfer' the schedd reads the job's files from this "
                    "node's staging directory, so it must be this node's own schedd",
                    "Leave schedd_name and collector unset to submit to the local schedd, or "
                    "use job_files: spool (files uploaded through the schedd).")
        if os.geteuid() == 0:
            return (f"'spool' or 'auto' when running as root: the schedd runs no job as root, "
                    f"and the user it runs them as cannot read root's private job files "
                    f"{'in place' if mode == 'shared' else 'to transfer them'}",
                    "Submit as the user whose jobs these are, or use job_files: spool (the "
                    "schedd then takes the files).")
        return None

    def _files_problem(self, mode: str) -> tuple[str, str] | None:
        """:meth:`files_problem` for this system's schedd."""
        return self.files_problem(mode, self.settings.schedd_name, self.settings.collector)

    def context(self, job: WorkerJob, staging: Path, count: int) -> dict[str, Any]:
        """The shared variables plus the vacate time, the file mode and, for a pool with a
        wall time, the seconds a job may run (HTCondor has no wall time of its own:
        ``periodic_remove``); HTCondor writes the job's output itself (``output``/``error``),
        so the wrapper redirects nothing."""
        from hybrid.units import walltime_seconds

        return {**super().context(job, staging, count),
                "vacate_seconds": self.settings.job_max_vacate_time,
                "run_seconds": walltime_seconds(job.spec.walltime) if job.spec.walltime
                else None,
                "shared_files": not self.ships_files_for(staging),
                "log_directory": None}

    def render_wrapper(self, job: WorkerJob, staging: Path) -> str:
        """The executable each job runs (shell), shipped through the schedd."""
        from hybrid.templates import render

        return render("htcondor-worker.sh.j2", **self.context(job, staging, 1))

    def job_files(self, job: WorkerJob, staging: Path, count: int = 1) -> dict[str, str]:
        """The submit description and the worker's executable."""
        return {"submit description": self.render(job, staging, count),
                "worker.sh (the job's executable)": self.render_wrapper(job, staging)}

    def prepare(self, job: WorkerJob, staging: Path) -> None:
        """The base's, and the bindings imported (a tenth of a second, once per process),
        where they are installed: without them the first submission says so."""
        super().prepare(job, staging)
        with contextlib.suppress(ToolMissing):
            _bindings()

    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        """One cluster of ``count`` procs; on any failure the cluster is removed again."""
        htcondor2 = _bindings()
        mode = self.job_files_mode(staging)
        if problem := self._files_problem(mode):
            raise ConfigurationError("hybrid.batch.htcondor.job-files", mode, *problem)
        spool = mode == "spool"
        write_private(staging / "worker.sh", self.render_wrapper(job, staging), 0o700)
        description = self.render(job, staging, count)
        try:
            submit = htcondor2.Submit(description)
        except Exception as error:
            raise BatchError(f"HTCondor refused the submit description: {error}") from None
        schedd = self.schedd()
        try:
            result = schedd.submit(submit, spool=spool)
        except Exception as error:
            raise BatchError(f"HTCondor submit failed: {error}") from None
        cluster_id = result.cluster()
        if spool:
            try:
                schedd.spool(result)
            except Exception as error:
                self._remove_quietly(schedd, str(cluster_id))
                raise BatchError(f"HTCondor could not receive the job files: {error}") from None
        self._reschedule(schedd)
        first = result.first_proc()
        return [f"{cluster_id}.{first + i}" for i in range(result.num_procs())]

    def _reschedule(self, schedd: Any) -> None:
        """Ask the schedd to negotiate for the new jobs now (``reschedule_interval``)."""
        interval = self.settings.reschedule_interval
        if not interval:
            return
        key = (self.settings.schedd_name, self.settings.collector)
        now = time.monotonic()
        with _rescheduled_lock:
            last = _rescheduled.get(key)
            if last is not None and now - last < interval:
                return
            _rescheduled[key] = now
        try:
            schedd.reschedule()
        except Exception as error:  # a hint to the schedd: the jobs are queued either way
            logger.debug("HTCondor reschedule after submit failed: %s", error)

    def _remove_quietly(self, schedd: Any, job_spec: Any) -> None:
        htcondor2 = _bindings()
        try:
            schedd.act(htcondor2.JobAction.Remove, job_spec, reason="hybrid: submit failed")
        except Exception:
            pass

    def _projection(self) -> list[str]:
        tag = tag_prefix()
        return ["ClusterId", "ProcId", "JobStatus", "HoldReason", "HoldReasonCode",
                "RemoveReason", "ExitCode", "ExitBySignal", "ExitSignal", "JobRunCount",
                "LastVacateTime", "LastRejMatchReason", tag, f"{tag}Pool", f"{tag}Scheduler"]

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs from ``Schedd.query`` (and ``Schedd.history`` with ``history``)."""
        from hybrid.templates import classad_string

        tag = tag_prefix()
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        constraint = f"{tag} =!= undefined"
        if cluster is not None:
            constraint += f" && {tag} == {classad_string(cluster)}"
        schedd = self.schedd()
        projection = self._projection()
        try:
            ads = list(schedd.query(constraint=constraint + _clusters_of(ids),
                                    projection=projection))
            ended: list[Any] = []
            if history:
                seen = {f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads}
                missing = [j for j in (ids or []) if j not in seen]
                if missing or ids is None:
                    ended = [ad for ad in schedd.history(
                                 constraint=constraint + _clusters_of(missing or None),
                                 projection=projection,
                                 match=len(missing) if missing else 10000)
                             if f"{ad['ClusterId']}.{ad['ProcId']}" not in seen]
        except Exception as error:
            raise BatchError(f"HTCondor query failed: {error}") from None
        wanted = set(ids) if ids is not None else None
        out: dict[str, JobStatus] = {}
        # the negotiator notes why it did not match on one job of a group of alike jobs:
        # the idle jobs of the same submission wait for the same reason
        idle = int(_bindings().JobStatus.IDLE)
        idle_reason = {ad["ClusterId"]: ad_text(ad, "LastRejMatchReason") for ad in ads
                       if int(ad.get("JobStatus", 0)) == idle
                       and ad_text(ad, "LastRejMatchReason")}
        for ad, in_queue in [(ad, True) for ad in ads] + [(ad, False) for ad in ended]:
            job_id = f"{ad['ClusterId']}.{ad['ProcId']}"
            if wanted is not None and job_id not in wanted:
                continue
            state, reason = condor_state(ad, in_queue)
            if state is JobState.pending and reason is None:
                reason = idle_reason.get(ad["ClusterId"])
            starts = ad.get("JobRunCount")
            out.setdefault(job_id, JobStatus(
                job_id, state, reason, ad.get(tag), ad.get(f"{tag}Pool"),
                ad.get(f"{tag}Scheduler"), starts=None if starts is None else int(starts),
                evicted=in_queue and int(ad.get("JobStatus", 0)) == idle
                and ad.get("LastVacateTime") is not None))  # waits again after a vacate
        return list(out.values())

    def remove(self, job_ids: Iterable[str]) -> None:
        """``Schedd.act(Remove, [ids])`` on exactly these jobs."""
        ids = list(job_ids)
        if not ids:
            return
        htcondor2 = _bindings()
        try:
            self.schedd().act(htcondor2.JobAction.Remove, ids, reason="hybrid: worker removed")
        except Exception as error:
            raise BatchError(f"HTCondor remove of {ids} failed: {error}") from None
