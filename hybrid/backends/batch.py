"""Batch backends with openff-evaluator's constructors, on :class:`HybridCluster`.

Switching from ``openff.evaluator.backends.dask.DaskSLURMBackend`` is a change of import:
the arguments keep their names, positions and meaning. ``queue_name=None`` means the batch
system's default queue (openff-evaluator's default, ``"default"``, names a queue most sites
lack). Every argument is checked when the backend is made, and :meth:`job_script` shows the
job before anything is started or submitted. Where the batch system's tools are missing,
:meth:`~BaseDaskJobQueueBackend.start` returns as openff-evaluator's does, with one
:class:`BatchToolMissingWarning`; the pool's first submission then fails it, and its tasks
and ``wait_for_workers`` raise that error instead of waiting.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any, ClassVar

from hybrid.adaptive import adaptive_class as validated_adaptive_class
from hybrid.backends.base import BaseDaskBackend
from hybrid.errors import ConfigurationError, ToolMissing, cleanup_after, warn_user
from hybrid.fields import Interval, count, validate, validate_value
from hybrid.pools import PoolSpec
from hybrid.resources import MAX_WORKERS, QueueWorkerResources


class BatchToolMissingWarning(UserWarning):
    """A backend started where its batch system's client tools are not found: nothing
    can be submitted, and the pool's first submission fails it with the reason."""


def _check_cluster_kwargs(kwargs: dict[str, Any], field: str) -> None:
    """Refuse what :class:`~hybrid.HybridCluster` does not take, or what the backend sets."""
    import inspect

    from hybrid.cluster import HybridCluster

    accepted = [name for name in inspect.signature(HybridCluster).parameters
                if name not in ("annotate_resources", "gpu_fraction")]
    for key in kwargs:
        if key not in accepted:
            raise ConfigurationError(
                field, key, "keys that are arguments of HybridCluster: "
                + ", ".join(accepted),
                "Give annotate_resources and gpu_fraction to the backend itself."
                if key in ("annotate_resources", "gpu_fraction") else None)


