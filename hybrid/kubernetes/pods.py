"""Kubernetes worker pods as a batch system: one pod per worker, found again by its labels.

Every pod runs the same ``dask worker`` command as a batch job
(:meth:`hybrid.worker.WorkerOptions.argv`). Its worker name is ``<cluster>-<pool>-<pod name>``:
the pod reads its own name through the downward API (``metadata.name`` into
``HYBRID_JOB_ID``), so the pool can tell which pod a connected worker lives in.

Pods carry the labels ``hybrid/tag`` (:func:`hybrid.batch.base.tag_prefix`),
``hybrid/cluster`` and ``hybrid/pool``; :meth:`KubernetesPods.query` lists them with that
label selector. There is no staging directory on the execute side, so a TLS cluster's CA,
certificate and key go into one Secret per cluster (mode 0400 in the pod), labelled the same
way so that :meth:`KubernetesPods.remove_cluster` (and ``hybrid gc``) delete it.
"""

from __future__ import annotations

import base64
import copy
import logging
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import distributed
import yaml

from hybrid import config
from hybrid.batch.base import (
    BatchSystem,
    JobSpec,
    JobState,
    JobStatus,
    tag_prefix,
)
from hybrid.errors import ConfigurationError, TemplateError
from hybrid.kubernetes.api import (
    KubernetesAPIError,
    call_api,
    check_dns_label,
    check_dns_subdomain,
    check_label_key,
    check_label_value,
    check_labels,
    dns_name,
    kubernetes_quantity,
    load_api_client,
    read_json,
)
from hybrid.kubernetes.volumes import KubernetesSecret, KubernetesVolume, check_mount_path
from hybrid.resources import PodResources
from hybrid.units import to_bytes, walltime_seconds
from hybrid.worker import TLSFiles

logger = logging.getLogger(__name__)

__all__ = [
    "ANNOTATION_SCHEDULER",
    "DEFAULT_IMAGE",
    "LABEL_CLUSTER",
    "LABEL_POOL",
    "LABEL_ROLE",
    "LABEL_TAG",
    "KubernetesPods",
    "escape_expansion",
    "pod_state",
    "tls_secret_name",
]

#: The image pods run when none is given: dask's own, at the version of this client.
DEFAULT_IMAGE = f"ghcr.io/dask/dask:{distributed.__version__}"

LABEL_TAG = "hybrid/tag"
LABEL_CLUSTER = "hybrid/cluster"
LABEL_POOL = "hybrid/pool"
LABEL_ROLE = "hybrid/role"
ANNOTATION_SCHEDULER = "hybrid/scheduler"
_RESERVED_LABELS = (LABEL_TAG, LABEL_CLUSTER, LABEL_POOL, LABEL_ROLE)

TLS_VOLUME = "hybrid-tls"
TLS_FILE_MODE = 0o400
PULL_POLICIES = ("Always", "IfNotPresent", "Never")

#: Container waiting reasons that will not clear by themselves: the pod is ``held``.
HELD_REASONS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def escape_expansion(text: str) -> str:
    """Make a string inert in a container's ``command`` or ``env`` value.

    Kubernetes expands ``$(NAME)`` there; ``$$`` stands for a literal ``$``.
    """
    return text.replace("$", "$$")


def tls_secret_name(cluster: str) -> str:
    """The name of the Secret holding a cluster's CA, certificate and key."""
    return f"hybrid-tls-{dns_name(cluster, 52)}"


def _waiting(status: Mapping[str, Any]) -> tuple[str | None, str | None]:
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or ():
            waiting = (container.get("state") or {}).get("waiting")
            if waiting and waiting.get("reason"):
                return waiting["reason"], waiting.get("message")
    return None, None


def _terminated(status: Mapping[str, Any]) -> str | None:
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            words = terminated.get("reason") or "terminated"
            if terminated.get("exitCode") is not None:
                words += f" (exit code {terminated['exitCode']})"
            if terminated.get("message"):
                words += f": {terminated['message']}"
            return words
    return None


def _joined(reason: str | None, message: str | None) -> str | None:
    if reason and message:
        return f"{reason}: {message}"
    return reason or message


