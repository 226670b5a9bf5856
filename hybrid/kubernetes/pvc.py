"""Persistent volume claims: create one and wait until Kubernetes has bound a volume to it.

A claim shared by every worker pod (``ReadWriteMany``) is where openff-evaluator style
workloads keep their files; mount it with
:class:`~hybrid.kubernetes.volumes.KubernetesPersistentVolumeClaim`. Waiting uses
``kubernetes.watch`` on the claim, so a claim is seen ``Bound`` the moment it is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from hybrid.errors import HybridError
from hybrid.fields import Interval, Memory, reject, validate
from hybrid.kubernetes.api import (
    KubernetesAPIError,
    api_errors,
    call_api,
    kubernetes_quantity,
    load_api_client,
)
from hybrid.kubernetes.fields import DNSLabel, DNSSubdomain, Labels
from hybrid.units import unit

__all__ = [
    "ACCESS_MODES",
    "AccessMode",
    "PersistentVolumeClaimNotBound",
    "create_persistent_volume_claim",
    "delete_persistent_volume_claim",
]


class AccessMode(str, Enum):
    """How pods may mount a claim (openff-evaluator's names)."""

    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_MANY = "ReadWriteMany"
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"


ACCESS_MODES = tuple(mode.value for mode in AccessMode)


class PersistentVolumeClaimNotBound(HybridError, TimeoutError):
    """A claim was not bound in time (or was lost); the message names its phase."""

    def __init__(self, name: str, namespace: str, phase: str, waited: float,
                 detail: str | None = None):
        self.name = name
        self.namespace = namespace
        self.phase = phase
        message = (f"persistent volume claim {name!r} in namespace {namespace!r} is still "
                   f"{phase} after {waited:.0f} s, not Bound")
        if phase == "Lost":
            message = (f"persistent volume claim {name!r} in namespace {namespace!r} is Lost: "
                       "its volume is gone")
        if detail:
            message += f" (last event: {detail})"
        message += (f". Check `kubectl describe pvc {name} -n {namespace}`: the storage class "
                    "may not exist or have no provisioner, no volume may offer the access "
                    "modes, or the class binds only when a pod uses the claim "
                    "(volumeBindingMode: WaitForFirstConsumer; then pass wait=False).")
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.name, self.namespace, self.phase, 0.0))


def _access_modes(value: Any) -> tuple[str, ...]:
    accepted = f"a list of access modes from {', '.join(ACCESS_MODES)}"
    modes = [value] if isinstance(value, (str, AccessMode)) else value
    if not isinstance(modes, Sequence) or not modes:
        raise reject(accepted)
    out = []
    for mode in modes:
        text = mode.value if isinstance(mode, AccessMode) else mode
        if text not in ACCESS_MODES:
            raise reject(accepted + f" ({mode!r} is not one)")
        out.append(text)
    return tuple(dict.fromkeys(out))


