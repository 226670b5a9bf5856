"""Kubernetes worker pods as a batch system: one pod per worker, found again by its labels.

Every pod runs the worker command of :func:`hybrid.worker.worker_command`, the one every
batch script runs, as the container's argv. Its worker name is ``<cluster>-<pool>-<pod
name>``: the pod reads its own name through the downward API (``metadata.name`` into
``HYBRID_JOB_ID``), so the pool can tell which pod a connected worker lives in.

Pods are built as plain objects (:meth:`KubernetesPods.manifests`) and sent with the
client's typed calls; nothing goes through a template. They carry the labels ``hybrid/tag``
(:func:`hybrid.batch.jobs.tag_prefix`), ``hybrid/cluster`` and ``hybrid/pool``;
:meth:`KubernetesPods.query` lists them with that label selector, page by page. Each cluster
has at most one Secret of its own (:func:`cluster_secret_name`): the scheduler's address
(annotation ``hybrid/scheduler``) and, for a TLS cluster, its CA, certificate and key, which
the pods mount read-only (mode 0400). :meth:`KubernetesPods.cluster_closed` deletes it with
the cluster's remaining pods and watches until they are gone.
"""

from __future__ import annotations

import base64
import copy
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybrid import config
from hybrid.batch.base import BatchSystem
from hybrid.batch.jobs import JobState, JobStatus, WorkerJob, tag_prefix
from hybrid.errors import ConfigurationError, attach_note
from hybrid.fields import reject, validate
from hybrid.gpusharing import pod_command, starts_mps
from hybrid.kubernetes.api import (
    CONFIGURATION_FIX,
    KubernetesAPIError,
    api_errors,
    call_api,
    dns_name,
    kubernetes_quantity,
    load_api_client,
)
from hybrid.kubernetes.settings import (
    ANNOTATION_SCHEDULER,
    DEFAULT_IMAGE,
    LABEL_CLUSTER,
    LABEL_POOL,
    LABEL_ROLE,
    LABEL_TAG,
    PLACE_SETTINGS,
    REFUSED_OPTIONS,
    TLS_FILE_MODE,
    TLS_VOLUME,
    KubernetesSettings,
    cluster_secret_name,
    escape_expansion,
    pod_state,
)
from hybrid.units import walltime_seconds
from hybrid.worker import Connection, TLSFiles, read_pem, worker_commands

if TYPE_CHECKING:
    from hybrid.checks import CheckResult
    from hybrid.pools import PoolSpec

__all__ = [
    "ANNOTATION_SCHEDULER",
    "DEFAULT_IMAGE",
    "LABEL_CLUSTER",
    "LABEL_POOL",
    "LABEL_ROLE",
    "LABEL_TAG",
    "KubernetesPods",
    "KubernetesSettings",
    "cluster_secret_name",
    "escape_expansion",
    "pod_state",
]

#: Items per page when listing (the server may send fewer; ``continue`` fetches the rest).
PAGE_SIZE = 500
#: How long deletions may take beyond the pods' grace period before it is an error.
DELETION_MARGIN = 30.0


