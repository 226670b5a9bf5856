"""Kubernetes backends in the style of openff-evaluator's: GPU and CPU worker pods.

:class:`DaskKubernetesBackend` starts a :class:`~hybrid.cluster.HybridCluster` with two pools
of worker pods, ``gpu`` and ``cpu``, each scaling on its own between its
:class:`~hybrid.resources.PodResources` minimum and maximum. With ``annotate_resources`` GPU
tasks run only on GPU pods and every other task only on CPU pods. Leaving the ``with`` block
removes every pod, and the cluster's TLS Secret.

:class:`DaskKubernetesExistingBackend` connects to a cluster that already runs, found by its
scheduler address or by its worker pods' labels, and leaves it running.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hybrid.backends.base import BaseDaskBackend
from hybrid.errors import ConfigurationError, HybridError
from hybrid.kubernetes.pods import DEFAULT_IMAGE, LABEL_CLUSTER, KubernetesPods
from hybrid.kubernetes.volumes import KubernetesSecret, KubernetesVolume
from hybrid.resources import GPUToolkit, PodResources
from hybrid.worker import check_name

logger = logging.getLogger(__name__)

__all__ = ["DaskKubernetesBackend", "DaskKubernetesExistingBackend"]

#: The GPU group when none is given: up to 10 pods of one CUDA GPU each.
DEFAULT_GPU_RESOURCES = PodResources(minimum_number_of_workers=0, maximum_number_of_workers=10,
                                     number_of_gpus=1, preferred_gpu_toolkit=GPUToolkit.CUDA)
#: The CPU group when none is given: up to 40 single-thread pods.
DEFAULT_CPU_RESOURCES = PodResources(minimum_number_of_workers=0, maximum_number_of_workers=40)

_CLUSTER_KEYS = ("security", "host", "worker_scheduler_address", "scheduler_sni",
                 "dashboard_address")
_POOL_KEYS = ("nanny", "death_timeout", "worker_extra_args", "python", "lease", "processes")
_OWN_KEYS = ("resource_timeout", "adapt_interval", "adapt_wait_count")


def _timeout(value: Any, field: str) -> float | None:
    from dask.utils import parse_timedelta

    if value is None:
        return None
    try:
        seconds = parse_timedelta(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError, KeyError):
        seconds = None
    if seconds is None or seconds <= 0:
        raise ConfigurationError(field, value, 'a duration > 0 (seconds or "5 minutes"), or None')
    return float(seconds)


class DaskKubernetesBackend(BaseDaskBackend):
    """GPU and CPU worker pods on Kubernetes, each group scaling between its own bounds.

    ``gpu_resources_per_worker`` (GPUs > 0) and ``cpu_resources_per_worker`` (no GPUs) are
    :class:`~hybrid.resources.PodResources`; either may be ``None`` to leave that group out.
    ``volumes`` (claims, scratch directories) and ``secrets`` are mounted into every pod;
    ``env`` is set in every pod. ``cluster_kwargs`` takes ``resource_timeout`` (seconds to
    wait for each group's minimum of workers on start; ``None`` does not wait),
    ``adapt_interval``, the :class:`~hybrid.cluster.HybridCluster` arguments ``security``,
    ``host``, ``worker_scheduler_address``, ``scheduler_sni``, ``dashboard_address``, and
    the pool options ``nanny``, ``death_timeout``, ``worker_extra_args``, ``python``,
    ``lease``, ``processes``.

    Every argument is checked on construction; the Kubernetes API is first contacted by
    :meth:`start`. The pods must reach the scheduler: run this inside the cluster (a
    notebook pod) or give ``cluster_kwargs={"host": "0.0.0.0",
    "worker_scheduler_address": "tcp://<address pods can reach>:<port>"}``.
    """

    def __init__(
        self,
        cluster_name: str = "hybrid-kubernetes",
        gpu_resources_per_worker: PodResources | None = DEFAULT_GPU_RESOURCES,
        cpu_resources_per_worker: PodResources | None = DEFAULT_CPU_RESOURCES,
        image: str = DEFAULT_IMAGE,
        namespace: str = "default",
        env: Mapping[str, str] | None = None,
        volumes: Sequence[KubernetesVolume] | None = None,
        secrets: Sequence[KubernetesSecret] | None = None,
        annotate_resources: bool | None = None,
        cluster_kwargs: Mapping[str, Any] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        service_account: str | None = None,
        image_pull_policy: str | None = None,
        image_pull_secrets: Sequence[str] = (),
        gpu_fraction: float | None = None,
        api_client: Any = None,
        kube_config: str | Path | None = None,
        kube_context: str | None = None,
    ):
        super().__init__(annotate_resources, gpu_fraction)
        self.cluster_name = check_name(cluster_name, "cluster_name")
        self.namespace = namespace
        groups: dict[str, PodResources] = {}
        for group, resources, wants_gpus in (("gpu", gpu_resources_per_worker, True),
                                             ("cpu", cpu_resources_per_worker, False)):
            if resources is None:
                continue
            field = f"{group}_resources_per_worker"
            if not isinstance(resources, PodResources):
                raise ConfigurationError(field, resources, "a hybrid.resources.PodResources")
            if wants_gpus and not resources.is_gpu:
                raise ConfigurationError(f"{field}.number_of_gpus", resources.number_of_gpus,
                                         "at least 1 for the GPU group (or pass None for no "
                                         "GPU group)")
            if not wants_gpus and resources.is_gpu:
                raise ConfigurationError(f"{field}.number_of_gpus", resources.number_of_gpus,
                                         "0 for the CPU group")
            groups[group] = copy.deepcopy(resources)
        if not groups:
            raise ConfigurationError("gpu_resources_per_worker", None,
                                     "PodResources for the GPU group, the CPU group or both")
        self.resources = groups
        if not isinstance(cluster_kwargs or {}, Mapping):
            raise ConfigurationError("cluster_kwargs", cluster_kwargs, "a mapping")
        options = dict(cluster_kwargs or {})
        unknown = sorted(set(options) - set(_CLUSTER_KEYS + _POOL_KEYS + _OWN_KEYS))
        if unknown:
            raise ConfigurationError("cluster_kwargs", unknown,
                                     "keys among " + ", ".join(_OWN_KEYS + _CLUSTER_KEYS
                                                               + _POOL_KEYS))
        self.resource_timeout = _timeout(options.pop("resource_timeout", 300),
                                         "cluster_kwargs['resource_timeout']")
        self.adapt_interval = options.pop("adapt_interval", "2s")
        _timeout(self.adapt_interval, "cluster_kwargs['adapt_interval']")
        self.adapt_wait_count = options.pop("adapt_wait_count", 3)
        self.cluster_options = {k: options[k] for k in _CLUSTER_KEYS if k in options}
        self.pool_options = {k: options[k] for k in _POOL_KEYS if k in options}
        self.systems: dict[str, KubernetesPods] = {
            group: KubernetesPods(
                image=image, namespace=namespace, env=env, volumes=list(volumes or ()),
                secrets=list(secrets or ()), pod_resources=resources, labels=labels,
                service_account=service_account, image_pull_policy=image_pull_policy,
                image_pull_secrets=image_pull_secrets, api_client=api_client,
                kube_config=kube_config, kube_context=kube_context,
            )
            for group, resources in groups.items()
        }
        self._cluster_started = False

    def _start_cluster(self) -> Any:
        from hybrid.cluster import HybridCluster

        cluster = HybridCluster(name=self.cluster_name, annotate_resources=self.annotate_resources,
                                gpu_fraction=self.gpu_fraction, **self.cluster_options)
        self._cluster_started = True
        try:
            for group, resources in self.resources.items():
                cluster.add_pool(group, self.systems[group], resources, **self.pool_options)
                if resources.minimum_number_of_workers:
                    cluster.scale(resources.minimum_number_of_workers, pool=group)
                cluster.adapt(pool=group, minimum=resources.minimum_number_of_workers,
                              maximum=resources.maximum_number_of_workers,
                              interval=self.adapt_interval, wait_count=self.adapt_wait_count)
            if self.resource_timeout is not None:
                for group, resources in self.resources.items():
                    if resources.minimum_number_of_workers:
                        cluster.wait_for_workers(resources.minimum_number_of_workers,
                                                 pool=group, timeout=self.resource_timeout,
                                                 progress=False)
        except BaseException:
            try:
                cluster.close()
            finally:
                self._cleanup_kubernetes()
            raise
        return cluster

    def _cleanup_kubernetes(self) -> None:
        """Delete what closing the pools leaves: finished pods and the TLS Secret."""
        if not self._cluster_started:
            return
        self._cluster_started = False
        errors = []
        for system in self.systems.values():
            try:
                system.remove_cluster(self.cluster_name)
            except Exception as error:
                errors.append(str(error))
        if errors:
            raise HybridError("removing the cluster's pods left work behind: "
                              + "; ".join(errors))

    def stop(self) -> None:
        """Close the client and the cluster (every pod removed), then delete the leftovers."""
        try:
            super().stop()
        finally:
            self._cleanup_kubernetes()

    def pods(self) -> dict[str, list[str]]:
        """Names of the cluster's live pods per group, as the Kubernetes API lists them."""
        return {group: [s.job_id for s in system.query(cluster=self.cluster_name)
                        if s.state.active and s.pool == group]
                for group, system in self.systems.items()}


class DaskKubernetesExistingBackend(DaskKubernetesBackend):
    """Connect to a Kubernetes cluster that already runs, and leave it running on exit.

    The scheduler is ``scheduler_address`` if given; otherwise the address that the live
    worker pods labelled ``hybrid/cluster=<cluster_name>`` in ``namespace`` were started for.
    The resources describe the workers that are there (GPU tasks still go to GPU workers);
    nothing is submitted or removed: scaling stays with the backend that started the
    cluster. :attr:`cluster` is the scheduler address.
    """

    def __init__(self, *args: Any, scheduler_address: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if scheduler_address is not None and (not isinstance(scheduler_address, str)
                                              or "://" not in scheduler_address):
            raise ConfigurationError("scheduler_address", scheduler_address,
                                     "an address like tcp://scheduler:8786, or None to find it "
                                     "from the worker pods' labels")
        self.scheduler_address = scheduler_address

    def find_scheduler_address(self) -> str:
        """The scheduler address the cluster's live worker pods name (one, or an error)."""
        addresses: list[str] = []
        for system in self.systems.values():
            for address in system.scheduler_addresses(self.cluster_name):
                if address not in addresses:
                    addresses.append(address)
        if not addresses:
            raise HybridError(
                f"no live worker pod labelled {LABEL_CLUSTER}={self.cluster_name} in namespace "
                f"{self.namespace!r} names its scheduler: start the cluster first, or give "
                "scheduler_address=...")
        if len(addresses) > 1:
            raise HybridError(
                f"the worker pods of cluster {self.cluster_name!r} name several schedulers "
                f"({', '.join(addresses)}): give scheduler_address=... to choose one")
        return addresses[0]

    def _start_cluster(self) -> str:
        """The scheduler's address: the cluster object stays with whoever started it."""
        return self.scheduler_address or self.find_scheduler_address()

    def start(self) -> None:
        """Connect a :class:`~hybrid.annotator.HybridClient` to the running scheduler.

        No second cluster manager is attached: ``distributed`` lets one manager at a time
        follow a scheduler's workers, and that is the one that started the cluster.
        """
        from hybrid.annotator import HybridClient

        if self._client is not None:
            return
        address = self._start_cluster()
        self._client = HybridClient(address, annotate_resources=self.annotate_resources,
                                    gpu_fraction=self.gpu_fraction,
                                    security=self.cluster_options.get("security"),
                                    set_as_default=False)
        self._cluster = address

    def stop(self) -> None:
        """Close the client only: the cluster and its pods keep running."""
        BaseDaskBackend.stop(self)
