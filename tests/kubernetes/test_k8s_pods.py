"""KubernetesPods against the API server double, with real dask workers in the pods."""

from __future__ import annotations

import base64
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hybrid.annotator import worker_resources
from hybrid.batch.base import BatchPool, JobSpec, JobState
from hybrid.cluster import HybridCluster
from hybrid.errors import ConfigurationError, WorkersDidNotArrive
from hybrid.kubernetes import KubernetesAPIError, KubernetesPods
from hybrid.kubernetes.pods import LABEL_CLUSTER, LABEL_ROLE, LABEL_TAG, tls_secret_name
from hybrid.resources import PodResources
from hybrid.worker import WorkerOptions
from tests.kubernetes import _tasks
from tests.kubernetes.conftest import MISSING_IMAGE, TOKEN, cpu_resources, gpu_resources
from tests.kubernetes.kube_api_double import KubeAPIServerDouble


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


def pool_spec(address: str, resources: PodResources, pool: str, cluster: str = "k8s-test",
              **changes: Any) -> JobSpec:
    """The spec HybridCluster.add_pool builds from PodResources (no nanny: quicker)."""
    worker = WorkerOptions(
        address, nthreads=resources.number_of_threads, memory_limit=resources.memory_bytes,
        resources=worker_resources(resources.number_of_gpus, resources.number_of_threads),
        nanny=False, death_timeout=20)
    return JobSpec(cluster, pool, worker, cores=resources.number_of_threads,
                   memory=resources.memory_bytes, gpus=resources.number_of_gpus, **changes)


def test_gpu_and_cpu_pools_run_real_workers_on_their_own_nodes(kube, scheduler, client) -> None:
    gpu, cpu = gpu_resources(), cpu_resources()
    gpu_pool = BatchPool(KubernetesPods(api_client=kube.api_client(), pod_resources=gpu),
                         pool_spec(scheduler.scheduler_address, gpu, "gpu"))
    cpu_pool = BatchPool(KubernetesPods(api_client=kube.api_client(), pod_resources=cpu),
                         pool_spec(scheduler.scheduler_address, cpu, "cpu"))
    try:
        gpu_ids = gpu_pool.submit(1)
        cpu_ids = cpu_pool.submit(2)
        assert len(gpu_ids) == 1 and len(cpu_ids) == 2
        client.wait_for_workers(3, timeout=60)
        workers = client.scheduler_info()["workers"].values()
        by_job = {}
        for info in workers:
            job = gpu_pool.job_id_of_worker(info["name"]) or cpu_pool.job_id_of_worker(
                info["name"])
            assert job is not None, info["name"]
            by_job[job] = info
        assert sorted(by_job) == sorted(gpu_ids + cpu_ids)
        assert by_job[gpu_ids[0]]["resources"] == {"GPU": 1, "notGPU": 0}
        assert all(by_job[j]["resources"] == {"GPU": 0, "notGPU": 1} for j in cpu_ids)
        # The scheduler of the double honoured affinity, taints and tolerations.
        assert kube.pod(gpu_ids[0])["spec"]["nodeName"] == "gpu-node-1"
        assert {kube.pod(j)["spec"]["nodeName"] for j in cpu_ids} == {"cpu-node-1"}
        # GPU tasks run on the GPU pod, CPU tasks on CPU pods; the job id is the pod's name.
        gpu_env = client.submit(_tasks.environment, "HYBRID_JOB_ID", resources={"GPU": 0.5},
                                pure=False).result(timeout=30)
        assert gpu_env == gpu_ids[0]
        names = client.gather(client.map(_tasks.slow_worker_name, [0.05] * 6,
                                         resources={"notGPU": 1}, pure=False))
        assert {cpu_pool.job_id_of_worker(n) for n in names} <= set(cpu_ids)
        # query lists both pools of the cluster, by label, with their scheduler.
        statuses = {s.job_id: s for s in cpu_pool.system.query(cluster="k8s-test")}
        assert set(statuses) == set(gpu_ids + cpu_ids)
        assert {s.pool for s in statuses.values()} == {"gpu", "cpu"}
        assert all(s.state is JobState.running for s in statuses.values())
        assert all(s.scheduler == scheduler.scheduler_address for s in statuses.values())
        assert cpu_pool.system.query(cluster="other-cluster") == []
        assert cpu_pool.system.query(job_ids=[cpu_ids[1], "no-such-pod"])[0].job_id == cpu_ids[1]
        # Removing one pod removes exactly that worker.
        cpu_pool.remove([cpu_ids[0]])
        wait_until(lambda: len(client.scheduler_info()["workers"]) == 2, 30, "the worker to go")
        left = {cpu_pool.job_id_of_worker(i["name"]) or gpu_pool.job_id_of_worker(i["name"])
                for i in client.scheduler_info()["workers"].values()}
        assert left == {gpu_ids[0], cpu_ids[1]}
    finally:
        gpu_pool.close()
        cpu_pool.close()
    assert gpu_pool.active() == [] and cpu_pool.active() == []
    wait_until(lambda: not kube.live_processes(), 20, "the pod processes to stop")
    wait_until(lambda: not kube.list_objects("pods"), 20, "the pods to be deleted")
    deletes = [path for method, path in kube.requests if method == "DELETE"]
    assert sorted(p.rsplit("/", 1)[-1] for p in deletes) == sorted(gpu_ids + cpu_ids)


