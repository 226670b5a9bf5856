from .backends import CalculationBackend, ComputeResources, QueueWorkerResources

__all__ = [
    ComputeResources,
    CalculationBackend,
    QueueWorkerResources,
]
