"""Kubernetes backends in the style of openff-evaluator's: GPU and CPU worker pods.

:class:`DaskKubernetesBackend` starts a :class:`~hybrid.cluster.HybridCluster` with two pools
of worker pods, ``gpu`` and ``cpu``, on one :class:`~hybrid.kubernetes.KubernetesPods`
system; each pool scales on its own between its :class:`~hybrid.resources.PodResources`
minimum and maximum, and gets its group's affinity, tolerations and ephemeral storage. With
``annotate_resources`` GPU tasks run only on GPU pods and every other task only on CPU pods.
On start the cluster's Secret records the scheduler's address, so that
:class:`DaskKubernetesExistingBackend` (another process, the same ``cluster_name`` and
``namespace``) finds it even while no pod runs. Leaving the ``with`` block removes every pod
and that Secret.

This module offers every name of openff-evaluator's ``dask_kubernetes`` module that users
import: the backends, the volumes and secrets, ``AccessMode``, ``PodResources``,
``ComputeResources`` (with ``ComputeResources.GPUToolkit``) and ``unit``.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool

from hybrid.backends.base import BaseDaskBackend
from hybrid.backends.batch import BaseDaskJobQueueBackend
from hybrid.batch import JobState
from hybrid.batch.jobs import tag_prefix
from hybrid.errors import ConfigurationError, HybridError, attach_note
from hybrid.fields import Address, Interval, Name, count, validate, validate_value
from hybrid.kubernetes.pods import (
    DEFAULT_IMAGE,
    LABEL_CLUSTER,
    LABEL_TAG,
    KubernetesPods,
    KubernetesSettings,
)
from hybrid.kubernetes.pvc import AccessMode
from hybrid.kubernetes.volumes import (
    BaseKubernetesVolume,
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesSecret,
    KubernetesVolume,
)
from hybrid.resources import (
    ComputeResources,
    GPUPrecision,
    GPUToolkit,
    PodResources,
    QueueWorkerResources,
)
from hybrid.security import attach_security, wants_tls
from hybrid.units import unit
from hybrid.worker import Connection, TLSFiles

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_IMAGE",
    "AccessMode",
    "BaseDaskBackend",
    "BaseDaskJobQueueBackend",
    "BaseDaskKubernetesBackend",
    "BaseKubernetesVolume",
    "ComputeResources",
    "DaskKubernetesBackend",
    "DaskKubernetesExistingBackend",
    "GPUPrecision",
    "GPUToolkit",
    "KubernetesEmptyDirVolume",
    "KubernetesPersistentVolumeClaim",
    "KubernetesSecret",
    "KubernetesVolume",
    "PodResources",
    "QueueWorkerResources",
    "unit",
]

#: ``cluster_kwargs`` that go to :class:`~hybrid.cluster.HybridCluster`.
_CLUSTER_KEYS = ("security", "host", "worker_scheduler_address", "scheduler_sni",
                 "dashboard_address")
#: ``cluster_kwargs`` that are not pool options: the resources and the system give those.
_NOT_POOL_KEYS = ("cores", "gpus", "memory", "env", "system_options")
#: Where the manifests shown before start say the scheduler is.
PLACEHOLDER_ADDRESS = "scheduler:8786"


class _StartOptions(BaseModel):
    """The backend's own ``cluster_kwargs``."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    #: Seconds to wait on start for each group's minimum of workers (None: do not wait).
    resource_timeout: Interval | None = 300.0
    adapt_interval: Interval = 2.0
    adapt_wait_count: count(1, 1000) = 3


