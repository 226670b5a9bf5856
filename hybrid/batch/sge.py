"""Grid Engine (Son of Grid Engine, Univa/Altair Grid Engine): ``qsub -t 1-n`` (one
transaction), ``qstat -xml``, ``qdel``, ``qacct``.

The job script (``jobtemplates/sge.sh.j2``) goes to ``qsub -terse`` on stdin as ONE array job
``#$ -t 1-n``: qsub answers ``1234.1-n:1`` and the workers are the tasks ``1234.1`` ..
``1234.n``. A request beyond the site's ``max_aj_tasks`` (``max_array_size``) goes out as
several arrays, one ``qsub`` each. Jobs are named ``<tag>-<cluster>-<pool>`` (``-N``) and
carry the job context ``HYBRID_TAG=<tag>:<cluster>:<pool>:<scheduler address>`` (``-ac``),
read back with ``qstat -xml -j`` (``hybrid gc`` uses the address).

States come from ``qstat -xml -g d`` (one entry per task) and the details of our jobs from
``qstat -xml -j``: ``qw`` pending (the reason: the scheduler's messages, where the site keeps
them, ``schedd_job_info``), ``h..`` held, ``E..`` held with the task's error (``Eqw``: "can't
chdir to ..."; ``qmod -cj`` clears it), ``s``/``S``/``T`` held (suspended), ``r``/``t``
running (``Rr`` too: qstat(1)'s ``R`` is "restarted"), ``Rq`` pending (rescheduled, to run
again), ``d..`` being removed. Tasks that left the queue are looked up with ``qacct`` (the
accounting file, where this node can read it): ``failed`` and ``exit_status`` say how they
ended. These do not say who ended a task: :class:`~hybrid.manager.PoolManager` remembers the
jobs it removed. Grid Engine 8.1.9 prints ``<job ids>`` (not XML) in the messages of an
``Rq`` task: element names are repaired, and a document still not XML is read job by job.

Grid Engine reads ``#$`` at the start of ANY line of a job script as a directive, even after
the first command and inside a quoted string: no value that reaches the script may put one
there (:meth:`SGE.check_spec`; :meth:`SGE.render` checks the whole script again).
"""

from __future__ import annotations

import getpass
import html
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid.batch.base import (
    CommandLineSystem,
    JobState,
    JobStatus,
    ReservedOptions,
    SystemSettings,
    WorkerJob,
    parse_tag,
    run_command,
    staging_root,
    tag_prefix,
)
from hybrid.errors import BatchError, ConfigurationError, TemplateError
from hybrid.fields import BatchWord, ResourceName, ResourceNames, ResourceRequests, count, reject

if TYPE_CHECKING:
    from hybrid.checks import CheckResult
    from hybrid.pools import PoolSpec

#: The job context variable that carries hybrid's tag.
CONTEXT = "HYBRID_TAG"
#: qdel/qstat words meaning "that job or task is no longer there", not a failure.
_GONE = ("does not exist", "comprises no tasks", "has already been deleted",
         "is already in deletion", "has deleted", "for deletion", "has registered")
#: A directive line anywhere in a script: "#$" at the start of a line.
_DIRECTIVE_LINE = re.compile(r"(?m)^#\$")
_SUSPENDED = {"s": "suspended (qmod -sj)", "S": "suspended with its queue (qmod -sq)",
              "T": "suspended by the queue's suspend threshold"}
_MESSAGE_PREFIX = re.compile(r"^\d\d/\d\d/\d{4} \d\d:\d\d:\d\d \[[^\]]*\]: ")
#: A tag whose name has spaces (``<job ids>``): words only, no attribute, no quote.
_SPACED_TAG = re.compile(r"<(/?)([A-Za-z_][\w.-]*(?:[ \t]+[A-Za-z_][\w.-]*)+)[ \t]*(/?)>")
_warned: set[str] = set()  # the commands whose documents were salvaged (said once)
logger = logging.getLogger("hybrid")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        import os

        return str(os.getuid())