def test_tls_files_travel_in_a_per_cluster_secret(kube) -> None:
    system = KubernetesPods(api_client=kube.api_client(), pod_resources=cpu_resources())
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
        assert [s["metadata"]["name"] for s in secrets] == [tls_secret_name("tls-test")]
        secret = secrets[0]
        assert secret["metadata"]["labels"] == {LABEL_TAG: "HybridCluster",
                                                LABEL_CLUSTER: "tls-test", LABEL_ROLE: "tls"}
        key_file = Path(cluster.pools["cpu"].batch.spec.tls_source.key)
        assert base64.b64decode(secret["data"]["key.pem"]) == key_file.read_bytes()
        mounted = kube.secret_files(job, "hybrid-tls")
        assert sorted(p.name for p in mounted.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]
        for path in mounted.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o400
        command = kube.pod(job)["spec"]["containers"][0]["command"]
        assert command[command.index("--tls-key") + 1] == "/etc/hybrid/tls/key.pem"
        assert "BEGIN" not in str(kube.pod(job))  # no key material in the pod itself
    finally:
        cluster.close()
    assert all(p["metadata"].get("deletionTimestamp") for p in kube.list_objects("pods"))
    # The secret outlives the pools (it is per cluster) until the cluster is removed,
    # and `hybrid gc` finds the cluster through it.
    assert system.cluster_names() == ["tls-test"]
    system.cluster_closed("tls-test")
    assert kube.list_objects("secrets") == []
    wait_until(lambda: system.cluster_names() == [], 20, "nothing left of the cluster")


def test_waiting_and_failed_pods_report_their_reasons(kube, scheduler) -> None:
    address = scheduler.scheduler_address
    api = kube.api_client()
    missing = KubernetesPods(image=MISSING_IMAGE, api_client=api, pod_resources=cpu_resources())
    too_big = KubernetesPods(api_client=api, pod_resources=gpu_resources(number_of_gpus=8))
    broken = KubernetesPods(api_client=api, pod_resources=cpu_resources(), python="/bin/false")
    short = KubernetesPods(api_client=api, pod_resources=cpu_resources())
    [pull] = missing.submit(pool_spec(address, cpu_resources(), "pull"), Path("."), 1)
    [big] = too_big.submit(pool_spec(address, gpu_resources(number_of_gpus=8), "big"),
                           Path("."), 1)
    [fails] = broken.submit(pool_spec(address, cpu_resources(), "fails"), Path("."), 1)
    [lease] = short.submit(pool_spec(address, cpu_resources(), "lease", lease_seconds=2),
                           Path("."), 1)

    def state(name: str) -> tuple[JobState, str | None]:
        [status] = short.query(job_ids=[name])
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
    assert failed[1] == "Error (exit code 1)"
    ended = wait_until(lambda: state(lease)[0] is JobState.failed and state(lease), 30,
                       "the deadline")
    assert ended[1].startswith("DeadlineExceeded: Pod was active on the node longer")
    # remove_cluster deletes every pod of the cluster, finished ones too.
    active = short.remove_cluster("k8s-test")
    assert sorted(active) == sorted([pull, big])
    wait_until(lambda: not kube.list_objects("pods"), 20, "every pod deleted")