class BaseDaskKubernetesBackend(BaseDaskBackend):
    """What both Kubernetes backends take: the groups of pods and what every pod gets.

    Parameters
    ----------
    gpu_resources_per_worker, cpu_resources_per_worker : PodResources or None
        The GPU group (GPUs > 0) and the CPU group (no GPUs); one of them at least.
    cluster_name : str
        Names the cluster: its pods' label ``hybrid/cluster`` and its workers' names.
    cluster_port : int, optional
        The scheduler's port (default: any free port).
    disable_nanny_process : bool
        Run the workers without a nanny.
    image, namespace, env, secrets, volumes
        The pods' image, namespace, environment, secrets and volumes (claims, scratch
        directories; one at least, for the files the workers share); ``None`` takes
        ``hybrid.batch.kubernetes``.
    cluster_kwargs : dict
        ``resource_timeout`` (seconds to wait on start for each group's minimum of workers;
        ``None`` does not wait), ``adapt_interval``, ``adapt_wait_count``, the
        :class:`~hybrid.cluster.HybridCluster` arguments ``security``, ``host``,
        ``worker_scheduler_address``, ``scheduler_sni``, ``dashboard_address``, and pool
        options (``nanny``, ``death_timeout``, ``worker_extra_args``, ``python``, ``lease``,
        ``processes``...).
    annotate_resources : bool or None
        GPU tasks only on GPU pods, the rest only on CPU pods (default
        ``hybrid.annotator.enabled``).
    include_jupyter : bool
        ``False`` only: the scheduler runs in this process, not in a pod beside Jupyter.
    labels, node_selector, service_account, image_pull_policy, image_pull_secrets
        Further settings of every pod (:class:`~hybrid.kubernetes.KubernetesSettings`).
    gpu_fraction : float, optional
        The GPU share one GPU task asks for.
    api_client, kube_config, kube_context
        How the Kubernetes API is reached (default: the in-cluster service account, else
        ``$KUBECONFIG`` or ``~/.kube/config``).
    """

    def __init__(
        self,
        gpu_resources_per_worker: PodResources | None = None,
        cpu_resources_per_worker: PodResources | None = None,
        cluster_name: str = "hybrid-kubernetes",
        cluster_port: int | None = None,
        disable_nanny_process: bool = False,
        image: str | None = None,
        namespace: str | None = None,
        env: Mapping[str, str] | None = None,
        secrets: Sequence[KubernetesSecret] | None = None,
        volumes: Sequence[KubernetesVolume] | None = None,
        cluster_kwargs: Mapping[str, Any] | None = None,
        annotate_resources: bool | None = None,
        include_jupyter: bool = False,
        *,
        labels: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        service_account: str | None = None,
        image_pull_policy: str | None = None,
        image_pull_secrets: Sequence[str] | None = None,
        gpu_fraction: float | None = None,
        api_client: Any = None,
        kube_config: str | Path | None = None,
        kube_context: str | None = None,
    ):
        from hybrid.pools import POOL_OPTIONS, PoolSpec

        self.resources = _groups(gpu_resources_per_worker, cpu_resources_per_worker)
        first = next(iter(self.resources.values()), None)
        super().__init__(first.minimum_number_of_workers if first else 0, first,
                         annotate_resources=annotate_resources, gpu_fraction=gpu_fraction)
        self.cluster_name = validate_value(Name, cluster_name, "cluster_name")
        self.cluster_port = None if cluster_port is None else validate_value(
            count(1, 65535), cluster_port, "cluster_port")
        if validate_value(StrictBool, include_jupyter, "include_jupyter"):
            raise ConfigurationError(
                "include_jupyter", include_jupyter, "False: hybrid runs the scheduler in this "
                "process, not in a pod, so there is no scheduler pod to add Jupyter to",
                "Run Jupyter where the backend runs (or in a pod of your own).")
        if not isinstance(cluster_kwargs or {}, Mapping):
            raise ConfigurationError("cluster_kwargs", cluster_kwargs,
                                     "a mapping of options, e.g. {'resource_timeout': 300}")
        options = dict(cluster_kwargs or {})
        own = tuple(_StartOptions.model_fields)
        pool_keys = tuple(k for k in POOL_OPTIONS if k not in _NOT_POOL_KEYS)
        unknown = sorted(set(options) - {*own, *_CLUSTER_KEYS, *pool_keys})
        if unknown:
            raise ConfigurationError("cluster_kwargs", unknown,
                                     "keys among " + ", ".join((*own, *_CLUSTER_KEYS,
                                                               *pool_keys)))
        names = {k: f"cluster_kwargs[{k!r}]" for k in options}
        self.start_options = validate(_StartOptions, {k: options[k] for k in own if k in options},
                                      labels=names)
        self.cluster_options = {k: options[k] for k in _CLUSTER_KEYS if k in options}
        self.pool_options = {k: options[k] for k in pool_keys if k in options}
        if validate_value(StrictBool, disable_nanny_process, "disable_nanny_process"):
            self.pool_options.setdefault("nanny", False)
        given = {"image": image, "namespace": namespace, "env": env, "volumes": volumes,
                 "secrets": secrets, "labels": labels, "node_selector": node_selector,
                 "service_account": service_account, "image_pull_policy": image_pull_policy,
                 "image_pull_secrets": image_pull_secrets, "kube_config": kube_config,
                 "kube_context": kube_context}
        given = {k: v for k, v in given.items() if v is not None}
        configured = KubernetesPods.configured_settings()
        settings = {**configured, **given}
        validate(KubernetesSettings, settings, labels={
            k: f"hybrid.batch.kubernetes.{k.replace('_', '-')}" for k in configured
            if k not in given})
        self.system = KubernetesPods(api_client=api_client, **settings)
        # Every pool option is checked now, before anything is started or contacted.
        self.specs = {group: PoolSpec.build(group, self.system, resources, prefix="",
                                            labels=names, **self._pool_options(group))
                      for group, resources in self.resources.items()}
        # What openff-evaluator refuses too (ValueErrors), once every value is checked.
        if not self.resources:
            raise ConfigurationError(
                "gpu_resources_per_worker", None, "PodResources for the GPU group, the CPU "
                "group or both: gpu_resources_per_worker or cpu_resources_per_worker must "
                "be specified")
        if not self.system.settings.volumes:
            raise ConfigurationError(
                "volumes", volumes, "at least one volume the workers mount, such as "
                "KubernetesPersistentVolumeClaim(name=..., mount_path=...)",
                "No volumes specified: the workers need a filesystem for their files (give "
                "volumes=[...], or hybrid.batch.kubernetes.volumes).")

    @property
    def namespace(self) -> str:
        """The pods' namespace."""
        return self.system.settings.namespace

    def _pool_options(self, group: str) -> dict[str, Any]:
        options = dict(self.pool_options)
        if group == "gpu" and "cpu" not in self.resources:
            options.setdefault("serves_unannotated", True)  # no CPU pod would take CPU tasks
        return options

    def _placeholder(self) -> Connection:
        """How the workers reach a scheduler that has not started yet (for showing pods)."""
        tls = wants_tls(self.cluster_options.get("security"))
        address = self.cluster_options.get("worker_scheduler_address") or (
            f"{'tls' if tls else 'tcp'}://{PLACEHOLDER_ADDRESS}")
        files = TLSFiles("ca.pem", "cert.pem", "key.pem") if address.startswith("tls://") \
            else None
        return Connection(address, files, self.cluster_options.get("scheduler_sni"))

    def manifests(self, count: int = 1) -> dict[str, list[dict[str, Any]]]:
        """Each group's pods as objects, as a submission would create them (nothing is
        contacted); before :meth:`start` the scheduler's address is a placeholder."""
        from hybrid.batch import WorkerJob

        connection = self._connection()
        return {group: self.system.manifests(WorkerJob(self.cluster_name, spec, connection),
                                             count)
                for group, spec in self.specs.items()}

    def _connection(self) -> Connection:
        """The started cluster's connection, else :meth:`_placeholder`."""
        manager = getattr(self.cluster, "manager", None)
        return manager.connection if manager is not None else self._placeholder()

    def job_script(self, count: int = 1) -> str:
        """Each group's pod manifests as YAML, for reading (works before :meth:`start`)."""
        from hybrid.batch import WorkerJob

        connection = self._connection()
        texts = []
        if connection.scheduler_address.endswith(f"//{PLACEHOLDER_ADDRESS}"):
            texts.append(f"# Not started: the scheduler's address, shown as "
                         f"{connection.scheduler_address}, is known once the backend starts.\n")
        for group, spec in self.specs.items():
            job = WorkerJob(self.cluster_name, spec, connection)
            texts.append(f"# --- pool {group} ---\n"
                         + self.system.job_script(job, Path("."), count))
        return "".join(texts)

    def pods(self) -> dict[str, list[str]]:
        """Names of the cluster's live pods per group, as the Kubernetes API lists them."""
        statuses = [s for s in self.system.query(cluster=self.cluster_name)
                    if s.state.active and s.state is not JobState.removing]
        return {group: [s.job_id for s in statuses if s.pool == group]
                for group in self.resources}


