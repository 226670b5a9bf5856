"""The Kubernetes backends against the API server double, with real workers in the pods."""

from __future__ import annotations

import base64

import pytest

from hybrid.backends.kubernetes import DaskKubernetesBackend, DaskKubernetesExistingBackend
from hybrid.errors import ConfigurationError, HybridError
from hybrid.kubernetes import (
    KubernetesPersistentVolumeClaim,
    KubernetesSecret,
    create_persistent_volume_claim,
)
from hybrid.kubernetes.pods import LABEL_POOL
from hybrid.resources import PodResources
from hybrid.units import unit
from tests.kubernetes import _tasks
from tests.kubernetes.conftest import MISSING_IMAGE, cpu_resources, gpu_resources
from tests.kubernetes.test_k8s_pods import wait_until

LICENSE_TEXT = "OpenEye license for the tests\n#LICENSE-123\n"


def created(kube, pool: str) -> list[str]:
    """Names of every pod of ``pool`` the double ever created."""
    return [m["name"] for m in kube.created_pods if m["labels"][LABEL_POOL] == pool]


def test_seed_example_gpu_and_cpu_groups_scale_on_their_own(kube) -> None:
    from kubernetes import client

    api = kube.api_client()
    create_persistent_volume_claim("evaluator-storage", 5 * unit.gigabytes,
                                   storage_class="standard", api_client=api, poll_interval=0.1)
    client.CoreV1Api(api).create_namespaced_secret("default", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "oe-license"},
        "data": {"oe_license.txt": base64.b64encode(LICENSE_TEXT.encode()).decode()}})
    backend = DaskKubernetesBackend(
        cluster_name="evaluator",
        gpu_resources_per_worker=gpu_resources(minimum=1, maximum=2),
        cpu_resources_per_worker=cpu_resources(minimum=0, maximum=1),
        env={"OE_LICENSE": "/secrets/oe_license.txt", "STORAGE": "/evaluator-storage"},
        volumes=[KubernetesPersistentVolumeClaim("evaluator-storage", "/evaluator-storage")],
        secrets=[KubernetesSecret(name="openeye-license", secret_name="oe-license",
                                  mount_path="/secrets/oe_license.txt",
                                  sub_path="oe_license.txt", read_only=True)],
        annotate_resources=True,
        cluster_kwargs={"resource_timeout": 300, "adapt_interval": "0.5s"},
        api_client=api,
    )
    assert kube.requests[-1][0] == "POST"  # constructing the backend asked the API nothing
    requests_before = len(kube.requests)
    with backend:
        assert len(kube.requests) > requests_before
        # The GPU group's minimum is there on start; the CPU group has none.
        pods = backend.pods()
        assert len(pods["gpu"]) == 1 and pods["cpu"] == []
        # GPU work grows the GPU group only, never beyond its maximum.
        gpu_futures = [backend.submit_task(_tasks.slow_worker_name, 1.5, gpu_task=True)
                       for _ in range(4)]
        gpu_names = [f.result(timeout=120) for f in gpu_futures]
        assert all(name.startswith("evaluator-gpu-evaluator-gpu-") for name in gpu_names)
        assert 1 <= len(created(kube, "gpu")) <= 2
        assert created(kube, "cpu") == []
        for name in created(kube, "gpu"):
            pod = kube.pod(name)
            if pod is not None:
                assert pod["spec"]["nodeName"] == "gpu-node-1"
        # CPU work grows the CPU group; it reads the license and writes to the shared claim.
        license_text = backend.submit_task(_tasks.read_env_file, "OE_LICENSE").result(60)
        assert license_text == LICENSE_TEXT
        writer = backend.submit_task(_tasks.write_file, "STORAGE", "note.txt",
                                     "written on a CPU pod").result(60)
        assert writer.startswith("evaluator-cpu-")
        assert len(created(kube, "cpu")) == 1
        assert kube.pod(created(kube, "cpu")[0])["spec"]["nodeName"] == "cpu-node-1"
        read_back = backend.submit_task(_tasks.read_file, "STORAGE", "note.txt",
                                        gpu_task=True).result(60)
        assert read_back == "written on a CPU pod"
        assert (kube.claim_directory("evaluator-storage") / "note.txt").exists()
        # Another process connects to the running cluster through its pods' labels.
        with DaskKubernetesExistingBackend(
                cluster_name="evaluator", gpu_resources_per_worker=gpu_resources(1, 2),
                cpu_resources_per_worker=cpu_resources(0, 1), annotate_resources=True,
                api_client=api) as existing:
            assert existing.cluster == backend.cluster.scheduler_address
            name = existing.submit_task(_tasks.worker_name, gpu_task=True).result(60)
            assert name.startswith("evaluator-gpu-")
        assert backend.pods()["gpu"], "leaving the existing backend must not remove pods"
        # Idle groups shrink back to their own minimum: one GPU pod, no CPU pod.
        wait_until(lambda: backend.pods() == {"gpu": backend.pods()["gpu"], "cpu": []}
                   and len(backend.pods()["gpu"]) == 1, 60, "both groups at their minimum")
        # The cluster still follows its workers after the other client came and went.
        live = [w["name"] for w in backend.client.scheduler_info()["workers"].values()]
        wait_until(lambda: sorted(backend.cluster.connected_workers()) == sorted(live), 10,
                   "the cluster's view of its workers")
        assert len(live) == 1 and live[0].startswith("evaluator-gpu-")
    assert kube.list_objects("pods") == [] or all(
        p["metadata"].get("deletionTimestamp") for p in kube.list_objects("pods"))
    wait_until(lambda: not kube.live_processes(), 30, "every pod process to stop")
    wait_until(lambda: kube.list_objects("pods") == [], 30, "every pod deleted")
    # The user's license secret and claim are theirs: still there.
    assert [s["metadata"]["name"] for s in kube.list_objects("secrets")] == ["oe-license"]
    assert len(kube.list_objects("persistentvolumeclaims")) == 1