def test_held_pods_stop_waiting_for_workers_with_the_reason(kube) -> None:
    system = KubernetesPods(image=MISSING_IMAGE, api_client=kube.api_client(),
                            pod_resources=cpu_resources())
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
    assert kube.list_objects("pods") == []


def test_a_refused_pod_undoes_the_whole_submission(tmp_path) -> None:
    double = KubeAPIServerDouble(tmp_path / "quota", pod_quota=2,
                                 missing_images=(MISSING_IMAGE,)).start()
    try:
        system = KubernetesPods(image=MISSING_IMAGE, api_client=double.api_client())
        with pytest.raises(KubernetesAPIError) as error:
            system.submit(pool_spec("tcp://127.0.0.1:1", cpu_resources(), "cpu"), tmp_path, 3)
        assert error.value.status == 403
        assert "exceeded quota" in str(error.value)
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
        names = system.submit(pool_spec("tcp://127.0.0.1:1", cpu_resources(), "cpu"),
                              tmp_path, 5)
        before = len(double.requests)
        assert sorted(s.job_id for s in system.query(cluster="k8s-test")) == sorted(names)
        listed = [p for _, p in double.requests[before:]]
        assert len(listed) == 3 and "continue=" in listed[-1]
        system.remove(names)
    finally:
        double.stop()


def test_kubeconfig_files_are_used(kube, tmp_path) -> None:
    config = kube.write_kubeconfig(tmp_path / "kubeconfig")
    system = KubernetesPods(image=MISSING_IMAGE, kube_config=config)
    names = system.submit(pool_spec("tcp://127.0.0.1:1", cpu_resources(), "cpu"), tmp_path, 1)
    assert [s.job_id for s in system.query(cluster="k8s-test")] == names
    system.remove(names)
    assert kube.list_objects("pods") == []
    wrong = tmp_path / "wrong"
    wrong.write_text(config.read_text().replace(TOKEN, "not-the-token"))
    with pytest.raises(KubernetesAPIError) as error:
        KubernetesPods(kube_config=wrong).query()
    assert error.value.status == 401
    with pytest.raises(ConfigurationError) as missing:
        KubernetesPods(kube_config=tmp_path / "absent").query()
    assert missing.value.field == "kube_config"


def test_refused_specs_make_no_api_request(kube, tmp_path) -> None:
    system = KubernetesPods(api_client=kube.api_client(), pod_resources=cpu_resources())
    bad = pool_spec("tcp://127.0.0.1:1", cpu_resources(), "cpu",
                    prologue=("module load cuda",))
    with pytest.raises(ConfigurationError):
        system.submit(bad, tmp_path, 1)
    mismatch = pool_spec("tcp://127.0.0.1:1", cpu_resources(number_of_threads=2), "cpu")
    with pytest.raises(ConfigurationError, match="pod_resources"):
        system.submit(mismatch, tmp_path, 1)
    from hybrid.worker import TLSFiles

    no_files = pool_spec("tcp://127.0.0.1:1", cpu_resources(), "cpu")
    no_files = JobSpec(no_files.cluster, no_files.pool, WorkerOptions(
        "tls://127.0.0.1:1", tls=TLSFiles("ca.pem", "cert.pem", "key.pem"),
        memory_limit=no_files.memory), memory=no_files.memory)
    with pytest.raises(ConfigurationError) as error:
        system.submit(no_files, tmp_path, 1)
    assert error.value.field == "tls_source"
    assert kube.requests == []
