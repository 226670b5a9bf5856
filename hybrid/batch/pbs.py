"""PBS Pro / OpenPBS: ``qsub`` of one job array (one transaction), ``qstat -f -F json``, ``qdel``.

The job script (``jobtemplates/pbs.sh.j2``) goes to ``qsub`` on stdin. ``n > 1`` workers
are the subjobs of ``#PBS -J 1-n``: qsub prints ``1234[].server`` and the workers are
``1234[1].server`` .. ``1234[n].server``; one worker is a plain job ``1234.server`` (qsub
refuses the range ``1-1``). Jobs are named ``<tag>-<cluster>-<pool>`` (``-N``) and carry
``-v HYBRID_TAG=<tag>:<cluster>:<pool>:<scheduler address>``, read back from
``Variable_List`` by ``qstat -f`` (``hybrid gc`` uses the address).

States come from ``qstat -f -F json -t`` (PBS Pro 19+ / OpenPBS; ``-x`` adds finished
jobs from the server's job history): ``Q``/``T``/``W`` pending, ``H`` held (the reason is
the scheduler's ``comment`` or the hold types), ``S``/``U`` held (suspended), ``R``/``E``
running, and for ``F``/``X`` the substate: 91 removed (``qdel``), 92 finished (failed if
``Exit_status`` is not 0), 93 failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hybrid.batch.base import (
    BatchSystem,
    JobSpec,
    JobState,
    JobStatus,
    parse_tag,
    run_command,
)
from hybrid.errors import BatchError

#: qstat/qdel words meaning "that job is no longer there", not a failure of the tool.
_GONE = ("Unknown Job Id", "Job has finished", "job has finished")
_SUBSTATE_TERMINATED, _SUBSTATE_FINISHED, _SUBSTATE_FAILED = 91, 92, 93
_HOLD_TYPES = {"u": "user", "o": "operator", "s": "system", "p": "bad password"}


def _variables(value: Any) -> dict[str, str]:
    """``Variable_List``: a JSON object (PBS 19+), or ``A=b,C=d`` text (older JSON, text)."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    variables = {}
    for item in re.split(r"(?<!\\),", str(value or "")):
        name, _, setting = item.partition("=")
        variables[name.strip()] = setting.replace("\\,", ",")
    return variables


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _exit_words(status: int) -> str:
    if status > 256:
        return f"killed by signal {status - 256} (Exit_status {status})"
    if status < 0:
        return f"PBS could not run it (Exit_status {status})"
    return f"Exit_status {status}"


def pbs_state(attributes: dict[str, Any]) -> tuple[JobState, str | None]:
    """Map one job's ``qstat -f`` attributes to a :class:`JobState` and a reason."""
    state = str(attributes.get("job_state", "")).upper()
    comment = attributes.get("comment") or None
    if state in ("Q", "T", "W"):
        return JobState.pending, comment
    if state == "H":
        holds = str(attributes.get("Hold_Types", ""))
        kinds = ", ".join(_HOLD_TYPES.get(h, h) for h in holds if h != "n")
        return JobState.held, comment or (f"{kinds} hold (Hold_Types={holds})" if kinds
                                          else "held")
    if state in ("S", "U"):
        return JobState.held, comment or "suspended"
    if state in ("R", "E", "B"):
        return JobState.running, comment
    if state == "M":
        return JobState.removed, comment or "moved to another server"
    if state in ("F", "X"):
        substate = _int(attributes.get("substate"))
        exit_status = _int(attributes.get("Exit_status"))
        if substate == _SUBSTATE_TERMINATED:
            return JobState.removed, comment or "deleted"
        if substate == _SUBSTATE_FAILED or (exit_status not in (None, 0)):
            words = _exit_words(exit_status) if exit_status is not None else "failed"
            return JobState.failed, f"{words}; {comment}" if comment else words
        return JobState.finished, comment
    return JobState.pending, comment or f"unknown PBS state {state!r}"


class PBS(BatchSystem):
    """A PBS Pro or OpenPBS server reached through ``qsub``/``qstat``/``qdel`` on this node."""

    name = "pbs"
    template = "pbs.sh.j2"

    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """``qsub`` the script once; returns ``SEQ[1].server`` .. ``SEQ[n].server``.

        One worker is a plain job, ``SEQ.server``.
        """
        script = self.render(spec, staging, count)
        out = run_command(["qsub"], input=script, timeout=120).stdout.strip()
        job = out.splitlines()[-1].strip() if out else ""
        if count == 1:
            if not re.fullmatch(r"\d+(\.\S+)?", job):
                raise BatchError(f"qsub answered {out!r}, not a job id")
            return [job]
        match = re.fullmatch(r"(\d+)\[\](\.\S+)?", job)
        if not match:
            raise BatchError(f"qsub answered {out!r}, not a job array id like 1234[].server")
        return [f"{match[1]}[{i}]{match[2] or ''}" for i in range(1, count + 1)]

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our jobs from ``qstat -f -F json -t`` (with ``-x`` for history)."""
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        argv = ["qstat", "-f", "-F", "json", "-t"] + (["-x"] if history else []) + (ids or [])
        result = run_command(argv, check=False)
        problems = [line for line in result.stderr.splitlines()
                    if line.strip() and not any(word in line for word in _GONE)]
        if result.returncode != 0 and (problems or not ids):
            raise BatchError(f"qstat failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
        try:
            document = json.loads(result.stdout, strict=False) if result.stdout.strip() else {}
        except json.JSONDecodeError as error:
            raise BatchError(f"qstat -F json printed something that is not JSON ({error}): "
                             f"{result.stdout[:200]!r}") from None
        found: dict[str, JobStatus] = {}
        for job_id, attributes in (document.get("Jobs") or {}).items():
            if str(attributes.get("array", "")).lower() == "true":
                continue  # the array's parent: its subjobs are the workers
            tag = _variables(attributes.get("Variable_List")).get("HYBRID_TAG", "")
            owner, pool, scheduler = parse_tag(tag)
            if owner is None or (cluster is not None and owner != cluster):
                continue
            state, reason = pbs_state(attributes)
            found[job_id] = JobStatus(job_id, state, reason, owner, pool, scheduler)
        if ids is not None:
            return [found[j] for j in ids if j in found]
        return list(found.values())

    def remove(self, job_ids: Iterable[str]) -> None:
        """``qdel`` exactly these jobs or subjobs; ones already gone are not an error."""
        ids = list(job_ids)
        if not ids:
            return
        result = run_command(["qdel", *ids], check=False)
        problems = [line for line in result.stderr.splitlines()
                    if line.strip() and not any(word in line for word in _GONE)]
        if result.returncode != 0 and (problems or not result.stderr.strip()):
            raise BatchError(f"qdel failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
