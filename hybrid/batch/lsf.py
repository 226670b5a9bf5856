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
from typing import Any

from hybrid.batch.base import CommandLineSystem, JobState, ReservedOptions
from hybrid.errors import BatchError

#: The bjobs -o fields we read (all in the LSF 10.1 field list).
FIELDS = "jobid jobindex stat job_name job_description exit_code pend_reason"
_NOT_FOUND = ("is not found", "No unfinished job found", "No job found",
              "No matching job found", "has already finished")
_STATES = {
    "PEND": JobState.pending, "PROV": JobState.pending, "WAIT": JobState.pending,
    "PSUSP": JobState.held, "USUSP": JobState.suspended, "SSUSP": JobState.suspended,
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


class LSF(CommandLineSystem):
    """An LSF cluster reached through ``bsub``/``bjobs``/``bkill`` on this node."""

    name = "lsf"
    template = "lsf.sh.j2"
    tools = ("bsub", "bjobs", "bkill")
    submit_command = ("bsub",)
    remove_command = "bkill"
    gone_words = _NOT_FOUND
    reserved_options = ReservedOptions(
        "#BSUB", short={},
        words={"-J": "the job array and its name", "-Jd": "the job description (hybrid's tag)",
               "-o": "the job's log file", "-oo": "the job's log file",
               "-e": "the job's log file", "-eo": "the job's log file",
               "-W": "the wall time (give walltime: the workers' lifetime ends before it)",
               "-n": "the job's cores (give cores: the worker's threads follow it)",
               "-M": "the job's memory (give memory: the worker's memory limit follows it)",
               "-gpu": "the job's GPUs (give gpus)", "-q": "the queue (give queue)"})
    #: bsub's ``-q``: one queue name (bqueues lists them).
    queue_names = (r"[A-Za-z0-9_.-]+", "letters, digits, _ . - (bqueues lists them)")

    def parse_submit(self, out: str, count: int) -> list[str]:
        """``Job <1234> is submitted ...``: the elements are ``1234[1]`` .. ``1234[n]``."""
        match = re.search(r"Job <(\d+)> is submitted", out)
        if not match:
            raise BatchError(f"bsub answered {out.strip()!r}, not 'Job <id> is submitted ...'")
        return [f"{match[1]}[{i}]" for i in range(1, count + 1)]

    def query_argv(self, job_ids: list[str] | None, history: bool) -> list[str]:
        """``bjobs -o FIELDS -json`` (``-a`` with history, or for given ids)."""
        return ["bjobs", "-o", FIELDS, "-json", *(["-a"] if history or job_ids else []),
                *(job_ids or [])]

    def parse_query(self, out: str) -> Iterable[tuple[str, str, JobState, str | None]]:
        """One record per element in the JSON answer."""
        try:
            document = json.loads(out) if out.strip() else {}
        except json.JSONDecodeError as error:
            raise BatchError(f"bjobs -json printed something that is not JSON ({error}): "
                             f"{out[:200]!r}") from None
        for record in document.get("RECORDS") or []:
            if "ERROR" in record or not record.get("JOBID"):
                continue  # "Job <id> is not found"
            state, reason = lsf_state(record)
            yield element_id(record), str(record.get("JOB_DESCRIPTION") or ""), state, reason
