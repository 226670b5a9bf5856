"""What Grid Engine's ``qstat -xml`` and ``qacct -j`` print, read: the states of tasks and
their reasons, the details of jobs (their tag, their tasks' errors, the scheduler's messages),
how tasks that left the queue ended (:mod:`hybrid.batch.sge` asks, this reads).

Grid Engine 8.1.9 prints ``<job ids>`` (not XML) in the messages of an ``Rq`` task: element
names are repaired, and a document still not XML is read job by job. The scheduler's
messages come per job number, for every task of an array: one held task's "Job is in hold
state" is not its waiting siblings' reason.
"""

from __future__ import annotations

import html
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from hybrid.batch.jobs import JobState
from hybrid.errors import BatchError

__all__ = ["CONTEXT", "JobDetail", "accounting_records", "accounting_state", "job_details",
           "parse_xml", "sge_state", "task_numbers", "text_of"]

#: The job context variable that carries hybrid's tag.
CONTEXT = "HYBRID_TAG"
_SUSPENDED = {"s": "suspended (qmod -sj)", "S": "suspended with its queue (qmod -sq)",
              "T": "suspended by the queue's suspend threshold"}
#: The scheduler's message for a held task, given with the job number: for every task.
_HOLD_MESSAGE = "Job is in hold state"
_MESSAGE_PREFIX = re.compile(r"^\d\d/\d\d/\d{4} \d\d:\d\d:\d\d \[[^\]]*\]: ")
#: A tag whose name has spaces (``<job ids>``): words only, no attribute, no quote.
_SPACED_TAG = re.compile(r"<(/?)([A-Za-z_][\w.-]*(?:[ \t]+[A-Za-z_][\w.-]*)+)[ \t]*(/?)>")
_warned: set[str] = set()  # the commands whose documents were salvaged (said once)
logger = logging.getLogger("hybrid")


@dataclass
class JobDetail:
    """What ``qstat -xml -j`` says about one job."""

    tag: str = ""
    name: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)


def text_of(element: ET.Element | None, path: str) -> str:
    """The stripped text at ``path`` below ``element`` (``""`` where there is none)."""
    found = element.find(path) if element is not None else None
    return (found.text or "").strip() if found is not None else ""


def parse_xml(out: str, what: str) -> ET.Element | None:
    """``out`` (``None``: empty) parsed, tag names with spaces joined by ``_`` if need be."""
    if not out.strip():
        return None
    try:
        return ET.fromstring(_SPACED_TAG.sub(lambda m: f"<{m[1]}{'_'.join(m[2].split())}{m[3]}>",
                                             out))
    except ET.ParseError as error:  # (what the repair left; it keeps the lines)
        return _salvaged(out, what, BatchError(
            f"{what} printed something that is not XML ({error}): {out[:200]!r}"))


def _salvaged(out: str, what: str, error: BatchError) -> ET.Element:
    """A document not XML even repaired, read job by job (from one ``JB_job_number`` to the
    next) by the tags of what hybrid needs; ``error`` if a job lacks its number, name, state."""
    listing = re.search(r"<job_list[\s>]", out) is not None
    needed = ("JB_job_number", "JB_name", "state") if listing else ("JB_job_number",)
    jobs = ET.SubElement(root := ET.Element("salvaged"), "djob_info")
    for part in re.split(r"(?=<JB_job_number>)", out)[1:]:
        entry = ET.SubElement(jobs, "job_list" if listing else "element")
        for name in ("JB_job_number", "JB_name", "JB_job_name", "state", "tasks"):
            if found := re.search(rf"<{name}>([^<]*)</{name}>", part):
                ET.SubElement(entry, name).text = html.unescape(found[1])
        if tag := re.search(rf"<VA_variable>{CONTEXT}</VA_variable>\s*<VA_value>([^<]*)<", part):
            context = ET.SubElement(ET.SubElement(entry, "JB_context"), "context_list")
            ET.SubElement(context, "VA_variable").text = CONTEXT
            ET.SubElement(context, "VA_value").text = html.unescape(tag[1])
        if not all(text_of(entry, name) for name in needed):
            raise error
    if not len(jobs):
        raise error
    if what not in _warned:
        _warned.add(what)
        logger.warning("%s; read job by job by its tags (the reasons of waiting and held jobs "
                       "may be missing)", error)
    return root


