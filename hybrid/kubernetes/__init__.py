"""Kubernetes: worker pods as a batch system, volumes and secrets, persistent volume claims.

Needs the ``kubernetes`` package (``pip install 'hybrid[kubernetes]'``) only when the API is
contacted; building and showing the pod manifests needs nothing beyond hybrid itself.
"""

from hybrid.kubernetes.api import KubernetesAPIError
from hybrid.kubernetes.pods import KubernetesPods
from hybrid.kubernetes.pvc import (
    AccessMode,
    PersistentVolumeClaimNotBound,
    create_persistent_volume_claim,
    delete_persistent_volume_claim,
)
from hybrid.kubernetes.settings import KubernetesSettings, pod_state
from hybrid.kubernetes.volumes import (
    BaseKubernetesVolume,
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesSecret,
    KubernetesVolume,
)

__all__ = [
    "AccessMode",
    "BaseKubernetesVolume",
    "KubernetesAPIError",
    "KubernetesEmptyDirVolume",
    "KubernetesPersistentVolumeClaim",
    "KubernetesPods",
    "KubernetesSecret",
    "KubernetesSettings",
    "KubernetesVolume",
    "PersistentVolumeClaimNotBound",
    "create_persistent_volume_claim",
    "delete_persistent_volume_claim",
    "pod_state",
]
