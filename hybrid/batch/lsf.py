"""IBM Spectrum LSF: ``bsub`` of one job array (one transaction), ``bjobs -o ... -json``, ``bkill``.

The job script (``jobtemplates/lsf.sh.j2``) goes to ``bsub`` on stdin; it names itself
``-J "<tag>-<cluster>-<pool>[1-n]"``, so ``bsub`` answers ``Job <1234> is submitted to
queue <q>.`` and the workers are the elements ``1234[1]`` .. ``1234[n]``. The job
description (``-Jd "<tag>:<cluster>:<pool>:<scheduler address>"``) is the tag read back
with ``bjobs -o "... job_description ..."`` (``hybrid gc`` uses the address).

States come from ``bjobs -o "jobid jobindex stat job_name job_description exit_code
pend_reason" -json`` (LSF 10.1; ``-a`` adds recently finished jobs): ``PEND``/``PROV``/
``WAIT`` pending (reason: ``pend_reason``), ``PSUSP``/``USUSP``/``SSUSP`` held (suspended
while pending, by the user, by LSF), ``RUN``/``UNKWN`` running, ``DONE`` finished,
``EXIT`` failed (with its exit code), ``ZOMBI`` removed. These fields do not say who ended
an ``EXIT`` job: :class:`~hybrid.batch.base.BatchPool` remembers the jobs it removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hybrid.batch.base import BatchSystem, JobSpec, JobState, JobStatus, parse_tag, run_command
from hybrid.errors import BatchError

#: The bjobs -o fields we read (all in the LSF 10.1 field list).
FIELDS = "jobid jobindex stat job_name job_description exit_code pend_reason"
_NOT_FOUND = ("is not found", "No unfinished job found", "No job found",
              "No matching job found", "has already finished")
_STATES = {
    "PEND": JobState.pending, "PROV": JobState.pending, "WAIT": JobState.pending,
    "PSUSP": JobState.held, "USUSP": JobState.held, "SSUSP": JobState.held,
    "RUN": JobState.running, "UNKWN": JobState.running,
    "DONE": JobState.finished, "EXIT": JobState.failed, "ZOMBI": JobState.removed,
}
_DEFAULT_REASONS = {
    "PSUSP": "suspended by the user while pending",
    "USUSP": "suspended by the user",
    "SSUSP": "suspended by LSF",
    "UNKWN": "LSF lost contact with the execution host",
    "ZOMBI": "killed, but LSF cannot reach its execution host",
}


def lsf_state(record: dict[str, Any]) -> tuple[JobState, str | None]:
    """Map one ``bjobs -json`` record to a :class:`JobState` and a reason."""
    stat = str(record.get("STAT", "")).upper()
    state = _STATES.get(stat, JobState.pending)
    reason = str(record.get("PEND_REASON") or "").strip().rstrip(";").strip() or None
    if stat == "EXIT":
        code = str(record.get("EXIT_CODE") or "").strip()
        reason = f"exit code {code}" if code else "exited"
    elif stat == "DONE":
        reason = None
    elif reason is None:
        reason = _DEFAULT_REASONS.get(stat, None if stat in _STATES else f"LSF state {stat}")
    return state, reason


def element_id(record: dict[str, Any]) -> str:
    """``1234[2]`` for an array element, ``1234`` for a plain job."""
    job = str(record.get("JOBID", ""))
    index = str(record.get("JOBINDEX", "") or "0")
    return job if index == "0" else f"{job}[{index}]"


def _harmless(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return all(any(words in line for words in _NOT_FOUND) for line in lines)


class LSF(BatchSystem):
    """An LSF cluster reached through ``bsub``/``bjobs``/``bkill`` on this node."""

    name = "lsf"
    template = "lsf.sh.j2"

    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """``bsub < script`` once; returns the element ids ``JOB[1]`` .. ``JOB[n]``."""
        script = self.render(spec, staging, count)
        out = run_command(["bsub"], input=script, timeout=120).stdout
        match = re.search(r"Job <(\d+)> is submitted", out)
        if not match:
            raise BatchError(f"bsub answered {out.strip()!r}, not 'Job <id> is submitted ...'")
        return [f"{match[1]}[{i}]" for i in range(1, count + 1)]

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs from ``bjobs -o ... -json`` (``-a`` with history, or for given ids)."""
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        argv = ["bjobs", "-o", FIELDS, "-json"]
        if history or ids:
            argv.append("-a")
        argv += ids or []
        result = run_command(argv, check=False)
        if result.returncode != 0 and not _harmless(result.stderr):
            raise BatchError(f"bjobs failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
        try:
            document = json.loads(result.stdout) if result.stdout.strip() else {}
        except json.JSONDecodeError as error:
            raise BatchError(f"bjobs -json printed something that is not JSON ({error}): "
                             f"{result.stdout[:200]!r}") from None
        found: dict[str, JobStatus] = {}
        for record in document.get("RECORDS") or []:
            if "ERROR" in record or not record.get("JOBID"):
                continue  # "Job <id> is not found"
            owner, pool, scheduler = parse_tag(str(record.get("JOB_DESCRIPTION") or ""))
            if owner is None or (cluster is not None and owner != cluster):
                continue
            state, reason = lsf_state(record)
            job_id = element_id(record)
            found[job_id] = JobStatus(job_id, state, reason, owner, pool, scheduler)
        if ids is not None:
            return [found[j] for j in ids if j in found]
        return list(found.values())

    def remove(self, job_ids: Iterable[str]) -> None:
        """``bkill`` exactly these elements; ones already gone are not an error."""
        ids = list(job_ids)
        if not ids:
            return
        result = run_command(["bkill", *ids], check=False)
        if result.returncode != 0 and not (result.stderr.strip() and _harmless(result.stderr)):
            raise BatchError(f"bkill failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
