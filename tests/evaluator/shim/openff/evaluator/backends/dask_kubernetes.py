"""``openff.evaluator.backends.dask_kubernetes`` -> :mod:`hybrid.backends.kubernetes`."""

from hybrid.backends.kubernetes import (
    AccessMode,
    BaseDaskKubernetesBackend,
    BaseKubernetesVolume,
    DaskKubernetesBackend,
    DaskKubernetesExistingBackend,
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesSecret,
    PodResources,
    unit,
)

__all__ = ["AccessMode", "BaseDaskKubernetesBackend", "BaseKubernetesVolume",
           "DaskKubernetesBackend", "DaskKubernetesExistingBackend", "KubernetesEmptyDirVolume",
           "KubernetesPersistentVolumeClaim", "KubernetesSecret", "PodResources", "unit"]