def test_a_failed_start_reports_why_and_leaves_nothing(kube) -> None:
    from hybrid.errors import WorkersDidNotArrive

    backend = DaskKubernetesBackend(
        cluster_name="no-image", image=MISSING_IMAGE,
        gpu_resources_per_worker=gpu_resources(minimum=1, maximum=1),
        cpu_resources_per_worker=cpu_resources(minimum=1, maximum=1),
        cluster_kwargs={"resource_timeout": 60}, api_client=kube.api_client())
    with pytest.raises(WorkersDidNotArrive) as error:
        with backend:
            pytest.fail("the backend must not start without its minimum of workers")
    assert "ImagePullBackOff" in str(error.value) or "ErrImagePull" in str(error.value)
    assert len(kube.created_pods) == 2
    assert kube.list_objects("pods") == []
    assert backend._client is None and backend.cluster is None


def test_existing_backend_without_a_cluster_says_how_to_fix_it(kube) -> None:
    backend = DaskKubernetesExistingBackend(cluster_name="absent", api_client=kube.api_client())
    with pytest.raises(HybridError) as error:
        backend.start()
    assert "hybrid/cluster=absent" in str(error.value)
    assert "scheduler_address" in str(error.value)
    assert backend._client is None


@pytest.mark.parametrize(("make", "field"), [
    (lambda: DaskKubernetesBackend(gpu_resources_per_worker=cpu_resources()),
     "gpu_resources_per_worker.number_of_gpus"),
    (lambda: DaskKubernetesBackend(cpu_resources_per_worker=gpu_resources()),
     "cpu_resources_per_worker.number_of_gpus"),
    (lambda: DaskKubernetesBackend(gpu_resources_per_worker=None, cpu_resources_per_worker=None),
     "gpu_resources_per_worker"),
    (lambda: DaskKubernetesBackend(gpu_resources_per_worker={"number_of_gpus": 1}),
     "gpu_resources_per_worker"),
    (lambda: DaskKubernetesBackend(cpu_resources_per_worker=PodResources(
        minimum_number_of_workers=5, maximum_number_of_workers=2)),
     "PodResources.minimum_number_of_workers"),
    (lambda: DaskKubernetesBackend(gpu_resources_per_worker=PodResources(
        number_of_gpus=1, preferred_gpu_toolkit="Metal")), "PodResources.preferred_gpu_toolkit"),
    (lambda: DaskKubernetesBackend(cluster_kwargs={"n_workers": 3}), "cluster_kwargs"),
    (lambda: DaskKubernetesBackend(cluster_kwargs={"resource_timeout": -1}),
     "cluster_kwargs['resource_timeout']"),
    (lambda: DaskKubernetesBackend(cluster_name="has space"), "cluster_name"),
    (lambda: DaskKubernetesBackend(namespace="Evaluator"), "KubernetesPods.namespace"),
    (lambda: DaskKubernetesBackend(secrets=[KubernetesSecret("lic", "oe-license")]),
     "KubernetesSecret.mount_path"),
    (lambda: DaskKubernetesBackend(env={"OE_LICENSE": 1}), "KubernetesPods.env['OE_LICENSE']"),
    (lambda: DaskKubernetesExistingBackend(scheduler_address="scheduler:8786"),
     "scheduler_address"),
])
def test_bad_backend_arguments_fail_before_any_request(kube, make, field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        make()
    assert error.value.field == field
    assert kube.requests == []
