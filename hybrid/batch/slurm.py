"""Slurm: ``sbatch --array=1-n`` (one transaction), ``squeue``/``scontrol``, ``scancel``.

Jobs carry ``--comment=<tag>:<cluster>:<pool>:<scheduler>``; array tasks are tracked as
``JOBID_TASK``. A request beyond the site's ``MaxArraySize`` (``max_array_size``) goes out as
several arrays, one ``sbatch`` each.

The queue is read as JSON (``squeue --json``, Slurm 21.08 and later) so that a job name,
comment or reason with spaces is read whole; older Slurm through ``squeue --format`` with a
separator and ``scontrol show job --oneliner`` split at its ``Key=`` words (whole there too).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from hybrid.batch.base import (
    CommandLineSystem,
    JobState,
    JobStatus,
    ReservedOptions,
    SystemSettings,
    run_command,
)
from hybrid.errors import BatchError
from hybrid.fields import count

if TYPE_CHECKING:
    from hybrid.checks import CheckResult

_STATES = {
    "PENDING": JobState.pending, "CONFIGURING": JobState.pending, "REQUEUED": JobState.pending,
    "REQUEUE_FED": JobState.pending, "REQUEUE_HOLD": JobState.held, "RESIZING": JobState.pending,
    "SUSPENDED": JobState.suspended, "STOPPED": JobState.suspended,
    "RUNNING": JobState.running, "COMPLETING": JobState.running, "SIGNALING": JobState.running,
    "STAGE_OUT": JobState.running,
    "COMPLETED": JobState.finished,
    "CANCELLED": JobState.removed, "REVOKED": JobState.removed,
    "FAILED": JobState.failed, "TIMEOUT": JobState.failed, "NODE_FAIL": JobState.failed,
    "OUT_OF_MEMORY": JobState.failed, "BOOT_FAIL": JobState.failed,
    "DEADLINE": JobState.failed, "PREEMPTED": JobState.removed, "SPECIAL_EXIT": JobState.failed,
}
#: Slurm states that say the job was preempted: not a failure of the job.
_PREEMPTED = ("PREEMPTED",)
_SEP = "\x1f"  # a separator no job name or comment contains
_GONE = ("already completing or completed", "Invalid job id")  # a job gone: not a failure
#: Where a ``Key=`` word starts in ``scontrol show job --oneliner`` (keys hold ``/`` and ``:``).
_SCONTROL_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:]*)=")


class SlurmJob(NamedTuple):
    """One array task (or job) as Slurm reports it."""
    job_id: str
    name: str
    comment: str
    state: JobState
    reason: str | None


def _base(state: str) -> str:
    return state.split()[0].rstrip("+").upper() if state else ""


def slurm_state(state: str, reason: str | None) -> JobState:
    """Map a Slurm state (and pending reason) to a :class:`JobState`."""
    mapped = _STATES.get(_base(state), JobState.pending)
    if mapped is JobState.pending and reason and "held" in reason.lower():
        return JobState.held
    return mapped


class SlurmSettings(SystemSettings):
    """``hybrid.batch.slurm``: tasks per array, below the site's ``MaxArraySize``."""

    max_array_size: count(1, 4_000_000) = 1000


#: What hybrid sets from a pool's own options (a directive that also sets it would win over
#: them in Slurm, and the workers' lifetime, threads and memory limit would not know it).
_WALLTIME = "the wall time (give walltime: the workers' lifetime ends before it)"
_CORES = "the job's cores (give cores: the worker's threads follow it)"
_MEMORY = "the job's memory (give memory: the worker's memory limit follows it)"
_PARTITION = "the partition (give queue)"
_ENVIRONMENT = "the job's environment (nothing of the submitting shell's: give env)"