class DaskKubernetesBackend(BaseDaskKubernetesBackend):
    """GPU and CPU worker pods on Kubernetes, each group scaling between its own bounds.

    Takes the arguments of :class:`BaseDaskKubernetesBackend`. Every argument is checked on
    construction; the Kubernetes API is first contacted by :meth:`start`, which fails at once,
    with the fix, when no configuration reaches the API. The pods must reach the scheduler:
    run this inside the cluster (a notebook pod) or give ``cluster_kwargs={"host":
    "0.0.0.0", "worker_scheduler_address": "tls://<address pods can reach>:<port>"}``. The
    scheduler speaks TLS with a certificate made for the cluster (the pods get theirs from
    the cluster's Secret) unless ``cluster_kwargs={"security": False}``.
    """

    #: Whether the cluster's Secret records this backend's scheduler (to delete on stop).
    _recorded = False

    def _start_cluster(self) -> Any:
        from hybrid.cluster import HybridCluster

        self.system.connect()  # no configuration: one clear error, and nothing to undo
        port = {} if self.cluster_port is None else {"scheduler_port": self.cluster_port}
        cluster = HybridCluster(name=self.cluster_name, annotate_resources=self.annotate_resources,
                                gpu_fraction=self.gpu_fraction, **port, **self.cluster_options)
        options = self.start_options
        try:
            self._recorded = True
            self.system.ensure_cluster_secret(cluster.name, cluster.manager.connection)
            for group, resources in self.resources.items():
                cluster.add_pool(group, self.system, resources, **self._pool_options(group))
            for group, resources in self.resources.items():
                if resources.minimum_number_of_workers:
                    cluster.scale(resources.minimum_number_of_workers, pool=group)
                cluster.adapt(pool=group, minimum=resources.minimum_number_of_workers,
                              maximum=resources.maximum_number_of_workers,
                              interval=options.adapt_interval,
                              wait_count=options.adapt_wait_count)
            if options.resource_timeout is not None:
                for group, resources in self.resources.items():
                    if resources.minimum_number_of_workers:
                        cluster.wait_for_workers(resources.minimum_number_of_workers,
                                                 pool=group, timeout=options.resource_timeout,
                                                 progress=False)
        except BaseException as error:
            self._close(cluster, error)
            raise
        return cluster

    def _close(self, cluster: Any, error: BaseException | None) -> None:
        """Close the cluster (every pod removed), then delete the cluster's Secret.

        A cleanup failure is attached to ``error`` when there is one, else raised.
        """
        problems: list[Exception] = []
        try:
            cluster.close()
        except Exception as problem:
            problems.append(problem)
        if self._recorded:
            self._recorded = False
            try:
                self.system.cluster_closed(self.cluster_name)
            except Exception as problem:
                problems.append(problem)
        if not problems:
            return
        if error is None:
            error = problems.pop(0)
            for problem in problems:
                attach_note(error, f"also: {problem}")
            raise error
        for problem in problems:
            attach_note(error, f"while cleaning up after this error: {problem}")

    def _stop(self) -> None:
        """Close the client and the cluster: every pod removed, the cluster's Secret
        deleted. Safe to call more than once."""
        client, self._client = self._client, None
        cluster, self._cluster = self._cluster, None
        try:
            if client is not None:
                client.close()
        finally:
            if cluster is not None:
                self._close(cluster, None)


