"""The Kubernetes backends against the API server double, with real workers in the pods."""

from __future__ import annotations

import base64

import kubernetes_validate
import pytest
import yaml

from hybrid.backends.kubernetes import DaskKubernetesBackend, DaskKubernetesExistingBackend
from hybrid.cluster import HybridCluster
from hybrid.errors import ConfigurationError, HybridError, WorkersDidNotArrive
from hybrid.kubernetes import (
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesPods,
    KubernetesSecret,
    create_persistent_volume_claim,
)
from hybrid.kubernetes.pods import LABEL_POOL
from hybrid.resources import PodResources
from hybrid.units import unit
from tests.kubernetes import _tasks
from tests.kubernetes.conftest import MISSING_IMAGE, cpu_resources, gpu_resources
from tests.kubernetes.test_k8s_pods import nothing_left, wait_until
from tests.scheduler_workers import scheduler_workers

LICENSE_TEXT = "OpenEye license for the tests\n#LICENSE-123\n"
#: A volume for backends that need no shared one (the backends refuse none, as
#: openff-evaluator's do).
SCRATCH = [KubernetesEmptyDirVolume("scratch", "/scratch")]


def created(kube, pool: str) -> list[str]:
    """Names of every pod of ``pool`` the double ever created."""
    return [m["name"] for m in kube.created_pods if m["labels"][LABEL_POOL] == pool]


def license_secret(kube) -> None:
    """The user's own Secret holding an OpenEye license."""
    from kubernetes import client

    client.CoreV1Api(kube.api_client()).create_namespaced_secret("default", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "oe-license"},
        "data": {"oe_license.txt": base64.b64encode(LICENSE_TEXT.encode()).decode()}})


def no_configuration(monkeypatch, tmp_path) -> None:
    """No kubeconfig where the client looks, and not inside a pod."""
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_gpu_and_cpu_groups_scale_on_their_own(kube) -> None:
    api = kube.api_client()
    create_persistent_volume_claim("evaluator-storage", 5 * unit.gigabytes,
                                   storage_class="standard", api_client=api, poll_interval=0.1)
    license_secret(kube)
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
        # The shown manifests are the started cluster's.
        assert backend.cluster.scheduler_address in backend.job_script()
        # Another process connects to the running cluster through its Secret.
        with DaskKubernetesExistingBackend(
                cluster_name="evaluator", gpu_resources_per_worker=gpu_resources(1, 2),
                cpu_resources_per_worker=cpu_resources(0, 1), annotate_resources=True,
                volumes=SCRATCH, api_client=api) as existing:
            assert existing.cluster == backend.cluster.scheduler_address
            name = existing.submit_task(_tasks.worker_name, gpu_task=True).result(60)
            assert name.startswith("evaluator-gpu-")
        assert backend.pods()["gpu"], "leaving the existing backend must not remove pods"
        # Idle groups shrink back to their own minimum: one GPU pod, no CPU pod.
        wait_until(lambda: backend.pods() == {"gpu": backend.pods()["gpu"], "cpu": []}
                   and len(backend.pods()["gpu"]) == 1, 60, "both groups at their minimum")
        # The cluster still follows its workers after the other client came and went.
        live = [w["name"] for w in scheduler_workers(backend.client).values()]
        wait_until(lambda: sorted(backend.cluster.connected_workers()) == sorted(live), 10,
                   "the cluster's view of its workers")
        assert len(live) == 1 and live[0].startswith("evaluator-gpu-")
    # Leaving the block removed every pod and the cluster's Secret, confirmed.
    assert nothing_left(kube)
    # The user's license secret and claim are theirs: still there.
    assert [s["metadata"]["name"] for s in kube.list_objects("secrets")] == ["oe-license"]
    assert len(kube.list_objects("persistentvolumeclaims")) == 1


def test_a_failed_start_reports_why_and_leaves_nothing(kube) -> None:
    backend = DaskKubernetesBackend(
        cluster_name="no-image", image=MISSING_IMAGE,
        gpu_resources_per_worker=gpu_resources(minimum=1, maximum=1),
        cpu_resources_per_worker=cpu_resources(minimum=1, maximum=1), volumes=SCRATCH,
        cluster_kwargs={"resource_timeout": 60}, api_client=kube.api_client())
    with pytest.raises(WorkersDidNotArrive) as error:
        with backend:
            pytest.fail("the backend must not start without its minimum of workers")
    assert "ImagePullBackOff" in str(error.value) or "ErrImagePull" in str(error.value)
    assert not getattr(error.value, "__notes__", None)  # the cleanup went well
    assert len(kube.created_pods) == 2
    assert nothing_left(kube)
    assert backend._client is None and backend.cluster is None


def test_a_backend_without_kubeconfig_fails_once_with_the_fix(kube, tmp_path,
                                                              monkeypatch) -> None:
    """Issue 12.2: one clear error, naming the cause and the fix; nothing to clean up."""
    no_configuration(monkeypatch, tmp_path)
    backend = DaskKubernetesBackend(cluster_name="no-config",
                                    gpu_resources_per_worker=gpu_resources(minimum=1),
                                    cpu_resources_per_worker=cpu_resources(minimum=1),
                                    volumes=SCRATCH)
    with pytest.raises(ConfigurationError) as error:
        with backend:
            pytest.fail("the backend cannot start without a Kubernetes configuration")
    message = str(error.value)
    assert error.value.field == "kube_config"
    assert str(tmp_path / "absent") in message
    assert "KUBECONFIG" in message and "api_client" in message
    assert "left work behind" not in message
    assert not getattr(error.value, "__notes__", None)
    assert backend._client is None and backend.cluster is None
    assert not (tmp_path / "staging").exists()  # no pool ever staged anything
    assert kube.requests == []