class Slurm(CommandLineSystem):
    """A Slurm cluster reached through its command-line tools on this node."""

    name = "slurm"
    template = "slurm.sh.j2"
    tools = ("sbatch", "squeue", "scancel")
    submit_command = ("sbatch", "--parsable")
    remove_command = "scancel"
    gone_words = _GONE
    evicted_reasons = _PREEMPTED
    suspended_reason = "scontrol suspend, or preempted by suspension"
    Settings = SlurmSettings
    #: Whether ``squeue --json`` answers (until it does not).
    _json = True
    unreachable_fix = ("Check that slurmctld is up and reachable (scontrol ping), and "
                       "SLURM_CONF.")
    reserved_options = ReservedOptions(
        "#SBATCH",
        short={"a": "the job array", "J": "the job name", "o": "the job's log file",
               "e": "the job's log file", "D": "the job's directory",
               "t": _WALLTIME, "c": _CORES, "p": _PARTITION},
        long={"array": "the job array", "job-name": "the job name",
              "comment": "the job comment (hybrid's tag)", "output": "the job's log file",
              "error": "the job's log file", "chdir": "the job's directory",
              "time": _WALLTIME, "cpus-per-task": _CORES, "mem": _MEMORY,
              "mem-per-cpu": _MEMORY, "mem-per-gpu": _MEMORY, "partition": _PARTITION,
              "export": _ENVIRONMENT, "export-file": _ENVIRONMENT},
        flags="hHkOQsuvVW")

    def check(self, timeout: float = 20.0) -> CheckResult:
        """The tools and a query (as every system), then the site's ``MaxArraySize``: an
        array's indexes stay below it, and hybrid's run from 1 to ``max_array_size``."""
        from hybrid.checks import fail, ok, warn

        result = super().check(timeout)
        if not result.ok:
            return result
        try:
            configuration = run_command(["scontrol", "show", "config"], timeout=timeout).stdout
        except BatchError as error:
            return warn(result.name, f"{result.message}; the site's MaxArraySize could not be "
                        f"read ({str(error).splitlines()[0]})",
                        "Run `scontrol show config` here to see that it answers.")
        limit = re.search(r"^MaxArraySize\s*=\s*(\d+)", configuration, re.M)
        if limit is None:
            return result
        largest = int(limit[1]) - 1  # the highest index an array may have
        if largest < self.settings.max_array_size:
            return fail(result.name, f"MaxArraySize of the site is {limit[1]}: an array's "
                        f"indexes stop at {largest}, below hybrid.batch.slurm.max-array-size "
                        f"({self.settings.max_array_size})",
                        f"Set hybrid.batch.slurm.max-array-size: {max(largest, 1)}.")
        return ok(result.name, f"{result.message}; MaxArraySize {limit[1]}")

    def parse_submit(self, out: str, count: int) -> list[str]:
        """``sbatch --parsable`` prints ``JOBID[;cluster]``: the tasks are ``JOBID_1..n``."""
        job = out.strip().split(";")[0].strip()
        if not job.isdigit():
            raise BatchError(f"sbatch answered {out.strip()!r}, not a job id")
        return [f"{job}_{i}" for i in range(1, count + 1)]

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs, from ``squeue --json`` where this Slurm offers it (see the module)."""
        try:
            return super().query(cluster, job_ids, history)
        except BatchError as error:
            if not self._json:
                raise
            if re.search(r"json|plugin|serializ", str(error), re.I):
                self._json = False  # no --json (before 21.08), or no JSON plugin: the text
                return super().query(cluster, job_ids, history)
            # squeue --json exits 0 with "Failed while looking for jobs"; the text says why
            why = run_command(["squeue", "--noheader", "--format=%i"], check=False).stderr.strip()
            raise BatchError(f"{error} ({why})" if why and why not in str(error)
                             else str(error)) from None

    def query_argv(self, job_ids: list[str] | None, history: bool) -> list[str]:
        """``squeue`` of these tasks, or of this user's jobs."""
        argv = ["squeue", "--states=all"]
        argv += ["--json"] if self._json else [
            "--noheader", "--array", f"--format=%i{_SEP}%T{_SEP}%r{_SEP}%k"]
        if job_ids is not None:
            # by job (array) id: squeue matches every record it holds against each id given,
            # so 10,000 task ids cost a second where the few array ids cost nothing; the tasks
            # not asked for are dropped by query() (as with --json before 23.02: every job)
            return [*argv, "--jobs=" + ",".join(dict.fromkeys(
                job_id.split("_", 1)[0] for job_id in job_ids))]
        return [*argv, f"--user={os.environ.get('USER') or os.getuid()}"]

    def parse_query(self, out: str) -> Iterable[tuple[str, str, JobState, str | None]]:
        """One record per task of ``squeue --json`` (this user's), or per line of text."""
        if self._json:
            for job in squeue_json(out):
                yield job.job_id, job.comment, job.state, job.reason
            return
        for line in out.splitlines():
            fields = line.split(_SEP)
            if len(fields) != 4:
                continue
            job_id, state, reason, comment = (f.strip() for f in fields)
            if _base(state) in _PREEMPTED:
                reason = _base(state)
            yield (job_id, comment, slurm_state(state, reason),
                   None if reason in ("None", "") else reason)

    def history(self, job_ids: list[str]) -> list[tuple[str, str, JobState, str | None]]:
        """``scontrol show job`` of the tasks that left ``squeue``: one call per array (it
        lists every task of it). ``squeue --json`` lists every job the controller knows."""
        if self._json:
            return []
        wanted, records = set(job_ids), []
        for array in sorted({job_id.split("_", 1)[0] for job_id in job_ids}):
            result = run_command(["scontrol", "show", "job", "--oneliner", array], check=False)
            jobs = map(scontrol_record, result.stdout.splitlines() if result.returncode == 0
                       else [])
            records += [(j.job_id, j.comment, j.state, j.reason) for j in jobs
                        if j is not None and j.job_id in wanted]
        return records


