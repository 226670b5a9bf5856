"""Batch backends with openff-evaluator's constructor arguments, on :class:`HybridCluster`.

Switching from ``openff.evaluator.backends.dask.DaskSLURMBackend`` is a change of import:
the arguments keep their names and meaning. ``queue_name=None`` means the batch system's
default queue (openff-evaluator's default, ``"default"``, names a queue most sites lack).
Every argument is checked when the backend is made, and :meth:`job_script` shows the job
before anything is started or submitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from hybrid.backends.base import BaseDaskBackend
from hybrid.errors import ConfigurationError, cleanup_after
from hybrid.fields import Interval, count, validate_value
from hybrid.pools import PoolSpec
from hybrid.resources import MAX_WORKERS, QueueWorkerResources


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
        The bounds of the pool; equal bounds keep it at that size.
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

    system: ClassVar[str]

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
        annotate_resources: bool | None = None,
        gpu_fraction: float | None = None,
        cluster_kwargs: dict[str, Any] | None = None,
        **pool_options: Any,
    ):
        super().__init__(annotate_resources, gpu_fraction)
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
        resources = resources_per_worker or QueueWorkerResources()
        if not isinstance(resources, QueueWorkerResources):
            raise ConfigurationError(f"{name}.resources_per_worker", resources,
                                     "a hybrid.resources.QueueWorkerResources")
        if cluster_kwargs is not None and not isinstance(cluster_kwargs, dict):
            raise ConfigurationError(f"{name}.cluster_kwargs", cluster_kwargs,
                                     "a dict of HybridCluster arguments")
        _check_cluster_kwargs(cluster_kwargs or {}, f"{name}.cluster_kwargs")
        self.minimum_number_of_workers = minimum_number_of_workers
        self.maximum_number_of_workers = maximum_number_of_workers
        self.resources_per_worker = resources
        self.adaptive_interval = adaptive_interval
        self.cluster_kwargs = dict(cluster_kwargs or {})
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
        self.pool_spec = PoolSpec.build(pool, self.system, resources, prefix=f"{name}.",
                                        labels=labels, **options)

    @property
    def pool_name(self) -> str:
        """``"gpu"`` for GPU workers, else ``"cpu"``."""
        return self.pool_spec.name

    def _start_cluster(self):
        from hybrid.cluster import HybridCluster

        cluster = HybridCluster(annotate_resources=self.annotate_resources,
                                gpu_fraction=self.gpu_fraction, **self.cluster_kwargs)
        try:
            cluster.add_spec(self.pool_spec)
            if self.minimum_number_of_workers == self.maximum_number_of_workers:
                cluster.scale(self.maximum_number_of_workers)
            else:
                cluster.adapt(minimum=self.minimum_number_of_workers,
                              maximum=self.maximum_number_of_workers,
                              interval=self.adaptive_interval)
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


class DaskHTCondorBackend(BaseDaskJobQueueBackend):
    """Workers from HTCondor (``request_gpus`` for GPU workers)."""

    system = "htcondor"


class DaskSLURMBackend(BaseDaskJobQueueBackend):
    """Workers from Slurm (``--gres=gpu:N`` for GPU workers)."""

    system = "slurm"


class DaskPBSBackend(BaseDaskJobQueueBackend):
    """Workers from PBS (``ngpus`` in the select for GPU workers)."""

    system = "pbs"


class DaskLSFBackend(BaseDaskJobQueueBackend):
    """Workers from LSF (``-gpu num=N`` for GPU workers)."""

    system = "lsf"
