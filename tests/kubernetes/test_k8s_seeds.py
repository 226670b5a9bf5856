"""openff-evaluator's Kubernetes documentation (seeds 000 and 002), run as its users run it.

Each snippet is the seed's own code, with its imports mapped to hybrid
(``openff.evaluator.backends.dask_kubernetes`` -> ``hybrid.backends.kubernetes``,
``openff.units`` -> ``hybrid.units``) and its placeholders (``job_name``, ``namespace``,
``image``, ``logger``) given values. They talk to the API server double through the default
kubeconfig, as the seed's users talk to their cluster.
"""

from __future__ import annotations

import base64
import importlib
import logging
from collections.abc import Iterator

import pytest

from tests.kubernetes import _tasks
from tests.kubernetes.conftest import TOKEN
from tests.kubernetes.kube_api_double import KubeAPIServerDouble, NodeDouble
from tests.kubernetes.test_k8s_pods import nothing_left

#: Every public name of openff-evaluator's ``openff.evaluator.backends.dask_kubernetes``.
OPENFF_NAMES = ("AccessMode", "BaseDaskBackend", "BaseDaskJobQueueBackend",
                "BaseDaskKubernetesBackend", "BaseKubernetesVolume", "DaskKubernetesBackend",
                "DaskKubernetesExistingBackend", "KubernetesEmptyDirVolume",
                "KubernetesPersistentVolumeClaim", "KubernetesSecret", "PodResources", "unit")


@pytest.fixture
def nrp(tmp_path, monkeypatch) -> Iterator[KubeAPIServerDouble]:
    """A double with the seed's storage class, reached as the seed's users reach theirs:
    through the default kubeconfig and the kubernetes client's default configuration."""
    from kubernetes import client
    from kubernetes.config import kube_config

    # The seed's GPU pods carry no tolerations: its GPU nodes have no taint.
    nodes = [NodeDouble("cpu-node-1"),
             NodeDouble("gpu-node-1", allocatable={"cpu": "16", "memory": "64Gi", "pods": "110",
                                                   "ephemeral-storage": "500Gi",
                                                   "nvidia.com/gpu": "4"})]
    double = KubeAPIServerDouble(tmp_path / "nrp", nodes=nodes, token=TOKEN,
                                 storage_classes=("rook-cephfs-central",),
                                 default_storage_class=None, bind_delay=0,
                                 termination_delay=0.5).start()
    path = double.write_kubeconfig(tmp_path / "kubeconfig", namespace="openforcefield")
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    previous = client.Configuration.get_default_copy()
    client.Configuration.set_default(double.configuration())
    try:
        yield double
    finally:
        client.Configuration.set_default(previous)
        double.stop()


def test_every_name_of_the_evaluator_module_imports_from_hybrid() -> None:
    """Issue 12.11: `from hybrid.backends.kubernetes import X` for each user-facing name."""
    module = importlib.import_module("hybrid.backends.kubernetes")
    missing = [name for name in OPENFF_NAMES if not hasattr(module, name)]
    assert missing == []
    assert set(OPENFF_NAMES) <= set(module.__all__)
    from hybrid.backends.kubernetes import (  # noqa: F401  (the seeds' own imports)
        ComputeResources,
        DaskKubernetesBackend,
        DaskKubernetesExistingBackend,
        KubernetesEmptyDirVolume,
        KubernetesPersistentVolumeClaim,
        KubernetesSecret,
        PodResources,
    )

    assert ComputeResources.GPUToolkit.CUDA.value == "CUDA"
    assert module.AccessMode.READ_WRITE_MANY.value == "ReadWriteMany"


