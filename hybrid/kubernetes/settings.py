"""What Kubernetes worker pods are: their settings, labels, states and the tag they carry.

The data side of :mod:`hybrid.kubernetes.pods` (which builds and sends the pods): the
system's own settings (:class:`KubernetesSettings`, the section ``hybrid.batch.kubernetes``),
the labels and annotation that find a cluster's pods again, and how a pod's phase and
container statuses read as a :class:`~hybrid.batch.JobState` with the reason Kubernetes
gives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import distributed
from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from hybrid.batch.base import SystemSettings
from hybrid.batch.jobs import JobState
from hybrid.fields import Environment, Interval, Seconds, reject, strings
from hybrid.kubernetes.api import dns_name
from hybrid.kubernetes.fields import (
    Bytes,
    DNSLabel,
    DNSSubdomain,
    ImageReference,
    KubeConfigPath,
    Labels,
    MountPath,
    ResourceLimits,
    ResourceName,
    Word,
)
from hybrid.kubernetes.volumes import KubernetesSecret, Volume

#: The image pods run when none is given: dask's own, at the version of this client.
DEFAULT_IMAGE = f"ghcr.io/dask/dask:{distributed.__version__}"

LABEL_TAG = "hybrid/tag"
LABEL_CLUSTER = "hybrid/cluster"
LABEL_POOL = "hybrid/pool"
LABEL_ROLE = "hybrid/role"
ANNOTATION_SCHEDULER = "hybrid/scheduler"
RESERVED_LABELS = (LABEL_TAG, LABEL_CLUSTER, LABEL_POOL, LABEL_ROLE)

TLS_VOLUME = "hybrid-tls"
TLS_FILE_MODE = 0o400

#: Container waiting reasons that will not clear by themselves: the pod is ``held``.
HELD_REASONS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})


def escape_expansion(text: str) -> str:
    """Make a string inert in a container's ``command`` or ``env`` value.

    Kubernetes expands ``$(NAME)`` there; ``$$`` stands for a literal ``$``.
    """
    return text.replace("$", "$$")


def cluster_secret_name(cluster: str) -> str:
    """The name of a cluster's own Secret (its scheduler address and TLS files)."""
    return f"hybrid-cluster-{dns_name(cluster, 48)}"


# --------------------------------------------------------------------------- pod states
def _joined(reason: str | None, message: str | None) -> str | None:
    if reason and message:
        return f"{reason}: {message}"
    return reason or message


def _waiting(status: Any) -> tuple[str | None, str | None]:
    for containers in (status.init_container_statuses, status.container_statuses):
        for container in containers or ():
            waiting = container.state.waiting if container.state is not None else None
            if waiting is not None and waiting.reason:
                return waiting.reason, waiting.message
    return None, None


def _terminated(status: Any) -> str | None:
    for container in status.container_statuses or ():
        terminated = container.state.terminated if container.state is not None else None
        if terminated is not None:
            words = terminated.reason or "terminated"
            if terminated.exit_code is not None:
                words += f" (exit code {terminated.exit_code})"
            if terminated.message:
                words += f": {terminated.message}"
            return words
    return None


def pod_state(pod: Any) -> tuple[JobState, str | None]:
    """A pod (``kubernetes.client.V1Pod``) as a :class:`JobState` and a reason.

    ``Pending`` is pending, with the container's waiting reason or the scheduler's
    ``Unschedulable`` message; a waiting reason that needs a fix (``ImagePullBackOff``,
    ``ErrImagePull``, ``CreateContainerConfigError``...) makes it ``held``. ``Running`` is
    running, ``Succeeded`` finished, ``Failed`` failed (with the pod's or the container's
    reason and exit code), ``Unknown`` pending (its node is not reporting). A pod being
    deleted is ``removing``: it is still there, and its worker may still be stopping.
    """
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return JobState.removing, "deleted, terminating"
    status = pod.status
    phase = (status.phase if status is not None else None) or "Pending"
    if status is None:
        return JobState.pending, None
    if phase == "Pending":
        reason, message = _waiting(status)
        if reason in HELD_REASONS:
            return JobState.held, _joined(reason, message)
        for condition in status.conditions or ():
            if condition.type == "PodScheduled" and condition.status == "False":
                return JobState.pending, _joined(condition.reason or "Unschedulable",
                                                 condition.message)
        if reason and reason not in _STARTING_REASONS:
            return JobState.pending, _joined(reason, message)
        return JobState.pending, reason
    if phase == "Running":
        return JobState.running, None
    if phase == "Succeeded":
        return JobState.finished, _terminated(status)
    if phase == "Failed":
        return JobState.failed, _joined(status.reason, status.message) or _terminated(status)
    return JobState.pending, _joined(
        "Unknown", status.message or "the pod's node is not reporting its state")


