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
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from hybrid.batch.base import CommandLineSystem, JobState, ReservedOptions, SystemSettings
from hybrid.errors import BatchError
from hybrid.fields import reject

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
    if state in ("S", "U"):  # (U: a cycle-harvesting node's owner came back)
        return JobState.suspended, comment or ("suspended" if state == "S" else
                                                "suspended: its workstation is busy")
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


#: One resource request of ``qsub -l``: ``select=1:ncpus=4:mem=8gb``, ``place=scatter``.
_RESOURCE = r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:=+@/*-]+"


def _resource_list(value: Any) -> Any:
    """A ``#PBS -l`` resource list: one word, since a space on the directive line would
    start another qsub option."""
    if value is not None and not (isinstance(value, str) and re.fullmatch(
            rf"{_RESOURCE}(,{_RESOURCE})*", value)):
        raise reject('a "#PBS -l" resource list such as "select=1:ncpus=4:mem=8gb" (no spaces, '
                     "line breaks, quotes, $ or ;)")
    return value


class PBSSettings(SystemSettings):
    """``hybrid.batch.pbs``: the resource line, when the site wants its own."""

    resource_spec: Annotated[str, BeforeValidator(_resource_list)] | None = None


class PBS(CommandLineSystem):
    """A PBS Pro or OpenPBS server reached through ``qsub``/``qstat``/``qdel`` on this node."""

    name = "pbs"
    template = "pbs.sh.j2"
    tools = ("qsub", "qstat", "qdel")
    Settings = PBSSettings
    settings: PBSSettings
    submit_command = ("qsub",)
    remove_command = "qdel"
    gone_words = _GONE
    reserved_directives: ClassVar = (
        # (-v with its list attached, or after flags grouped with it, anywhere on the line)
        (r"(^|\s)-[fhIVXz]*v.*HYBRID_TAG\b", "hybrid's tag variable"),
        (r"(^|\s)-l\s*(\S*,)?(walltime|select|ncpus|mem|ngpus)=",
         "the job's wall time, cores, memory or GPUs (give walltime, cores, memory and gpus, "
         "or hybrid.batch.pbs.resource-spec: the worker's threads, memory limit and lifetime "
         "follow them)"),
    )
    reserved_options = ReservedOptions(
        "#PBS",
        short={"J": "the job array", "N": "the job name", "o": "the job's log file",
               "e": "the job's log file", "j": "the job's log file",
               "q": "the queue (give queue)"},
        flags="fhIVXz")
    #: qsub's ``-q``: a queue, optionally at a server (``workq``, ``gpu@pbs01``).
    queue_names = (r"[A-Za-z0-9_.-]+(@[A-Za-z0-9_.:-]+)?",
                   "letters, digits, _ . - and at most one @server (qstat -Q lists them)")

    def context(self, job: Any, staging: Path, count: int) -> dict[str, Any]:
        """The shared variables, and the site's own resource line (``resource_spec``)."""
        return {**super().context(job, staging, count),
                "resource_spec": self.settings.resource_spec}

    def parse_submit(self, out: str, count: int) -> list[str]:
        """``SEQ[].server`` for an array (subjobs ``SEQ[i].server``), ``SEQ.server`` for one."""
        job = out.strip().splitlines()[-1].strip() if out.strip() else ""
        if count == 1:
            if not re.fullmatch(r"\d+(\.\S+)?", job):
                raise BatchError(f"qsub answered {out.strip()!r}, not a job id")
            return [job]
        match = re.fullmatch(r"(\d+)\[\](\.\S+)?", job)
        if not match:
            raise BatchError(f"qsub answered {out.strip()!r}, not a job array id like "
                             "1234[].server")
        return [f"{match[1]}[{i}]{match[2] or ''}" for i in range(1, count + 1)]

    def query_argv(self, job_ids: list[str] | None, history: bool) -> list[str]:
        """``qstat -f -F json -t`` (``-x``: with finished jobs)."""
        return ["qstat", "-f", "-F", "json", "-t", *(["-x"] if history else []),
                *(job_ids or [])]

    def parse_query(self, out: str) -> Iterable[tuple[str, str, JobState, str | None]]:
        """Subjobs and plain jobs of the JSON answer (array parents are skipped)."""
        try:
            document = json.loads(out, strict=False) if out.strip() else {}
        except json.JSONDecodeError as error:
            raise BatchError(f"qstat -F json printed something that is not JSON ({error}): "
                             f"{out[:200]!r}") from None
        for job_id, attributes in (document.get("Jobs") or {}).items():
            if str(attributes.get("array", "")).lower() == "true":
                continue  # the array's parent: its subjobs are the workers
            tag = _variables(attributes.get("Variable_List")).get("HYBRID_TAG", "")
            state, reason = pbs_state(attributes)
            yield job_id, tag, state, reason