class BaseDaskJobQueueBackend(BaseDaskBackend):
    """One pool of batch workers, fixed (min == max) or adaptive between min and max.

    Parameters
    ----------
    minimum_number_of_workers, maximum_number_of_workers : int
        The bounds of the pool; equal bounds keep it at that size (unless
        ``adaptive_class`` is given).
    resources_per_worker : QueueWorkerResources
        Threads, GPUs, memory per thread and wall time of each worker's job.
    queue_name : str, optional
        The queue (partition); ``None``: the system's default or ``hybrid.batch.<system>``.
    setup_script_commands : list of str, optional
        Shell commands each job runs (by bash) before its worker; the worker's python is
        then looked up on ``PATH`` (after ``conda activate ...``) unless ``python=`` is given.
    extra_script_options : list of str, optional
        Further batch directives, one per item.
    adaptive_interval : str or float
        How often the adaptive pool reconsiders its size.
    disable_nanny_process : bool
        Run workers without a nanny.
    cluster_type : str
        The batch system (``"htcondor"``, ``"slurm"``, ``"pbs"``, ``"lsf"``); the
        subclasses set it.
    adaptive_class : type, optional
        The adaptive scaler of the pool: a subclass of
        :class:`hybrid.adaptive.PoolAdaptive` (hybrid's ``AdaptiveCore`` for one pool).
    annotate_resources : bool, optional
        Route GPU tasks to GPU workers and the rest to CPU workers.
    gpu_fraction : float, optional
        The GPU share one GPU task asks for.
    cluster_kwargs : dict, optional
        Arguments of :class:`~hybrid.HybridCluster`.
    **pool_options
        Any pool option of :meth:`~hybrid.HybridCluster.add_pool` (``python``,
        ``container_image``, ``env``...).
    """

    #: The batch system of a subclass (``None``: ``cluster_type`` says).
    system: ClassVar[str | None] = None

    def __init__(
        self,
        minimum_number_of_workers: int = 1,
        maximum_number_of_workers: int = 1,
        resources_per_worker: QueueWorkerResources | None = None,
        queue_name: str | None = None,
        setup_script_commands: Sequence[str] | None = None,
        extra_script_options: Sequence[str] | None = None,
        adaptive_interval: str = "10000ms",
        disable_nanny_process: bool = False,
        cluster_type: str | None = None,
        adaptive_class: type | None = None,
        *,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        cluster_kwargs: dict[str, Any] | None = None,
        **pool_options: Any,
    ):
        resources = resources_per_worker or QueueWorkerResources()
        super().__init__(minimum_number_of_workers, resources,
                         annotate_resources=annotate_resources, gpu_fraction=gpu_fraction)
        name = type(self).__name__
        for label, value, least in (("minimum_number_of_workers", minimum_number_of_workers, 0),
                                    ("maximum_number_of_workers", maximum_number_of_workers, 1)):
            validate_value(count(least, MAX_WORKERS), value,
                           f"{name}.{label}")
        adaptive_interval = validate_value(Interval, adaptive_interval,
                                           f"{name}.adaptive_interval")
        if minimum_number_of_workers > maximum_number_of_workers:
            raise ConfigurationError(f"{name}.minimum_number_of_workers",
                                     minimum_number_of_workers,
                                     f"at most maximum_number_of_workers "
                                     f"({maximum_number_of_workers})")
        if not isinstance(resources, QueueWorkerResources):
            raise ConfigurationError(f"{name}.resources_per_worker", resources,
                                     "a hybrid.resources.QueueWorkerResources")
        if cluster_kwargs is not None and not isinstance(cluster_kwargs, dict):
            raise ConfigurationError(f"{name}.cluster_kwargs", cluster_kwargs,
                                     "a dict of HybridCluster arguments")
        _check_cluster_kwargs(cluster_kwargs or {}, f"{name}.cluster_kwargs")
        system = self._system(cluster_type)
        self.adaptive_class = None if adaptive_class is None else validated_adaptive_class(
            adaptive_class, f"{name}.adaptive_class")
        self.minimum_number_of_workers = minimum_number_of_workers
        self.maximum_number_of_workers = maximum_number_of_workers
        self.adaptive_interval = adaptive_interval
        self.cluster_kwargs = dict(cluster_kwargs or {})
        self._warned = False
        pool = "gpu" if resources.is_gpu else "cpu"
        options = {"queue": queue_name, "job_script_prologue": setup_script_commands,
                   "job_extra_directives": extra_script_options,
                   "nanny": False if disable_nanny_process else None,
                   "serves_unannotated": True, **pool_options}
        labels = {"queue": f"{name}.queue_name",
                  "job_script_prologue": f"{name}.setup_script_commands",
                  "job_extra_directives": f"{name}.extra_script_options",
                  "nanny": f"{name}.disable_nanny_process",
                  "resources": f"{name}.resources_per_worker"}
        #: The pool, validated now: nothing is started before :meth:`start`.
        self.pool_spec = PoolSpec.build(pool, system, resources, prefix=f"{name}.",
                                        labels=labels, **options)

    def _system(self, cluster_type: Any) -> str:
        """The batch system: the class's own, else ``cluster_type``."""
        name = type(self).__name__
        own = type(self).system
        if own is not None and cluster_type not in (None, own):
            raise ConfigurationError(f"{name}.cluster_type", cluster_type,
                                     f"{own!r} or None (this backend's batch system)")
        if own is None and cluster_type is None:
            raise ConfigurationError(
                f"{name}.cluster_type", None, "the batch system: 'htcondor', 'slurm', 'pbs', "
                "'lsf' or 'sge'", "Or use DaskHTCondorBackend, DaskSLURMBackend, DaskPBSBackend, "
                "DaskLSFBackend or DaskSGEBackend, which set it.")
        return own or cluster_type

    @property
    def pool_name(self) -> str:
        """``"gpu"`` for GPU workers, else ``"cpu"``."""
        return self.pool_spec.name

    def missing_tools(self) -> list[str]:
        """The batch system's client tools not found on ``PATH`` here."""
        from hybrid.batch import system_class

        return [tool for tool in system_class(self.pool_spec.system).tools
                if shutil.which(tool) is None]

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            warn_user(f"{type(self).__name__}: {why}. Nothing can be submitted from here: "
                      "job_script() shows the job; the pool's first submission fails it, and "
                      "its tasks and wait_for_workers raise that error.",
                      BatchToolMissingWarning)

    def start(self) -> None:
        """Start the cluster and its pool; where the batch system's tools are missing,
        return all the same, with one :class:`BatchToolMissingWarning` (as
        openff-evaluator's backends return, their submissions failing later)."""
        if self._client is None:
            missing = self.missing_tools()
            if missing:
                self._warn(f"{', '.join(missing)} not found on PATH (install the "
                           f"{self.pool_spec.system} client tools or add them to PATH; "
                           f"`hybrid doctor --system {self.pool_spec.system}` checks them)")
        super().start()

    def _start_cluster(self):
        from hybrid.cluster import HybridCluster

        cluster = HybridCluster(annotate_resources=self.annotate_resources,
                                gpu_fraction=self.gpu_fraction, **self.cluster_kwargs)
        try:
            cluster.add_spec(self.pool_spec)
            fixed = self.minimum_number_of_workers == self.maximum_number_of_workers
            if fixed and self.adaptive_class is None:
                try:
                    cluster.scale(self.maximum_number_of_workers)
                except ToolMissing as error:  # the pool failed with it: its tasks raise it
                    self._warn(str(error))
            else:
                cluster.adapt(minimum=self.minimum_number_of_workers,
                              maximum=self.maximum_number_of_workers,
                              interval=self.adaptive_interval, Adaptive=self.adaptive_class)
        except BaseException as error:
            cleanup_after(error, cluster.close, "closing the cluster")
            raise
        return cluster

    def job_script(self) -> str:
        """The job script the backend submits (before or after :meth:`start`)."""
        if self.cluster is not None:
            return self.cluster.job_script(self.pool_name)
        from hybrid.batch import Staging, WorkerJob, get_system
        from hybrid.security import wants_tls
        from hybrid.worker import Connection, TLSFiles

        spec = self.pool_spec
        connection = Connection("tls://scheduler.not-started:8786",
                                TLSFiles("ca.pem", "cert.pem", "key.pem")) \
            if wants_tls(self.cluster_kwargs.get("security")) \
            else Connection("tcp://scheduler.not-started:8786")
        job = WorkerJob("not-started", spec, connection)
        system = get_system(spec.system, **spec.system_options)
        return system.job_script(job, Staging.would_be(job))


