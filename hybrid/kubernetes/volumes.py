"""Volumes mounted into every worker pod: claims, scratch directories and secrets.

The names and arguments follow openff-evaluator's Kubernetes backend. Each class is a frozen
pydantic model: it validates on construction (a :class:`~hybrid.errors.ConfigurationError`
naming the field), compares by value, pickles, and round-trips through JSON as part of a
pool's settings (its ``kind``, always written, tells which class).
:meth:`~KubernetesVolume.volume` gives the pod's ``volumes`` entry and
:meth:`~KubernetesVolume.mount` the container's ``volumeMounts`` entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hybrid.fields import configuration_error
from hybrid.kubernetes.api import dns_name, kubernetes_quantity
from hybrid.kubernetes.fields import Bytes, DNSLabel, DNSSubdomain, MountPath, SubPath

__all__ = [
    "BaseKubernetesVolume",
    "KubernetesEmptyDirVolume",
    "KubernetesPersistentVolumeClaim",
    "KubernetesSecret",
    "KubernetesVolume",
    "Volume",
]


def _plain_data_skips(init: Callable[..., None]) -> Callable[..., None]:
    """Mark a constructor that only maps positional arguments to fields: pydantic then
    validates plain data (a volume inside a pool's settings) without calling it, as it
    does for ``RootModel``."""
    init.__pydantic_base_init__ = True  # type: ignore[attr-defined]
    return init


class KubernetesVolume(BaseModel):
    """A volume, by the name it has in the pod, mounted at ``mount_path``."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    name: str
    mount_path: MountPath
    read_only: bool = False

    @_plain_data_skips
    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise configuration_error(error, prefix=f"{type(self).__name__}.",
                                      fields=tuple(type(self).model_fields)) from None

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


#: openff-evaluator's name for the base class.
BaseKubernetesVolume = KubernetesVolume


class KubernetesPersistentVolumeClaim(KubernetesVolume):
    """An existing claim ``name`` (see :func:`hybrid.kubernetes.create_persistent_volume_claim`).

    Every pod mounts the same claim, so with ``ReadWriteMany`` all workers share its files.
    """

    kind: Literal["persistent_volume_claim"]
    name: DNSSubdomain

    @_plain_data_skips
    def __init__(self, name: Any = None, mount_path: Any = None, read_only: Any = False,
                 **extra: Any) -> None:
        super().__init__(kind="persistent_volume_claim", name=name, mount_path=mount_path,
                         read_only=read_only, **extra)

    @property
    def volume_name(self) -> str:
        """The claim name, made a DNS-1123 label when it has dots or is long."""
        return self.name if len(self.name) <= 63 and "." not in self.name else dns_name(self.name)

    def source(self) -> dict[str, Any]:
        """``persistentVolumeClaim`` naming the claim."""
        source: dict[str, Any] = {"claimName": self.name}
        if self.read_only:
            source["readOnly"] = True
        return {"persistentVolumeClaim": source}


class KubernetesEmptyDirVolume(KubernetesVolume):
    """A scratch directory of each pod, removed with it; ``size_limit`` caps its size."""

    kind: Literal["empty_dir"]
    name: DNSLabel
    size_limit: Bytes | None = None

    @_plain_data_skips
    def __init__(self, name: Any = None, mount_path: Any = None, read_only: Any = False, *,
                 size_limit: Any = None, **extra: Any) -> None:
        super().__init__(kind="empty_dir", name=name, mount_path=mount_path,
                         size_limit=size_limit, read_only=read_only, **extra)

    def source(self) -> dict[str, Any]:
        """``emptyDir``, with its ``sizeLimit`` when one is set."""
        if self.size_limit is None:
            return {"emptyDir": {}}
        return {"emptyDir": {"sizeLimit": kubernetes_quantity(self.size_limit)}}


class KubernetesSecret(KubernetesVolume):
    """The Kubernetes Secret ``secret_name`` mounted at ``mount_path``.

    With ``sub_path`` only that key of the secret is mounted, as the single file
    ``mount_path`` (an OpenEye license, for instance); without it ``mount_path`` is a
    directory holding one file per key.
    """

    kind: Literal["secret"]
    name: DNSLabel
    secret_name: DNSSubdomain
    sub_path: SubPath | None = None
    read_only: bool = True

    @_plain_data_skips
    def __init__(self, name: Any = None, secret_name: Any = None, mount_path: Any = None,
                 sub_path: Any = None, read_only: Any = True, **extra: Any) -> None:
        super().__init__(kind="secret", name=name, secret_name=secret_name,
                         mount_path=mount_path, sub_path=sub_path, read_only=read_only,
                         **extra)

    def source(self) -> dict[str, Any]:
        """``secret`` naming the Secret."""
        return {"secret": {"secretName": self.secret_name}}

    def mount(self) -> dict[str, Any]:
        """The mount, with ``subPath`` when one key is mounted as a file."""
        entry = super().mount()
        if self.sub_path is not None:
            entry["subPath"] = self.sub_path
        return entry


#: Any volume, told apart by its ``kind`` in plain data.
Volume = Annotated[
    KubernetesPersistentVolumeClaim | KubernetesEmptyDirVolume | KubernetesSecret,
    Field(discriminator="kind"),
]