def seed_pvc(job_name: str, namespace: str, logger: logging.Logger) -> str:
    """Seed 000, "PersistentVolumeClaims in Python", as written but for one word.

    The seed passes ``client.V1ResourceRequirements`` as the claim's ``resources``; the
    kubernetes client validates its models since version 36 and wants
    ``client.V1VolumeResourceRequirements`` there (the API's type since Kubernetes 1.29).
    That is the kubernetes client's rule, not hybrid's (see docs/kubernetes.md);
    :func:`hybrid.kubernetes.create_persistent_volume_claim` does the whole snippet.
    """
    import time

    from kubernetes import client, config  # noqa: F401  (as in the seed)

    from hybrid.units import unit

    core_v1 = client.CoreV1Api()

    # from https://ucsd-prp.gitlab.io/userdocs/storage/ceph/#currently-available-storageclasses
    storage_class_name = "rook-cephfs-central"

    # required space to request
    storage_space = 1 * unit.gigabytes

    pvc_spec = client.V1PersistentVolumeClaimSpec(
        access_modes=["ReadWriteMany"],
        storage_class_name=storage_class_name,
        resources=client.V1VolumeResourceRequirements(
            requests={
                "storage": f"{storage_space.to(unit.gigabytes).m}Gi",
            }
        ),
    )

    pvc_name = f"evaluator-storage-{job_name}"
    metadata = client.V1ObjectMeta(name=pvc_name)
    pvc = client.V1PersistentVolumeClaim(
        api_version="v1",
        kind="PersistentVolumeClaim",
        metadata=metadata,
        spec=pvc_spec,
    )
    api_response = core_v1.create_namespaced_persistent_volume_claim(
        namespace=namespace,
        body=pvc
    )
    logger.info(
        f"Created PVC {pvc.metadata.name}. State={api_response.status.phase}"
    )

    # wait for PVC to bind
    timeout = 1000
    end_time = time.time() + timeout
    while time.time() < end_time:
        pvc = core_v1.read_namespaced_persistent_volume_claim(name=pvc_name, namespace=namespace)
        if pvc.status.phase == "Bound":
            logger.info(f"PVC '{pvc_name}' is Bound.")
            return pvc_name
        logger.info(f"Waiting for PVC '{pvc_name}' to become Bound. Current phase: "
                    f"{pvc.status.phase}")
        time.sleep(5)
    raise AssertionError("the seed's loop ended without a bound claim")


def test_seed_000_pvc_helper(nrp) -> None:
    from kubernetes import client

    with pytest.raises(ValueError, match="V1VolumeResourceRequirements"):
        client.V1PersistentVolumeClaimSpec(  # the seed's word: this client refuses it
            access_modes=["ReadWriteMany"],
            resources=client.V1ResourceRequirements(requests={"storage": "1Gi"}))
    name = seed_pvc("run-1", "openforcefield", logging.getLogger("seed"))
    assert name == "evaluator-storage-run-1"
    [claim] = nrp.list_objects("persistentvolumeclaims", "openforcefield")
    assert claim["status"]["phase"] == "Bound"
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"


def seed_env() -> dict[str, str]:
    """The ``env`` both of the seeds' backends are given, as written."""
    return {
        "OE_LICENSE": "/secrets/oe_license.txt",
        # daemonic processes are not allowed to have children
        "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
        "DASK_LOGGING__DISTRIBUTED": "debug",
        "DASK__TEMPORARY_DIRECTORY": "/evaluator-storage",
        "STORAGE_DIRECTORY": "/evaluator-storage",
        "EXTRA_PIP_PACKAGES": "jupyterlab"
    }