class _NamedBackend(BaseDaskJobQueueBackend):
    """openff-evaluator's constructor of a backend whose batch system is its own."""

    def __init__(
        self,
        minimum_number_of_workers: int = 1,
        maximum_number_of_workers: int = 1,
        resources_per_worker: QueueWorkerResources | None = None,
        queue_name: str | None = None,
        setup_script_commands: Sequence[str] | None = None,
        extra_script_options: Sequence[str] | None = None,
        adaptive_interval: str = "10000ms",
        disable_nanny_process: bool = False,
        adaptive_class: type | None = None,
        *,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        cluster_kwargs: dict[str, Any] | None = None,
        **pool_options: Any,
    ):
        super().__init__(minimum_number_of_workers, maximum_number_of_workers,
                         resources_per_worker, queue_name, setup_script_commands,
                         extra_script_options, adaptive_interval, disable_nanny_process,
                         self.system, adaptive_class, annotate_resources=annotate_resources,
                         gpu_fraction=gpu_fraction, cluster_kwargs=cluster_kwargs,
                         **pool_options)


class DaskHTCondorBackend(_NamedBackend):
    """Workers from HTCondor (``request_gpus`` for GPU workers)."""

    system = "htcondor"


class DaskSLURMBackend(_NamedBackend):
    """Workers from Slurm (``--gres=gpu:N`` for GPU workers)."""

    system = "slurm"


class DaskPBSBackend(BaseDaskJobQueueBackend):
    """Workers from PBS (``ngpus`` in the select for GPU workers).

    ``resource_line``, as in openff-evaluator, is the whole ``#PBS -l`` resource line (for
    instance ``"select=1:ncpus=4:mem=8gb:ngpus=1"``) in place of the one hybrid writes from
    the resources (the system option ``resource_spec``).
    """

    system = "pbs"

    def __init__(
        self,
        minimum_number_of_workers: int = 1,
        maximum_number_of_workers: int = 1,
        resources_per_worker: QueueWorkerResources | None = None,
        queue_name: str | None = None,
        setup_script_commands: Sequence[str] | None = None,
        extra_script_options: Sequence[str] | None = None,
        adaptive_interval: str = "10000ms",
        disable_nanny_process: bool = False,
        resource_line: str | None = None,
        adaptive_class: type | None = None,
        *,
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        cluster_kwargs: dict[str, Any] | None = None,
        **pool_options: Any,
    ):
        options = pool_options.get("system_options")
        if resource_line is not None and isinstance(options, (dict, type(None))):
            from hybrid.batch.pbs import PBSSettings

            validate(PBSSettings, {"resource_spec": resource_line},
                     labels={"resource_spec": f"{type(self).__name__}.resource_line"})
            pool_options["system_options"] = {**(options or {}), "resource_spec": resource_line}
        super().__init__(minimum_number_of_workers, maximum_number_of_workers,
                         resources_per_worker, queue_name, setup_script_commands,
                         extra_script_options, adaptive_interval, disable_nanny_process,
                         "pbs", adaptive_class, annotate_resources=annotate_resources,
                         gpu_fraction=gpu_fraction, cluster_kwargs=cluster_kwargs,
                         **pool_options)


class DaskLSFBackend(_NamedBackend):
    """Workers from LSF (``-gpu num=N`` for GPU workers)."""

    system = "lsf"


class DaskSGEBackend(_NamedBackend):
    """Workers from Grid Engine (``-l gpu=N`` for GPU workers, ``-pe smp N`` for several
    threads). openff-evaluator has no Grid Engine backend: this one is ours, with the same
    arguments as its LSF and PBS backends; the project (``-P``) and further ``-l`` requests
    are ``hybrid.batch.sge.project`` and ``resource-spec``, or
    ``system_options={"project": ...}``."""

    system = "sge"