class SGESettings(SystemSettings):
    """``hybrid.batch.sge``: what differs between Grid Engine sites."""

    #: The cluster's ``max_aj_tasks`` (``qconf -sconf``): larger requests are split.
    max_array_size: count(1, 10_000_000) = 75000
    #: The parallel environment of multi-core jobs (``-pe <pe> <cores>``); ``None``: none,
    #: and pools of more than one core are refused.
    parallel_environment: ResourceName | None = "smp"
    #: The resources that carry a pool's memory, per slot (``-l h_vmem=...``).
    memory_resources: ResourceNames = ("mem_free",)
    #: The consumable resource GPU pools ask for (``-l gpu=N``).
    gpu_resource: ResourceName = "gpu"
    #: The project of every job (``-P``; dask-jobqueue's ``project``).
    project: BatchWord | None = None
    #: Further resource requests of every job (``-l``; dask-jobqueue's ``resource_spec``).
    resource_spec: ResourceRequests | None = None
    #: Read ``qacct`` for tasks that left the queue (how they ended).
    accounting: bool = True


@dataclass
class _Detail:
    """What ``qstat -xml -j`` says about one job."""

    tag: str = ""
    name: str = ""
    errors: dict[str, str] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)


def _text(element: ET.Element | None, path: str) -> str:
    found = element.find(path) if element is not None else None
    return (found.text or "").strip() if found is not None else ""


def _xml(out: str, what: str) -> ET.Element | None:
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
        if not all(_text(entry, name) for name in needed):
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


def _details(root: ET.Element | None) -> dict[str, _Detail]:
    """Job number -> its context tag, task errors and scheduler messages."""
    details: dict[str, _Detail] = {}
    if root is None:
        return details
    for job in root.iterfind("djob_info/element"):
        detail = _Detail(name=_text(job, "JB_job_name"))
        for variable in job.iterfind("JB_context/context_list"):
            if _text(variable, "VA_variable") == CONTEXT:
                detail.tag = _text(variable, "VA_value")
        for task in job.iterfind("JB_ja_tasks/ulong_sublist"):
            words = [_MESSAGE_PREFIX.sub("", m.text.strip())
                     for m in task.iterfind("JAT_message_list/ulong_sublist/QIM_message")
                     if m.text]
            if words:
                detail.errors[_text(task, "JAT_task_number")] = "; ".join(words)
        details[_text(job, "JB_job_number")] = detail
    for message in root.iter():
        text = _text(message, "MES_message")
        if not text:
            continue
        for number in message.iterfind("MES_job_number_list/*/ULNG_value"):  # (or job_ids)
            if number.text and number.text.strip() in details:
                details[number.text.strip()].messages.append(text)
    # why nothing more starts anywhere (a full cell: "queue instance ... dropped because it
    # is full"): the reason of every job without one of its own
    cell = [text for message in root.iterfind(".//SME_global_message_list/element")
            if (text := _text(message, "MES_message"))]
    for detail in details.values():
        if not detail.messages:
            detail.messages = list(cell)
    return details


def _accounting(out: str) -> Iterator[dict[str, str]]:
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


def _ranges(job_ids: Iterable[str]) -> list[str]:
    """``["7.1", "7.2", "7.3", "7.5", "8.1"]`` -> ``["7.1-3", "7.5", "8.1"]`` (qdel's form)."""
    by_job: dict[str, list[int]] = {}
    plain = []
    for job_id in job_ids:
        job, _, task = job_id.partition(".")
        if task.isdigit():
            by_job.setdefault(job, []).append(int(task))
        else:
            plain.append(job_id)
    words = []
    for job, tasks in by_job.items():
        tasks = sorted(set(tasks))
        start = previous = tasks[0]
        for task in [*tasks[1:], None]:
            if task is not None and task == previous + 1:
                previous = task
                continue
            words.append(f"{job}.{start}" if start == previous else f"{job}.{start}-{previous}")
            if task is not None:
                start = previous = task
    return words + plain


