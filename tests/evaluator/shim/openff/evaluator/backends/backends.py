"""``openff.evaluator.backends.backends`` -> :mod:`hybrid.resources` and the base backend."""

from hybrid.backends.base import CalculationBackend
from hybrid.resources import ComputeResources, PodResources, QueueWorkerResources

__all__ = ["CalculationBackend", "ComputeResources", "PodResources", "QueueWorkerResources"]
