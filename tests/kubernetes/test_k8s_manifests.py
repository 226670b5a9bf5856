"""Pod manifests: every combination validates against the official Kubernetes 1.33 schema."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import dask
import kubernetes_validate
import pytest
import yaml

from hybrid.backends.kubernetes import DaskKubernetesBackend
from hybrid.batch.base import JobState
from hybrid.errors import ConfigurationError
from hybrid.kubernetes import (
    KubernetesEmptyDirVolume,
    KubernetesPersistentVolumeClaim,
    KubernetesPods,
    KubernetesSecret,
    pod_state,
)
from hybrid.kubernetes.pods import TLS_FILE_MODE, cluster_secret_name, escape_expansion
from hybrid.pools import PoolSpec
from hybrid.resources import PodResources
from hybrid.worker import WORKER_MODULE, TLSFiles
from tests.kubernetes.conftest import (
    GPU_AFFINITY,
    GPU_TOLERATIONS,
    cpu_resources,
    gpu_resources,
    worker_job,
)
from tests.kubernetes.kube_api_double import expand, parse_quantity

VERSION = "1.33"
LICENSE = KubernetesSecret(name="openeye-license", secret_name="oe-license",
                           mount_path="/secrets/oe_license.txt", sub_path="oe_license.txt",
                           read_only=True)
VOLUMES = [KubernetesPersistentVolumeClaim("evaluator-storage", "/evaluator-storage"),
           KubernetesEmptyDirVolume("scratch", "/scratch", size_limit="5 GiB")]
TRICKY_ENV = {"OE_LICENSE": "/secrets/oe_license.txt", "QUOTED": "it's \"quoted\"\nsecond line",
              "DOLLARS": "$(HOME) and $$ and ${PATH}", "COLON": "key: value # not a comment"}
HOST_TLS = TLSFiles("/local/ca.pem", "/local/cert.pem", "/local/key.pem")


def validate(document: dict) -> None:
    """The official schema (strict), plus the quantity syntax the schema leaves open."""
    assert kubernetes_validate.validate(document, VERSION, strict=True) == VERSION
    for container in document["spec"]["containers"]:
        for section in container["resources"].values():
            for value in section.values():
                assert isinstance(value, str)
                parse_quantity(value)


def documents(text: str) -> list[dict]:
    """The YAML documents of a rendering."""
    return [d for d in yaml.safe_load_all(text) if d is not None]


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
        env={"SYSTEM_LEVEL": "yes"} if with_env else None,
        labels={"team": "force-fields"}, service_account="evaluator",
        image_pull_policy="IfNotPresent", image_pull_secrets=["registry-login"],
    )
    job = worker_job(system, resources, pool=group, cluster="evaluator",
                     address="tls://10.0.0.7:8786" if tls else "tcp://10.0.0.7:8786",
                     tls=HOST_TLS if tls else None, env=TRICKY_ENV if with_env else None,
                     worker_extra_args=["--lifetime", "2h"])
    pods = system.manifests(job, 3)
    # What job_script() shows for reading is what is sent.
    shown = documents(system.job_script(job, tmp_path, 3))
    strip = re.compile(r"evaluator-(gpu|cpu)-[0-9a-f]{8}")
    assert [strip.sub("P", json.dumps(d)) for d in shown] == [
        strip.sub("P", json.dumps(p)) for p in pods]
    assert len(pods) == 3 and len({p["metadata"]["name"] for p in pods}) == 3
    for pod in pods:
        validate(pod)
        meta, pod_spec = pod["metadata"], pod["spec"]
        container = pod_spec["containers"][0]
        assert meta["namespace"] == "openforcefield"
        assert meta["labels"] == {"team": "force-fields", "hybrid/tag": "HybridCluster",
                                  "hybrid/cluster": "evaluator", "hybrid/pool": group}
        assert meta["annotations"]["hybrid/scheduler"] == job.connection.scheduler_address
        assert re.fullmatch(rf"evaluator-{group}-[0-9a-f]{{8}}", meta["name"])
        assert pod_spec["restartPolicy"] == "Never"
        assert pod_spec["terminationGracePeriodSeconds"] == 10
        assert pod_spec["serviceAccountName"] == "evaluator"
        assert pod_spec["imagePullSecrets"] == [{"name": "registry-login"}]
        # The worker name and job id come from the pod's own name (downward API).
        env = {e["name"]: e for e in container["env"]}
        assert env["HYBRID_JOB_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["HYBRID_WORKER_NAME"]["value"] == f"evaluator-{group}-$(HYBRID_JOB_ID)"
        assert container["command"][-2:] == ["--name", "$(HYBRID_WORKER_NAME)"]
        if group == "gpu":
            # the job scripts' CUDA MPS block (sh -c), then both worker command lines as data
            # (without the daemon: the first N words; under it: the rest)
            assert container["command"][:2] == ["/bin/sh", "-c"]
            assert "nvidia-cuda-mps-control -d" in container["command"][2]
            n = int(container["command"][4])
            plain = container["command"][5:5 + n]
            assert plain[:3] == ["python", "-m", WORKER_MODULE]
            assert container["command"][5 + n:8 + n] == ["python", "-m", WORKER_MODULE]
        else:
            assert container["command"][:3] == ["python", "-m", WORKER_MODULE]
        assert container["command"][container["command"].index("--lifetime") + 1] == "2h"
        expanded = {name: expand(e.get("value", ""), {"HYBRID_JOB_ID": meta["name"]})
                    for name, e in env.items()}
        assert expanded["HYBRID_WORKER_NAME"] == f"evaluator-{group}-{meta['name']}"
        assert expanded["DASK_DISTRIBUTED__WORKER__DAEMON"] == "False"
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
                "secretName": cluster_secret_name("evaluator"), "defaultMode": TLS_FILE_MODE}
            assert TLS_FILE_MODE == 0o400
            assert mounts["hybrid-tls"]["readOnly"] is True
            command = container["command"]
            assert command[command.index("--tls-key") + 1] == "/etc/hybrid/tls/key.pem"
            assert "/local/key.pem" not in json.dumps(pod)
        else:
            assert "hybrid-tls" not in volumes


def test_gpu_settings_do_not_leak_into_the_cpu_group() -> None:
    gpu = gpu_resources(0, 3)
    backend = DaskKubernetesBackend(gpu_resources_per_worker=gpu,
                                    cpu_resources_per_worker=cpu_resources(0, 3),
                                    cluster_name="leak-check", volumes=VOLUMES,
                                    secrets=[LICENSE])
    # Changing the caller's objects afterwards changes nothing either.
    gpu.tolerations.append({"key": "late", "operator": "Exists"})
    gpu.affinity_specification["podAffinity"] = {}
    rendered = backend.manifests(2)
    for pods in rendered.values():
        for pod in pods:
            validate(pod)
    for pod in rendered["cpu"]:
        assert "tolerations" not in pod["spec"] and "affinity" not in pod["spec"]
        assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]
    for pod in rendered["gpu"]:
        assert pod["spec"]["tolerations"] == GPU_TOLERATIONS
        assert pod["spec"]["affinity"] == GPU_AFFINITY
    # Both groups mount the same volumes, each pod with its own copy of the list.
    gpu_volumes = rendered["gpu"][0]["spec"]["volumes"]
    cpu_volumes = rendered["cpu"][0]["spec"]["volumes"]
    assert gpu_volumes == cpu_volumes and gpu_volumes is not cpu_volumes
    assert rendered["gpu"][0]["spec"]["volumes"] is not rendered["gpu"][1]["spec"]["volumes"]
    # Before start the manifests say where the scheduler's address will go.
    text = backend.job_script()
    assert "# --- pool gpu ---" in text and "# --- pool cpu ---" in text
    assert "known once the backend starts" in text


def test_user_strings_cannot_change_the_manifest(tmp_path: Path) -> None:
    hostile = {"INJECT": 'x"\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: stolen}',
               "EXPAND": "$(HYBRID_JOB_ID)", "BACKSLASH": "C:\\path\\\"quoted\\\""}
    system = KubernetesPods(image="img@sha256:" + "a" * 64,
                            labels={"example.org/owner": "a_b.c-d"})
    job = worker_job(system, cpu_resources(), env=hostile,
                     worker_extra_args=["--lifetime", "$(HYBRID_JOB_ID)"])
    pods = documents(system.render(job, tmp_path, 2))
    assert [d["kind"] for d in pods] == ["Pod", "Pod"]
    for pod in pods:
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
    job = worker_job("kubernetes", cluster="demo", address="tcp://scheduler.example:8786")
    system = KubernetesPods(**job.spec.system_options)
    [pod] = documents(system.job_script(job, tmp_path, 1))
    validate(pod)
    container = pod["spec"]["containers"][0]
    assert container["image"].startswith("ghcr.io/dask/dask:")
    assert container["resources"]["limits"] == {"cpu": "1"}
    assert "volumes" not in pod["spec"]


def test_the_configuration_section_reaches_the_pods() -> None:
    """hybrid.batch.kubernetes: a site sets the image, namespace and grace period once."""
    with dask.config.set({"hybrid.batch.kubernetes.image": "site/worker:2",
                          "hybrid.batch.kubernetes.namespace": "science",
                          "hybrid.batch.kubernetes.termination-grace-period": "45s",
                          "hybrid.batch.kubernetes.walltime": "01:00"}):
        job = worker_job("kubernetes")
        from hybrid.batch import get_system

        system = get_system("kubernetes", **job.spec.system_options)
        [pod] = system.manifests(job)
    assert job.spec.system_options == {"image": "site/worker:2", "namespace": "science",
                                       "termination_grace_period": 45}
    assert pod["metadata"]["namespace"] == "science"
    assert pod["spec"]["containers"][0]["image"] == "site/worker:2"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 45
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    with dask.config.set({"hybrid.batch.kubernetes.namespace": "Not_A_Label"}), \
            pytest.raises(ConfigurationError) as error:
        worker_job("kubernetes")
    assert error.value.field == "hybrid.batch.kubernetes.namespace"


def test_pod_resources_become_pool_settings_that_round_trip() -> None:
    resources = gpu_resources(ephemeral_storage_limit="3 GiB")
    options = KubernetesPods.options_from_resources(resources)
    assert options == {"affinity": GPU_AFFINITY, "tolerations": GPU_TOLERATIONS,
                       "ephemeral_storage": f"{3 * 2**30} B"}
    assert KubernetesPods.options_from_resources(cpu_resources(ephemeral_storage_limit=
                                                               "0 GiB")) == {}
    system = KubernetesPods(volumes=VOLUMES, secrets=[LICENSE])
    spec = PoolSpec.build("gpu", system, resources)
    assert spec.system_options["affinity"] == GPU_AFFINITY
    # The pool, with its system's settings, is plain data and comes back the same.
    text = json.dumps(spec.system_options)
    again = KubernetesPods(**json.loads(text))
    assert again.settings == system.pod_settings(spec)
    assert again.settings.ephemeral_storage == 3 * 2**30


def test_pods_ignore_host_only_worker_settings(tmp_path: Path) -> None:
    """A contact address names one host: pods, each with its own address, drop it; the
    pool's python wins over the image's."""
    system = KubernetesPods(python="/opt/conda/bin/python")
    job = worker_job(system, contact_address="tcp://203.0.113.5:10000")
    command = system.manifests(job)[0]["spec"]["containers"][0]["command"]
    assert command[0] == "/opt/conda/bin/python"
    assert "--contact-address" not in command
    explicit = worker_job(system, python="/usr/bin/python3")
    assert system.manifests(explicit)[0]["spec"]["containers"][0]["command"][0] == (
        "/usr/bin/python3")


def test_lease_and_walltime_become_the_active_deadline() -> None:
    system = KubernetesPods()
    pod = system.manifests(worker_job(system, lease=7200))[0]
    assert pod["spec"]["activeDeadlineSeconds"] == 7200
    pod = system.manifests(worker_job(system, walltime="01:30"))[0]
    assert pod["spec"]["activeDeadlineSeconds"] == 5400


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"queue": "gpu"}, "add_pool('cpu').queue", "node_selector"),
    ({"account": "chem"}, "add_pool('cpu').account", "no account"),
    ({"job_extra_directives": ["--exclusive"]}, "add_pool('cpu').job_extra_directives",
     "built as objects"),
    ({"job_script_prologue": ["module load cuda"]}, "add_pool('cpu').job_script_prologue",
     "into the image"),
    ({"container_image": "/images/worker.sif"}, "add_pool('cpu').container_image",
     "image=..."),
    ({"conda_env": "evaluator"}, "add_pool('cpu').conda_env", "the image's python"),
    ({"env": {"HYBRID_WORKER_NAME": "mine"}}, "add_pool('cpu').env", "HYBRID_"),
    ({"system_options": {"namespace": "Bad_Name"}},
     "add_pool('cpu').system_options.namespace", "a-z 0-9"),
])
def test_what_a_pod_cannot_do_is_refused(options: dict, field: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        PoolSpec.build("cpu", KubernetesPods(), cpu_resources(), check_paths=False, **options)
    assert error.value.field == field
    assert words in str(error.value)


def test_a_site_container_image_is_named_where_it_comes_from() -> None:
    with dask.config.set({"hybrid.worker.container.image": "/images/site.sif"}), \
            pytest.raises(ConfigurationError) as error:
        PoolSpec.build("cpu", "kubernetes", check_paths=False)
    assert error.value.field == "hybrid.worker.container.image"
    assert "unset" in str(error.value)


def test_a_pool_cannot_move_its_pods_to_another_namespace() -> None:
    system = KubernetesPods(namespace="science")
    job = worker_job(system, system_options={"namespace": "elsewhere"})
    with pytest.raises(ConfigurationError) as error:
        system.manifests(job)
    assert error.value.field == "add_pool('cpu').system_options.namespace"


@pytest.mark.parametrize(("options", "field"), [
    ({"namespace": "Upper_Case"}, "kubernetes.namespace"),
    ({"image": "has space:1"}, "kubernetes.image"),
    ({"image": ""}, "kubernetes.image"),
    ({"image_pull_policy": "Sometimes"}, "kubernetes.image_pull_policy"),
    ({"image_pull_secrets": "registry-login"}, "kubernetes.image_pull_secrets"),
    ({"image_pull_secrets": ["Registry"]}, "kubernetes.image_pull_secrets[0]"),
    ({"labels": {"hybrid/pool": "x"}}, "kubernetes.labels"),
    ({"labels": {"ok": "-bad-value"}}, "kubernetes.labels"),
    ({"labels": {"bad key!": "v"}}, "kubernetes.labels"),
    ({"node_selector": {"zone": "a b"}}, "kubernetes.node_selector"),
    ({"service_account": "No"}, "kubernetes.service_account"),
    ({"env": {"1BAD": "x"}}, "kubernetes.env"),
    ({"env": {"HYBRID_JOB_ID": "x"}}, "kubernetes.env"),
    ({"env": {"N": 3}}, "kubernetes.env"),
    ({"gpu_resource_name": "gpu"}, "kubernetes.gpu_resource_name"),
    ({"tls_mount_path": "relative/tls"}, "kubernetes.tls_mount_path"),
    ({"affinity": [{"nodeAffinity": {}}]}, "kubernetes.affinity"),
    ({"tolerations": {"key": "a"}}, "kubernetes.tolerations"),
    ({"ephemeral_storage": 5}, "kubernetes.ephemeral_storage"),
    ({"termination_grace_period": -1}, "kubernetes.termination_grace_period"),
    ({"volumes": [KubernetesEmptyDirVolume("a", "/same"),
                  KubernetesEmptyDirVolume("b", "/same")]}, "kubernetes.volumes[1].mount_path"),
    ({"volumes": [KubernetesEmptyDirVolume("a", "/one"),
                  KubernetesPersistentVolumeClaim("a", "/two")]}, "kubernetes.volumes[1].name"),
    ({"volumes": [KubernetesEmptyDirVolume("tls", "/etc/hybrid/tls")]},
     "kubernetes.volumes[0]"),
    ({"volumes": KubernetesEmptyDirVolume("a", "/one")}, "kubernetes.volumes"),
    ({"secrets": [KubernetesEmptyDirVolume("a", "/one")]}, "kubernetes.secrets[0]"),
    ({"request_timeout": 0}, "kubernetes.request_timeout"),
    ({"no_such_option": 1}, "kubernetes.no_such_option"),
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


def pod(phase: str | None, deleted: bool = False, **status) -> object:
    """A ``V1Pod`` as the client reads it from the API."""
    from kubernetes import client

    metadata = {"name": "p"}
    if deleted:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    document = {"metadata": metadata}
    if phase is not None:
        document["status"] = {"phase": phase, **status}
    return client.V1Pod.model_validate(document)


def container(state: dict) -> dict:
    return {"containerStatuses": [{"name": "worker", "image": "img", "imageID": "",
                                   "ready": False, "restartCount": 0, "state": state}]}


def waiting(reason: str, message: str = "") -> dict:
    return container({"waiting": {"reason": reason, "message": message}})


@pytest.mark.parametrize(("document", "state", "reason"), [
    (pod(None), JobState.pending, None),
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
    (pod("Failed", **container({"terminated": {"reason": "OOMKilled", "exitCode": 137}})),
     JobState.failed, "OOMKilled (exit code 137)"),
    (pod("Unknown"), JobState.pending, "Unknown: the pod's node is not reporting its state"),
    (pod("Running", deleted=True), JobState.removing, "deleted, terminating"),
])
def test_pod_phases_map_to_job_states(document, state: JobState, reason: str) -> None:
    assert pod_state(document) == (state, reason)
