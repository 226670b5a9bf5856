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
chdir to ..."; ``qmod -cj`` clears it), ``s``/``S``/``T`` suspended, ``r``/``t``
running (``Rr`` too: qstat(1)'s ``R`` is "restarted"), ``Rq`` pending (rescheduled, to run
again), ``d..`` being removed. Tasks that left the queue are looked up with ``qacct`` (the
accounting file, where this node can read it): ``failed`` and ``exit_status`` say how they
ended. These do not say who ended a task: :class:`~hybrid.manager.PoolManager` remembers the
jobs it removed. What qstat and qacct print is read by :mod:`hybrid.batch.sge_documents`.

Grid Engine reads ``#$`` at the start of ANY line of a job script as a directive, even after
the first command and inside a quoted string: no value that reaches the script may put one
there (:meth:`SGE.check_spec`; :meth:`SGE.render` checks the whole script again).
"""

from __future__ import annotations

import getpass
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
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
from hybrid.batch.sge_documents import (
    CONTEXT,
    JobDetail,
    accounting_records,
    accounting_state,
    job_details,
    parse_xml,
    sge_state,
    task_numbers,
    text_of,
)
from hybrid.errors import BatchError, ConfigurationError, TemplateError
from hybrid.fields import BatchWord, ResourceName, ResourceNames, ResourceRequests, count, reject

if TYPE_CHECKING:
    from hybrid.checks import CheckResult
    from hybrid.pools import PoolSpec

#: qdel/qstat words meaning "that job or task is no longer there", not a failure.
_GONE = ("does not exist", "comprises no tasks", "has already been deleted",
         "is already in deletion", "has deleted", "for deletion", "has registered")
#: A directive line anywhere in a script: "#$" at the start of a line.
_DIRECTIVE_LINE = re.compile(r"(?m)^#\$")
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
        for entry in (parse_xml(out, "qstat -xml") or ET.Element("none")).iter("job_list"):
            number, name = text_of(entry, "JB_job_number"), text_of(entry, "JB_name")
            if not name.startswith(prefix) or (jobs is not None and number not in jobs):
                continue
            for task in task_numbers(text_of(entry, "tasks") or "1"):
                tasks.append((number, task, text_of(entry, "state")))
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

    def _details(self, jobs: list[str]) -> dict[str, JobDetail]:
        result = run_command(["qstat", "-xml", "-j", ",".join(jobs)], check=False)
        if result.returncode != 0:
            raise BatchError(f"qstat -j failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout).strip()}")
        return job_details(parse_xml(result.stdout, "qstat -xml -j"))

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
            for record in accounting_records(result.stdout):
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