class DaskKubernetesExistingBackend(BaseDaskKubernetesBackend):
    """Connect to a Kubernetes cluster that already runs, and leave it running on exit.

    The scheduler is ``scheduler_address`` if given; otherwise the address recorded by the
    :class:`DaskKubernetesBackend` that started the cluster ``cluster_name`` in
    ``namespace`` (its Secret, or its live worker pods). The resources describe the workers
    that are there (GPU tasks still go to GPU workers); nothing is submitted or removed:
    scaling stays with the backend that started the cluster. :attr:`cluster` is the
    scheduler's address. Where nothing is recorded and ``cluster_port`` is given, the
    scheduler is where openff-evaluator's backend puts it: the Service
    ``<cluster_name>-scheduler.<namespace>.svc.cluster.local:<cluster_port>``.
    """

    def __init__(self, *args: Any, scheduler_address: str | None = None, **kwargs: Any):
        address = None if scheduler_address is None else validate_value(
            Address, scheduler_address, "scheduler_address")
        super().__init__(*args, **kwargs)
        self.scheduler_address = address

    def find_scheduler_address(self) -> str:
        """The scheduler address the cluster recorded (one, or an error saying what to do)."""
        self.system.connect()
        addresses = self.system.scheduler_addresses(self.cluster_name)
        selector = f"{LABEL_TAG}={tag_prefix()},{LABEL_CLUSTER}={self.cluster_name}"
        if not addresses and self.cluster_port is not None:
            return (f"tcp://{self.cluster_name}-scheduler.{self.namespace}.svc.cluster.local:"
                    f"{self.cluster_port}")
        if not addresses:
            raise HybridError(
                f"no cluster {self.cluster_name!r} runs in namespace {self.namespace!r}: "
                f"nothing labelled {selector} names its scheduler. Start it first (a "
                "DaskKubernetesBackend with the same cluster_name and namespace), or give "
                "scheduler_address=... (or cluster_port=..., for a cluster openff-evaluator "
                "started)")
        if len(addresses) > 1:
            raise HybridError(
                f"cluster {self.cluster_name!r} in namespace {self.namespace!r} names several "
                f"schedulers ({', '.join(addresses)}): give scheduler_address=... to choose")
        return addresses[0]

    def _start_cluster(self) -> str:
        """The scheduler's address: the cluster object stays with whoever started it."""
        return self.scheduler_address or self.find_scheduler_address()

    def start(self) -> None:
        """Connect a :class:`~hybrid.annotator.HybridClient` to the running scheduler."""
        from hybrid.annotator import HybridClient

        if self._client is not None:
            return
        address = self._start_cluster()
        security = attach_security(self.cluster_options.get("security"), address,
                                   "cluster_kwargs['security']")
        self._client = HybridClient(address, annotate_resources=self.annotate_resources,
                                    gpu_fraction=self.gpu_fraction, security=security,
                                    set_as_default=False)
        self._cluster = address

    def stop(self) -> None:
        """Close the client only: the cluster and its pods keep running."""
        BaseDaskBackend.stop(self)


