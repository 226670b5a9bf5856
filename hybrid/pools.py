"""The pool model: every option of a pool of workers, validated once, serialisable.

:class:`PoolSpec` is what :meth:`hybrid.HybridCluster.add_pool`, the gateway client
(``new_cluster(pools=...)``), ``hybrid render/submit`` and the evaluator-style backends all
build, with :meth:`PoolSpec.build`. It holds the numbers a batch system needs (cores, GPUs,
memory, wall time) mapped from a resource object, the worker's environment (container, pixi or
conda), and the settings of its batch system. It is plain data: JSON round-trips exactly, which
is how a gateway cluster keeps its pools in the scheduler's metadata for a later ``connect``.

Each field's description below is the one place the option is documented: ``add_pool``'s
Parameters section, the ``hybrid render`` options and docs/pools.md are generated from it.
Adding a pool option is one field here plus the template lines that use it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_serializer,
    model_validator,
)

from hybrid import config, lifetimes, workerargs
from hybrid.errors import ConfigurationError
from hybrid.fields import (
    AbsolutePath,
    Address,
    BatchWord,
    Environment,
    Lines,
    Memory,
    Name,
    PortRange,
    Seconds,
    Strings,
    Walltime,
    absolute_path,
    count,
    one_line,
    port_range_bounds,
    reject,
    strings,
    validate,
)
from hybrid.gpusharing import layout, sharing_mode
from hybrid.gpusharing import variants as gpu_variants
from hybrid.routing import GPU, NOT_GPU
from hybrid.systems import SYSTEMS, system_choices, system_class

__all__ = ["POOL_OPTIONS", "PoolSpec", "numpydoc_parameters"]


def _system_name(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in SYSTEMS:
        return value.lower()
    raise reject(system_choices())


def _conda_env(value: Any) -> Any:
    if value is None:
        return None
    accepted = "a conda environment name or an absolute path"
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise reject(accepted)
    if "/" in value:
        return absolute_path(value)
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}", value):
        raise reject(accepted)
    return value


def _binds(value: Any) -> Any:
    items = strings(True, '"SRC[:DEST[:OPTS]]" bind specs')(value)
    for item in items:
        if not item or "," in item:
            raise reject('"SRC[:DEST[:OPTS]]" bind specs without commas (one per item)')
    return items


Command = Annotated[str, one_line("a python command or path, on one line")]
ImageRef = Annotated[str, one_line("an Apptainer image path or URI, on one line")]


class PoolSpec(BaseModel):
    """One pool of workers: every option, validated once. Build it with :meth:`build`."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    name: Name = Field(description="The pool's name: it tags its jobs and names its workers "
                                   "(``<cluster>-<pool>-<job id>``).")
    system: Annotated[str, BeforeValidator(_system_name)] = Field(
        "local", description="Where the workers run: ``local`` (processes on this machine), "
        "``htcondor``, ``slurm``, ``pbs``, ``lsf``, ``sge`` (Grid Engine) or ``kubernetes``.")
    cores: count(1, 1024) = Field(
        1, description="Threads of each job, shared by its ``processes`` (dask-jobqueue's "
        "``cores``). Default: the resources' ``number_of_threads``, else 1.")
    gpus: count(0, 64) = Field(
        0, description="GPUs of each job. GPU pools run GPU tasks only (see "
        "``serves_unannotated``). Default: the resources' ``number_of_gpus``, else 0.")
    memory: Memory | None = Field(
        None, description='Memory of each job, e.g. ``"4 GiB"`` or ``4 * unit.GiB``; the '
        "workers' memory limit is its share per process (at least 1 byte). Default: the "
        "resources' memory, else none requested.")
    walltime: Walltime | None = Field(
        None, description='Wall time of each job: ``"HH:MM"``, ``"D-HH:MM:SS"`` or a duration with '
        'its unit (``"6h"``, ``"90 minutes"``), or a time quantity. Default: '
        "the resources' ``wallclock_time_limit``, else the system's section "
        "(``hybrid.batch.<system>.walltime``), else the lease. A longer walltime stretches the "
        "configured lease; it may not exceed a ``lease`` given for the pool.")
    processes: count(1, 1024) = Field(
        1, description="Worker processes per job (dask-jobqueue's ``processes``); more than "
        "one needs a nanny.")
    queue: BatchWord | None = Field(
        None, description="Queue, partition (Slurm) or accounting group (HTCondor). Default: "
        "``hybrid.batch.<system>.queue``, else the system's default.")
    account: BatchWord | None = Field(
        None, description="Account (Slurm, PBS), project (LSF) or account string (Grid "
        "Engine ``-A``; its project is ``hybrid.batch.sge.project``). Default: "
        "``hybrid.batch.<system>.account``.")
    job_extra_directives: Lines = Field(
        (), description="Further batch directives, one per item (dask-jobqueue's "
        "``job_extra_directives``). Directives that would override hybrid's own (array "
        "size, queue count, job name, the tag) are refused.")
    job_script_prologue: Strings = Field(
        (), description="Shell commands run (by bash) before the worker starts, e.g. "
        '``["module load cuda", "conda activate env"]`` (dask-jobqueue\'s '
        "``job_script_prologue``, openff-evaluator's ``setup_script_commands``). The "
        "worker's python is looked up on ``PATH`` after them unless ``python`` is given.")
    worker_extra_args: Strings = Field(
        (), description="Further ``dask worker`` arguments, one word per item: ``--resources`` "
        "adds to the routing resources; options hybrid sets itself are refused.")
    env: Environment = Field(
        {}, description="Environment variables of the workers, ``{NAME: value}``.")
    python: Command | None = Field(
        None, description="The python that runs the worker on the execute side. Default: "
        "``hybrid.worker.python``; else ``python`` inside a container, pixi or conda "
        "environment; else the first ``python3`` on ``PATH`` after ``job_script_prologue``; "
        "else this process's python (a shared filesystem).")
    container_image: ImageRef | None = Field(
        None, description="An Apptainer image (path or URI) the worker runs in. Default: "
        "``hybrid.worker.container.image``.")
    container_runtime: Literal["apptainer", "singularity"] = Field(
        "apptainer", description="``apptainer`` or ``singularity``.")
    container_binds: Annotated[tuple[str, ...], BeforeValidator(_binds)] = Field(
        (), description='Bind specs ``"SRC[:DEST[:OPTS]]"`` for the container.')
    container_options: Strings = Field(
        (), description="Further options of ``apptainer exec`` (GPU pools get ``--nv``, or "
        "``--rocm`` with ``gpu_vendor='amd'``, by themselves).")
    gpu_vendor: Literal["nvidia", "amd"] = Field(
        "nvidia", description="Whose GPUs a GPU pool's container is given: ``nvidia`` "
        "(``--nv``) or ``amd`` (``--rocm``).")
    pixi_project: AbsolutePath | None = Field(
        None, description="A pixi project (``pixi.toml`` or its directory) the worker runs "
        "in: ``pixi run --manifest-path PROJECT``.")
    pixi_env: Annotated[str, BeforeValidator(lambda v: v if v is None else _pixi_env(v))] | None \
        = Field(None, description="The pixi environment (with ``pixi_project``).")
    conda_env: Annotated[str, BeforeValidator(_conda_env)] | None = Field(
        None, description="A conda environment (name, or absolute path) the worker runs in: "
        "``conda run``.")
    nanny: bool | None = Field(
        None, description="Run each worker under a nanny. Default: "
        "``hybrid.worker.nanny``; ``None`` means only where needed (``processes > 1``). "
        "Without one, ``client.restart()`` replaces the jobs and the job script enforces "
        "the memory limit as a nanny would (docs: Pools, the nanny).")
    gpu_sharing: count(1, 64) | None = Field(
        None, description="GPU tasks that run at once on each GPU of a job. Default: "
        "``hybrid.worker.gpu-sharing``; ``None``: 8 where the job runs under a CUDA MPS "
        "daemon (``gpu_mps``) and 1 where it does not, since tasks time-sliced on one GPU "
        "run slower together than one at a time (docs/benchmarks.md). A number: that many "
        "either way.")
    gpu_sharing_mode: Literal["auto", "threads", "processes"] = Field(
        "auto", description="How a GPU job runs its shared tasks: ``processes`` "
        "(``gpus x gpu_sharing`` one-thread workers under a nanny) or ``threads`` (one worker "
        "of ``gpus x gpu_sharing`` threads); ``auto``: processes (11 % more throughput than "
        "threads on an H100, docs/benchmarks.md), but threads where a nanny "
        "cannot run (``nanny=False``, ``processes > 1``, behind a gateway's proxy) or the "
        "job's ``memory`` leaves a process less than 1 GiB. Default: "
        "``hybrid.worker.gpu-sharing-mode``.")
    gpu_mps: Literal["auto", "on", "off"] = Field(
        "auto", description="CUDA MPS in a GPU pool's jobs: ``auto`` starts a daemon of the "
        "job's own (pipe and log directories private to the job, stopped after the workers) "
        "where ``nvidia-cuda-mps-control`` is on ``PATH``, or uses the one "
        "``CUDA_MPS_PIPE_DIRECTORY`` names; ``on``: the job fails without one; ``off``: "
        "never. Default: ``hybrid.worker.gpu-mps``.")
    serves_unannotated: bool | None = Field(
        None, description="Let this pool's workers take CPU (unannotated) tasks. Default: "
        "True for CPU pools, False for GPU pools; give True to a GPU pool with no CPU pool "
        "beside it.")
    death_timeout: Seconds = Field(
        60, description="How long a worker waits for its scheduler before it exits. "
        "Default: ``hybrid.worker.death-timeout``.")
    lease: Seconds = Field(
        86400, description="Jobs remove themselves after this long. Default: "
        "``hybrid.batch.lease``, or the walltime where that is longer.")
    lifetime: Annotated[int | Literal["auto", "off"],
                        BeforeValidator(lifetimes.lifetime_value)] = Field(
        "auto", description="How long each worker takes tasks; then it drains: it takes no "
        "new task, finishes its running ones and retires with its results moved to other "
        "workers, and its replacement, submitted ahead of time (by the queue's recent "
        "waits), keeps the pool at its target. ``\"auto\"``: with a walltime, the walltime "
        "less a margin (a tenth of it, at least 1 minute, at most 15 minutes and at most "
        "half the walltime), else none; ``\"off\"`` (or 0): none. Lifetime plus stagger "
        "must leave 10 s of the walltime. Default: ``hybrid.worker.lifetime``.")
    lifetime_stagger: Annotated[int | Literal["auto"],
                                BeforeValidator(lifetimes.stagger_value)] = Field(
        "auto", description="Each worker's lifetime is spread by up to this much either way, "
        "so that workers do not all leave at once (distributed's ``--lifetime-stagger``). "
        "``\"auto\"``: a twentieth of the lifetime, at most a quarter of what it leaves of "
        "the walltime. Default: ``hybrid.worker.lifetime-stagger``.")
    lifetime_restart: bool = Field(
        False, description="Restart each worker in its job at the end of its lifetime "
        "(after draining) instead of replacing the job (distributed's "
        "``--lifetime-restart``): needs a nanny and no walltime, since a restarted worker "
        "would still be killed at the walltime. Default: ``hybrid.worker.lifetime-restart``.")
    worker_port: PortRange | None = Field(
        None, description='Ports the workers listen on, ``"FIRST:LAST"``. Default: '
        "``hybrid.worker.port-range``.")
    nanny_port: PortRange | None = Field(
        None, description="Ports the nannies listen on. Default: "
        "``hybrid.worker.nanny-port-range``.")
    contact_address: Address | None = Field(
        None, description="The address the scheduler dials to reach a worker (NAT). Default: "
        "``hybrid.worker.contact-address``.")
    system_options: dict[str, Any] = Field(
        {}, description="Settings of the batch system itself, e.g. ``schedd_name`` "
        "(HTCondor), ``image`` and ``namespace`` (Kubernetes); defaults from "
        "``hybrid.batch.<system>``.")

    @field_serializer("memory")
    def _memory_with_unit(self, memory: int | None) -> str | None:
        return None if memory is None else f"{memory} B"  # bytes, read back exactly

    # ------------------------------------------------------------------ cross-field rules
    @model_validator(mode="after")
    def _consistent(self) -> PoolSpec:
        if self.processes > self.cores:
            raise _field_error("processes", self.processes,
                               f"an integer from 1 to cores ({self.cores}): each process "
                               "gets at least one thread")
        if self.processes > 1 and self.nanny is False:
            raise _field_error("processes", self.processes,
                               "1 when workers run without a nanny (nanny=False): several "
                               "worker processes per job need a nanny")
        environments = [k for k in ("container_image", "pixi_project", "conda_env")
                        if getattr(self, k) is not None]
        if len(environments) > 1:
            raise _field_error(environments[1], getattr(self, environments[1]),
                               "at most one worker environment: container_image, "
                               "pixi_project or conda_env",
                               f"Choose one of {', '.join(environments)}.")
        if self.pixi_env is not None and self.pixi_project is None:
            raise _field_error("pixi_env", self.pixi_env, "pixi_env only with pixi_project",
                               "Give pixi_project (the pixi.toml or its directory) too.")
        if self.python is not None and (self.pixi_project or self.conda_env):
            raise _field_error("python", self.python,
                               "no python with pixi_project or conda_env",
                               "The environment's own python runs the worker.")
        if self.gpus and self.gpu_sharing_mode == "processes":
            if self.processes != 1:
                raise _field_error("processes", self.processes,
                                   "1 in a GPU pool with gpu_sharing_mode='processes' (it "
                                   "runs gpus x gpu_sharing worker processes per job)")
            if self.nanny is False and max(self.gpus * k for k in gpu_variants(self)) > 1:
                raise _field_error("nanny", self.nanny,
                                   "a nanny (True or None) with gpu_sharing_mode='processes': "
                                   "several worker processes per job need one",
                                   "Give gpu_sharing_mode='threads', or leave nanny unset.")
        elif self.gpus and self.processes > self.gpus * min(gpu_variants(self)):
            raise _field_error("processes", self.processes,
                               f"at most gpus x gpu_sharing ({self.gpus * min(gpu_variants(self))})"
                               " worker processes in a GPU pool: each takes GPU tasks",
                               "Leave processes at 1: gpu_sharing and gpu_sharing_mode say how "
                               "a GPU job runs its tasks.")
        for key in ("container_binds", "container_options"):
            if getattr(self, key) and self.container_image is None:
                raise _field_error(key, list(getattr(self, key)),
                                   f"{key} only together with container_image")
        if self.uses_nanny and self.worker_port and self.nanny_port:
            workers, nannies = (port_range_bounds(r) for r in (self.worker_port,
                                                                self.nanny_port))
            if workers[0] <= nannies[1] and nannies[0] <= workers[1]:
                raise _field_error(
                    "nanny_port", self.nanny_port,
                    f"a port range that does not overlap worker_port ({self.worker_port}): "
                    "a worker and its nanny each need a port of their own",
                    "Give the nannies ports beside the workers', e.g. "
                    f"nanny_port='{workers[1] + 1}:{workers[1] + 1 + nannies[1] - nannies[0]}'.")
        self._check_lifetime()
        system_class(self.system).check_spec(self)
        return self

    def _check_lifetime(self) -> None:
        if (bad := workerargs.problem(self.worker_extra_args)) is not None:
            raise _field_error(*bad)
        problem = lifetimes.spec_problem(self)  # (and the lease, and the memory split)
        if problem is not None:
            field, accepted, fix = problem
            raise _field_error(field, getattr(self, field), accepted, fix)

    # ------------------------------------------------------------------ lifetimes
    def walltime_seconds(self) -> int | None:
        """The walltime in seconds (``None`` without one)."""
        return lifetimes.walltime_seconds(self.walltime)

    def lifetime_seconds(self) -> float | None:
        """How long each worker takes tasks before it drains (``None``: no lifetime)."""
        return lifetimes.lifetime_seconds(self.lifetime, self.walltime,
                                          self.worker_extra_args)

    def lifetime_stagger_seconds(self) -> float:
        """The spread of each worker's lifetime, either way (seconds)."""
        return lifetimes.stagger_seconds(self.lifetime_stagger, self.lifetime_seconds(),
                                         self.walltime)

    def worker_deadline_seconds(self) -> float | None:
        """When each worker stops on its own (distributed's ``--lifetime``, from its start),
        whatever still runs: before the walltime, with time to move its results. The pool
        manager drains it earlier (``None``: no walltime, no deadline)."""
        return lifetimes.worker_deadline(self.lifetime_seconds(),
                                         self.lifetime_stagger_seconds(), self.walltime)

    # ------------------------------------------------------------------ derived numbers
    @property
    def uses_nanny(self) -> bool:
        """Whether workers run under a nanny (``nanny``, else only where a job runs several
        worker processes)."""
        return self.nanny if self.nanny is not None else self.max_processes > 1

    @property
    def max_processes(self) -> int:
        """The most worker processes one job runs (GPU sharing by processes: under MPS)."""
        if self.gpus and sharing_mode(self) == "processes":
            return self.gpus * max(gpu_variants(self))
        return self.processes

    @property
    def threads_per_worker(self) -> int:
        """Threads of each worker process."""
        return self.cores // self.processes

    @property
    def memory_per_worker(self) -> int | None:
        """Memory limit of each worker process, in bytes."""
        return self.memory // self.processes if self.memory else None

    @property
    def serves_cpu_tasks(self) -> bool:
        """Whether the workers take unannotated (CPU) tasks."""
        return self.serves_unannotated if self.serves_unannotated is not None else not self.gpus

    @property
    def resource(self) -> str:
        """``"GPU"`` for a GPU pool, else ``"notGPU"``: the demand it answers."""
        return GPU if self.gpus else NOT_GPU

    def worker_resources(self) -> dict[str, float]:
        """What each worker advertises (``--resources``; a GPU pool: without MPS)."""
        return layout(self).resources

    def tasks_per_job(self, fraction: float) -> int:
        """How many annotated tasks one job's workers run at once (a GPU pool: GPU tasks
        without MPS, or under it where ``gpu_mps="on"``)."""
        if self.gpus:
            plain, shared = gpu_variants(self)
            return self.gpus * (shared if self.gpu_mps == "on" else plain)
        return self.threads_per_worker * self.processes

    def launcher(self) -> list[str]:
        """The words that run the worker inside its pixi or conda environment."""
        if self.pixi_project is not None:
            words = ["pixi", "run", "--manifest-path", self.pixi_project]
            if self.pixi_env is not None:
                words += ["--environment", self.pixi_env]
            return [*words, "--executable"]
        if self.conda_env is not None:
            flag = "-p" if "/" in self.conda_env else "-n"
            return ["conda", "run", "--no-capture-output", flag, self.conda_env]
        return []

    def container_prefix(self) -> list[str]:
        """``apptainer exec [--nv] [--bind B]... [options] IMAGE`` (empty without image)."""
        if self.container_image is None:
            return []
        words = [self.container_runtime, "exec"]
        if self.gpus:
            words.append("--rocm" if self.gpu_vendor == "amd" else "--nv")
        for bind in self.container_binds:
            words += ["--bind", bind]
        return [*words, *self.container_options, self.container_image]

    def worker_paths(self) -> dict[str, str]:
        """The paths the execute side needs, by option (for existence checks)."""
        paths = {"pixi_project": self.pixi_project}
        if self.container_image and "://" not in self.container_image:
            paths["container_image"] = self.container_image
        if self.conda_env and "/" in self.conda_env:
            paths["conda_env"] = self.conda_env
        return {k: v for k, v in paths.items() if v}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :meth:`from_dict` rebuilds an equal spec."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PoolSpec:
        """Back from :meth:`to_dict` (unknown keys are an error)."""
        return validate(cls, dict(data), prefix="pool.")

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, name: Any, system: Any = "local", resources: Any = None, *,
              prefix: str | None = None, labels: Mapping[str, str] | None = None,
              check_paths: bool | None = None, **options: Any) -> PoolSpec:
        """Validate a pool from arguments, a resource object and the configuration.

        Explicit ``options`` win over the ``resources`` numbers, which win over the system's
        section (``hybrid.batch.<system>``) and the worker section (``hybrid.worker``) of the
        configuration. An error names the field as the caller gave it: ``prefix + option``,
        ``labels[option]``, or the configuration key a value came from.
        """
        check_job_settings()
        prefix = f"add_pool({name!r})." if prefix is None else prefix
        names = dict(labels or {})
        data: dict[str, Any] = {}
        sources: dict[str, str] = {}

        def default(key: str, value: Any, source: str) -> None:
            if value is not None and value != [] and value != ():
                data[key] = value
                sources[key] = source

        worker = config.section("worker")
        container = config.section("worker.container")
        for key, setting in (("python", "python"), ("death_timeout", "death-timeout"),
                             ("worker_port", "port-range"), ("nanny_port", "nanny-port-range"),
                             ("contact_address", "contact-address"), ("nanny", "nanny"),
                             ("worker_extra_args", "extra-args"), ("lifetime", "lifetime"),
                             ("gpu_sharing", "gpu-sharing"), ("gpu_mps", "gpu-mps"),
                             ("gpu_sharing_mode", "gpu-sharing-mode"),
                             ("lifetime_stagger", "lifetime-stagger"),
                             ("lifetime_restart", "lifetime-restart")):
            default(key, worker.get(setting.replace("-", "_")), f"hybrid.worker.{setting}")
        for key in ("image", "runtime", "binds", "options"):
            default(f"container_{key}", container.get(key), f"hybrid.worker.container.{key}")
        default("lease", config.get("batch.lease", None), "hybrid.batch.lease")

        system_name = system.name if hasattr(system, "submit") else system
        try:
            kind = system_class(system_name)
        except ConfigurationError:
            raise ConfigurationError(names.get("system", f"{prefix}system"), system_name,
                                     system_choices()) from None
        for key, value in config.section(f"batch.{kind.name}").items():
            label = f"hybrid.batch.{kind.name}.{key.replace('_', '-')}"
            if key in kind.Settings.model_fields:
                continue  # the system's own setting (Kubernetes' python: the image's)
            if key in cls.model_fields:
                default(key, value, label)
            else:
                known = sorted({*kind.Settings.model_fields, *POOL_OPTIONS})
                raise ConfigurationError(label, value, f"a setting {kind.name} knows, one of "
                                         + ", ".join(k.replace("_", "-") for k in known))
        system_prefix = f"hybrid.batch.{kind.name}."
        data["system_options"] = kind.settings_from(kind.configured_settings(), system_prefix)

        numbers = _numbers_from(resources, prefix)
        if numbers.get("cores") is not None and options.get("cores") is not None and (
                options["cores"] != numbers["cores"]):
            raise ConfigurationError(names.get("cores", f"{prefix}cores"), options["cores"],
                                     f"the resources' number_of_threads ({numbers['cores']}) "
                                     "or no cores at all")
        for key, value in numbers.items():
            if value is not None:
                data[key] = value
                sources.pop(key, None)
        if resources is not None:
            resource_options = kind.options_from_resources(resources)
            data["system_options"] = kind.settings_from(
                {**data["system_options"], **resource_options}, system_prefix)

        given_system_options = options.pop("system_options", None) or {}
        if not isinstance(given_system_options, Mapping):
            raise ConfigurationError(names.get("system_options", f"{prefix}system_options"),
                                     given_system_options, "a mapping of the system's settings")
        if hasattr(system, "submit"):
            given_system_options = {**system.options(), **given_system_options}
        if given_system_options:
            merged = {**data["system_options"], **given_system_options}
            data["system_options"] = kind.settings_from(
                merged, names.get("system_options", f"{prefix}system_options") + ".")
            sources.pop("system_options", None)
        for key, value in options.items():
            if value is None and key not in ("nanny", "serves_unannotated"):
                continue
            data[key] = value
            sources.pop(key, None)
        data["name"], data["system"] = name, kind.name
        data["lease"] = lifetimes.stretched_lease(data.get("walltime"), data.get("lease", 86400),
                                                  given="lease" in options)
        # (a value from the configuration is named by its key, not by the caller's name)
        spec = validate(cls, data, prefix=prefix, labels={**names, **sources})
        if check_paths is None:
            check_paths = bool(config.get("worker.check-paths", True))
        if check_paths:
            for key, path in spec.worker_paths().items():
                if not os.path.exists(path):
                    raise ConfigurationError(
                        names.get(key, sources.get(key, f"{prefix}{key}")), path,
                        "a path that exists", "Create it, fix the path, or, if only the batch "
                        "nodes see it, set hybrid.worker.check-paths: false.")
        return spec