def task_numbers(tasks: str) -> list[str]:
    """``"3"``, ``"2-4:1"``, ``"1,3,5-9:2"`` -> the task numbers."""
    numbers: list[str] = []
    for part in tasks.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:-(\d+)(?::(\d+))?)?\s*", part)
        if not match:
            continue
        first = int(match[1])
        last = int(match[2] or first)
        numbers += [str(n) for n in range(first, last + 1, int(match[3] or 1))]
    return numbers


def sge_state(state: str, error: str | None = None,
              messages: Iterable[str] = ()) -> tuple[JobState, str | None]:
    """Map a ``qstat`` state (``qw``, ``hqw``, ``Eqw``, ``r``, ``dr``...) to a
    :class:`JobState` and a reason."""
    if "h" not in state:  # (a message of the job number's: another task's hold)
        messages = [m for m in messages if m != _HOLD_MESSAGE]
    scheduler = "; ".join(list(dict.fromkeys(messages))[:3]) or None
    if "d" in state:
        return JobState.removing, "being deleted (qdel)"
    if "E" in state:
        return JobState.held, (f"error state {state}: {error}" if error else
                               f"error state {state}") + "; `qmod -cj` clears it once fixed"
    if "h" in state:
        return JobState.held, f"on hold ({state}; `qrls` releases it)"
    for letter, why in _SUSPENDED.items():
        if letter in state:
            return JobState.suspended, why
    if any(letter in state for letter in "rt"):  # (R: restarted, e.g. Rr)
        return JobState.running, None
    if "z" in state:
        return JobState.finished, None
    if "R" in state:  # Rq: rescheduled, to run again
        return JobState.pending, f"rescheduled ({state}), waiting to run again" + (
            f": {scheduler}" if scheduler else "")
    return JobState.pending, scheduler


def job_details(root: ET.Element | None) -> dict[str, JobDetail]:
    """Job number -> its context tag, task errors and scheduler messages."""
    details: dict[str, JobDetail] = {}
    if root is None:
        return details
    for job in root.iterfind("djob_info/element"):
        detail = JobDetail(name=text_of(job, "JB_job_name"))
        for variable in job.iterfind("JB_context/context_list"):
            if text_of(variable, "VA_variable") == CONTEXT:
                detail.tag = text_of(variable, "VA_value")
        for task in job.iterfind("JB_ja_tasks/ulong_sublist"):
            words = [_MESSAGE_PREFIX.sub("", m.text.strip())
                     for m in task.iterfind("JAT_message_list/ulong_sublist/QIM_message")
                     if m.text]
            if words:
                detail.errors[text_of(task, "JAT_task_number")] = "; ".join(words)
        details[text_of(job, "JB_job_number")] = detail
    for message in root.iter():
        text = text_of(message, "MES_message")
        if not text:
            continue
        for number in message.iterfind("MES_job_number_list/*/ULNG_value"):  # (or job_ids)
            if number.text and number.text.strip() in details:
                details[number.text.strip()].messages.append(text)
    # why nothing more starts anywhere (a full cell: "queue instance ... dropped because it
    # is full"): the reason of every job without one of its own
    cell = [text for message in root.iterfind(".//SME_global_message_list/element")
            if (text := text_of(message, "MES_message"))]
    for detail in details.values():
        if not detail.messages:
            detail.messages = list(cell)
    return details


def accounting_records(out: str) -> Iterator[dict[str, str]]:
    """The records of ``qacct -j``, as dicts of their fields."""
    for block in re.split(r"^=+\s*$", out, flags=re.M):
        record = {}
        for line in block.splitlines():
            key, _, value = line.strip().partition(" ")
            if key:
                record[key] = value.strip()
        if "jobnumber" in record:
            yield record


def accounting_state(record: dict[str, str]) -> tuple[JobState, str | None]:
    """How one ``qacct`` record ended: finished, or failed with why (ending in the exit
    status, which :meth:`~hybrid.manager.PoolManager.describe_end` explains)."""
    failed = record.get("failed", "0").strip()
    try:
        status = int(record.get("exit_status", "0").split()[0])
    except (ValueError, IndexError):
        status = 0
    if failed.split(":")[0].strip() in ("", "0") and status == 0:
        return JobState.finished, None
    words = f"killed by signal {status - 128}, " if status > 128 else ""
    if failed.split(":")[0].strip() not in ("", "0"):
        words += f"Grid Engine: failed {failed}, "
    return JobState.failed, f"{words}exit status {status}"