# The base's parameters, and scheduler_address (for help(), inspect and the docs).
DaskKubernetesExistingBackend.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    BaseDaskKubernetesBackend).replace(parameters=[
        *inspect.signature(BaseDaskKubernetesBackend).parameters.values(),
        inspect.Parameter("scheduler_address", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation="str | None")])


def _groups(gpu: Any, cpu: Any) -> dict[str, PodResources]:
    """The groups, checked: the GPU group has GPUs, the CPU group none (copies)."""
    groups: dict[str, PodResources] = {}
    for group, resources, wants_gpus in (("gpu", gpu, True), ("cpu", cpu, False)):
        if resources is None:
            continue
        field = f"{group}_resources_per_worker"
        if not isinstance(resources, PodResources):
            raise ConfigurationError(field, resources, "a hybrid.resources.PodResources")
        if wants_gpus and not resources.is_gpu:
            raise ConfigurationError(f"{field}.number_of_gpus", resources.number_of_gpus,
                                     "at least 1 for the GPU group (or pass None for no GPU "
                                     "group)")
        if not wants_gpus and resources.is_gpu:
            raise ConfigurationError(f"{field}.number_of_gpus", resources.number_of_gpus,
                                     "0 for the CPU group")
        groups[group] = copy.deepcopy(resources)
    return groups