class SGE(CommandLineSystem):
    """A Grid Engine cell reached through ``qsub``/``qstat``/``qdel`` on this node."""

    name = "sge"
    template = "sge.sh.j2"
    tools = ("qsub", "qstat", "qdel")
    submit_command = ("qsub", "-terse")
    remove_command = "qdel"
    gone_words = _GONE
    Settings = SGESettings
    unreachable_fix = ("Check that sge_qmaster is up and reachable (qstat -f), and that "
                       "SGE_ROOT and SGE_CELL name the cell (source "
                       "$SGE_ROOT/$SGE_CELL/common/settings.sh).")
    reserved_options = ReservedOptions("#$", short={}, words={
        "-t": "the job array", "-N": "the job name", "-o": "the job's log file",
        "-e": "the job's log file", "-j": "the job's log file", "-wd": "the job's directory",
        "-cwd": "the job's directory", "-S": "the job's shell (bash)",
        "-ac": "the job context (hybrid's tag)", "-sc": "the job context (hybrid's tag)",
        "-dc": "the job context (hybrid's tag)",
        "-pe": "the parallel environment (give cores; its name is "
               "hybrid.batch.sge.parallel-environment)",
        "-b": "how the job script is read (it is a script)",
        "-clear": "every option before it, hybrid's included",
        "-C": "the directive prefix (#$)",
        "-@": "options from a file (hybrid checks every option it sends)",
        "-sync": "qsub returning at once (hybrid waits for workers, not for jobs)",
        "-terse": "qsub's answer (hybrid reads the job id from it)",
        "-w": "the submission itself (-w v or -w p only verify, -w e/w/n change nothing "
              "hybrid needs)",
    })

    # ------------------------------------------------------------------ checks
    @classmethod
    def check_spec(cls, spec: PoolSpec) -> None:
        """Beyond the reserved options: resource requests hybrid makes itself, a parallel
        environment for multi-core pools, and ``#$`` lines from any value."""
        super().check_spec(spec)
        from hybrid.fields import validate

        settings = validate(cls.Settings, spec.system_options, prefix="system_options.")
        if spec.cores > 1 and settings.parallel_environment is None:
            raise reject("1 core: hybrid.batch.sge.parallel-environment is null, and Grid "
                         "Engine gives a job several slots only through one",
                         "Set hybrid.batch.sge.parallel-environment to the site's PE for "
                         "single-node jobs (qconf -spl lists them; often smp).",
                         field="cores", value=spec.cores)
        mine = {"h_rt": "the wall time (give walltime)", "s_rt": "the wall time (give "
                "walltime)"}
        if spec.memory:
            mine.update({name: "the memory (give memory)" for name in settings.memory_resources})
            if "mem_free" in settings.memory_resources:
                mine["mf"] = "the memory (give memory)"
        if spec.gpus:
            mine[settings.gpu_resource] = "the GPUs (give gpus)"
        if settings.resource_spec:
            what = _requested(settings.resource_spec.split(","), mine)
            if what:
                raise reject(f"resources other than {what[0]} ({what[1]})",
                             "hybrid sets it for each job.", field="system_options",
                             value={"resource_spec": settings.resource_spec})
        for index, directive in enumerate(spec.job_extra_directives):
            what = _requested(_l_values(directive), mine)
            if what:
                raise reject(f"a directive that does not request {what[0]} ({what[1]}: "
                             "hybrid sets it)", "Leave it out: hybrid requests it.",
                             field=f"job_extra_directives[{index}]", value=directive)
        for key, value in _script_strings(spec):
            starts = key.startswith("job_script_prologue")
            if (_DIRECTIVE_LINE.search(value) if starts else "\n#$" in value):
                raise reject("no line starting with #$: Grid Engine reads such a line anywhere "
                             "in the job script as a directive",
                             "Indent the line or rephrase it (e.g. ' #$ ...').",
                             field=key, value=value)

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        _check_staging(staging_root())

    # ------------------------------------------------------------------ rendering
    def context(self, job: WorkerJob, staging: Path, count: int) -> dict[str, Any]:
        """The shared variables plus Grid Engine's: the PE, per-slot memory, resources."""
        context = super().context(job, staging, count)
        settings = self.settings
        slots = job.spec.cores if settings.parallel_environment else 1
        per_slot = -(-job.spec.memory // slots // 1048576) if job.spec.memory else 0
        _check_staging(staging)
        if "," in job.tag_value or any(c.isspace() for c in job.tag_value):
            raise TemplateError(f"the tag {job.tag_value!r} contains a comma or a space, "
                                "which a Grid Engine job context cannot hold")
        context.update(
            parallel_environment=settings.parallel_environment if job.spec.cores > 1 else None,
            memory_requests=[f"{name}={per_slot}M" for name in settings.memory_resources]
            if per_slot else [],
            gpu_request=f"{settings.gpu_resource}={job.spec.gpus}" if job.spec.gpus else None,
            project=settings.project, resource_spec=settings.resource_spec,
            context_variable=CONTEXT)
        return context

    def render(self, job: WorkerJob, staging: Path, count: int = 1) -> str:
        """The job script; refused if any line after the header would be read as a
        directive (a user's own template, or a value that slipped past the checks)."""
        script = super().render(job, staging, count)
        lines = script.split("\n")  # as qsub splits it (not at \u2028 and the like)
        body = next((i for i, line in enumerate(lines[1:], 1)
                     if line.strip() and not line.startswith("#")), len(lines))
        for line in lines[body:]:
            if line.startswith("#$"):
                raise TemplateError(f"the Grid Engine job script has a directive line after "
                                    f"its first command ({line!r}): qsub would read it")
        return script

    # ------------------------------------------------------------------ operations
    def parse_submit(self, out: str, count: int) -> list[str]:
        """``qsub -terse`` prints ``JOB.1-n:1`` for an array: the tasks are ``JOB.1..n``."""
        answer = out.strip().splitlines()[-1].strip() if out.strip() else ""
        match = re.fullmatch(r"(\d+)(?:\.(\d+)-(\d+):(\d+))?", answer)
        if not match:
            raise BatchError(f"qsub answered {out.strip()!r}, not a job array id like "
                             "1234.1-4:1")
        if match[2] is None:  # a user's template without -t: one plain job
            return [f"{match[1]}.1"] if count == 1 else [match[1]]
        return [f"{match[1]}.{i}" for i in range(int(match[2]), int(match[3]) + 1,
                                                  int(match[4]))]

    def query_argv(self, job_ids: list[str] | None, history: bool) -> list[str]:
        """``qstat -xml -g d -u USER``: every task of this user's jobs, one entry each
        (qstat cannot list tasks by id; :meth:`query` keeps those asked for)."""
        return ["qstat", "-xml", "-g", "d", "-u", _user()]

    def parse_query(self, out: str) -> Iterable[tuple[str, str, JobState, str | None]]:
        """``(task id, tag, state, reason)`` of our tasks in the listing (details are asked
        for with a second ``qstat -xml -j``)."""
        return self._records(out, f"{tag_prefix()}-", None)

    def _records(self, out: str, prefix: str, jobs: set[str] | None,
                 ) -> list[tuple[str, str, JobState, str | None]]:
        tasks = []
        for entry in (_xml(out, "qstat -xml") or ET.Element("none")).iter("job_list"):
            number, name = _text(entry, "JB_job_number"), _text(entry, "JB_name")
            if not name.startswith(prefix) or (jobs is not None and number not in jobs):
                continue
            for task in task_numbers(_text(entry, "tasks") or "1"):
                tasks.append((number, task, _text(entry, "state")))
        if not tasks:
            return []
        details = self._details(sorted({number for number, _, _ in tasks}, key=int))
        records = []
        for number, task, state in tasks:
            detail = details.get(number)
            if detail is None:
                continue  # it left between the two calls
            job_state, reason = sge_state(state, detail.errors.get(task), detail.messages)
            records.append((f"{number}.{task}", detail.tag, job_state, reason))
        return records

    def _details(self, jobs: list[str]) -> dict[str, _Detail]:
        result = run_command(["qstat", "-xml", "-j", ",".join(jobs)], check=False)
        if result.returncode != 0:
            raise BatchError(f"qstat -j failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
        return _details(_xml(result.stdout, "qstat -xml -j"))

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our tasks, from the listing and the details of the jobs named like ours (and of
        ``cluster``); with ``history``, ``qacct`` of the asked-for tasks that left."""
        ids = list(job_ids) if job_ids is not None else None
        if ids is not None and not ids:
            return []
        tag = tag_prefix()
        prefix = f"{tag}-{cluster}-" if cluster else f"{tag}-"
        jobs = {job_id.split(".", 1)[0] for job_id in ids} if ids is not None else None
        argv = self.query_argv(ids, history)
        result = run_command(argv, check=False)
        if result.returncode != 0:
            raise BatchError(f"qstat failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
        found: dict[str, JobStatus] = {}
        for job_id, value, state, reason in self._records(result.stdout, prefix, jobs):
            owner, pool, scheduler = parse_tag(value, tag)
            if owner is None or (cluster is not None and owner != cluster):
                continue
            found[job_id] = JobStatus(job_id, state, reason, owner, pool, scheduler)
        if history and ids is not None and self.settings.accounting:
            missing = [j for j in ids if j not in found]
            if missing:
                found.update(self.history_of(missing, prefix, cluster))
        if ids is not None:
            return [found[j] for j in ids if j in found]
        return list(found.values())

    def history_of(self, job_ids: list[str], prefix: str, cluster: str | None,
                   ) -> dict[str, JobStatus]:
        """``qacct -j`` of the tasks that left the queue: one call per job (it lists every
        task). A job named like ours is ours; its pool is known only with ``cluster``."""
        wanted = set(job_ids)
        found = {}
        for job in sorted({j.split(".", 1)[0] for j in job_ids}, key=lambda j: int(j)
                          if j.isdigit() else 0):
            try:
                result = run_command(["qacct", "-j", job], check=False, timeout=30)
            except BatchError:
                continue  # a huge accounting file: no history rather than a stuck poll
            for record in _accounting(result.stdout):
                task = record.get("taskid", "undefined")
                job_id = f"{record['jobnumber']}.{task if task.isdigit() else 1}"
                name = record.get("jobname", "")
                if job_id not in wanted or not name.startswith(prefix):
                    continue
                state, reason = accounting_state(record)
                pool = name[len(prefix):] if cluster else None
                found[job_id] = JobStatus(job_id, state, reason, cluster, pool)
        return found

    def remove(self, job_ids: Iterable[str]) -> None:
        """``qdel`` of exactly these tasks (as ranges: ``7.1-3``); ones already gone are not
        an error (qdel prints every answer on stdout)."""
        ids = list(job_ids)
        if not ids:
            return
        words = _ranges(ids)
        for start in range(0, len(words), 500):
            result = run_command(["qdel", *words[start:start + 500]], check=False)
            if result.returncode != 0:
                lines = [line for line in (result.stdout + result.stderr).splitlines()
                         if line.strip()]
                if not lines or not all(any(w in line for w in _GONE) for line in lines):
                    raise BatchError(f"qdel failed (exit {result.returncode}): "
                                     f"{(result.stderr or result.stdout).strip()}")

    def check(self, timeout: float = 20.0) -> CheckResult:
        """The tools and a query (as every system), then the cell's own configuration: the
        parallel environment, the resources hybrid requests, ``max_aj_tasks``."""
        from hybrid.checks import fail, ok, warn

        result = super().check(timeout)
        if not result.ok:
            return result
        name = result.name
        problems = []
        settings = self.settings
        try:
            complexes = run_command(["qconf", "-sc"], timeout=timeout).stdout
            configuration = run_command(["qconf", "-sconf"], timeout=timeout).stdout
            environments = run_command(["qconf", "-spl"], timeout=timeout).stdout.split()
        except BatchError as error:
            return warn(name, f"{result.message}; the cell's configuration could not be read "
                        f"({str(error).splitlines()[0]})",
                        "Run `hybrid doctor` on a submit or admin host of the cell to check "
                        "the parallel environment and resources.")
        requestable = {line.split()[0]: line.split()[4] for line in complexes.splitlines()
                       if line.strip() and not line.startswith("#") and len(line.split()) > 4}
        if settings.parallel_environment and settings.parallel_environment not in environments:
            problems.append((f"the parallel environment {settings.parallel_environment!r} "
                             f"does not exist (qconf -spl: {', '.join(environments) or 'none'})",
                             "Set hybrid.batch.sge.parallel-environment to one of those."))
        for resource, option in [*((r, "memory-resources") for r in settings.memory_resources),
                                 (settings.gpu_resource, "gpu-resource")]:
            if requestable.get(resource, "NO") not in ("YES", "FORCED"):
                problems.append((f"the resource {resource!r} is not a requestable complex "
                                 "(qconf -sc)", f"Set hybrid.batch.sge.{option} to one that "
                                 "is (or ask the site to add it)."))
        limit = re.search(r"^max_aj_tasks\s+(\d+)", configuration, re.M)
        if limit and 0 < int(limit[1]) < settings.max_array_size:
            problems.append((f"max_aj_tasks of the cell is {limit[1]}, below "
                             f"hybrid.batch.sge.max-array-size ({settings.max_array_size})",
                             f"Set hybrid.batch.sge.max-array-size: {limit[1]}."))
        if problems:
            return fail(name, "; ".join(p for p, _ in problems), " ".join(f for _, f in problems))
        return ok(name, f"{result.message}; parallel environment "
                  f"{settings.parallel_environment or '(none)'}, resources "
                  f"{', '.join([*settings.memory_resources, settings.gpu_resource])} "
                  f"requestable, max_aj_tasks {limit[1] if limit else '?'}")


def _check_staging(path: Path) -> None:
    """A staging directory qsub reads as it is written: it takes ``host:path`` in ``-o`` and
    ``-wd``, and ends a directive line at ``#`` (tested with the real ``qsub -verify``)."""
    if ":" in str(path) or "#" in str(path):
        raise ConfigurationError(
            "hybrid.batch.staging-directory", str(path), "a path without ':' or '#' for Grid "
            "Engine (qsub reads 'host:path' in -o and -wd, and a '#' ends a directive line)",
            "Choose a plain directory.")


def _l_values(directive: str) -> list[str]:
    """The resource names requested by ``-l`` options of one directive line."""
    import shlex

    try:
        tokens = shlex.split(directive)
    except ValueError:
        tokens = directive.split()
    names = []
    for option, value in zip(tokens, [*tokens[1:], ""], strict=True):
        if option == "-l":
            names += value.split(",")
    return names


def _requested(requests: Iterable[str], mine: dict[str, str]) -> tuple[str, str] | None:
    """The first of ``requests`` (``name=value``) that names one of ``mine``."""
    for request in requests:
        resource = request.split("=", 1)[0].strip()
        if resource in mine:
            return resource, mine[resource]
    return None


def _script_strings(spec: PoolSpec) -> Iterator[tuple[str, str]]:
    """``(field, value)`` of every string of the pool that lands in the job script."""
    for key in ("job_script_prologue", "worker_extra_args", "container_binds",
                "container_options"):
        for index, value in enumerate(getattr(spec, key)):
            yield f"{key}[{index}]", value
    for name, value in spec.env.items():
        yield f"env[{name!r}]", value
    for key in ("python", "container_image", "pixi_project", "conda_env"):
        value = getattr(spec, key)
        if isinstance(value, str):
            yield key, value