#: The options a pool takes, in the order they are documented.
POOL_OPTIONS = tuple(k for k in PoolSpec.model_fields if k not in ("name", "system"))


def check_job_settings() -> None:
    """The settings every pool's jobs use (the tag, ``hybrid.worker-dask-config``, the
    template and staging directories, how jobs are watched), checked as a pool is added: a
    bad one is an error of ``add_pool``, not of a later submission or reconcile."""
    from hybrid.config import staging_root
    from hybrid.templates import template_directories

    for key in ("batch.tag", "batch.poll-interval", "batch.stuck-timeout",
                "batch.max-failures", "batch.held-jobs", "batch.poll-interval-max"):
        config.get(key, None)
    config.worker_dask_environment()
    config.process_environment()
    template_directories()
    staging_root()


def _pixi_env(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", value):
        raise reject("a pixi environment name (a-z, 0-9 and -)")
    return value


def _field_error(field: str, value: Any, accepted: str, fix: str | None = None) -> Exception:
    return reject(accepted, fix, field=field, value=value)


def _numbers_from(resources: Any, prefix: str) -> dict[str, Any]:
    """Cores, GPUs, memory and wall time from a resource object (the one mapping)."""
    from hybrid.resources import ComputeResources, PodResources, QueueWorkerResources

    if resources is None:
        return {}
    if isinstance(resources, QueueWorkerResources):
        return {"cores": resources.number_of_threads, "gpus": resources.number_of_gpus,
                "memory": f"{resources.memory_bytes} B",
                "walltime": resources.wallclock_time_limit}
    if isinstance(resources, PodResources):
        return {"cores": resources.number_of_threads, "gpus": resources.number_of_gpus,
                "memory": f"{resources.memory_bytes} B"}
    if isinstance(resources, ComputeResources):
        return {"cores": resources.number_of_threads, "gpus": resources.number_of_gpus}
    raise ConfigurationError(f"{prefix}resources", resources,
                             "ComputeResources, QueueWorkerResources or PodResources")


def numpydoc_parameters(skip: tuple[str, ...] = ("name",)) -> str:
    """The numpydoc ``Parameters`` entries of every pool option (from the field docs)."""
    lines = []
    for key, field in PoolSpec.model_fields.items():
        if key in skip:
            continue
        kind = {"system": "str or BatchSystem", "memory": "str or pint.Quantity",
                "walltime": "str or pint.Quantity", "env": "dict",
                "system_options": "dict", "death_timeout": "str or float",
                "lease": "str or float", "lifetime": "str or float",
                "lifetime_stagger": "str or float"}.get(key) or _doc_type(field)
        lines.append(f"{key} : {kind}")
        lines.append(f"    {field.description or ''}")
    return "\n".join(lines)


def _doc_type(field: Any) -> str:
    annotation = field.annotation
    text = str(annotation)
    if "tuple" in text:
        return "list of str"
    if "bool" in text:
        return "bool or None" if field.default is None else "bool"
    if "int" in text:
        return "int"
    if "Literal" in text:
        return "str"
    return "str or None" if field.default is None else "str"