# --------------------------------------------------------------------------- the system
class KubernetesPods(BatchSystem):
    """Worker pods in one namespace of a Kubernetes cluster (``system="kubernetes"``).

    The settings are those of :class:`KubernetesSettings` (the configuration section
    ``hybrid.batch.kubernetes``). The API is reached through ``api_client`` (a
    ``kubernetes.client.ApiClient``), else the kubeconfig ``kube_config`` (``kube_context``),
    else the in-cluster service account, else ``$KUBECONFIG`` or ``~/.kube/config``; nothing
    is contacted until the first submit or query.
    """

    name = "kubernetes"
    template = "pods.yaml"  # not a Jinja template: pods are built as objects
    ships_files = True
    Settings = KubernetesSettings
    settings: KubernetesSettings

    def __init__(self, api_client: Any = None, **settings: Any):
        try:  # one line now, not a traceback at its first call
            import kubernetes  # noqa: F401
        except ImportError:
            from hybrid.errors import ToolMissing

            raise ToolMissing("the kubernetes system needs the Python package 'kubernetes', "
                              "which is not installed here: pip install 'hybrid[kubernetes]'"
                              ) from None
        super().__init__(**settings)
        self._api_client = load_api_client(api_client) if api_client is not None else None
        self._core: Any = None
        self._lock = threading.Lock()
        self._secrets_made: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ pools
    @classmethod
    def options_from_resources(cls, resources: Any) -> dict[str, Any]:
        """A ``PodResources``' affinity, tolerations, further limits and ephemeral storage."""
        from hybrid.resources import PodResources
        from hybrid.units import to_bytes

        if not isinstance(resources, PodResources):
            return {}
        options: dict[str, Any] = {}
        if resources.affinity_specification is not None:
            options["affinity"] = copy.deepcopy(resources.affinity_specification)
        if resources.tolerations:
            options["tolerations"] = copy.deepcopy(resources.tolerations)
        if resources.additional_limit_specifications:
            options["resource_limits"] = dict(resources.additional_limit_specifications)
        storage = to_bytes(resources.ephemeral_storage_limit)
        if storage:
            options["ephemeral_storage"] = f"{storage} B"
        return options

    @classmethod
    def check_spec(cls, spec: PoolSpec) -> None:
        """Refuse what a pod cannot do: queues, directives, setup commands, another
        environment than the image's, and ``HYBRID_`` variables."""
        for option, accepted, fix in REFUSED_OPTIONS:
            value = getattr(spec, option)
            if value not in (None, ()):
                raise reject(accepted, fix, field=option,
                             value=list(value) if isinstance(value, tuple) else value)
        for name in spec.env:
            if name.startswith("HYBRID_"):
                raise reject(f"variable names not starting with HYBRID_ (not {name!r}: "
                             "hybrid sets those in every pod)", field="env", value=name)

    def pod_settings(self, spec: PoolSpec) -> KubernetesSettings:
        """This system's settings with the pool's own (its resources' affinity...)."""
        settings = validate(self.Settings, {**self.options(), **spec.system_options},
                            prefix=f"add_pool({spec.name!r}).system_options.")
        for key in PLACE_SETTINGS:
            if getattr(settings, key) != getattr(self.settings, key):
                raise ConfigurationError(
                    f"add_pool({spec.name!r}).system_options.{key}", getattr(settings, key),
                    f"the system's own {key} ({getattr(self.settings, key)!r})",
                    "Give a pool in another place its own KubernetesPods.")
        return settings

    # ------------------------------------------------------------------ rendering
    def job_paths(self, staging: Path) -> TLSFiles:
        """Where the pod finds the TLS files: the cluster's Secret, mounted read-only."""
        return self._tls_paths(self.settings)

    @staticmethod
    def _tls_paths(settings: KubernetesSettings) -> TLSFiles:
        mount = settings.tls_mount_path
        return TLSFiles(f"{mount}/ca.pem", f"{mount}/cert.pem", f"{mount}/key.pem")

    def pod_names(self, job: WorkerJob, count: int) -> list[str]:
        """``count`` new pod names ``<cluster>-<pool>-<random>`` (DNS-1123 labels)."""
        import secrets

        base = dns_name(f"{job.cluster}-{job.pool}", 54)
        return [f"{base}-{secrets.token_hex(4)}" for _ in range(count)]

    def labels(self, job: WorkerJob, settings: KubernetesSettings) -> dict[str, str]:
        """The labels every pod of this pool carries."""
        return {**settings.labels, LABEL_TAG: tag_prefix(), LABEL_CLUSTER: job.cluster,
                LABEL_POOL: job.pool}

    def _container(self, job: WorkerJob, settings: KubernetesSettings) -> dict[str, Any]:
        spec = job.spec
        tls = self._tls_paths(settings) if job.connection.tls is not None else None
        # A configured contact address names one host; each pod has its own address.
        plain, shared = worker_commands(spec.model_copy(update={"contact_address": None}),
                                        job.connection, tls)
        python = spec.python or settings.python
        argv = [escape_expansion(w) for w in replace(plain, python=python).argv()]
        argv += ["--name", "$(HYBRID_WORKER_NAME)"]
        if starts_mps(spec):  # a GPU pod starts its own CUDA MPS daemon, as a batch job does
            shared_argv = [escape_expansion(w) for w in
                           replace(shared or plain, python=python).argv()]
            script = pod_command(spec, argv, [*shared_argv, "--name", "$(HYBRID_WORKER_NAME)"])
            argv = [*script[:2], escape_expansion(script[2]), *script[3:]]
        env: list[dict[str, Any]] = [
            {"name": "HYBRID_JOB_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "HYBRID_WORKER_NAME",
             "value": escape_expansion(job.name_prefix) + "-$(HYBRID_JOB_ID)"},
        ]
        given = {**settings.env, **spec.env}
        process = config.process_environment(given)  # a container's env is set, not defaulted
        variables = {**config.worker_dask_environment(), **process.unless_set,
                     **process.always, **given}
        env += [{"name": k, "value": escape_expansion(v)} for k, v in variables.items()]
        amounts = {"cpu": str(spec.cores)}
        if spec.memory:
            amounts["memory"] = kubernetes_quantity(spec.memory)
        if settings.ephemeral_storage:
            amounts["ephemeral-storage"] = kubernetes_quantity(settings.ephemeral_storage)
        amounts.update(settings.resource_limits)
        if spec.gpus:
            amounts[settings.gpu_resource_name] = str(spec.gpus)
        container: dict[str, Any] = {
            "name": "worker", "image": settings.image,
            "command": argv,
            "env": env, "resources": {"requests": dict(amounts), "limits": dict(amounts)}}
        if settings.image_pull_policy:
            container["imagePullPolicy"] = settings.image_pull_policy
        mounts = [v.mount() for v in settings.mounted()]
        if tls is not None:
            mounts.append({"name": TLS_VOLUME, "mountPath": settings.tls_mount_path,
                           "readOnly": True})
        if mounts:
            container["volumeMounts"] = mounts
        return container

    def manifests(self, job: WorkerJob, count: int = 1) -> list[dict[str, Any]]:
        """The ``count`` pods a submission creates, as objects (nothing is contacted)."""
        settings = self.pod_settings(job.spec)
        spec = job.spec
        pod: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": settings.termination_grace_period,
            "activeDeadlineSeconds": (walltime_seconds(spec.walltime) if spec.walltime
                                      else spec.lease),
            "containers": [self._container(job, settings)],
        }
        if settings.service_account:
            pod["serviceAccountName"] = settings.service_account
        if settings.image_pull_secrets:
            pod["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
        if settings.node_selector:
            pod["nodeSelector"] = dict(settings.node_selector)
        if settings.affinity:
            pod["affinity"] = settings.affinity
        if settings.tolerations:
            pod["tolerations"] = list(settings.tolerations)
        volumes = [v.volume() for v in settings.mounted()]
        if job.connection.tls is not None:
            volumes.append({"name": TLS_VOLUME, "secret": {
                "secretName": cluster_secret_name(job.cluster), "defaultMode": TLS_FILE_MODE}})
        if volumes:
            pod["volumes"] = volumes
        template = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "namespace": settings.namespace, "labels": self.labels(job, settings),
            "annotations": {ANNOTATION_SCHEDULER: job.connection.scheduler_address}},
            "spec": pod}
        pods = []
        for name in self.pod_names(job, count):
            document = copy.deepcopy(template)  # no object shared between pods
            document["metadata"] = {"name": name, **document["metadata"]}
            pods.append(document)
        return pods

    def render(self, job: WorkerJob, staging: Path, count: int = 1) -> str:
        """The pods as YAML documents, for reading."""
        import yaml

        return yaml.safe_dump_all(self.manifests(job, count), sort_keys=False,
                                  explicit_start=True)

    def job_files(self, job: WorkerJob, staging: Path, count: int = 1) -> dict[str, str]:
        """The pod manifests (YAML), and where a TLS cluster's files come from."""
        text = self.render(job, staging, count)
        if job.connection.tls is not None:
            text = (f"# The cluster's TLS files travel in the Secret "
                    f"{cluster_secret_name(job.cluster)}, created on the first submission.\n"
                    + text)
        return {"pods.yaml": text}

    # ------------------------------------------------------------------ the API
    @property
    def core(self) -> Any:
        """The ``CoreV1Api`` (the client is loaded on first use)."""
        with self._lock:
            if self._core is None:
                from kubernetes import client

                if self._api_client is None:
                    self._api_client = load_api_client(None, self.settings.kube_config,
                                                       self.settings.kube_context)
                self._core = client.CoreV1Api(self._api_client)
            return self._core

    def connect(self) -> None:
        """Load the API client now: a missing kubeconfig is a clear error here."""
        _ = self.core

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.settings.request_timeout)
        return call_api(what, getattr(self.core, method), *args, **kwargs)

    def _where(self) -> str:
        return f"in namespace {self.settings.namespace}"

    def _list(self, kind: str, selector: str) -> tuple[list[Any], str | None]:
        """Every object of ``kind`` (``pod``, ``secret``) matching ``selector``, page by
        page; and the list's resource version (where a watch starts)."""
        items: list[Any] = []
        token = None
        while True:
            page = self._call(f"list {kind}s {self._where()}", f"list_namespaced_{kind}",
                              self.settings.namespace, label_selector=selector,
                              limit=PAGE_SIZE, **({"_continue": token} if token else {}))
            items += page.items or []
            token = page.metadata._continue if page.metadata is not None else None
            if not token:
                return items, page.metadata.resource_version if page.metadata else None

    def _selector(self, cluster: str | None = None, role: str | None = None) -> str:
        words = [f"{LABEL_TAG}={tag_prefix()}"]
        if cluster is not None:
            words.append(f"{LABEL_CLUSTER}={cluster}")
        if role is not None:
            words.append(f"{LABEL_ROLE}={role}")
        return ",".join(words)

    def ensure_cluster_secret(self, cluster: str, connection: Connection) -> str:
        """Create (or update) the cluster's Secret: the scheduler's address and, for TLS,
        the CA, certificate and key (PEM text, or files on this host). Returns its name."""
        name = cluster_secret_name(cluster)
        key = (cluster, connection.scheduler_address)
        if key in self._secrets_made:
            return name
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": self.settings.namespace,
                         "labels": {LABEL_TAG: tag_prefix(), LABEL_CLUSTER: cluster,
                                    LABEL_ROLE: "cluster"},
                         "annotations": {ANNOTATION_SCHEDULER: connection.scheduler_address}}}
        if connection.tls is not None:
            tls = connection.tls
            body["data"] = {file: base64.b64encode(read_pem(source)).decode()
                            for file, source in (("ca.pem", tls.ca), ("cert.pem", tls.cert),
                                                 ("key.pem", tls.key))}
        try:
            self._call(f"create the secret {name} {self._where()}", "create_namespaced_secret",
                       self.settings.namespace, body)
        except KubernetesAPIError as error:
            if error.status != 409:
                raise
            self._call(f"update the secret {name} {self._where()}", "replace_namespaced_secret",
                       name, self.settings.namespace, body)
        self._secrets_made.add(key)
        return name

    def submit(self, job: WorkerJob, staging: Path, count: int) -> list[str]:
        """Create ``count`` pods (a TLS cluster's Secret first); return their names.

        If one pod is refused, those already created are deleted again before the error is
        raised, so a submission happens entirely or not at all.
        """
        pods = self.manifests(job, count)
        if job.connection.tls is not None:
            self.ensure_cluster_secret(job.cluster, job.connection)
        created: list[str] = []
        try:
            for pod in pods:
                name = pod["metadata"]["name"]
                self._call(f"create pod {name} {self._where()}", "create_namespaced_pod",
                           self.settings.namespace, pod)
                created.append(name)
        except BaseException as error:
            if created:
                try:
                    self.remove(created)
                except Exception as cleanup:
                    attach_note(error, f"the pods created before it ({', '.join(created)}) "
                                       f"could not be deleted: {cleanup}")
            raise
        return created

    def _status(self, pod: Any) -> JobStatus:
        metadata = pod.metadata
        labels = metadata.labels or {}
        state, reason = pod_state(pod)
        if state is JobState.failed:
            reason = (f"{reason or 'failed'}; `kubectl logs -n {self.settings.namespace} "
                      f"{metadata.name}` shows its output")
        return JobStatus(metadata.name, state, reason, labels.get(LABEL_CLUSTER),
                         labels.get(LABEL_POOL),
                         (metadata.annotations or {}).get(ANNOTATION_SCHEDULER))

    def query(self, cluster: str | None = None, job_ids: Iterable[str] | None = None,
              history: bool = False) -> list[JobStatus]:
        """Our pods (label selector), of ``cluster`` or with these names.

        Finished and failed pods stay listed until deleted; deleted pods are gone, so
        ``history`` adds nothing.
        """
        wanted = list(job_ids) if job_ids is not None else None
        if wanted is not None and not wanted:
            return []
        pods, _ = self._list("pod", self._selector(cluster))
        found = {s.job_id: s for s in (self._status(p) for p in pods)}
        if wanted is not None:
            return [found[name] for name in wanted if name in found]
        return list(found.values())

    def _delete(self, kind: str, name: str) -> bool:
        """Delete one object; False when it was already gone."""
        try:
            self._call(f"delete {kind} {name} {self._where()}", f"delete_namespaced_{kind}",
                       name, self.settings.namespace)
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
                self._delete("pod", name)
            except KubernetesAPIError as error:
                failures.append(str(error))
        if failures:
            raise KubernetesAPIError("; ".join(failures))

    def cluster_closed(self, cluster: str) -> None:
        """After a cluster's pools are closed: delete its remaining pods (finished ones
        too) and its Secret, and watch until every pod is gone."""
        selector = self._selector(cluster)
        pods, version = self._list("pod", selector)
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                self._delete("pod", pod.metadata.name)
        secrets, _ = self._list("secret", self._selector(cluster, role="cluster"))
        for secret in secrets:
            self._delete("secret", secret.metadata.name)
        self._secrets_made = {k for k in self._secrets_made if k[0] != cluster}
        self.wait_deleted({p.metadata.name for p in pods}, selector, version,
                          self.settings.termination_grace_period + DELETION_MARGIN)

    def wait_deleted(self, names: set[str], selector: str, version: str | None,
                     timeout: float) -> None:
        """Watch the pods matching ``selector`` from ``version`` on until none of ``names``
        is left; an error names those still there after ``timeout`` seconds."""
        from kubernetes import watch

        left = set(names)
        deadline = time.monotonic() + timeout
        while left and time.monotonic() < deadline:
            window = deadline - time.monotonic()
            stream = watch.Watch()
            try:
                with api_errors(f"watch the deletion of pods {self._where()}"):
                    for event in stream.stream(
                            self.core.list_namespaced_pod, self.settings.namespace,
                            label_selector=selector, resource_version=version,
                            timeout_seconds=max(1, math.ceil(window)),
                            _request_timeout=window + self.settings.request_timeout):
                        version = event["object"].metadata.resource_version or version
                        if event["type"] == "DELETED":
                            left.discard(event["object"].metadata.name)
                        if not left:
                            stream.stop()
            except KubernetesAPIError as error:
                if error.status != 410:  # 410 Gone: the version expired; list again
                    raise
            if left:  # the stream ended: check against a fresh list
                pods, version = self._list("pod", selector)
                left &= {p.metadata.name for p in pods}
        if left:
            raise KubernetesAPIError(
                f"{len(left)} pod(s) {self._where()} were still there {timeout:g} s after "
                f"their deletion: {', '.join(sorted(left))}. `kubectl get pods -n "
                f"{self.settings.namespace} -l {selector}` shows them.")

    def kept_clusters(self) -> dict[str, str | None]:
        """Clusters with a Secret here, and the scheduler address it names."""
        secrets, _ = self._list("secret", self._selector(role="cluster"))
        return {(s.metadata.labels or {})[LABEL_CLUSTER]:
                (s.metadata.annotations or {}).get(ANNOTATION_SCHEDULER)
                for s in secrets if (s.metadata.labels or {}).get(LABEL_CLUSTER)}

    def cluster_names(self) -> list[str]:
        """Clusters that have pods or a Secret here (what ``hybrid gc`` may look at)."""
        names = set()
        for kind in ("pod", "secret"):
            for item in self._list(kind, self._selector())[0]:
                label = (item.metadata.labels or {}).get(LABEL_CLUSTER)
                if label:
                    names.add(label)
        return sorted(names)

    def scheduler_addresses(self, cluster: str) -> list[str]:
        """The scheduler addresses of ``cluster``: its Secret's, then its live pods'."""
        addresses: list[str] = []
        secrets, _ = self._list("secret", self._selector(cluster, role="cluster"))
        found = [(s.metadata.annotations or {}).get(ANNOTATION_SCHEDULER) for s in secrets]
        found += [s.scheduler for s in self.query(cluster=cluster) if s.state.active]
        for address in found:
            if address and address not in addresses:
                addresses.append(address)
        return addresses

    def check(self, timeout: float = 20.0) -> CheckResult:
        """The kubeconfig loads and the API lists pods in the namespace (``hybrid doctor``)."""
        from hybrid.checks import fail, ok

        name = "batch system (kubernetes)"
        try:
            self.connect()
        except ConfigurationError as error:
            return fail(name, f"no Kubernetes configuration: {error.accepted}",
                        CONFIGURATION_FIX)
        namespace = self.settings.namespace
        try:
            self._call(f"list pods {self._where()}", "list_namespaced_pod", namespace, limit=1,
                       _request_timeout=timeout)
        except KubernetesAPIError as error:
            return fail(name, f"the API does not answer: {error}",
                        f"Check the kubeconfig's server and credentials, and that you may list "
                        f"pods in {namespace} (`kubectl get pods -n {namespace}`).")
        host = self.core.api_client.configuration.host
        return ok(name, f"the API at {host} lists pods in namespace {namespace}")
