"""GPU/CPU routing as data: the resource names, what workers advertise, what tasks ask for.

GPU tasks ask for ``{"GPU": fraction}`` (``hybrid.annotator.gpu-fraction``, 0.5); every other
task asks for ``{"notGPU": 1}``. GPU workers advertise ``GPU=<gpus> notGPU=0`` (a pool's: their
GPU task slots, :mod:`hybrid.gpusharing`) and CPU workers ``GPU=0 notGPU=<threads>``, so
neither kind of task can land on the other kind of worker. No ``distributed`` import: batch
templates use this too.
"""

from __future__ import annotations

from hybrid import config
from hybrid.fields import Fraction, validate_value

GPU = "GPU"
NOT_GPU = "notGPU"

__all__ = ["GPU", "NOT_GPU", "gpu_fraction", "resources_argument", "task_resources",
           "worker_resources"]


def gpu_fraction(value: float | None = None, field: str = "gpu_fraction") -> float:
    """The GPU share one GPU task asks for (argument, else configuration), validated as
    ``hybrid.annotator.gpu-fraction`` is; ``field``: what the caller calls the argument."""
    if value is None:
        return float(config.get("annotator.gpu-fraction"))
    return validate_value(Fraction, value, field)


def task_resources(gpu: bool, fraction: float | None = None) -> dict[str, float]:
    """The resources one task asks for."""
    return {GPU: gpu_fraction(fraction)} if gpu else {NOT_GPU: 1}


def worker_resources(number_of_gpus: int, number_of_threads: int,
                     serves_cpu_tasks: bool = False) -> dict[str, float]:
    """The resources a worker advertises: GPU workers only GPU, CPU workers only notGPU.

    ``serves_cpu_tasks`` lets a GPU worker take CPU tasks too (``notGPU=<threads>``), for a
    cluster that has no CPU workers at all: otherwise its CPU tasks could never run.
    """
    if number_of_gpus > 0:
        return {GPU: number_of_gpus, NOT_GPU: number_of_threads if serves_cpu_tasks else 0}
    return {GPU: 0, NOT_GPU: number_of_threads}


def resources_argument(resources: dict[str, float]) -> str:
    """``{"GPU": 1, "notGPU": 0}`` -> ``"GPU=1 notGPU=0"`` for ``dask worker --resources``."""
    return " ".join(f"{name}={value:g}" for name, value in resources.items())
