"""KubernetesPods against the API server double, with real dask workers in the pods."""

from __future__ import annotations

import base64
import socket
import stat
import time
from collections.abc import Callable
from typing import Any

import dask
import pytest

from hybrid.admin.doctor import Status
from hybrid.batch.base import JobState
from hybrid.cluster import HybridCluster
from hybrid.errors import ConfigurationError, WorkersDidNotArrive
from hybrid.kubernetes import KubernetesAPIError, KubernetesPods
from hybrid.kubernetes.pods import (
    ANNOTATION_SCHEDULER,
    LABEL_CLUSTER,
    LABEL_ROLE,
    LABEL_TAG,
    cluster_secret_name,
)
from hybrid.worker import TLSFiles, read_pem
from tests.kubernetes import _tasks
from tests.kubernetes.conftest import (
    MISSING_IMAGE,
    TOKEN,
    cpu_resources,
    gpu_resources,
    worker_job,
)
from tests.kubernetes.kube_api_double import KubeAPIServerDouble
from tests.scheduler_workers import scheduler_workers


def wait_until(predicate: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something true; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def pod_of(job, worker_name: str) -> str | None:
    """The pod behind a worker name ``<cluster>-<pool>-<pod>``, if it is one of ``job``'s."""
    prefix = job.name_prefix + "-"
    return worker_name[len(prefix):] if worker_name.startswith(prefix) else None


def nothing_left(kube: KubeAPIServerDouble) -> bool:
    """No pod, no hybrid Secret, no pod process."""
    secrets = [s for s in kube.list_objects("secrets")
               if LABEL_TAG in (s["metadata"].get("labels") or {})]
    return not kube.list_objects("pods") and not secrets and not kube.live_processes()


def test_gpu_and_cpu_pools_run_real_workers_on_their_own_nodes(kube, scheduler, client,
                                                               tmp_path) -> None:
    system = KubernetesPods(api_client=kube.api_client())
    address = scheduler.scheduler_address
    gpu_job = worker_job(system, gpu_resources(), pool="gpu", address=address)
    cpu_job = worker_job(system, cpu_resources(), pool="cpu", address=address)
    gpu_ids = system.submit(gpu_job, tmp_path, 1)
    cpu_ids = system.submit(cpu_job, tmp_path, 2)
    try:
        assert len(gpu_ids) == 1 and len(cpu_ids) == 2
        client.wait_for_workers(3, timeout=60)
        by_pod = {}
        for info in scheduler_workers(client).values():
            name = pod_of(gpu_job, info["name"]) or pod_of(cpu_job, info["name"])
            assert name is not None, info["name"]
            by_pod[name] = info
        assert sorted(by_pod) == sorted(gpu_ids + cpu_ids)
        assert by_pod[gpu_ids[0]]["resources"] == {"GPU": 1, "notGPU": 0}
        assert all(by_pod[j]["resources"] == {"GPU": 0, "notGPU": 1} for j in cpu_ids)
        # The scheduler of the double honoured affinity, taints and tolerations.
        assert kube.pod(gpu_ids[0])["spec"]["nodeName"] == "gpu-node-1"
        assert {kube.pod(j)["spec"]["nodeName"] for j in cpu_ids} == {"cpu-node-1"}
        # GPU tasks run on the GPU pod, CPU tasks on CPU pods; the job id is the pod's name.
        gpu_env = client.submit(_tasks.environment, "HYBRID_JOB_ID", resources={"GPU": 0.5},
                                pure=False).result(timeout=30)
        assert gpu_env == gpu_ids[0]
        names = client.gather(client.map(_tasks.slow_worker_name, [0.05] * 6,
                                         resources={"notGPU": 1}, pure=False))
        assert {pod_of(cpu_job, n) for n in names} <= set(cpu_ids)
        # query lists both pools of the cluster, by label, with their scheduler.
        statuses = {s.job_id: s for s in system.query(cluster="k8s-test")}
        assert set(statuses) == set(gpu_ids + cpu_ids)
        assert {s.pool for s in statuses.values()} == {"gpu", "cpu"}
        assert all(s.state is JobState.running for s in statuses.values())
        assert all(s.scheduler == address for s in statuses.values())
        assert system.query(cluster="other-cluster") == []
        assert system.query(job_ids=[cpu_ids[1], "no-such-pod"])[0].job_id == cpu_ids[1]
        # Removing one pod removes exactly that worker; the pod is "removing" meanwhile.
        system.remove([cpu_ids[0]])
        assert all(s.state is JobState.removing for s in system.query(job_ids=[cpu_ids[0]]))
        wait_until(lambda: len(scheduler_workers(client)) == 2, 30, "the worker to go")
        left = {pod_of(cpu_job, i["name"]) or pod_of(gpu_job, i["name"])
                for i in scheduler_workers(client).values()}
        assert left == {gpu_ids[0], cpu_ids[1]}
    finally:
        system.cluster_closed("k8s-test")
    # cluster_closed returns once every pod is gone: nothing to wait for here.
    assert nothing_left(kube)
    deletes = [path for method, path in kube.requests if method == "DELETE"]
    assert sorted(p.rsplit("/", 1)[-1] for p in deletes) == sorted(gpu_ids + cpu_ids)
    assert any(method == "GET" and "watch=" in path for method, path in kube.requests)


def test_tls_files_travel_in_a_per_cluster_secret(kube) -> None:
    system = KubernetesPods(api_client=kube.api_client())
    cluster = HybridCluster(name="tls-test", security=True)
    try:
        assert cluster.scheduler_address.startswith("tls://")
        cluster.add_pool("cpu", system, cpu_resources(), nanny=False)
        cluster.scale(1, pool="cpu")
        cluster.wait_for_workers(1, pool="cpu", timeout=60, progress=False)
        with cluster.get_client() as tls_client:
            job = tls_client.submit(_tasks.environment, "HYBRID_JOB_ID",
                                    pure=False).result(timeout=30)
        secrets = kube.list_objects("secrets")
        assert [s["metadata"]["name"] for s in secrets] == [cluster_secret_name("tls-test")]
        secret = secrets[0]
        assert secret["metadata"]["labels"] == {LABEL_TAG: "HybridCluster",
                                                LABEL_CLUSTER: "tls-test",
                                                LABEL_ROLE: "cluster"}
        assert secret["metadata"]["annotations"] == {
            ANNOTATION_SCHEDULER: cluster.scheduler_address}
        key = read_pem(cluster.manager.connection.tls.key)
        assert base64.b64decode(secret["data"]["key.pem"]) == key
        mounted = kube.secret_files(job, "hybrid-tls")
        assert sorted(p.name for p in mounted.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
        for path in mounted.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o400
        command = kube.pod(job)["spec"]["containers"][0]["command"]
        assert command[command.index("--tls-key") + 1] == "/etc/hybrid/tls/key.pem"
        assert "BEGIN" not in str(kube.pod(job))  # no key material in the pod itself
        assert system.cluster_names() == ["tls-test"]
    finally:
        cluster.close()
    # close() returns once the pods are gone (a pod being deleted is still "removing"),
    # and the cluster's Secret with them: no race with the pods' shutdown.
    assert nothing_left(kube)
    assert system.cluster_names() == []


def test_waiting_and_failed_pods_report_their_reasons(kube, scheduler, tmp_path) -> None:
    address = scheduler.scheduler_address
    api = kube.api_client()
    missing = KubernetesPods(image=MISSING_IMAGE, api_client=api)
    pods = KubernetesPods(api_client=api)
    [pull] = missing.submit(worker_job(missing, cpu_resources(), pool="pull",
                                       address=address), tmp_path, 1)
    [big] = pods.submit(worker_job(pods, gpu_resources(number_of_gpus=8), pool="big",
                                   address=address), tmp_path, 1)
    [fails] = pods.submit(worker_job(pods, cpu_resources(), pool="fails", address=address,
                                     python="/bin/false"), tmp_path, 1)
    [lease] = pods.submit(worker_job(pods, cpu_resources(), pool="lease", address=address,
                                     lease=2), tmp_path, 1)

    def state(name: str) -> tuple[JobState, str | None]:
        [status] = pods.query(job_ids=[name])
        return status.state, status.reason

    first = wait_until(lambda: state(pull)[0] is JobState.held and state(pull), 10, "held")
    assert first[1].startswith(("ErrImagePull", "ImagePullBackOff"))
    assert MISSING_IMAGE in first[1]
    wait_until(lambda: "ImagePullBackOff" in (state(pull)[1] or ""), 10, "back-off")
    big_state = wait_until(lambda: state(big)[1] and state(big), 10, "unschedulable")
    assert big_state[0] is JobState.pending
    assert big_state[1].startswith("Unschedulable: 0/2 nodes are available")
    assert "Insufficient nvidia.com/gpu" in big_state[1]
    failed = wait_until(lambda: state(fails)[0] is JobState.failed and state(fails), 10,
                        "the failed pod")
    assert failed[1] == f"Error (exit code 1); `kubectl logs -n default {fails}` shows its output"
    ended = wait_until(lambda: state(lease)[0] is JobState.failed and state(lease), 30,
                       "the deadline")
    assert ended[1].startswith("DeadlineExceeded: Pod was active on the node longer")
    # remove_cluster deletes the active pods; cluster_closed the finished ones too.
    active = pods.remove_cluster("k8s-test")
    assert sorted(active) == sorted([pull, big])
    pods.cluster_closed("k8s-test")
    assert nothing_left(kube)


def test_held_pods_stop_waiting_for_workers_with_the_reason(kube) -> None:
    system = KubernetesPods(image=MISSING_IMAGE, api_client=kube.api_client())
    cluster = HybridCluster(name="held-test")
    try:
        cluster.add_pool("cpu", system, cpu_resources())
        cluster.scale(2, pool="cpu")
        start = time.monotonic()
        with pytest.raises(WorkersDidNotArrive) as error:
            cluster.wait_for_workers(2, pool="cpu", timeout=30, progress=False)
        assert time.monotonic() - start < 15
        assert "held" in str(error.value)
        assert "ErrImagePull" in str(error.value) or "ImagePullBackOff" in str(error.value)
    finally:
        cluster.close()
    assert nothing_left(kube)


def test_cluster_closed_watches_until_running_pods_are_gone(kube, tmp_path) -> None:
    """Pods whose worker is still stopping are waited for (a watch, not a poll)."""
    system = KubernetesPods(api_client=kube.api_client(), termination_grace_period=5)
    names = system.submit(worker_job(system, cpu_resources()), tmp_path, 2)
    wait_until(lambda: len(kube.live_processes()) == 2, 20, "the pods' processes")
    before = len(kube.requests)
    system.cluster_closed("k8s-test")
    assert nothing_left(kube)
    asked = [path for _, path in kube.requests[before:]]
    assert sum("watch=" in path for path in asked) >= 1
    assert sum("/pods?" in path and "watch=" not in path for path in asked) <= 2
    assert sorted(m["name"] for m in kube.created_pods) == sorted(names)


def test_a_refused_pod_undoes_the_whole_submission(tmp_path) -> None:
    double = KubeAPIServerDouble(tmp_path / "quota", pod_quota=2,
                                 missing_images=(MISSING_IMAGE,)).start()
    try:
        system = KubernetesPods(image=MISSING_IMAGE, api_client=double.api_client())
        with pytest.raises(KubernetesAPIError) as error:
            system.submit(worker_job(system, cpu_resources()), tmp_path, 3)
        assert error.value.status == 403
        assert "exceeded quota" in str(error.value)
        assert "create pod k8s-test-cpu-" in str(error.value)
        assert double.list_objects("pods") == []
        created = [p for m, p in double.requests if m == "POST"]
        deleted = [p for m, p in double.requests if m == "DELETE"]
        assert len(created) == 3 and len(deleted) == 2
    finally:
        double.stop()


def test_listing_follows_continue_tokens(tmp_path) -> None:
    double = KubeAPIServerDouble(tmp_path / "pages", page_size=2,
                                 missing_images=(MISSING_IMAGE,)).start()
    try:
        system = KubernetesPods(image=MISSING_IMAGE, api_client=double.api_client())
        names = system.submit(worker_job(system, cpu_resources()), tmp_path, 5)
        before = len(double.requests)
        assert sorted(s.job_id for s in system.query(cluster="k8s-test")) == sorted(names)
        listed = [p for _, p in double.requests[before:]]
        assert len(listed) == 3 and "continue=" in listed[-1]
        system.cluster_closed("k8s-test")
        assert double.list_objects("pods") == []
    finally:
        double.stop()


def test_kubeconfig_files_are_used(kube, tmp_path) -> None:
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    system = KubernetesPods(image=MISSING_IMAGE, kube_config=config)
    names = system.submit(worker_job(system, cpu_resources()), tmp_path, 1)
    assert [s.job_id for s in system.query(cluster="k8s-test")] == names
    system.remove(names)
    assert kube.list_objects("pods") == []
    wrong = tmp_path / "wrong"
    wrong.write_text(config.read_text().replace(TOKEN, "not-the-token"))
    with pytest.raises(KubernetesAPIError) as error:
        KubernetesPods(kube_config=wrong).query()
    assert error.value.status == 401
    assert "list pods in namespace default" in str(error.value)
    with pytest.raises(ConfigurationError) as missing:
        KubernetesPods(kube_config=tmp_path / "absent").query()
    assert missing.value.field == "kube_config"
    assert "KUBECONFIG" in str(missing.value)


def test_doctor_checks_the_configuration_and_the_api(kube, tmp_path, monkeypatch) -> None:
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    good = KubernetesPods(kube_config=config).check(timeout=5)
    assert good.status is Status.ok, good
    assert kube.url in good.message
    wrong = tmp_path / "wrong"
    wrong.write_text(config.read_text().replace(TOKEN, "not-the-token"))
    refused = KubernetesPods(kube_config=wrong).check(timeout=5)
    assert refused.status is Status.fail and "401" in refused.message
    assert "kubectl get pods -n default" in refused.fix
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    absent = KubernetesPods().check(timeout=5)
    assert absent.status is Status.fail
    assert "no Kubernetes configuration" in absent.message
    assert "KUBECONFIG" in absent.fix


def test_bad_inputs_make_no_api_request(kube, tmp_path) -> None:
    system = KubernetesPods(api_client=kube.api_client())
    with pytest.raises(ConfigurationError):
        worker_job(system, cpu_resources(), job_script_prologue=["module load cuda"])
    unreadable = TLSFiles(str(tmp_path / "ca.pem"), str(tmp_path / "cert.pem"),
                          str(tmp_path / "key.pem"))
    job = worker_job(system, cpu_resources(), address="tls://127.0.0.1:1", tls=unreadable)
    with pytest.raises(ConfigurationError) as error:
        system.submit(job, tmp_path, 1)
    assert error.value.field == "tls"
    with pytest.raises(ConfigurationError) as tag:
        with dask.config.set({"hybrid.batch.tag": "_private"}):
            system.submit(worker_job(system, cpu_resources()), tmp_path, 1)
    assert tag.value.field == "hybrid.batch.tag"
    assert kube.requests == []


def test_gc_drops_the_secret_of_a_cluster_whose_client_died(kube, scheduler) -> None:
    """A client killed after its pods left keeps no job, only its Secret (the TLS key):
    ``hybrid gc`` finds it by its scheduler, which no longer answers, and deletes it; a live
    cluster's Secret stays."""
    from hybrid.batch.orphans import remove_orphaned_clusters
    from hybrid.worker import Connection

    system = KubernetesPods(api_client=kube.api_client())
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        dead = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    system.ensure_cluster_secret("gone", Connection(dead, None))
    system.ensure_cluster_secret("alive", Connection(scheduler.scheduler_address, None))
    assert system.kept_clusters() == {"gone": dead, "alive": scheduler.scheduler_address}

    assert remove_orphaned_clusters(system, timeout=2, dry_run=True) == ["gone"]
    assert len(kube.list_objects("secrets")) == 2  # a dry run deletes nothing
    assert remove_orphaned_clusters(system, timeout=2) == ["gone"]
    assert [s["metadata"]["name"] for s in kube.list_objects("secrets")] == [
        cluster_secret_name("alive")]
    assert remove_orphaned_clusters(system, timeout=2) == []
