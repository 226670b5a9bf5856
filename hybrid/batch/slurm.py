"""Slurm: ``sbatch --array=1-n`` (one transaction), ``squeue``/``scontrol``, ``scancel``.

Jobs carry ``--comment=<tag>:<cluster>:<pool>:<scheduler>``; array tasks are tracked as
``JOBID_TASK``. A request beyond the site's ``MaxArraySize`` (``max_array_size``) goes out as
several arrays, one ``sbatch`` each.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from hybrid.batch.base import (
    CommandLineSystem,
    JobState,
    ReservedOptions,
    SystemSettings,
    WorkerJob,
    run_command,
)
from hybrid.errors import BatchError
from hybrid.fields import count

_STATES = {
    "PENDING": JobState.pending, "CONFIGURING": JobState.pending, "REQUEUED": JobState.pending,
    "REQUEUE_FED": JobState.pending, "REQUEUE_HOLD": JobState.held, "RESIZING": JobState.pending,
    "SUSPENDED": JobState.pending, "STOPPED": JobState.pending,
    "RUNNING": JobState.running, "COMPLETING": JobState.running, "SIGNALING": JobState.running,
    "STAGE_OUT": JobState.running,
    "COMPLETED": JobState.finished,
    "CANCELLED": JobState.removed, "REVOKED": JobState.removed,
    "FAILED": JobState.failed, "TIMEOUT": JobState.failed, "NODE_FAIL": JobState.failed,
    "OUT_OF_MEMORY": JobState.failed, "BOOT_FAIL": JobState.failed,
    "DEADLINE": JobState.failed, "PREEMPTED": JobState.failed, "SPECIAL_EXIT": JobState.failed,
}
_SEP = "\x1f"  # a separator no job name or comment contains


def slurm_state(state: str, reason: str | None) -> JobState:
    """Map a Slurm state (and pending reason) to a :class:`JobState`."""
    base = state.split()[0].rstrip("+").upper() if state else ""
    mapped = _STATES.get(base, JobState.pending)
    if mapped is JobState.pending and reason and "held" in reason.lower():
        return JobState.held
    return mapped


class SlurmSettings(SystemSettings):
    """``hybrid.batch.slurm``: the site's ``MaxArraySize``."""

    max_array_size: count(1, 4_000_000) = 1000


class Slurm(CommandLineSystem):
    """A Slurm cluster reached through its command-line tools on this node."""

    name = "slurm"
    template = "slurm.sh.j2"
    tools = ("sbatch", "squeue", "scancel")
    submit_command = ("sbatch", "--parsable")
    remove_command = "scancel"
    gone_words = ("already completing or completed", "Invalid job id")
    Settings = SlurmSettings
    unreachable_fix = ("Check that slurmctld is up and reachable (scontrol ping), and "
                       "SLURM_CONF.")
    reserved_options = ReservedOptions(
        "#SBATCH",
        short={"a": "the job array", "J": "the job name", "o": "the job's log file",
               "e": "the job's log file", "D": "the job's directory"},
        long={"array": "the job array", "job-name": "the job name",
              "comment": "the job comment (hybrid's tag)", "output": "the job's log file",
              "error": "the job's log file", "chdir": "the job's directory"},
        flags="hHkOQsuvVW")

    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        """One ``sbatch --array`` per ``max_array_size`` workers (usually one)."""
        size = self.settings.max_array_size
        ids: list[str] = []
        left = count
        try:
            while left > 0:
                ids += super().submit(job, staging, min(left, size))
                left -= size
        except BatchError:
            if ids:  # a later array failed: the earlier ones are not left behind
                self.remove(ids)
            raise
        return ids

    def parse_submit(self, out: str, count: int) -> list[str]:
        """``sbatch --parsable`` prints ``JOBID[;cluster]``: the tasks are ``JOBID_1..n``."""
        job = out.strip().split(";")[0].strip()
        if not job.isdigit():
            raise BatchError(f"sbatch answered {out.strip()!r}, not a job id")
        return [f"{job}_{i}" for i in range(1, count + 1)]

    def query_argv(self, job_ids: list[str] | None, history: bool) -> list[str]:
        """``squeue`` of these tasks, or of this user's jobs."""
        argv = ["squeue", "--noheader", "--array", "--states=all",
                f"--format=%i{_SEP}%T{_SEP}%r{_SEP}%k"]
        if job_ids is not None:
            # by job (array) id: squeue matches every record it holds against each id given,
            # so 10,000 task ids cost a second where the few array ids cost nothing; the tasks
            # not asked for are dropped by query()
            return [*argv, "--jobs=" + ",".join(dict.fromkeys(
                job_id.split("_", 1)[0] for job_id in job_ids))]
        return [*argv, f"--user={os.environ.get('USER') or os.getuid()}"]

    def parse_query(self, out: str) -> Iterable[tuple[str, str, JobState, str | None]]:
        """One record per line of ``squeue``."""
        for line in out.splitlines():
            fields = line.split(_SEP)
            if len(fields) != 4:
                continue
            job_id, state, reason, comment = (f.strip() for f in fields)
            yield (job_id, comment, slurm_state(state, reason),
                   None if reason in ("None", "") else reason)

    def history(self, job_ids: list[str]) -> list[tuple[str, str, JobState, str | None]]:
        """``scontrol show job`` of the tasks that left ``squeue``: one call per array (it
        lists every task of it), not one per task."""
        wanted = set(job_ids)
        arrays = sorted({job_id.split("_", 1)[0] for job_id in job_ids})
        records = []
        for array in arrays:
            result = run_command(["scontrol", "show", "job", "--oneliner", array], check=False)
            if result.returncode != 0:
                continue
            for line in result.stdout.splitlines():
                record = _scontrol_record(line)
                if record is not None and record[0] in wanted:
                    records.append(record)
        return records


def _scontrol_record(line: str) -> tuple[str, str, JobState, str | None] | None:
    """``(job id, comment, state, reason)`` of one ``scontrol show job --oneliner`` line;
    array tasks are ``ARRAYJOB_TASK``."""
    fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
    if "JobId" not in fields:
        return None
    task = fields.get("ArrayTaskId", "")
    job_id = f"{fields.get('ArrayJobId')}_{task}" if task.isdigit() else fields["JobId"]
    reason = fields.get("Reason")
    state = slurm_state(fields.get("JobState", ""), reason)
    if state is JobState.failed and fields.get("ExitCode"):
        reason = f"{fields.get('JobState')} (exit code {fields['ExitCode']})"
    return (job_id, fields.get("Comment", ""), state,
            None if reason in (None, "None") else reason)
