"""Kubernetes: worker pods as a pool system, volumes and secrets, persistent volume claims.

Needs the ``kubernetes`` package (``pip install 'hybrid[kubernetes]'``) only when the API is
contacted; rendering manifests needs nothing beyond hybrid itself.
"""

from hybrid.kubernetes.api import KubernetesAPIError
from hybrid.kubernetes.pods import KubernetesPods, pod_state
from hybrid.kubernetes.pvc import (
    PersistentVolumeClaimNotBound,
    create_persistent_volume_claim,
    delete_persistent_volume_claim,
)
from hybrid.kubernetes.volumes import (
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesSecret,
    KubernetesVolume,
)

__all__ = [
    "KubernetesAPIError",
    "KubernetesEmptyDirVolume",
    "KubernetesPersistentVolumeClaim",
    "KubernetesPods",
    "KubernetesSecret",
    "KubernetesVolume",
    "PersistentVolumeClaimNotBound",
    "create_persistent_volume_claim",
    "delete_persistent_volume_claim",
    "pod_state",
]