# --------------------------------------------------------------------------- settings
def _pod_environment(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if name.startswith("HYBRID_"):
            raise reject(f"variable names not starting with HYBRID_ (not {name!r}: hybrid "
                         "sets those in every pod)")
    return env


def _pod_labels(labels: dict[str, str]) -> dict[str, str]:
    for key in labels:
        if key in RESERVED_LABELS:
            raise reject(f"label keys other than {', '.join(RESERVED_LABELS)} (not {key!r}: "
                         "hybrid sets those itself)")
    return labels


def _json_mapping(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise reject("a Kubernetes affinity mapping, e.g. {'nodeAffinity': {...}}, or None")
    try:
        return json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError):
        raise reject("a mapping of plain JSON values (strings, numbers, lists, mappings)") \
            from None


def _tolerations(value: Any) -> Any:
    if value is None:
        return ()
    accepted = ("a list of Kubernetes toleration mappings, e.g. [{'key': 'nvidia.com/gpu', "
                "'operator': 'Exists', 'effect': 'NoSchedule'}]")
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise reject(accepted)
    items = tuple(value)
    if not all(isinstance(item, Mapping) for item in items):
        raise reject(accepted)
    return tuple(_json_mapping(item) for item in items)


def _volume_list(value: Any) -> Any:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or hasattr(value, "volume") or not hasattr(
            value, "__iter__"):
        raise reject("a list of volumes (wrap a single one in [...])")
    return tuple(value)


def _names(value: Any) -> Any:
    return strings(True, "secret names")(value)


class KubernetesSettings(SystemSettings):
    """``hybrid.batch.kubernetes``: the pods' image, namespace and API, and what each pod
    gets beyond the pool's numbers (affinity, tolerations, storage, volumes, secrets)."""

    image: ImageReference = Field(
        DEFAULT_IMAGE, description="The image that runs the worker; it needs ``python`` with "
        "``distributed``. Default: ``ghcr.io/dask/dask`` at this distributed's version.")
    namespace: DNSLabel = Field("default", description="The namespace of the pods.")
    env: Annotated[Environment, AfterValidator(_pod_environment)] = Field(
        {}, description="Environment variables of every pod (a pool's ``env`` adds to "
        "them; names starting ``HYBRID_`` are hybrid's).")
    labels: Annotated[Labels, AfterValidator(_pod_labels)] = Field(
        {}, description="Labels of every pod, besides hybrid's own ``hybrid/...``.")
    node_selector: Labels = Field({}, description="Node labels the pods need.")
    service_account: DNSSubdomain | None = Field(
        None, description="The pods' service account.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="``Always``, ``IfNotPresent`` or ``Never``.")
    image_pull_secrets: Annotated[tuple[DNSSubdomain, ...], BeforeValidator(_names)] = Field(
        (), description="Secrets holding registry credentials, by name.")
    gpu_resource_name: ResourceName = Field(
        "nvidia.com/gpu", description="The extended resource GPUs are requested as.")
    tls_mount_path: MountPath = Field(
        "/etc/hybrid/tls", description="Where the pods find a TLS cluster's files.")
    python: Word = Field(
        "python", description="The image's python (a pool's own ``python`` wins).")
    request_timeout: Interval = Field(30.0, description="Seconds one API request may take.")
    termination_grace_period: Seconds = Field(
        10, description="Between SIGTERM and SIGKILL when a pod is deleted.")
    kube_config: KubeConfigPath | None = Field(
        None, description="The kubeconfig file. Default: the in-cluster service account, "
        "else ``$KUBECONFIG``, else ``~/.kube/config``.")
    kube_context: Word | None = Field(None, description="The kubeconfig's context.")
    affinity: Annotated[dict[str, Any], BeforeValidator(_json_mapping)] | None = Field(
        None, description="The pods' ``affinity`` (``PodResources.affinity_specification``).")
    tolerations: Annotated[tuple[dict[str, Any], ...], BeforeValidator(_tolerations)] = Field(
        (), description="The pods' ``tolerations`` (``PodResources.tolerations``).")
    resource_limits: ResourceLimits = Field(
        {}, description="Further resources of each pod's requests and limits, such as "
        "``{'nvidia.com/mig-1g.5gb': '1'}`` (``PodResources.additional_limit_specifications``).")
    ephemeral_storage: Bytes | None = Field(
        None, description="Each pod's ``ephemeral-storage`` request and limit "
        "(``PodResources.ephemeral_storage_limit``).")
    volumes: Annotated[tuple[Volume, ...], BeforeValidator(_volume_list)] = Field(
        (), description="Claims, scratch directories and secrets every pod mounts.")
    secrets: Annotated[tuple[KubernetesSecret, ...], BeforeValidator(_volume_list)] = Field(
        (), description="Secrets every pod mounts.")

    @model_validator(mode="after")
    def _distinct_mounts(self) -> KubernetesSettings:
        names: dict[str, Any] = {}
        paths: dict[str, Any] = {}
        for index, item in enumerate((*self.volumes, *self.secrets)):
            field = (f"volumes[{index}]" if index < len(self.volumes)
                     else f"secrets[{index - len(self.volumes)}]")
            if item.volume_name == TLS_VOLUME or item.mount_path == self.tls_mount_path:
                raise reject(f"a volume name other than {TLS_VOLUME!r} and a mount path other "
                             f"than {self.tls_mount_path!r} (hybrid's TLS files)",
                             field=field, value=item)
            if names.get(item.volume_name, item) != item:
                raise reject("a volume name used by no other volume",
                             field=f"{field}.name", value=item.name)
            if paths.get(item.mount_path, item) != item:
                raise reject("a mount path used by no other volume",
                             field=f"{field}.mount_path", value=item.mount_path)
            names[item.volume_name] = paths[item.mount_path] = item
        return self

    def mounted(self) -> list[Any]:
        """The volumes and secrets, each once, in order."""
        return list(dict.fromkeys((*self.volumes, *self.secrets)))


#: Settings that say where the pods are, not what they are: a pool cannot change them.
PLACE_SETTINGS = ("namespace", "kube_config", "kube_context")

#: Pool options a pod cannot apply: (option, what is accepted, the fix).
REFUSED_OPTIONS = (
    ("queue", "no queue: Kubernetes pods have none",
     "Choose nodes with the system options node_selector, affinity or tolerations."),
    ("account", "no account: Kubernetes pods have none", "Leave it out."),
    ("job_extra_directives", "no batch directives: pods are built as objects",
     "Use the system options (labels, node_selector, service_account...)."),
    ("job_script_prologue", "no setup commands: the pod runs the worker directly",
     "Build the setup into the image."),
    ("container_image", "no container image: each pod runs the system's image",
     "Give image=... to KubernetesPods (or hybrid.batch.kubernetes.image); a site-wide "
     "hybrid.worker.container.image must be unset for Kubernetes pools."),
    ("pixi_project", "no pixi project: each pod runs its image's python",
     "Build the environment into the image."),
    ("conda_env", "no conda environment: each pod runs its image's python",
     "Build the environment into the image, or give python=... (the image's python)."),
)
