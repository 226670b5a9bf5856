"""Persistent volume claims: create one and wait until Kubernetes has bound a volume to it.

A claim shared by every worker pod (``ReadWriteMany``) is where openff-evaluator style
workloads keep their files; mount it with
:class:`~hybrid.kubernetes.volumes.KubernetesPersistentVolumeClaim`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybrid.errors import ConfigurationError, HybridError
from hybrid.kubernetes.api import (
    KubernetesAPIError,
    call_api,
    check_dns_label,
    check_dns_subdomain,
    check_labels,
    kubernetes_quantity,
    load_api_client,
    read_json,
)
from hybrid.units import is_quantity, parse_memory, to_bytes, unit

__all__ = [
    "ACCESS_MODES",
    "PersistentVolumeClaimNotBound",
    "create_persistent_volume_claim",
    "delete_persistent_volume_claim",
]

ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")


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


def _seconds(value: Any, field: str) -> float:
    from dask.utils import parse_timedelta

    accepted = 'a duration > 0: seconds, a time quantity, or text such as "5 minutes"'
    try:
        if is_quantity(value):
            seconds = float(unit.Quantity(value.magnitude, str(value.units)).to(unit.second)
                            .magnitude)
        elif isinstance(value, bool):
            raise TypeError
        else:
            seconds = parse_timedelta(value)
    except Exception:
        raise ConfigurationError(field, value, accepted) from None
    if seconds is None or seconds <= 0:
        raise ConfigurationError(field, value, accepted)
    return float(seconds)


def _access_modes(value: Any) -> list[str]:
    modes = [value] if isinstance(value, str) else value
    accepted = f"a list of access modes from {', '.join(ACCESS_MODES)}"
    if not isinstance(modes, Sequence) or not modes:
        raise ConfigurationError("access_modes", value, accepted)
    for mode in modes:
        if mode not in ACCESS_MODES:
            raise ConfigurationError("access_modes", mode, accepted)
    return list(dict.fromkeys(modes))


def _last_event(core: Any, name: str, namespace: str) -> str | None:
    """The newest event about the claim, if the API offers any (best effort)."""
    try:
        events = read_json(call_api(
            "list events", core.list_namespaced_event, namespace,
            field_selector=f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={name}",
            _preload_content=False, _request_timeout=10))
    except KubernetesAPIError:
        return None
    items = events.get("items") or []
    if not items:
        return None
    items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    event = items[-1]
    return ": ".join(p for p in (event.get("reason"), event.get("message")) if p) or None


def create_persistent_volume_claim(
    name: str,
    storage: Any = 1 * unit.gigabytes,
    storage_class: str | None = None,
    namespace: str = "default",
    access_modes: Sequence[str] = ("ReadWriteMany",),
    timeout: Any = 300,
    *,
    wait: bool = True,
    labels: Mapping[str, str] | None = None,
    api_client: Any = None,
    kube_config: str | Path | None = None,
    kube_context: str | None = None,
    poll_interval: float = 1.0,
) -> dict[str, Any]:
    """Create the claim ``name`` and wait until it is ``Bound``; return the claim object.

    ``storage`` is a quantity of bytes (``5 * unit.terabytes``, ``"100 GiB"``);
    ``storage_class=None`` takes the cluster's default class. A claim of that name that
    already exists is waited for rather than created again. Raises
    :class:`PersistentVolumeClaimNotBound`, naming the phase the claim was stuck in, when it
    is not bound within ``timeout``. Every argument is checked before the API is contacted.
    """
    check_dns_subdomain(name, "persistent volume claim name")
    size = to_bytes(parse_memory(storage, "storage"))
    if size <= 0:
        raise ConfigurationError("storage", storage,
                                 "a size larger than zero, e.g. 1 * unit.gigabytes")
    if storage_class is not None:
        check_dns_subdomain(storage_class, "storage_class")
    check_dns_label(namespace, "namespace")
    modes = _access_modes(access_modes)
    limit = _seconds(timeout, "timeout")
    interval = _seconds(poll_interval, "poll_interval")
    claim_labels = check_labels(labels, "labels")
    core = _core(api_client, kube_config, kube_context)

    spec: dict[str, Any] = {"accessModes": modes,
                            "resources": {"requests": {"storage": kubernetes_quantity(size)}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if claim_labels:
        metadata["labels"] = claim_labels
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata,
            "spec": spec}
    try:
        claim = read_json(call_api(f"create persistent volume claim {name}",
                                   core.create_namespaced_persistent_volume_claim, namespace,
                                   body, _preload_content=False))
    except KubernetesAPIError as error:
        if error.status != 409:
            raise
        claim = _read(core, name, namespace)
    if not wait:
        return claim
    start = time.monotonic()
    while True:
        phase = (claim.get("status") or {}).get("phase") or "Pending"
        if phase == "Bound":
            return claim
        waited = time.monotonic() - start
        if phase == "Lost" or waited >= limit:
            raise PersistentVolumeClaimNotBound(name, namespace, phase, waited,
                                                _last_event(core, name, namespace))
        time.sleep(min(interval, max(0.05, limit - waited)))
        claim = _read(core, name, namespace)


def _read(core: Any, name: str, namespace: str) -> dict[str, Any]:
    return read_json(call_api(f"read persistent volume claim {name}",
                              core.read_namespaced_persistent_volume_claim, name, namespace,
                              _preload_content=False))


def _core(api_client: Any, kube_config: Any, kube_context: str | None) -> Any:
    from kubernetes import client

    return client.CoreV1Api(load_api_client(api_client, kube_config, kube_context))


def delete_persistent_volume_claim(
    name: str, namespace: str = "default", *, api_client: Any = None,
    kube_config: str | Path | None = None, kube_context: str | None = None,
) -> bool:
    """Delete the claim ``name`` (its data goes with it, per its reclaim policy).

    Returns False when there was no such claim.
    """
    check_dns_subdomain(name, "persistent volume claim name")
    check_dns_label(namespace, "namespace")
    core = _core(api_client, kube_config, kube_context)
    try:
        read_json(call_api(f"delete persistent volume claim {name}",
                           core.delete_namespaced_persistent_volume_claim, name, namespace,
                           _preload_content=False))
    except KubernetesAPIError as error:
        if error.status == 404:
            return False
        raise
    return True