def pod_state(pod: Mapping[str, Any]) -> tuple[JobState, str | None]:
    """A pod's phase (and why it waits) as a :class:`JobState` and a reason.

    ``Pending`` is pending, with the container's waiting reason or the scheduler's
    ``Unschedulable`` message; a waiting reason that needs a fix (``ImagePullBackOff``,
    ``ErrImagePull``, ``CreateContainerConfigError``...) makes it ``held``. ``Running`` is
    running, ``Succeeded`` finished, ``Failed`` failed (with the pod's or the container's
    reason and exit code), ``Unknown`` pending (its node is not reporting). A pod being
    deleted is ``removed``.
    """
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return JobState.removed, "deleted, terminating"
    phase = status.get("phase") or "Pending"
    if phase == "Pending":
        reason, message = _waiting(status)
        if reason in HELD_REASONS:
            return JobState.held, _joined(reason, message)
        for condition in status.get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return JobState.pending, _joined(condition.get("reason") or "Unschedulable",
                                                 condition.get("message"))
        if reason and reason not in _STARTING_REASONS:
            return JobState.pending, _joined(reason, message)
        return JobState.pending, reason
    if phase == "Running":
        return JobState.running, None
    if phase == "Succeeded":
        return JobState.finished, _terminated(status)
    if phase == "Failed":
        return JobState.failed, _joined(status.get("reason"), status.get("message")) or (
            _terminated(status))
    return JobState.pending, _joined(
        "Unknown", status.get("message") or "the pod's node is not reporting its state")


