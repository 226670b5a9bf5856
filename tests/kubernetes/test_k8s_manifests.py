"""Pod manifests: every combination validates against the official Kubernetes 1.33 schema."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from hybrid.annotator import worker_resources
from hybrid.backends.kubernetes import DaskKubernetesBackend
from hybrid.batch.base import JobSpec, JobState
from hybrid.errors import ConfigurationError
from hybrid.kubernetes import (
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesPods,
    KubernetesSecret,
    pod_state,
)
from hybrid.kubernetes.pods import TLS_FILE_MODE, escape_expansion, tls_secret_name
from hybrid.resources import PodResources
from hybrid.worker import TLSFiles, WorkerOptions
from tests.kubernetes.conftest import GPU_AFFINITY, GPU_TOLERATIONS, cpu_resources, gpu_resources
from tests.kubernetes.kube_api_double import expand, parse_quantity

VERSION = "1.33"
LICENSE = KubernetesSecret(name="openeye-license", secret_name="oe-license",
                           mount_path="/secrets/oe_license.txt", sub_path="oe_license.txt",
                           read_only=True)
VOLUMES = [KubernetesPersistentVolumeClaim("evaluator-storage", "/evaluator-storage"),
           KubernetesEmptyDirVolume("scratch", "/scratch", size_limit="5 GiB")]
TRICKY_ENV = {"OE_LICENSE": "/secrets/oe_license.txt", "QUOTED": "it's \"quoted\"\nsecond line",
              "DOLLARS": "$(HOME) and $$ and ${PATH}", "COLON": "key: value # not a comment"}


def job_spec(resources: PodResources, *, tls: bool = False, env: dict | None = None,
             cluster: str = "evaluator", pool: str = "gpu") -> JobSpec:
    """A spec as HybridCluster.add_pool builds it from a PodResources."""
    files = TLSFiles("/local/ca.pem", "/local/cert.pem", "/local/key.pem") if tls else None
    worker = WorkerOptions(
        "tls://10.0.0.7:8786" if tls else "tcp://10.0.0.7:8786",
        nthreads=resources.number_of_threads, memory_limit=resources.memory_bytes,
        resources=worker_resources(resources.number_of_gpus, resources.number_of_threads),
        tls=files, extra_args=("--lifetime", "2h"),
    )
    return JobSpec(cluster, pool, worker, cores=resources.number_of_threads,
                   memory=resources.memory_bytes, gpus=resources.number_of_gpus,
                   env=dict(env or {}), tls_source=files)


def validate(document: dict) -> None:
    """The official schema (strict), plus the quantity syntax the schema leaves open."""
    assert kubernetes_validate.validate(document, VERSION, strict=True) == VERSION
    for container in document["spec"]["containers"]:
        for section in container["resources"].values():
            for value in section.values():
                assert isinstance(value, str)
                parse_quantity(value)


COMBINATIONS = list(itertools.product(("gpu", "cpu"), (False, True), (False, True),
                                      (False, True), (False, True)))


@pytest.mark.parametrize(("group", "with_volumes", "with_secret", "with_env", "tls"),
                         COMBINATIONS)
def test_every_combination_validates(tmp_path: Path, group: str, with_volumes: bool,
                                     with_secret: bool, with_env: bool, tls: bool) -> None:
    resources = gpu_resources() if group == "gpu" else cpu_resources()
    system = KubernetesPods(
        image="ghcr.io/example/evaluator:1.0", namespace="openforcefield",
        volumes=VOLUMES if with_volumes else (), secrets=[LICENSE] if with_secret else (),
        env={"SYSTEM_LEVEL": "yes"} if with_env else None, pod_resources=resources,
        labels={"team": "force-fields"}, service_account="evaluator",
        image_pull_policy="IfNotPresent", image_pull_secrets=["registry-login"],
    )
    spec = job_spec(resources, tls=tls, env=TRICKY_ENV if with_env else None, pool=group)
    text = system.render(spec, tmp_path, 3)
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    assert len(documents) == 3
    assert len({d["metadata"]["name"] for d in documents}) == 3
    for pod in documents:
        validate(pod)
        meta, pod_spec = pod["metadata"], pod["spec"]
        container = pod_spec["containers"][0]
        assert meta["namespace"] == "openforcefield"
        assert meta["labels"] == {"team": "force-fields", "hybrid/tag": "HybridCluster",
                                  "hybrid/cluster": "evaluator", "hybrid/pool": group}
        assert meta["annotations"]["hybrid/scheduler"] == spec.worker.scheduler_address
        assert re.fullmatch(rf"evaluator-{group}-[0-9a-f]{{8}}", meta["name"])
        assert pod_spec["restartPolicy"] == "Never"
        assert pod_spec["serviceAccountName"] == "evaluator"
        assert pod_spec["imagePullSecrets"] == [{"name": "registry-login"}]
        # The worker name and job id come from the pod's own name (downward API).
        env = {e["name"]: e for e in container["env"]}
        assert env["HYBRID_JOB_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["HYBRID_WORKER_NAME"]["value"] == f"evaluator-{group}-$(HYBRID_JOB_ID)"
        assert container["command"][-2:] == ["--name", "$(HYBRID_WORKER_NAME)"]
        assert container["command"][:4] == ["python", "-m", "dask", "worker"]
        expanded = {name: expand(e.get("value", ""), {"HYBRID_JOB_ID": meta["name"]})
                    for name, e in env.items()}
        assert expanded["HYBRID_WORKER_NAME"] == f"evaluator-{group}-{meta['name']}"
        if with_env:
            for name, value in TRICKY_ENV.items():
                assert expand(env[name]["value"], {"HOME": "/root"}) == value
            assert expanded["SYSTEM_LEVEL"] == "yes"
        # Requests equal limits; GPUs only in the GPU group.
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert requests == limits
        assert limits["cpu"] == "1"
        assert limits["ephemeral-storage"] == "1Gi"
        assert limits["memory"] == ("2Gi" if group == "gpu" else "1Gi")
        assert ("nvidia.com/gpu" in limits) == (group == "gpu")
        if group == "gpu":
            assert limits["nvidia.com/gpu"] == "1"
            assert pod_spec["tolerations"] == GPU_TOLERATIONS
            assert pod_spec["affinity"] == GPU_AFFINITY
            assert "GPU=1 notGPU=0" in container["command"]
        else:
            assert "tolerations" not in pod_spec and "affinity" not in pod_spec
            assert "GPU=0 notGPU=1" in container["command"]
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
        assert volumes.keys() == mounts.keys()
        if with_volumes:
            assert volumes["evaluator-storage"]["persistentVolumeClaim"] == {
                "claimName": "evaluator-storage"}
            assert volumes["scratch"]["emptyDir"] == {"sizeLimit": "5Gi"}
        if with_secret:
            assert volumes["openeye-license"]["secret"] == {"secretName": "oe-license"}
            assert mounts["openeye-license"] == {"name": "openeye-license",
                                                 "mountPath": "/secrets/oe_license.txt",
                                                 "readOnly": True, "subPath": "oe_license.txt"}
        if tls:
            assert volumes["hybrid-tls"]["secret"] == {
                "secretName": tls_secret_name("evaluator"), "defaultMode": TLS_FILE_MODE}
            assert TLS_FILE_MODE == 0o400
            assert mounts["hybrid-tls"]["readOnly"] is True
            command = container["command"]
            assert command[command.index("--tls-key") + 1] == "/etc/hybrid/tls/key.pem"
            assert "/local/key.pem" not in json.dumps(pod)
        else:
            assert "hybrid-tls" not in volumes


def test_gpu_settings_do_not_leak_into_the_cpu_group(tmp_path: Path) -> None:
    gpu = gpu_resources(0, 3)
    backend = DaskKubernetesBackend("leak-check", gpu_resources_per_worker=gpu,
                                    cpu_resources_per_worker=cpu_resources(0, 3),
                                    volumes=VOLUMES, secrets=[LICENSE])
    # Changing the caller's objects afterwards changes nothing either.
    gpu.tolerations.append({"key": "late", "operator": "Exists"})
    gpu.affinity_specification["podAffinity"] = {}
    rendered = {}
    for group, system in backend.systems.items():
        resources = backend.resources[group]
        pods = system.manifests(job_spec(resources, pool=group, cluster="leak-check"),
                                tmp_path, 2)
        rendered[group] = pods
        for pod in pods:
            validate(pod)
    for pod in rendered["cpu"]:
        assert "tolerations" not in pod["spec"] and "affinity" not in pod["spec"]
        assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]
    for pod in rendered["gpu"]:
        assert pod["spec"]["tolerations"] == GPU_TOLERATIONS
        assert pod["spec"]["affinity"] == GPU_AFFINITY
    # Both groups mount the same volumes, each with its own copy of the list.
    gpu_volumes = rendered["gpu"][0]["spec"]["volumes"]
    cpu_volumes = rendered["cpu"][0]["spec"]["volumes"]
    assert gpu_volumes == cpu_volumes and gpu_volumes is not cpu_volumes


def test_user_strings_cannot_change_the_manifest(tmp_path: Path) -> None:
    resources = cpu_resources()
    hostile = {"INJECT": 'x"\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: stolen}',
               "EXPAND": "$(HYBRID_JOB_ID)", "BACKSLASH": "C:\\path\\\"quoted\\\""}
    system = KubernetesPods(image="img@sha256:" + "a" * 64, pod_resources=resources,
                            labels={"example.org/owner": "a_b.c-d"})
    spec = job_spec(resources, env=hostile, pool="cpu")
    spec = JobSpec(spec.cluster, spec.pool, WorkerOptions(
        spec.worker.scheduler_address, nthreads=1, memory_limit=resources.memory_bytes,
        extra_args=("--lifetime", "$(HYBRID_JOB_ID)")), cores=1, memory=resources.memory_bytes,
        env=hostile)
    documents = [d for d in yaml.safe_load_all(system.render(spec, tmp_path, 2)) if d]
    assert [d["kind"] for d in documents] == ["Pod", "Pod"]
    for pod in documents:
        validate(pod)
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        mapping = {"HYBRID_JOB_ID": pod["metadata"]["name"]}
        for name, value in hostile.items():
            assert env[name] == escape_expansion(value)
            assert expand(env[name], mapping) == value  # never expanded by Kubernetes
        lifetime = container["command"][container["command"].index("--lifetime") + 1]
        assert expand(lifetime, mapping) == "$(HYBRID_JOB_ID)"


def test_default_system_renders_without_options(tmp_path: Path) -> None:
    """What `hybrid render --system kubernetes` needs: no option is required."""
    system = KubernetesPods()
    worker = WorkerOptions("tcp://scheduler.example:8786")
    pods = system.manifests(JobSpec("demo", "cpu", worker), tmp_path, 1)
    validate(pods[0])
    container = pods[0]["spec"]["containers"][0]
    assert container["image"].startswith("ghcr.io/dask/dask:")
    assert container["resources"]["limits"] == {"cpu": "1"}
    assert "volumes" not in pods[0]["spec"]


def test_pods_ignore_host_only_worker_settings(tmp_path: Path) -> None:
    """A batch container image, contact address or local python never reach a pod."""
    from hybrid.worker import ContainerOptions

    worker = WorkerOptions("tcp://10.0.0.7:8786", contact_address="tcp://203.0.113.5:10000",
                           container=ContainerOptions("/images/worker.sif"))
    pod = KubernetesPods(python="/opt/conda/bin/python").manifests(
        JobSpec("demo", "cpu", worker), tmp_path, 1)[0]
    command = pod["spec"]["containers"][0]["command"]
    assert command[0] == "/opt/conda/bin/python"
    assert "apptainer" not in command and "--contact-address" not in command
    explicit = WorkerOptions("tcp://10.0.0.7:8786", python="/usr/bin/python3")
    pod = KubernetesPods().manifests(JobSpec("demo", "cpu", explicit), tmp_path, 1)[0]
    assert pod["spec"]["containers"][0]["command"][0] == "/usr/bin/python3"


def test_lease_and_walltime_become_the_active_deadline(tmp_path: Path) -> None:
    worker = WorkerOptions("tcp://10.0.0.7:8786")
    pod = KubernetesPods().manifests(JobSpec("demo", "cpu", worker, lease_seconds=7200),
                                     tmp_path, 1)[0]
    assert pod["spec"]["activeDeadlineSeconds"] == 7200
    pod = KubernetesPods().manifests(JobSpec("demo", "cpu", worker, walltime="01:30"),
                                     tmp_path, 1)[0]
    assert pod["spec"]["activeDeadlineSeconds"] == 5400


@pytest.mark.parametrize(("change", "field"), [
    ({"queue": "gpu"}, "queue"),
    ({"account": "chem"}, "account"),
    ({"job_extra_directives": ("--exclusive",)}, "job_extra_directives"),
    ({"prologue": ("module load cuda",)}, "job_script_prologue"),
    ({"cluster": "ends-with-dash-"}, "cluster name"),
    ({"env": {"HYBRID_WORKER_NAME": "mine"}}, "env"),
    ({"cores": 4}, "KubernetesPods.pod_resources"),
    ({"gpus": 1}, "KubernetesPods.pod_resources"),
])
def test_what_a_pod_cannot_do_is_refused(tmp_path: Path, change: dict, field: str) -> None:
    resources = cpu_resources()
    spec = job_spec(resources, pool="cpu")
    values = {name: getattr(spec, name) for name in spec.__dataclass_fields__}
    values.update(change)
    with pytest.raises(ConfigurationError) as error:
        KubernetesPods(pod_resources=resources).render(JobSpec(**values), tmp_path, 1)
    assert error.value.field.startswith(field)


@pytest.mark.parametrize(("options", "field"), [
    ({"namespace": "Upper_Case"}, "KubernetesPods.namespace"),
    ({"image": "has space:1"}, "KubernetesPods.image"),
    ({"image": ""}, "KubernetesPods.image"),
    ({"image_pull_policy": "Sometimes"}, "KubernetesPods.image_pull_policy"),
    ({"labels": {"hybrid/pool": "x"}}, "KubernetesPods.labels"),
    ({"labels": {"ok": "-bad-value"}}, "KubernetesPods.labels['ok']"),
    ({"labels": {"bad key!": "v"}}, "KubernetesPods.labels key"),
    ({"node_selector": {"zone": "a b"}}, "KubernetesPods.node_selector['zone']"),
    ({"service_account": "No"}, "KubernetesPods.service_account"),
    ({"env": {"1BAD": "x"}}, "KubernetesPods.env"),
    ({"env": {"HYBRID_JOB_ID": "x"}}, "KubernetesPods.env"),
    ({"env": {"N": 3}}, "KubernetesPods.env['N']"),
    ({"gpu_resource_name": "gpu"}, "KubernetesPods.gpu_resource_name"),
    ({"tls_mount_path": "relative/tls"}, "KubernetesPods.tls_mount_path"),
    ({"pod_resources": {"number_of_gpus": 1}}, "KubernetesPods.pod_resources"),
    ({"volumes": [KubernetesEmptyDirVolume("a", "/same"),
                  KubernetesEmptyDirVolume("b", "/same")]},
     "KubernetesEmptyDirVolume.mount_path"),
    ({"volumes": [KubernetesEmptyDirVolume("a", "/one"),
                  KubernetesPersistentVolumeClaim("a", "/two")]},
     "KubernetesPersistentVolumeClaim.name"),
    ({"volumes": [KubernetesEmptyDirVolume("tls", "/etc/hybrid/tls")]},
     "KubernetesEmptyDirVolume"),
    ({"volumes": KubernetesEmptyDirVolume("a", "/one")}, "KubernetesPods.volumes"),
    ({"secrets": [KubernetesEmptyDirVolume("a", "/one")]}, "KubernetesPods.secrets"),
    ({"request_timeout": 0}, "KubernetesPods.request_timeout"),
])
def test_bad_system_options_are_refused(options: dict, field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        KubernetesPods(**options)
    assert error.value.field == field
    assert repr(error.value.value)[:20] in str(error.value)


def test_unknown_gpu_toolkit_and_bad_bounds_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="preferred_gpu_toolkit"):
        PodResources(number_of_gpus=1, preferred_gpu_toolkit="Vulkan")
    with pytest.raises(ConfigurationError, match="minimum_number_of_workers"):
        PodResources(minimum_number_of_workers=3, maximum_number_of_workers=2)


def pod(phase: str, **status) -> dict:
    return {"metadata": {"name": "p"}, "status": {"phase": phase, **status}}


def waiting(reason: str, message: str = "") -> dict:
    return {"containerStatuses": [{"name": "worker", "state": {"waiting": {
        "reason": reason, "message": message}}}]}


@pytest.mark.parametrize(("document", "state", "reason"), [
    (pod("Pending"), JobState.pending, None),
    (pod("Pending", **waiting("ContainerCreating")), JobState.pending, "ContainerCreating"),
    (pod("Pending", **waiting("ImagePullBackOff", "Back-off pulling image")), JobState.held,
     "ImagePullBackOff: Back-off pulling image"),
    (pod("Pending", **waiting("ErrImagePull", "not found")), JobState.held,
     "ErrImagePull: not found"),
    (pod("Pending", **waiting("CreateContainerConfigError", "secret missing")), JobState.held,
     "CreateContainerConfigError: secret missing"),
    (pod("Pending", conditions=[{"type": "PodScheduled", "status": "False",
                                 "reason": "Unschedulable",
                                 "message": "0/2 nodes are available"}]),
     JobState.pending, "Unschedulable: 0/2 nodes are available"),
    (pod("Running"), JobState.running, None),
    (pod("Succeeded"), JobState.finished, None),
    (pod("Failed", reason="Evicted", message="low on ephemeral-storage"), JobState.failed,
     "Evicted: low on ephemeral-storage"),
    (pod("Failed", containerStatuses=[{"state": {"terminated": {
        "reason": "OOMKilled", "exitCode": 137}}}]), JobState.failed,
     "OOMKilled (exit code 137)"),
    (pod("Unknown"), JobState.pending, "Unknown: the pod's node is not reporting its state"),
    ({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"},
      "status": {"phase": "Running"}}, JobState.removed, "deleted, terminating"),
])
def test_pod_phases_map_to_job_states(document: dict, state: JobState, reason: str) -> None:
    assert pod_state(document) == (state, reason)