def scontrol_record(line: str) -> SlurmJob | None:
    """One ``scontrol show job --oneliner`` line (Slurm without ``--json``); a value runs to
    the next ``Key=`` word, so a job name or comment with spaces is read whole (``scontrol``
    itself writes a reason's spaces as ``_``)."""
    keys = list(_SCONTROL_KEY.finditer(line))
    fields = {key[1]: line[key.end():following.start() if following else None].strip()
              for key, following in zip(keys, [*keys[1:], None], strict=True)}
    if "JobId" not in fields:
        return None
    task = fields.get("ArrayTaskId", "")
    job_id = f"{fields.get('ArrayJobId')}_{task}" if task.isdigit() else fields["JobId"]
    reason = fields.get("Reason")
    state = slurm_state(fields.get("JobState", ""), reason)
    if _base(fields.get("JobState", "")) in _PREEMPTED:
        reason = _base(fields["JobState"])
    elif state is JobState.failed and fields.get("ExitCode"):
        code, _, signal = fields["ExitCode"].partition(":")
        ended = (f"signal {signal}" if signal.strip("0") else
                 f"exit code {code}" if code.isdigit() else f"exit code {fields['ExitCode']}")
        reason = f"{fields.get('JobState')} ({ended})"
    return SlurmJob(job_id, fields.get("JobName", ""), fields.get("Comment", ""), state,
                    None if reason in (None, "None") else reason)


def _number(value: Any) -> int | None:
    """A number of ``squeue --json``: plain (Slurm 22.05), or ``{"set", "number"}`` (23.02+)."""
    if isinstance(value, dict):
        return value.get("number") if value.get("set", True) else None
    return value if isinstance(value, int) else None


def _tasks(text: str) -> list[int]:
    """The task ids of a pending array record's ``array_task_string`` (``1-9:2,12%4``)."""
    tasks: list[int] = []
    for part in text.split("%", 1)[0].split(","):
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if first.isdigit():
            tasks += range(int(first), int(last or first) + 1, int(step or 1))
    return tasks


def json_exit(value: object) -> str | None:
    """How a job ended, from ``squeue --json``'s ``exit_code``: ``"exit code 127"`` or
    ``"signal 9"`` (``None`` for 0 or nothing). Slurm 22.05 gives the raw wait status
    (32512 for exit 127), 23.02 and later a mapping with ``return_code`` and ``signal``."""
    if isinstance(value, dict):
        signal = value.get("signal") or {}
        number = signal.get("id") if isinstance(signal, dict) else signal
        number = number.get("number") if isinstance(number, dict) else number
        code = value.get("return_code")
        code = code.get("number") if isinstance(code, dict) else code
        if isinstance(number, int) and number:
            return f"signal {number}"
        return f"exit code {code}" if isinstance(code, int) and code else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        try:
            code = os.waitstatus_to_exitcode(value)  # (negative: the signal's number)
        except ValueError:
            return None
        return f"signal {-code}" if code < 0 else f"exit code {code}" if code else None
    return None


def squeue_json(out: str, uid: int | None = None) -> list[SlurmJob]:
    """This user's (``uid``) array tasks and jobs in ``squeue --json``, with the reason
    ``squeue`` prints; a pending array's one record stands for each of its tasks."""
    try:
        document = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError as error:
        raise BatchError(f"squeue --json printed something that is not JSON ({error}): "
                         f"{out[:200]!r}") from None
    errors = [str(e.get("description") or e.get("error")) for e in document.get("errors") or []]
    if [e for e in errors if not any(word in e for word in _GONE)]:  # (squeue exits 0 here)
        raise BatchError(f"squeue: {'; '.join(errors)}")
    uid = os.getuid() if uid is None else uid
    found = []
    for job in document.get("jobs") or []:
        if _number(job.get("user_id")) != uid:
            continue
        states = job.get("job_state")  # a list of words from 23.02 on
        state = " ".join(states) if isinstance(states, list) else str(states or "")
        reason = job.get("state_description") or job.get("state_reason")
        reason = None if reason in (None, "", "None") else reason
        if _base(state) in _PREEMPTED:  # preempted, not failed: the state is the reason
            reason = _base(state)
        elif slurm_state(state, reason) is JobState.failed:
            ended = json_exit(job.get("exit_code"))
            if ended:
                reason = f"{reason or _base(state)} ({ended})"
        array, task = _number(job.get("array_job_id")), _number(job.get("array_task_id"))
        if array and task is not None:
            ids = [f"{array}_{task}"]
        elif array:
            ids = [f"{array}_{t}" for t in _tasks(job.get("array_task_string") or "")]
        else:
            ids = [str(_number(job.get("job_id")))]
        found += [SlurmJob(i, job.get("name") or "", job.get("comment") or "",
                           slurm_state(state, reason), reason) for i in ids]
    return found