def test_a_cluster_that_never_submitted_does_not_ask_the_api_on_close(kube) -> None:
    system = KubernetesPods(api_client=kube.api_client())
    with HybridCluster(name="idle") as cluster:
        cluster.add_pool("cpu", system, cpu_resources())
        assert "kind: Pod" in cluster.job_script("cpu")
    assert kube.requests == []


def test_a_failing_cleanup_does_not_replace_the_error(kube) -> None:
    backend = DaskKubernetesBackend(
        cluster_name="cleanup", gpu_resources_per_worker=gpu_resources(minimum=1, maximum=1),
        cpu_resources_per_worker=None, api_client=kube.api_client(), volumes=SCRATCH,
        cluster_kwargs={"resource_timeout": 60})
    with pytest.raises(ZeroDivisionError) as error:
        with backend:
            kube.token = "rotated"  # every request of the cleanup is now refused (401)
            _ = 1 / 0
    notes = " ".join(getattr(error.value, "__notes__", []))
    assert "while stopping the backend after this error" in notes
    assert "401" in notes
    kube.token = "double-token"
    # A cleanup that could not finish is done by a second stop() or `hybrid cancel`.
    KubernetesPods(api_client=kube.api_client()).cluster_closed("cleanup")
    assert nothing_left(kube)


def test_manifests_show_before_start(kube) -> None:
    """Issue 12.5: each group's pod, for reading, before anything is started."""
    backend = DaskKubernetesBackend(
        cluster_name="preview", gpu_resources_per_worker=gpu_resources(),
        cpu_resources_per_worker=cpu_resources(), api_client=kube.api_client(), volumes=SCRATCH,
        cluster_kwargs={"worker_scheduler_address": "tcp://10.1.2.3:8786"})
    text = backend.job_script()
    pods = [d for d in yaml.safe_load_all(text) if d]
    assert [p["metadata"]["labels"][LABEL_POOL] for p in pods] == ["gpu", "cpu"]
    for pod in pods:
        kubernetes_validate.validate(pod, "1.33", strict=True)
        assert "tcp://10.1.2.3:8786" in pod["spec"]["containers"][0]["command"]
    tls = DaskKubernetesBackend(gpu_resources(), cluster_name="preview-tls", volumes=SCRATCH,
                                cluster_kwargs={"security": True})
    [pod] = tls.manifests()["gpu"]
    assert pod["metadata"]["annotations"]["hybrid/scheduler"] == "tls://scheduler:8786"
    assert any(v["name"] == "hybrid-tls" for v in pod["spec"]["volumes"])
    assert "known once the backend starts" in tls.job_script()
    assert kube.requests == []


def test_cluster_port_is_the_schedulers_port_and_finds_a_cluster_evaluator_started(
        kube) -> None:
    """``cluster_port`` as in openff-evaluator (issue 24): the port the scheduler listens
    on; for the existing backend, where no hybrid cluster is recorded, the port of the
    scheduler Service openff-evaluator's backend makes."""
    from distributed.utils import open_port

    port = open_port()
    api = kube.api_client()
    backend = DaskKubernetesBackend(cpu_resources_per_worker=cpu_resources(), volumes=SCRATCH,
                                    cluster_name="ported", cluster_port=port, api_client=api)
    with backend:
        assert backend.cluster.scheduler_address == f"tls://127.0.0.1:{port}"  # TLS: default
        recorded = DaskKubernetesExistingBackend(
            cpu_resources_per_worker=cpu_resources(), cluster_name="ported", cluster_port=1,
            volumes=SCRATCH, api_client=api)
        assert recorded.find_scheduler_address() == backend.cluster.scheduler_address
    made_by_evaluator = DaskKubernetesExistingBackend(
        cpu_resources_per_worker=cpu_resources(), cluster_name="evaluator", cluster_port=8786,
        namespace="openforcefield", volumes=SCRATCH, api_client=api)
    assert made_by_evaluator.find_scheduler_address() == (
        "tcp://evaluator-scheduler.openforcefield.svc.cluster.local:8786")
    assert nothing_left(kube)


def test_existing_backend_without_a_cluster_says_how_to_fix_it(kube) -> None:
    backend = DaskKubernetesExistingBackend(cluster_name="absent", api_client=kube.api_client(),
                                            cpu_resources_per_worker=cpu_resources(),
                                            volumes=SCRATCH)
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
    (lambda: DaskKubernetesBackend(cpu_resources_per_worker=cpu_resources(),
                                   cluster_kwargs={"processes": 0}),
     "cluster_kwargs['processes']"),
    (lambda: DaskKubernetesBackend(cpu_resources_per_worker=cpu_resources(),
                                   cluster_kwargs={"queue": "gpu"}),
     "cluster_kwargs['queue']"),
    (lambda: DaskKubernetesBackend(cluster_name="has space"), "cluster_name"),
    (lambda: DaskKubernetesBackend(namespace="Evaluator"), "namespace"),
    (lambda: DaskKubernetesBackend(secrets=[KubernetesSecret("lic", "oe-license")]),
     "KubernetesSecret.mount_path"),
    (lambda: DaskKubernetesBackend(env={"OE_LICENSE": 1}), "env"),
    (lambda: DaskKubernetesBackend(disable_nanny_process="yes"), "disable_nanny_process"),
    (lambda: DaskKubernetesExistingBackend(scheduler_address="scheduler:"),
     "scheduler_address"),
])
def test_bad_backend_arguments_fail_before_any_request(kube, make, field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        make()
    assert error.value.field == field
    assert kube.requests == []
