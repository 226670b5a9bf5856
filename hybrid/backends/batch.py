"""Batch backends with openff-evaluator's constructor arguments, on :class:`HybridCluster`.

Switching from ``openff.evaluator.backends.dask.DaskSLURMBackend`` is a change of import:
the arguments keep their names and meaning. ``queue_name=None`` means the batch system's
default queue (openff-evaluator's default, ``"default"``, names a queue most sites lack).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from hybrid.backends.base import BaseDaskBackend
from hybrid.errors import ConfigurationError
from hybrid.resources import QueueWorkerResources


class BaseDaskJobQueueBackend(BaseDaskBackend):
    """One pool of batch workers, fixed (min == max) or adaptive between min and max."""

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
        for label, value in (("minimum_number_of_workers", minimum_number_of_workers),
                             ("maximum_number_of_workers", maximum_number_of_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"{name}.{label}", value, "an integer >= 0")
        if maximum_number_of_workers < 1:
            raise ConfigurationError(f"{name}.maximum_number_of_workers",
                                     maximum_number_of_workers, "an integer >= 1")
        if minimum_number_of_workers > maximum_number_of_workers:
            raise ConfigurationError(f"{name}.minimum_number_of_workers",
                                     minimum_number_of_workers,
                                     f"at most maximum_number_of_workers "
                                     f"({maximum_number_of_workers})")
        resources = resources_per_worker or QueueWorkerResources()
        if not isinstance(resources, QueueWorkerResources):
            raise ConfigurationError(f"{name}.resources_per_worker", resources,
                                     "a hybrid.resources.QueueWorkerResources")
        for label, value in (("setup_script_commands", setup_script_commands),
                             ("extra_script_options", extra_script_options)):
            if value is not None and (isinstance(value, str) or not all(
                    isinstance(v, str) for v in value)):
                raise ConfigurationError(f"{name}.{label}", value, "a list of strings")
        self.minimum_number_of_workers = minimum_number_of_workers
        self.maximum_number_of_workers = maximum_number_of_workers
        self.resources_per_worker = resources
        self.queue_name = queue_name
        self.setup_script_commands = list(setup_script_commands or [])
        self.extra_script_options = list(extra_script_options or [])
        self.adaptive_interval = adaptive_interval
        self.disable_nanny_process = disable_nanny_process
        self.cluster_kwargs = dict(cluster_kwargs or {})
        self.pool_options = pool_options

    @property
    def pool_name(self) -> str:
        """``"gpu"`` for GPU workers, else ``"cpu"``."""
        return "gpu" if self.resources_per_worker.is_gpu else "cpu"

    def _start_cluster(self):
        from hybrid.cluster import HybridCluster

        cluster = HybridCluster(annotate_resources=self.annotate_resources,
                                gpu_fraction=self.gpu_fraction, **self.cluster_kwargs)
        try:
            cluster.add_pool(
                self.pool_name, self.system, self.resources_per_worker, queue=self.queue_name,
                job_extra_directives=self.extra_script_options,
                job_script_prologue=self.setup_script_commands,
                nanny=not self.disable_nanny_process, serves_unannotated=True,
                **self.pool_options,
            )
            if self.minimum_number_of_workers == self.maximum_number_of_workers:
                cluster.scale(self.maximum_number_of_workers)
            else:
                cluster.adapt(minimum=self.minimum_number_of_workers,
                              maximum=self.maximum_number_of_workers,
                              interval=self.adaptive_interval)
        except BaseException:
            cluster.close()
            raise
        return cluster

    def job_script(self) -> str:
        """The job script the backend submits (needs a started backend)."""
        return self.cluster.pool(self.pool_name).job_script()


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
