"""Slurm: ``sbatch --array=1-n`` (one transaction), ``squeue``/``scontrol``, ``scancel``.

Jobs carry ``--comment=<tag>:<cluster>:<pool>``; array tasks are tracked as ``JOBID_TASK``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from hybrid.batch.base import BatchSystem, JobSpec, JobState, JobStatus, parse_tag, run_command
from hybrid.errors import BatchError

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


class Slurm(BatchSystem):
    """A Slurm cluster reached through its command-line tools on this node."""

    name = "slurm"
    template = "slurm.sh.j2"

    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """``sbatch --parsable`` the array script; returns ``JOBID_1 .. JOBID_n``."""
        script = self.render(spec, staging, count)
        out = run_command(["sbatch", "--parsable"], input=script, timeout=120).stdout.strip()
        job = out.split(";")[0].strip()
        if not job.isdigit():
            raise BatchError(f"sbatch answered {out!r}, not a job id")
        return [f"{job}_{i}" for i in range(1, count + 1)]

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs from ``squeue`` (and ``scontrol show job`` for ended ones with history)."""
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        argv = ["squeue", "--noheader", "--array", "--states=all",
                f"--format=%i{_SEP}%T{_SEP}%r{_SEP}%k"]
        if ids is not None:
            argv.append("--jobs=" + ",".join(ids))
        else:
            argv.append(f"--user={os.environ.get('USER') or os.getuid()}")
        result = run_command(argv, check=False)
        if result.returncode != 0 and "Invalid job id" not in result.stderr:
            raise BatchError(f"squeue failed (exit {result.returncode}): {result.stderr.strip()}")
        found: dict[str, JobStatus] = {}
        for line in result.stdout.splitlines():
            fields = line.split(_SEP)
            if len(fields) != 4:
                continue
            job_id, state, reason, comment = (f.strip() for f in fields)
            owner, pool, scheduler = parse_tag(comment)
            if owner is None or (cluster is not None and owner != cluster):
                continue
            found[job_id] = JobStatus(job_id, slurm_state(state, reason),
                                      None if reason in ("None", "") else reason, owner, pool,
                                      scheduler)
        if history and ids is not None:
            for job_id in ids:
                if job_id not in found:
                    status = self._show_job(job_id)
                    if status is not None:
                        found[job_id] = status
        if ids is not None:
            return [found[j] for j in ids if j in found]
        return list(found.values())

    def _show_job(self, job_id: str) -> JobStatus | None:
        result = run_command(["scontrol", "show", "job", "--oneliner", job_id], check=False)
        if result.returncode != 0:
            return None
        fields = dict(
            word.split("=", 1) for word in result.stdout.split() if "=" in word
        )
        owner, pool, scheduler = parse_tag(fields.get("Comment", ""))
        if owner is None:
            return None
        reason = fields.get("Reason")
        state = slurm_state(fields.get("JobState", ""), reason)
        if state is JobState.failed and fields.get("ExitCode"):
            reason = f"{fields.get('JobState')} (exit code {fields['ExitCode']})"
        return JobStatus(job_id, state, None if reason in (None, "None") else reason, owner, pool,
                         scheduler)

    def remove(self, job_ids: Iterable[str]) -> None:
        """``scancel`` exactly these array tasks (tasks that already ended are fine)."""
        ids = list(job_ids)
        if not ids:
            return
        result = run_command(["scancel", *ids], check=False)
        if result.returncode != 0:
            words = result.stderr.strip()
            benign = ("already completing or completed", "Invalid job id")
            lines = [line for line in words.splitlines() if not any(b in line for b in benign)]
            if lines:
                raise BatchError(f"scancel failed (exit {result.returncode}): {words}")