def _check_mapping_list(value: Any, field: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not all(
            isinstance(item, Mapping) for item in value):
        raise ConfigurationError(field, value, "a list of mappings")
    return [copy.deepcopy(dict(item)) for item in value]


class KubernetesPods(BatchSystem):
    """Worker pods in one namespace of a Kubernetes cluster.

    ``image`` runs the worker (it needs ``python`` with ``distributed`` on its ``PATH``,
    or give ``python``). ``pod_resources`` gives each pod its CPU, memory, GPU and
    ephemeral-storage requests and limits (equal, for Guaranteed QoS), its affinity and its
    tolerations; it must describe the same worker as the pool's resources. Each pool has its
    own instance, so one group's affinity and tolerations never reach another's pods.

    The API is reached through ``api_client`` (a ``kubernetes.client.ApiClient``), else the
    kubeconfig ``kube_config`` (``kube_context``), else the in-cluster service account, else
    ``~/.kube/config``; nothing is contacted until the first submit or query.
    """

    name = "kubernetes"
    template = "pod.yaml.j2"
    ships_files = True

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        namespace: str = "default",
        env: Mapping[str, str] | None = None,
        volumes: Iterable[KubernetesVolume] = (),
        secrets: Iterable[KubernetesSecret] = (),
        pod_resources: PodResources | None = None,
        labels: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        service_account: str | None = None,
        image_pull_policy: str | None = None,
        image_pull_secrets: Sequence[str] = (),
        gpu_resource_name: str = "nvidia.com/gpu",
        tls_mount_path: str = "/etc/hybrid/tls",
        python: str = "python",
        api_client: Any = None,
        kube_config: str | Path | None = None,
        kube_context: str | None = None,
        request_timeout: float = 30,
    ):
        if not isinstance(image, str) or not image.strip() or any(
                c.isspace() or ord(c) < 32 for c in image):
            raise ConfigurationError("KubernetesPods.image", image,
                                     'an image reference without spaces, e.g. "ghcr.io/dask/dask"')
        self.image = image
        self.namespace = check_dns_label(namespace, "KubernetesPods.namespace")
        self.env = self._check_env(env)
        self.volumes = self._check_volumes(volumes, secrets, tls_mount_path)
        if pod_resources is not None and not isinstance(pod_resources, PodResources):
            raise ConfigurationError("KubernetesPods.pod_resources", pod_resources,
                                     "a hybrid.resources.PodResources or None")
        self.pod_resources = copy.deepcopy(pod_resources)
        self.labels = check_labels(labels, "KubernetesPods.labels")
        for key in self.labels:
            if key in _RESERVED_LABELS:
                raise ConfigurationError("KubernetesPods.labels", key,
                                         f"a label key other than {', '.join(_RESERVED_LABELS)} "
                                         "(hybrid sets those itself)")
        self.node_selector = check_labels(node_selector, "KubernetesPods.node_selector")
        self.service_account = None if service_account is None else check_dns_subdomain(
            service_account, "KubernetesPods.service_account")
        if image_pull_policy is not None and image_pull_policy not in PULL_POLICIES:
            raise ConfigurationError("KubernetesPods.image_pull_policy", image_pull_policy,
                                     f"one of {', '.join(PULL_POLICIES)} or None")
        self.image_pull_policy = image_pull_policy
        if isinstance(image_pull_secrets, str):
            image_pull_secrets = [image_pull_secrets]
        self.image_pull_secrets = [check_dns_subdomain(s, "KubernetesPods.image_pull_secrets")
                                   for s in image_pull_secrets]
        check_label_key(gpu_resource_name, "KubernetesPods.gpu_resource_name")
        if "/" not in gpu_resource_name:
            raise ConfigurationError("KubernetesPods.gpu_resource_name", gpu_resource_name,
                                     'an extended resource name with a domain, e.g. '
                                     '"nvidia.com/gpu" or "amd.com/gpu"')
        self.gpu_resource_name = gpu_resource_name
        self.tls_mount_path = check_mount_path(tls_mount_path, "KubernetesPods.tls_mount_path")
        if not isinstance(python, str) or not python.strip() or "\n" in python:
            raise ConfigurationError("KubernetesPods.python", python,
                                     'the python command in the image, e.g. "python"')
        self.python = python
        if isinstance(request_timeout, bool) or not isinstance(request_timeout, (int, float)) or (
                request_timeout <= 0):
            raise ConfigurationError("KubernetesPods.request_timeout", request_timeout,
                                     "a number of seconds > 0")
        self.request_timeout = float(request_timeout)
        self._api_client = load_api_client(api_client) if api_client is not None else None
        self._kube_config = kube_config
        self._kube_context = kube_context
        self._core: Any = None

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
        if env is None:
            return {}
        if not isinstance(env, Mapping):
            raise ConfigurationError("KubernetesPods.env", env, "a mapping of names to strings")
        out = {}
        for name, value in env.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):  # as JobSpec checks
                raise ConfigurationError("KubernetesPods.env", name,
                                         "environment variable names matching "
                                         "[A-Za-z_][A-Za-z0-9_]*")
            if name.startswith("HYBRID_"):
                raise ConfigurationError("KubernetesPods.env", name,
                                         "a name not starting with HYBRID_ (hybrid sets those)")
            if not isinstance(value, str):
                raise ConfigurationError(f"KubernetesPods.env[{name!r}]", value, "a string value")
            out[name] = value
        return out

    @staticmethod
    def _check_volumes(volumes: Iterable[KubernetesVolume], secrets: Iterable[KubernetesSecret],
                       tls_mount_path: str) -> list[KubernetesVolume]:
        if isinstance(volumes, KubernetesVolume) or isinstance(secrets, KubernetesVolume):
            raise ConfigurationError("KubernetesPods.volumes", volumes,
                                     "a list of volumes (wrap a single one in [...])")
        checked: list[KubernetesVolume] = []
        for field, items, kind in (("volumes", volumes or (), KubernetesVolume),
                                   ("secrets", secrets or (), KubernetesSecret)):
            for item in items:
                if not isinstance(item, kind):
                    raise ConfigurationError(f"KubernetesPods.{field}", item,
                                             f"{kind.__name__} objects")
                checked.append(item)
        names: dict[str, KubernetesVolume] = {}
        paths: dict[str, KubernetesVolume] = {}
        for item in checked:
            if item.volume_name == TLS_VOLUME or item.mount_path == tls_mount_path:
                raise ConfigurationError(f"{type(item).__name__}", item,
                                         f"a volume name other than {TLS_VOLUME!r} and a mount "
                                         f"path other than {tls_mount_path!r} (hybrid's TLS files)")
            if item.volume_name in names and names[item.volume_name] != item:
                raise ConfigurationError(f"{type(item).__name__}.name", item.name,
                                         "a volume name used by no other volume")
            if item.mount_path in paths and paths[item.mount_path] != item:
                raise ConfigurationError(f"{type(item).__name__}.mount_path", item.mount_path,
                                         "a mount path used by no other volume")
            names[item.volume_name] = item
            paths[item.mount_path] = item
        return list(dict.fromkeys(checked))

    def _check_spec(self, spec: JobSpec) -> None:
        """Refuse what a pod cannot do, and a pod_resources that is not the pool's worker."""
        for label, value in (("queue", spec.queue), ("account", spec.account)):
            if value is not None:
                raise ConfigurationError(label, value, "None: Kubernetes pods have no "
                                         f"{label}; use namespace, labels or node_selector")
        if spec.job_extra_directives:
            raise ConfigurationError("job_extra_directives", list(spec.job_extra_directives),
                                     "no batch directives for Kubernetes pods")
        if spec.prologue:
            raise ConfigurationError("job_script_prologue", list(spec.prologue),
                                     "no setup commands for Kubernetes pods: the pod runs the "
                                     "worker directly, so build the setup into the image")
        for name in spec.env:
            if name.startswith("HYBRID_"):
                raise ConfigurationError("env", name,
                                         "a name not starting with HYBRID_ (hybrid sets those)")
        for label, value in (("cluster name", spec.cluster), ("pool name", spec.pool),
                             ("hybrid.batch.tag", tag_prefix())):
            check_label_value(value, f"{label} (a Kubernetes label value)")
        resources = self.pod_resources
        if resources is not None:
            differences = []
            if spec.cores != resources.number_of_threads:
                differences.append(f"threads {spec.cores} != {resources.number_of_threads}")
            if spec.gpus != resources.number_of_gpus:
                differences.append(f"GPUs {spec.gpus} != {resources.number_of_gpus}")
            if (spec.memory or 0) != resources.memory_bytes:
                differences.append(f"memory {spec.memory or 0} != {resources.memory_bytes} bytes")
            if differences:
                raise ConfigurationError(
                    "KubernetesPods.pod_resources", resources,
                    "the worker the pool describes (" + "; ".join(differences) + ")",
                    "Pass the same PodResources to add_pool(resources=...).")

    # ------------------------------------------------------------------ rendering
    def job_paths(self, staging: Path) -> TLSFiles:
        """Where the pod finds the TLS files: the cluster's Secret, mounted read-only."""
        mount = self.tls_mount_path
        return TLSFiles(f"{mount}/ca.pem", f"{mount}/cert.pem", f"{mount}/key.pem")

    def pod_names(self, spec: JobSpec, count: int) -> list[str]:
        """``count`` new pod names ``<cluster>-<pool>-<random>`` (DNS-1123 labels)."""
        base = dns_name(f"{spec.cluster}-{spec.pool}", 54)
        return [f"{base}-{secrets.token_hex(4)}" for _ in range(count)]

    def pod_labels(self, spec: JobSpec) -> dict[str, str]:
        """The labels every pod of this pool carries."""
        return {**self.labels, LABEL_TAG: tag_prefix(), LABEL_CLUSTER: spec.cluster,
                LABEL_POOL: spec.pool}

    def container_resources(self, spec: JobSpec) -> dict[str, dict[str, str]]:
        """Requests and limits (equal): CPU, memory, ephemeral storage, GPUs."""
        amounts = {"cpu": str(spec.cores)}
        if spec.memory:
            amounts["memory"] = kubernetes_quantity(spec.memory)
        if self.pod_resources is not None:
            storage = to_bytes(self.pod_resources.ephemeral_storage_limit)
            if storage:
                amounts["ephemeral-storage"] = kubernetes_quantity(storage)
        if spec.gpus:
            amounts[self.gpu_resource_name] = str(spec.gpus)
        return {"requests": dict(amounts), "limits": dict(amounts)}

    def _pod_spec(self, spec: JobSpec) -> JobSpec:
        """The spec with the worker as a pod runs it: the image's python, no host container.

        A configured contact address names one host; each pod has its own, so it is dropped.
        """
        worker = replace(spec.worker, python=spec.worker.python or self.python, container=None,
                         contact_address=None)
        if worker.tls is not None:
            worker = replace(worker, tls=self.job_paths(Path(".")))
        return replace(spec, worker=worker)

    def context(self, spec: JobSpec, staging: Path, count: int) -> dict[str, Any]:
        """Template variables: the shared ones plus the pod's pieces, ready for ``json``."""
        self._check_spec(spec)
        spec = self._pod_spec(spec)
        context = super().context(spec, staging, count)
        env = {**config.worker_dask_environment(), **self.env, **spec.env}
        container_env: list[dict[str, Any]] = [
            {"name": "HYBRID_JOB_ID",
             "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "HYBRID_WORKER_NAME", "value": f"{spec.name_prefix}-$(HYBRID_JOB_ID)"},
        ]
        container_env += [{"name": k, "value": escape_expansion(v)} for k, v in env.items()]
        command = [escape_expansion(str(word)) for word in context["command"]]
        command += ["--name", "$(HYBRID_WORKER_NAME)"]
        volumes = [v.volume() for v in self.volumes]
        mounts = [v.mount() for v in self.volumes]
        tls_secret = None
        if spec.worker.tls is not None:
            tls_secret = tls_secret_name(spec.cluster)
            volumes.append({"name": TLS_VOLUME, "secret": {"secretName": tls_secret,
                                                           "defaultMode": TLS_FILE_MODE}})
            mounts.append({"name": TLS_VOLUME, "mountPath": self.tls_mount_path,
                           "readOnly": True})
        resources = self.pod_resources
        deadline = walltime_seconds(spec.walltime) if spec.walltime else spec.lease_seconds
        context.update(
            pod_names=self.pod_names(spec, count),
            namespace=self.namespace,
            labels=self.pod_labels(spec),
            annotations={ANNOTATION_SCHEDULER: spec.worker.scheduler_address},
            image=self.image,
            image_pull_policy=self.image_pull_policy,
            image_pull_secrets=[{"name": name} for name in self.image_pull_secrets],
            service_account=self.service_account,
            node_selector=dict(self.node_selector),
            affinity=copy.deepcopy(resources.affinity_specification) if resources else None,
            tolerations=copy.deepcopy(resources.tolerations) if resources else None,
            container_command=command,
            container_env=container_env,
            container_resources=self.container_resources(spec),
            volume_mounts=mounts,
            pod_volumes=volumes,
            tls_secret=tls_secret,
            active_deadline_seconds=deadline,
        )
        return context

    def manifests(self, spec: JobSpec, staging: Path, count: int = 1) -> list[dict[str, Any]]:
        """The rendered pods as objects (the YAML of :meth:`render`, parsed)."""
        text = self.render(spec, staging, count)
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as error:
            raise TemplateError(
                f"job template {self.template!r} is not valid YAML: {error}") from None
        for document in documents:
            if not isinstance(document, dict) or document.get("kind") != "Pod":
                raise TemplateError(f"job template {self.template!r} must render Pod documents "
                                    f"only, not {str(document)[:80]!r}")
        if len(documents) != count:
            raise TemplateError(f"job template {self.template!r} rendered {len(documents)} pods "
                                f"for {count} workers")
        return documents

    # ------------------------------------------------------------------ the API
    @property
    def core(self) -> Any:
        """The ``CoreV1Api`` (the client is loaded on first use)."""
        if self._core is None:
            from kubernetes import client

            api_client = self._api_client or load_api_client(
                None, self._kube_config, self._kube_context)
            self._api_client = api_client
            self._core = client.CoreV1Api(api_client)
        return self._core

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.request_timeout)
        return call_api(what, getattr(self.core, method), *args, **kwargs)

    def _list(self, what: str, method: str, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = None
        while True:
            extra = {"_continue": token} if token else {}
            page = read_json(self._call(what, method, self.namespace, label_selector=selector,
                                        limit=500, _preload_content=False, **extra))
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _selector(self, cluster: str | None = None, pool: str | None = None) -> str:
        words = [f"{LABEL_TAG}={tag_prefix()}"]
        if cluster is not None:
            words.append(f"{LABEL_CLUSTER}={check_label_value(cluster, 'cluster name')}")
        if pool is not None:
            words.append(f"{LABEL_POOL}={check_label_value(pool, 'pool name')}")
        return ",".join(words)

    def ensure_tls_secret(self, spec: JobSpec) -> str | None:
        """Create (or update) the cluster's TLS Secret from ``spec.tls_source``; its name."""
        source = spec.tls_source
        if source is None:
            if spec.worker.tls is not None:
                raise ConfigurationError(
                    "tls_source", None, "the CA, certificate and key files of a TLS worker, so "
                    "that submit can put them in the cluster's Secret (pods have no staging "
                    "directory)")
            return None
        name = tls_secret_name(spec.cluster)
        data = {}
        for key, path in (("ca.pem", source.ca), ("cert.pem", source.cert),
                          ("key.pem", source.key)):
            try:
                data[key] = base64.b64encode(Path(path).read_bytes()).decode()
            except OSError as error:
                raise ConfigurationError("tls", path, f"a readable certificate or key file "
                                         f"({error.strerror})") from None
        body = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": self.namespace,
                         "labels": {LABEL_TAG: tag_prefix(), LABEL_CLUSTER: spec.cluster,
                                    LABEL_ROLE: "tls"}},
            "data": data,
        }
        try:
            read_json(self._call(f"create the TLS secret {name}", "create_namespaced_secret",
                                 self.namespace, body, _preload_content=False))
        except KubernetesAPIError as error:
            if error.status != 409:
                raise
            read_json(self._call(f"update the TLS secret {name}", "replace_namespaced_secret",
                                 name, self.namespace, body, _preload_content=False))
        return name

    def submit(self, spec: JobSpec, staging: Path, count: int) -> list[str]:
        """Create ``count`` pods (the cluster's TLS Secret first); return their names.

        If one pod is refused, those already created are deleted again before the error is
        raised, so a submission happens entirely or not at all.
        """
        documents = self.manifests(spec, staging, count)
        self.ensure_tls_secret(spec)
        created: list[str] = []
        try:
            for document in documents:
                name = document["metadata"]["name"]
                read_json(self._call(f"create pod {name}", "create_namespaced_pod",
                                     self.namespace, document, _preload_content=False))
                created.append(name)
        except BaseException:
            if created:
                try:
                    self.remove(created)
                except Exception as error:  # report the first failure, not this one
                    logger.warning("could not delete the pods of a failed submission %s: %s",
                                   created, error)
            raise
        return created

    def _status(self, pod: Mapping[str, Any]) -> JobStatus:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        state, reason = pod_state(pod)
        return JobStatus(metadata.get("name", ""), state, reason, labels.get(LABEL_CLUSTER),
                         labels.get(LABEL_POOL),
                         (metadata.get("annotations") or {}).get(ANNOTATION_SCHEDULER))

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our pods (label selector), of ``cluster`` or with these names.

        Finished and failed pods stay listed until deleted; deleted pods are gone, so
        ``history`` adds nothing.
        """
        wanted = list(job_ids) if job_ids is not None else None
        if wanted is not None and not wanted:
            return []
        pods = self._list("list pods", "list_namespaced_pod", self._selector(cluster))
        found = {s.job_id: s for s in (self._status(p) for p in pods)}
        if wanted is not None:
            return [found[name] for name in wanted if name in found]
        return list(found.values())

    def _delete_pod(self, name: str) -> bool:
        try:
            read_json(self._call(f"delete pod {name}", "delete_namespaced_pod", name,
                                 self.namespace, _preload_content=False))
        except KubernetesAPIError as error:
            if error.status == 404:
                return False
            raise
        return True

    def remove(self, job_ids: Iterable[str]) -> None:
        """Delete exactly these pods (their grace period lets the workers leave cleanly)."""
        failures = []
        for name in list(job_ids):
            try:
                self._delete_pod(name)
            except KubernetesAPIError as error:
                failures.append(str(error))
        if failures:
            raise KubernetesAPIError("; ".join(failures))

    def delete_tls_secrets(self, cluster: str) -> list[str]:
        """Delete the cluster's TLS Secret(s); their names."""
        selector = self._selector(cluster) + f",{LABEL_ROLE}=tls"
        deleted = []
        for item in self._list("list secrets", "list_namespaced_secret", selector):
            name = item["metadata"]["name"]
            try:
                read_json(self._call(f"delete secret {name}", "delete_namespaced_secret", name,
                                     self.namespace, _preload_content=False))
            except KubernetesAPIError as error:
                if error.status != 404:
                    raise
            deleted.append(name)
        return deleted

    def remove_cluster(self, cluster: str) -> list[str]:
        """Delete every pod of ``cluster`` (finished ones too) and its TLS Secret.

        Returns the names of the pods that were still pending, running or held.
        """
        statuses = self.query(cluster=cluster)
        active = [s.job_id for s in statuses if s.state.active]
        self.remove(s.job_id for s in statuses if s.state is not JobState.removed)
        self.delete_tls_secrets(cluster)
        return active

    def cluster_closed(self, cluster: str) -> None:
        """After a cluster's pools are closed: delete its finished pods and its TLS Secret."""
        self.remove_cluster(cluster)

    def cluster_names(self) -> list[str]:
        """Clusters that have pods or a TLS Secret here (for ``hybrid gc``)."""
        selector = self._selector()
        names = set()
        for method, what in (("list_namespaced_pod", "list pods"),
                             ("list_namespaced_secret", "list secrets")):
            for item in self._list(what, method, selector):
                label = ((item.get("metadata") or {}).get("labels") or {}).get(LABEL_CLUSTER)
                if label:
                    names.add(label)
        return sorted(names)

    def scheduler_addresses(self, cluster: str) -> list[str]:
        """The scheduler addresses the cluster's live pods were started for."""
        addresses = []
        for status in self.query(cluster=cluster):
            if status.state.active and status.scheduler and status.scheduler not in addresses:
                addresses.append(status.scheduler)
        return addresses