class ClaimRequest(BaseModel):
    """The arguments of :func:`create_persistent_volume_claim`, validated at once."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    name: DNSSubdomain
    storage: Memory
    storage_class: DNSSubdomain | None = None
    namespace: DNSLabel = "default"
    access_modes: Annotated[tuple[str, ...], BeforeValidator(_access_modes)] = (
        "ReadWriteMany",)
    timeout: Interval = 300.0
    poll_interval: Interval = 1.0
    labels: Labels = {}

    def body(self) -> dict[str, Any]:
        """The claim as the API takes it."""
        spec: dict[str, Any] = {
            "accessModes": list(self.access_modes),
            "resources": {"requests": {"storage": kubernetes_quantity(self.storage)}}}
        if self.storage_class is not None:
            spec["storageClassName"] = self.storage_class
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata,
                "spec": spec}


def _core(api_client: Any, kube_config: Any, kube_context: str | None) -> Any:
    from kubernetes import client

    return client.CoreV1Api(load_api_client(api_client, kube_config, kube_context))


def _last_event(core: Any, name: str, namespace: str) -> str | None:
    """The newest event about the claim, if the API offers any (best effort)."""
    try:
        events = call_api(
            "list events", core.list_namespaced_event, namespace,
            field_selector=f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={name}",
            _request_timeout=10)
    except KubernetesAPIError:
        return None
    items = list(events.items or [])
    if not items:
        return None

    def when(event: Any) -> str:
        stamp = event.last_timestamp or event.event_time
        return stamp.isoformat() if stamp is not None else ""

    event = max(items, key=when)
    return ": ".join(p for p in (event.reason, event.message) if p) or None


def _phase(claim: Any) -> str:
    return (claim.status.phase if claim.status is not None else None) or "Pending"


def _wait_bound(core: Any, request: ClaimRequest, claim: Any) -> Any:
    """Watch the claim until it is Bound (or Lost, or the time is up)."""
    from kubernetes import watch

    name, namespace = request.name, request.namespace
    start = time.monotonic()
    while True:
        phase = _phase(claim)
        if phase == "Bound":
            return claim
        waited = time.monotonic() - start
        if phase == "Lost" or waited >= request.timeout:
            raise PersistentVolumeClaimNotBound(name, namespace, phase, waited,
                                                _last_event(core, name, namespace))
        window = max(0.05, min(request.poll_interval, request.timeout - waited))
        stream = watch.Watch()
        try:
            with api_errors(f"watch persistent volume claim {name}"):
                for event in stream.stream(
                        core.list_namespaced_persistent_volume_claim, namespace,
                        field_selector=f"metadata.name={name}",
                        resource_version=claim.metadata.resource_version,
                        timeout_seconds=max(1, math.ceil(window)),
                        _request_timeout=window + 10):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        claim = event["object"]
                    if event["type"] == "DELETED" or _phase(claim) in ("Bound", "Lost") or (
                            time.monotonic() - start >= request.timeout):
                        stream.stop()
        except KubernetesAPIError as error:
            if error.status != 410:  # 410 Gone: the version expired; read the claim again
                raise
        claim = _read(core, name, namespace) if _phase(claim) != "Bound" else claim


def create_persistent_volume_claim(
    name: str,
    storage: Any = 1 * unit.gigabytes,
    storage_class: str | None = None,
    namespace: str = "default",
    access_modes: Sequence[str | AccessMode] = ("ReadWriteMany",),
    timeout: Any = 300,
    *,
    wait: bool = True,
    labels: Mapping[str, str] | None = None,
    api_client: Any = None,
    kube_config: str | Path | None = None,
    kube_context: str | None = None,
    poll_interval: Any = 1.0,
) -> Any:
    """Create the claim ``name`` and wait until it is ``Bound``; return the claim
    (a ``kubernetes.client.V1PersistentVolumeClaim``).

    ``storage`` is a quantity of bytes (``5 * unit.terabytes``, ``"100 GiB"``);
    ``storage_class=None`` takes the cluster's default class. A claim of that name that
    already exists is waited for rather than created again. Raises
    :class:`PersistentVolumeClaimNotBound`, naming the phase the claim was stuck in and the
    last event about it, when it is not bound within ``timeout``. ``poll_interval`` is the
    longest the watch waits between checks of the clock. Every argument is checked before
    the API is contacted.
    """
    request = validate(ClaimRequest, {
        "name": name, "storage": storage, "storage_class": storage_class,
        "namespace": namespace, "access_modes": access_modes, "timeout": timeout,
        "poll_interval": poll_interval, "labels": labels},
        labels={"name": "persistent volume claim name"})
    core = _core(api_client, kube_config, kube_context)
    try:
        claim = call_api(f"create persistent volume claim {name}",
                         core.create_namespaced_persistent_volume_claim, request.namespace,
                         request.body())
    except KubernetesAPIError as error:
        if error.status != 409:
            raise
        claim = _read(core, request.name, request.namespace)
    if not wait:
        return claim
    return _wait_bound(core, request, claim)


def _read(core: Any, name: str, namespace: str) -> Any:
    return call_api(f"read persistent volume claim {name}",
                    core.read_namespaced_persistent_volume_claim, name, namespace)


def delete_persistent_volume_claim(
    name: str, namespace: str = "default", *, api_client: Any = None,
    kube_config: str | Path | None = None, kube_context: str | None = None,
) -> bool:
    """Delete the claim ``name`` (its data goes with it, per its reclaim policy).

    Returns False when there was no such claim.
    """
    validate(ClaimRequest, {"name": name, "namespace": namespace, "storage": "1 B"},
             labels={"name": "persistent volume claim name"})
    core = _core(api_client, kube_config, kube_context)
    try:
        call_api(f"delete persistent volume claim {name}",
                 core.delete_namespaced_persistent_volume_claim, name, namespace)
    except KubernetesAPIError as error:
        if error.status == 404:
            return False
        raise
    return True
