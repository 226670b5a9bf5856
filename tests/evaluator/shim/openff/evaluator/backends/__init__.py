"""``openff.evaluator.backends`` -> hybrid (the names its ``__init__`` exports)."""

from hybrid.backends.base import CalculationBackend
from hybrid.resources import ComputeResources, QueueWorkerResources

__all__ = ["CalculationBackend", "ComputeResources", "QueueWorkerResources"]
