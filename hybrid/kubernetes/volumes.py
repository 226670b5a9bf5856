"""Volumes mounted into every worker pod: claims, scratch directories and secrets.

The names follow openff-evaluator's Kubernetes backend. Each validates on construction (a
:class:`~hybrid.errors.ConfigurationError` naming the field), and gives the pod its
``volumes`` entry (:meth:`~KubernetesVolume.volume`) and the container its ``volumeMounts``
entry (:meth:`~KubernetesVolume.mount`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybrid.errors import ConfigurationError
from hybrid.kubernetes.api import (
    check_dns_label,
    check_dns_subdomain,
    dns_name,
    kubernetes_quantity,
)
from hybrid.units import parse_memory, to_bytes

__all__ = [
    "KubernetesEmptyDirVolume",
    "KubernetesPersistentVolumeClaim",
    "KubernetesSecret",
    "KubernetesVolume",
]


def check_mount_path(value: Any, field: str) -> str:
    """An absolute container path without ``..``, ``:`` or control characters."""
    accepted = 'an absolute path in the container, e.g. "/data"'
    if value is None or value == "":
        raise ConfigurationError(field, value, accepted, "Every volume needs a mount path.")
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigurationError(field, value, accepted)
    if ":" in value or any(ord(c) < 32 for c in value) or ".." in value.split("/"):
        raise ConfigurationError(field, value,
                                 accepted + " without '..', ':' or control characters")
    return value.rstrip("/") or "/"


def check_sub_path(value: Any, field: str) -> str | None:
    """A relative path inside a volume (a secret's key), or ``None``."""
    if value is None:
        return None
    accepted = 'a relative path inside the volume, e.g. "oe_license.txt", or None'
    if not isinstance(value, str) or not value or value.startswith("/"):
        raise ConfigurationError(field, value, accepted)
    if any(ord(c) < 32 for c in value) or ".." in value.split("/"):
        raise ConfigurationError(field, value, accepted + " without '..' or control characters")
    return value


@dataclass(frozen=True)
class KubernetesVolume:
    """A volume, by the name it has in the pod, mounted at ``mount_path``."""

    name: str
    mount_path: str
    read_only: bool = False

    def __post_init__(self) -> None:
        kind = type(self).__name__
        object.__setattr__(self, "mount_path",
                           check_mount_path(self.mount_path, f"{kind}.mount_path"))
        if not isinstance(self.read_only, bool):
            raise ConfigurationError(f"{kind}.read_only", self.read_only, "True or False")

    @property
    def volume_name(self) -> str:
        """The name of the pod's ``volumes`` entry (a DNS-1123 label)."""
        return self.name

    def source(self) -> dict[str, Any]:
        """The volume source (``{"emptyDir": {...}}`` and the like)."""
        raise NotImplementedError

    def volume(self) -> dict[str, Any]:
        """The pod's ``volumes`` entry."""
        return {"name": self.volume_name, **self.source()}

    def mount(self) -> dict[str, Any]:
        """The container's ``volumeMounts`` entry."""
        entry: dict[str, Any] = {"name": self.volume_name, "mountPath": self.mount_path}
        if self.read_only:
            entry["readOnly"] = True
        return entry


@dataclass(frozen=True)
class KubernetesPersistentVolumeClaim(KubernetesVolume):
    """An existing claim ``name`` (see :func:`hybrid.kubernetes.create_persistent_volume_claim`).

    Every pod mounts the same claim, so with ``ReadWriteMany`` all workers share its files.
    """

    def __post_init__(self) -> None:
        check_dns_subdomain(self.name, "KubernetesPersistentVolumeClaim.name")
        super().__post_init__()

    @property
    def volume_name(self) -> str:
        """The claim name, made a DNS-1123 label when it has dots."""
        return self.name if len(self.name) <= 63 and "." not in self.name else dns_name(self.name)

    def source(self) -> dict[str, Any]:
        """``persistentVolumeClaim`` naming the claim."""
        source: dict[str, Any] = {"claimName": self.name}
        if self.read_only:
            source["readOnly"] = True
        return {"persistentVolumeClaim": source}


@dataclass(frozen=True, init=False)
class KubernetesEmptyDirVolume(KubernetesVolume):
    """A scratch directory of each pod, removed with it; ``size_limit`` caps its size."""

    size_limit: Any = None

    def __init__(self, name: str, mount_path: str, size_limit: Any = None,
                 read_only: bool = False):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "mount_path", mount_path)
        object.__setattr__(self, "size_limit", size_limit)
        object.__setattr__(self, "read_only", read_only)
        self.__post_init__()

    def __post_init__(self) -> None:
        check_dns_label(self.name, "KubernetesEmptyDirVolume.name")
        super().__post_init__()
        if self.size_limit is not None:
            size = to_bytes(parse_memory(self.size_limit, "KubernetesEmptyDirVolume.size_limit"))
            if size == 0:
                raise ConfigurationError("KubernetesEmptyDirVolume.size_limit", self.size_limit,
                                         "a size larger than zero, or None for no limit")

    def source(self) -> dict[str, Any]:
        """``emptyDir``, with its ``sizeLimit`` when one is set."""
        if self.size_limit is None:
            return {"emptyDir": {}}
        size = to_bytes(parse_memory(self.size_limit, "KubernetesEmptyDirVolume.size_limit"))
        return {"emptyDir": {"sizeLimit": kubernetes_quantity(size)}}


@dataclass(frozen=True, init=False)
class KubernetesSecret(KubernetesVolume):
    """The Kubernetes Secret ``secret_name`` mounted at ``mount_path``.

    With ``sub_path`` only that key of the secret is mounted, as the single file
    ``mount_path`` (an OpenEye license, for instance); without it ``mount_path`` is a
    directory holding one file per key.
    """

    secret_name: str = ""
    sub_path: str | None = None

    def __init__(self, name: str, secret_name: str, mount_path: str | None = None,
                 sub_path: str | None = None, read_only: bool = True):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "secret_name", secret_name)
        object.__setattr__(self, "mount_path", mount_path)
        object.__setattr__(self, "sub_path", sub_path)
        object.__setattr__(self, "read_only", read_only)
        self.__post_init__()

    def __post_init__(self) -> None:
        check_dns_label(self.name, "KubernetesSecret.name")
        check_dns_subdomain(self.secret_name, "KubernetesSecret.secret_name")
        super().__post_init__()
        object.__setattr__(self, "sub_path",
                           check_sub_path(self.sub_path, "KubernetesSecret.sub_path"))

    def source(self) -> dict[str, Any]:
        """``secret`` naming the Secret."""
        return {"secret": {"secretName": self.secret_name}}

    def mount(self) -> dict[str, Any]:
        """The mount, with ``subPath`` when one key is mounted as a file."""
        entry = super().mount()
        if self.sub_path is not None:
            entry["subPath"] = self.sub_path
        return entry
