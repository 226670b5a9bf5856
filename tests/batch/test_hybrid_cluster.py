"""HybridCluster: many pools in one cluster, target scaling, per-pool adaptive, backends.

The HTCondor and Slurm pools here are the REAL systems (fixtures in tests/conftest.py); the
GPU is faked by the resource the pool advertises (the CI pools declare fake GPUs). PBS and LSF
run against the executing test doubles of tests/batch/doubles (named as such).
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from hybrid import HybridCluster
from hybrid.backends import (
    DaskHTCondorBackend,
    DaskLSFBackend,
    DaskPBSBackend,
    DaskSLURMBackend,
)
from hybrid.errors import ConfigurationError, WorkersDidNotArrive
from hybrid.resources import ComputeResources, QueueWorkerResources
from tests.batch._tasks import environment_value, pack, simulate, slow_simulation
from tests.batch.doubles import batch_double
from tests.batch.test_real_pools import condor_jobs, slurm_jobs, wait_for

pytestmark = pytest.mark.timeout(300)

VENV_BIN = os.path.dirname(sys.executable)


@pytest.mark.htcondor
@pytest.mark.slurm
def test_gpu_pool_on_htcondor_cpu_pool_on_slurm_route_every_task(
        htcondor_pool, slurm_cluster, staging) -> None:
    with HybridCluster(security=True) as cluster:
        cluster.add_pool("gpu", "htcondor", ComputeResources(number_of_gpus=1), nanny=False)
        cluster.add_pool("cpu", "slurm", QueueWorkerResources(
            number_of_threads=1, per_thread_memory_limit="512 MiB", wallclock_time_limit="00:15"),
            nanny=False)
        cluster.scale(2, pool="gpu")
        cluster.scale(2, pool="cpu")
        cluster.wait_for_workers(4, timeout=150, progress=False)
        assert cluster.scheduler_address.startswith("tls://")
        with cluster.get_client() as client:
            sims = client.gather(client.map(simulate, range(12)))
            packs = client.gather(client.map(pack, range(12)))
        assert [r for r, _ in sims] == [s * 3 for s in range(12)]
        assert [r for r, _ in packs] == [s + 1000 for s in range(12)]
        assert {w for _, w in sims} <= set(cluster.connected_workers("gpu"))
        assert {w for _, w in packs} <= set(cluster.connected_workers("cpu"))
        assert len(condor_jobs(cluster.name)) == 2 and len(slurm_jobs(cluster.name)) == 2
    # close() removed every job, confirmed by the batch systems themselves
    assert condor_jobs(cluster.name) == [] and slurm_jobs(cluster.name) == []


@pytest.mark.slurm
def test_scale_up_down_up_the_batch_system_follows_the_target(slurm_cluster, staging) -> None:
    resources = QueueWorkerResources(per_thread_memory_limit="256 MiB",
                                     wallclock_time_limit="00:10")
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "slurm", resources, nanny=False)
        for target in (3, 1, 2):
            cluster.scale(target)  # one pool: no name needed
            cluster.scale(target)  # repeating the call never over-submits
            wait_for(lambda t=target: len(slurm_jobs(cluster.name)) == t, 60,
                     f"squeue to list {target} job(s)")
            cluster.wait_for_workers(target, timeout=60, progress=False)
            wait_for(lambda t=target: len(cluster.connected_workers()) == t, 60,
                     f"{target} connected worker(s)")
        assert cluster.pools["cpu"].submit_calls == 2  # 3, then +1
    assert slurm_jobs(cluster.name) == []


@pytest.mark.htcondor
@pytest.mark.slurm
def test_adaptive_grows_only_the_pool_whose_resource_is_in_demand(
        htcondor_pool, slurm_cluster, staging) -> None:
    with HybridCluster() as cluster:
        gpu = cluster.add_pool("gpu", "htcondor", ComputeResources(number_of_gpus=1), nanny=False)
        cpu = cluster.add_pool("cpu", "slurm", QueueWorkerResources(
            per_thread_memory_limit="256 MiB", wallclock_time_limit="00:10"), nanny=False)
        gpu_adaptive = cluster.adapt(pool="gpu", minimum=0, maximum=2, interval="1s",
                                     wait_count=3)
        cpu_adaptive = cluster.adapt(pool="cpu", minimum=0, maximum=2, interval="1s",
                                     wait_count=3)
        with cluster.get_client() as client:
            futures = client.map(slow_simulation, range(8), pure=False)
            assert client.gather(futures, errors="raise") == list(range(8))
            del futures
        assert gpu.submit_calls >= 1
        assert cpu.submit_calls == 0  # no CPU demand, no CPU job
        assert cluster.connected_workers("cpu") == []
        # the burst is over: the GPU pool goes back to its minimum
        wait_for(lambda: condor_jobs(cluster.name) == [], 90, "the GPU jobs to be removed")
        wait_for(lambda: cluster.connected_workers() == [], 60, "the workers to leave")
        # bounded: no submit/remove loop went unnoticed
        assert gpu.submit_calls <= 2
        assert gpu.remove_calls <= 3
        assert gpu_adaptive.errors == [] and cpu_adaptive.errors == []


def test_local_pool_target_scaling_and_errors(staging) -> None:
    with HybridCluster() as cluster:
        with pytest.raises(ConfigurationError, match="add one first"):
            cluster.scale(1)
        cluster.add_pool("a", "local", nanny=False)
        with pytest.raises(ConfigurationError, match="nanny"):
            cluster.add_pool("b", "local", nanny=False, cores=2, processes=2)
        cluster.add_pool("b", "local", cores=2, memory="1 GiB", processes=2)
        with pytest.raises(ConfigurationError, match="pool = None"):
            cluster.scale(1)
        with pytest.raises(ConfigurationError, match=r"scale\.n"):
            cluster.scale(-1, pool="a")
        with pytest.raises(ConfigurationError, match="processes"):
            cluster.add_pool("c", "local", cores=2, processes=3)
        with pytest.raises(ConfigurationError, match="cores"):
            cluster.add_pool("d", "local", QueueWorkerResources(number_of_threads=4), cores=2)
        with pytest.raises(ConfigurationError, match="system"):
            cluster.add_pool("e", "torque")
        cluster.scale(1, pool="b")
        # processes=2: one job starts two workers of one thread and 512 MiB each
        wait_for(lambda: len(cluster.connected_workers("b")) == 2, 60, "two workers of one job")
        # (the cluster's own view follows the scheduler's messages: it may lag a moment)
        wait_for(lambda: len(cluster.scheduler_info["workers"]) == 2, 30,
                 "the cluster's view of both workers")
        workers = cluster.scheduler_info["workers"].values()
        assert sorted(w["nthreads"] for w in workers) == [1, 1]
        assert {w["memory_limit"] for w in workers} == {512 * 2**20}
        assert len(cluster.pools["b"].active()) == 1
    assert not any(staging.glob("*"))


def test_pool_status_counts_jobs_by_state_with_target_and_workers(staging) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.add_pool("idle", "local", nanny=False)
        before = cluster.pool_status()
        assert before["idle"].jobs == {"pending": 0, "running": 0, "suspended": 0, "held": 0,
                                       "removing": 0}
        assert before["idle"].summary() == "pool idle (local): no job; target 0"
        cluster.scale(2, pool="cpu")
        cluster.wait_for_workers(2, pool="cpu", timeout=60, progress=False)
        wait_for(lambda: cluster.pool_status()["cpu"].jobs["running"] == 2, 60,
                 "both local jobs reported running")
        status = cluster.pool_status()["cpu"]
        assert (status.name, status.system, status.target, status.connected) == (
            "cpu", "local", 2, 2)
        assert status.summary().startswith("pool cpu (local): 2 running")
        assert status.as_dict()["jobs"]["running"] == 2
        adaptive = cluster.adapt(pool="idle", minimum=0, maximum=3)
        wait_for(lambda: cluster.pool_status()["idle"].adaptive == (0, 3), 30, "bounds shown")
        adaptive.stop()


def test_wait_for_workers_names_the_reason_when_jobs_fail(staging) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", python="/nonexistent/python")
        cluster.scale(1)
        with pytest.raises(WorkersDidNotArrive, match="exit code"):
            cluster.wait_for_workers(1, timeout=30, progress=False)


@pytest.mark.htcondor
def test_evaluator_style_htcondor_backend(htcondor_pool, staging) -> None:
    with DaskHTCondorBackend(minimum_number_of_workers=1, maximum_number_of_workers=1,
                             resources_per_worker=QueueWorkerResources(number_of_gpus=1),
                             disable_nanny_process=True) as backend:
        assert "request_gpus = 1" in backend.job_script()
        assert backend.submit_task(pack, 1).result()[0] == 1001
        assert backend.submit_task(simulate, 2).result()[0] == 6
        name = backend.cluster.name
    assert condor_jobs(name) == []


@pytest.mark.slurm
def test_evaluator_style_slurm_backend(slurm_cluster, staging) -> None:
    resources = QueueWorkerResources(number_of_gpus=1, per_thread_memory_limit="256 MiB",
                                     wallclock_time_limit="00:10")
    with DaskSLURMBackend(resources_per_worker=resources, queue_name="debug",
                          # as `conda activate` would: the job's python is looked up after
                          setup_script_commands=["export HYBRID_SETUP_RAN=yes",
                                                 f"export PATH={VENV_BIN}:$PATH"],
                          extra_script_options=["--nice=10"],
                          disable_nanny_process=True) as backend:
        script = backend.job_script()
        assert "#SBATCH --gres=gpu:1" in script and "#SBATCH --partition=debug" in script
        assert "#SBATCH --nice=10" in script
        assert backend.submit_task(environment_value, "HYBRID_SETUP_RAN").result() == "yes"
        name = backend.cluster.name
    assert slurm_jobs(name) == []


@pytest.mark.parametrize("kind", ["pbs", "lsf"])
def test_evaluator_style_pbs_and_lsf_backends_against_the_doubles(
        kind, tmp_path, monkeypatch, staging) -> None:
    """PBS and LSF cannot run here: their TEST DOUBLES (tests/batch/doubles) execute the jobs."""
    doubles = os.path.join(os.path.dirname(batch_double.__file__), kind)
    state = tmp_path / f"{kind}-double-state"
    monkeypatch.setenv("PATH", f"{doubles}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HYBRID_DOUBLE_PYTHON", sys.executable)
    monkeypatch.setenv(f"HYBRID_{kind.upper()}_DOUBLE_STATE", str(state))
    backend_class = DaskPBSBackend if kind == "pbs" else DaskLSFBackend
    resources = QueueWorkerResources(number_of_gpus=1, wallclock_time_limit="00:10")
    try:
        with backend_class(resources_per_worker=resources, disable_nanny_process=True) as backend:
            script = backend.job_script()
            assert ("ngpus=1" in script) if kind == "pbs" else ('-gpu "num=1"' in script)
            assert backend.submit_task(pack, 5).result()[0] == 1005
            assert backend.submit_task(simulate, 5).result()[0] == 15
            system = backend.cluster.pools["gpu"].system
            name = backend.cluster.name
        assert [j for j in system.query(cluster=name) if j.state.active] == []
    finally:
        store = batch_double.StateStore(state)
        for pid in batch_double.job_pids(store):
            if batch_double.process_alive(pid):
                os.killpg(pid, signal.SIGKILL)


def test_jobqueue_keys_keep_their_meaning(staging) -> None:
    with HybridCluster(scheduler_address=None) as cluster:
        pool = cluster.add_pool(
            "cpu", "slurm", cores=4, memory="8 GiB", processes=2, walltime="02:30",
            job_extra_directives=["--exclusive"], worker_extra_args=["--lifetime", "1h"],
            job_script_prologue=["module load apptainer"])
        script = pool.job_script()
    assert "#SBATCH --cpus-per-task=4" in script
    assert "#SBATCH --mem=8192M" in script
    assert "#SBATCH --time=02:30:00" in script
    assert "#SBATCH --exclusive" in script
    assert "module load apptainer" in script
    assert "--nthreads 2 --nworkers 2 --memory-limit 4294967296" in script
    assert "--death-timeout 60 --lifetime 1h" in script


def test_scale_down_moves_results_off_retired_workers(staging) -> None:
    """Results held only by the workers being retired survive the scale-down."""
    from tests.batch._tasks import square

    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(3)
        cluster.wait_for_workers(3, timeout=60, progress=False)
        with cluster.get_client() as client:
            futures = client.map(square, range(30), pure=False)
            client.gather(futures)
            holders = {w for ws in client.who_has(futures).values() for w in ws}
            assert len(holders) > 1  # results spread over several workers
            cluster.scale(1)
            wait_for(lambda: len(cluster.connected_workers()) == 1, 60, "one worker left")
            # every result is still there, now on the one remaining worker
            assert client.gather(futures) == [x * x for x in range(30)]
            assert len({w for ws in client.who_has(futures).values() for w in ws}) == 1
        assert len(cluster.pools["cpu"].active()) == 1


def test_adapt_active_false_stops_it_as_on_a_gateway_cluster(staging) -> None:
    """``adapt(active=False)`` (dask-gateway's way to stop adapting) was refused here while
    ``HTCGatewayCluster`` took it; ``target_duration`` is refused with the reason."""
    with HybridCluster() as cluster:
        cluster.add_pool("a", "local", nanny=False)
        cluster.add_pool("b", "local", nanny=False)
        first = cluster.adapt(pool="a", maximum=2, interval="0.2s")
        second = cluster.adapt(pool="b", maximum=2, interval="0.2s")
        wait_for(lambda: first.steps > 0 and second.steps > 0, 30, "both to take a step")
        assert cluster.adapt(pool="a", active=False) is None
        assert cluster.pools["a"].adaptive is None and cluster.pools["b"].adaptive is second
        steps = first.steps
        wait_for(lambda: second.steps >= steps + 3, 30, "the other pool to go on adapting")
        assert first.steps == steps  # stopped: it takes no step
        assert cluster.adapt(active=False) is None  # every pool
        assert cluster.pools["b"].adaptive is None
        with pytest.raises(ConfigurationError, match="tasks waiting") as caught:
            cluster.adapt(pool="a", maximum=2, target_duration="5s")
        assert caught.value.field == "adapt.target_duration"
        assert cluster.pools["a"].adaptive is None and cluster.jobs() == []


def test_waiting_for_more_workers_than_the_pools_are_scaled_to_says_so_at_once(staging) -> None:
    """``scale(1)`` then ``wait_for_workers(3)`` waited out its timeout (or forever, without
    one) for workers no job would start."""
    import time

    with HybridCluster() as cluster:
        cluster.add_pool("a", "local", nanny=False)
        cluster.add_pool("b", "local", cores=2, processes=2)
        cluster.scale(1, pool="a")
        started = time.monotonic()
        with pytest.raises(WorkersDidNotArrive, match=r"at most 1 \(a: 1\)") as caught:
            cluster.wait_for_workers(3, pool="a", timeout=60)
        assert "scale(3, pool='a')" in str(caught.value)
        assert time.monotonic() - started < 30  # at once, not after the 60 s
        # every pool: a job of b runs two workers; an adaptive pool may grow to its maximum
        cluster.scale(1, pool="b")
        with pytest.raises(WorkersDidNotArrive, match=r"at most 3 \(a: 1, b: 2\)"):
            cluster.wait_for_workers(4, timeout=60)
        cluster.adapt(pool="a", minimum=1, maximum=3, interval="0.5s")
        cluster.wait_for_workers(3, timeout=60)  # reachable: 1 of a, 2 of b


def test_a_scheduler_that_cannot_listen_names_the_field(staging) -> None:
    """A listen host that is no host, or a port another process holds, is refused naming
    ``host`` or ``scheduler_port`` (the port case runs in tests/reliability/test_bad_input.py);
    an address of no interface here (``EADDRNOTAVAIL``, which no test may bind beyond
    loopback) names the field it came from, the argument or ``hybrid.scheduler.host``."""
    import errno

    import dask

    from hybrid.security import listen_error

    with pytest.raises(ConfigurationError) as caught:
        HybridCluster(host="my host")
    assert caught.value.field == "HybridCluster.host"
    unavailable = OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
    explained = listen_error(unavailable, "HybridCluster.host", "10.1.2.3", 0)
    assert explained.field == "HybridCluster.host" and explained.value == "10.1.2.3"
    assert "Cannot assign requested address" in str(explained)
    assert listen_error(OSError(errno.EACCES, "Permission denied"), "h", "10.1.2.3", 1) is None
    with dask.config.set({"hybrid.scheduler.host": "127.0.0.1"}), \
            HybridCluster(dashboard_address=None) as cluster:
        assert cluster._host_field == "hybrid.scheduler.host"


def test_pool_status_is_read_on_the_cluster_s_loop(staging) -> None:
    """A refresh applies each change on the cluster's loop at once (an eviction is counted,
    then its job is marked pending). ``pool_status()`` read from the script's thread saw
    half of one on CI: evictions 1 and the job not yet pending. It is read on the loop."""
    import threading

    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        read_on = []
        status = cluster.manager.status

        def recorded() -> dict:
            read_on.append(threading.get_ident())
            return status()

        cluster.manager.status = recorded
        assert "cpu" in cluster.pool_status()
        assert read_on and read_on[0] != threading.get_ident()  # not this thread: the loop's


def test_extra_resources_are_added_to_the_routing_ones_not_put_in_their_place(staging) -> None:
    """``worker_extra_args=["--resources", "FPGA=1"]`` (hybrid.yaml's own example) gave the
    worker a second ``--resources``, and ``dask worker`` keeps the last: the worker lost
    ``notGPU`` and no CPU task could run on it. The worker now advertises both."""
    from tests.batch._tasks import square

    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False, cores=2,
                         worker_extra_args=["--resources", "FPGA=1"])
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=60, progress=False)
        with cluster.get_client() as client:
            (worker,) = client.scheduler_info()["workers"].values()
            assert worker["resources"] == {"GPU": 0, "notGPU": 2, "FPGA": 1}
            assert client.submit(square, 3, pure=False).result(timeout=60) == 9  # a CPU task
            assert client.submit(square, 4, resources={"FPGA": 1}).result(timeout=60) == 16


@pytest.mark.parametrize(("args", "field", "words"), [
    (["--nthreads=8"], "worker_extra_args[0]", "the pool's cores"),
    (["--lifetime", "1h", "--name", "w"], "worker_extra_args[2]", "named after its batch job"),
    (["--resources", "GPU=2"], "worker_extra_args[0]", "route GPU and CPU tasks"),
    (["--resources=FPGA"], "worker_extra_args[0]", '"FPGA=1"'),
])
def test_extra_arguments_that_would_undo_hybrid_s_own_are_refused(
        args: list[str], field: str, words: str) -> None:
    """``dask worker`` takes the last of an option given twice: an extra argument that hybrid
    sets too (cores, the worker's name, the routing resources) would silently win."""
    from hybrid.pools import PoolSpec

    with pytest.raises(ConfigurationError) as caught:
        PoolSpec.build("cpu", "slurm", worker_extra_args=args)
    assert caught.value.field == f"add_pool('cpu').{field}" and words in str(caught.value)


def test_closing_ends_the_loop_thread_its_clients_shared_and_a_closed_cluster_says_so(
        staging) -> None:
    """A client from ``get_client()`` kept the cluster's "IO loop" thread alive after
    ``close()`` (its own hold on the loop); ``with cluster:`` after the close raised
    distributed's "IOLoop is closed" instead of hybrid's one clear error."""
    import threading

    from hybrid.errors import ClusterClosed

    def loop_threads() -> set[int]:
        return {t.ident for t in threading.enumerate() if t.name == "IO loop"}

    before = loop_threads()
    cluster = HybridCluster()
    cluster.add_pool("cpu", "local", nanny=False)
    cluster.scale(1)
    cluster.wait_for_workers(1, timeout=60, progress=False)
    client = cluster.get_client()
    assert client.submit(sum, [1, 2]).result(timeout=60) == 3
    cluster.close()
    wait_for(lambda: loop_threads() <= before, 30, "the cluster's loop thread to end")
    with pytest.raises(ClusterClosed, match=cluster.name), cluster:
        pass