def seed_resources():
    """Seed 000, "Specifying pod resources", "volumes" and "secrets", as written."""
    from hybrid.backends.kubernetes import (
        ComputeResources,
        KubernetesPersistentVolumeClaim,
        KubernetesSecret,
        PodResources,
    )
    from hybrid.units import unit

    ephemeral_storage = 20 * unit.gigabytes
    memory = 8 * unit.gigabytes

    gpu_resources_per_worker = PodResources(
        minimum_number_of_workers=0,
        maximum_number_of_workers=10,
        number_of_threads=1,
        memory_limit=memory,
        ephemeral_storage_limit=ephemeral_storage,
        number_of_gpus=1,
        preferred_gpu_toolkit=ComputeResources.GPUToolkit.CUDA,
    )
    cpu_resources_per_worker = PodResources(
        minimum_number_of_workers=0,
        maximum_number_of_workers=40,
        number_of_threads=1,
        memory_limit=memory,
        ephemeral_storage_limit=ephemeral_storage,
        number_of_gpus=0,
    )
    volume = KubernetesPersistentVolumeClaim(
        name="evaluator-storage",  # `pvc_name`, the name of the PVC
        mount_path="/evaluator-storage",  # where to mount the PVC
    )
    secret = KubernetesSecret(
        name="openeye-license",
        secret_name="oe-license",
        mount_path="/secrets/oe_license.txt",
        sub_path="oe_license.txt",
        read_only=True,
    )
    return gpu_resources_per_worker, cpu_resources_per_worker, volume, secret


def test_seed_000_and_002_backends(nrp) -> None:
    """The seeds' backend, and the existing backend a second process connects with."""
    from kubernetes import client

    from hybrid.backends.kubernetes import DaskKubernetesBackend, DaskKubernetesExistingBackend
    from hybrid.kubernetes import create_persistent_volume_claim

    create_persistent_volume_claim("evaluator-storage", "1 GiB", namespace="openforcefield",
                                   storage_class="rook-cephfs-central")
    client.CoreV1Api().create_namespaced_secret("openforcefield", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "oe-license"},
        "data": {"oe_license.txt": base64.b64encode(b"license").decode()}})
    gpu_resources_per_worker, cpu_resources_per_worker, volume, secret = seed_resources()
    image = "ghcr.io/lilyminium/openff-images:tmp-evaluator-dask-v2"
    cluster_name = "evaluator-cluster"
    namespace = "openforcefield"  # namespace on NRP

    # Seed 000, "Dask Kubernetes Cluster", as written (its env: seed_env()).
    backend = DaskKubernetesBackend(
        cluster_name=cluster_name,
        gpu_resources_per_worker=gpu_resources_per_worker,  # see below
        cpu_resources_per_worker=cpu_resources_per_worker,  # see below
        image=image,
        namespace=namespace,
        env=seed_env(),
        volumes=[volume], # see below
        secrets=[secret], # see below
        annotate_resources=True, # see below
        cluster_kwargs={"resource_timeout": 300}
    )
    # Issue 12.5: what the backend will create, shown before it starts.
    assert "image: ghcr.io/lilyminium/openff-images:tmp-evaluator-dask-v2" in (
        backend.job_script())
    with backend:
        # Seed 002, "Dask Kubernetes Existing Backend", as written: no pod runs yet.
        existing = DaskKubernetesExistingBackend(
            cluster_name=cluster_name,
            gpu_resources_per_worker=gpu_resources_per_worker,
            cpu_resources_per_worker=cpu_resources_per_worker,
            image=image,
            namespace=namespace,
            env=seed_env(),
            volumes=[volume],
            secrets=[secret],
            annotate_resources=True,
            cluster_kwargs={"resource_timeout": 300}
        )
        assert nrp.list_objects("pods") == []
        with existing:
            assert existing.cluster == backend.cluster.scheduler_address
            # Work through the second process grows the right group from nothing.
            gpu = existing.submit_task(_tasks.read_env_file, "OE_LICENSE", gpu_task=True)
            cpu = existing.submit_task(_tasks.environment, "STORAGE_DIRECTORY")
            assert gpu.result(timeout=120) == "license"
            # The double stands the claim's directory in for the mount path.
            claim = nrp.claim_directory("evaluator-storage", "openforcefield")
            assert cpu.result(timeout=120) == str(claim)
        pools = {m["labels"]["hybrid/pool"] for m in nrp.created_pods}
        assert pools == {"gpu", "cpu"}
        for pod in nrp.list_objects("pods", "openforcefield"):
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert limits["memory"] == "8G" and limits["ephemeral-storage"] == "20G"
    assert nothing_left(nrp)
