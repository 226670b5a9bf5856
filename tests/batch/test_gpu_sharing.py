"""GPU sharing and CUDA MPS in GPU pools' jobs, without a GPU.

The pools are REAL (local processes through the job script every batch system runs, and the
CI's HTCondor pool, which advertises fake GPUs): what they share is checked by the workers'
resources and by when tasks run. No GPU or NVIDIA driver is here, so
``nvidia-cuda-mps-control`` is a TEST DOUBLE: a shell function given to the job in its setup
commands (``mps_double``), which records what it is asked in a file and leaves a sleeping
stand-in daemon whose PID it writes where the real one does. The scripts of the other
systems are checked by bash itself (``bash -n``) and by running the GPU pod's command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid import HybridCluster
from hybrid.batch import WorkerJob, get_system
from hybrid.errors import ConfigurationError, HybridError
from hybrid.gpusharing import MPS_TASKS_PER_GPU, layout, sharing_mode
from hybrid.kubernetes.pods import KubernetesPods
from hybrid.pools import PoolSpec
from hybrid.worker import Connection, TLSFiles, worker_commands
from tests.batch.test_real_pools import wait_for
from tests.scheduler_workers import scheduler_workers

pytestmark = pytest.mark.timeout(300)

PLAIN = Connection("tcp://10.0.0.1:8786")
PROXIED = Connection("tls://gateway.example.org:8786", TLSFiles("/x/ca", "/x/cert", "/x/key"),
                     sni="daskgateway-demo")


def mps_double_body(log: str) -> str:
    """The TEST DOUBLE of ``nvidia-cuda-mps-control`` (POSIX sh, its arguments in ``$@``):
    ``-d`` records the pipe directory (and its mode and its parent's, and the job's GPUs) in
    ``log`` and leaves a stand-in daemon whose PID it writes where the real one does;
    ``quit`` on stdin is recorded and ends the stand-in."""
    return f"""    if [ "$1" = -d ]; then
        echo "start $CUDA_MPS_PIPE_DIRECTORY $(stat -c %a "$CUDA_MPS_PIPE_DIRECTORY") \
$(stat -c %a "$(dirname "$CUDA_MPS_PIPE_DIRECTORY")") ${{CUDA_VISIBLE_DEVICES-unset}}" >>{log}
        sleep 600 </dev/null >/dev/null 2>&1 &
        echo $! >"$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
    else
        read -r hybrid_double_command
        echo "$hybrid_double_command $CUDA_MPS_PIPE_DIRECTORY" >>{log}
        kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")"
    fi
"""


def mps_double(log: str) -> str:
    """The double as a bash function, for a job's setup commands (``command -v`` finds it)."""
    return ("nvidia-cuda-mps-control() {  # TEST DOUBLE, not NVIDIA's program\n"
            + mps_double_body(log) + "}")


def _build():
    def window(i: int, sleep: float) -> dict:
        """A GPU task: when it ran, where, and the MPS setting of its worker."""
        import os
        import time

        from distributed import get_worker

        began = time.time()
        time.sleep(sleep)
        pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
        return {"began": began, "ended": time.time(), "worker": get_worker().name,
                "pipe": pipe, "pipe_mode": oct(os.stat(pipe).st_mode & 0o777) if pipe else None,
                "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    from hybrid.annotator import gpu_task

    return gpu_task(window)


window = _build()


def most_at_once(runs: list[dict]) -> int:
    """The most tasks that ran at the same moment."""
    edges = sorted([(r["began"], 1) for r in runs] + [(r["ended"], -1) for r in runs])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def log_lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


# --------------------------------------------------------------------------- the model
def test_by_default_a_gpu_job_runs_one_task_per_gpu_and_eight_under_mps() -> None:
    spec = PoolSpec.build("gpu", "slurm", gpus=2, cores=4)
    plain, shared = worker_commands(spec, PLAIN, None)
    assert sharing_mode(spec) == "processes" and spec.max_processes == 2 * MPS_TASKS_PER_GPU
    assert _words(plain, "--nthreads", "--nworkers", "--resources") == ["1", "2", "GPU=1 notGPU=0"]
    assert "--nanny" in plain.arguments
    assert _words(shared, "--nthreads", "--nworkers", "--resources") == [
        "1", str(2 * MPS_TASKS_PER_GPU), "GPU=1 notGPU=0"]


def test_threads_give_one_worker_as_many_threads_as_gpu_tasks() -> None:
    spec = PoolSpec.build("gpu", "slurm", gpus=1, cores=2, gpu_sharing_mode="threads")
    plain, shared = worker_commands(spec, PLAIN, None)
    assert _words(plain, "--nthreads", "--resources") == ["1", "GPU=1 notGPU=0"]
    assert _words(shared, "--nthreads", "--resources") == ["8", "GPU=8 notGPU=0"]
    assert "--nworkers" not in shared.arguments and "--no-nanny" in shared.arguments


def test_behind_a_gateway_proxy_auto_sharing_uses_threads() -> None:
    spec = PoolSpec.build("gpu", "slurm", gpus=1)
    plain, shared = worker_commands(spec, PROXIED, None)
    assert _words(plain, "--nthreads", "--resources") == ["1", "GPU=1 notGPU=0"]
    assert _words(shared, "--nthreads", "--resources") == ["8", "GPU=8 notGPU=0"]
    assert "--nworkers" not in shared.arguments and "--no-nanny" in shared.arguments
    processes = PoolSpec.build("gpu", "slurm", gpus=1, gpu_sharing_mode="processes")
    with pytest.raises(ConfigurationError, match="gpu_sharing_mode"):
        PROXIED.check_pool(processes, "pool")


def test_a_given_sharing_applies_with_or_without_mps() -> None:
    spec = PoolSpec.build("gpu", "slurm", gpus=1, gpu_sharing=3, gpu_sharing_mode="threads")
    plain, shared = worker_commands(spec, PLAIN, None)
    assert shared is None and _words(plain, "--nthreads") == ["3"]
    off = PoolSpec.build("gpu", "slurm", gpus=1, gpu_mps="off")
    assert worker_commands(off, PLAIN, None)[1] is None
    assert "nvidia-cuda-mps-control" not in get_system("slurm").render(
        WorkerJob("c", off, PLAIN), Path("/s"), 1)


def test_a_gpu_pool_serving_cpu_tasks_keeps_its_cores_for_them() -> None:
    spec = PoolSpec.build("gpu", "local", gpus=1, cores=6, serves_unannotated=True,
                          gpu_sharing_mode="threads")
    assert layout(spec).threads == 6 and layout(spec).resources == {"GPU": 1, "notGPU": 6}
    assert layout(spec, 8).threads == 8 and layout(spec, 8).resources == {"GPU": 8, "notGPU": 8}


def test_cpu_pools_are_unchanged() -> None:
    spec = PoolSpec.build("cpu", "slurm", cores=4, processes=2, nanny=True)
    plain, shared = worker_commands(spec, PLAIN, None)
    assert shared is None
    assert _words(plain, "--nthreads", "--nworkers", "--resources") == ["2", "2",
                                                                        "GPU=0 notGPU=2"]
    assert "CUDA MPS" not in get_system("slurm").render(WorkerJob("c", spec, PLAIN),
                                                         Path("/s"), 1)


@pytest.mark.parametrize("options, field, words", [
    ({"gpu_sharing": 0}, "gpu_sharing", "whole number from 1 to 64"),
    ({"gpu_sharing": 2.5}, "gpu_sharing", "whole number"),
    ({"gpu_mps": "yes"}, "gpu_mps", "'auto', 'on' or 'off'"),
    ({"gpu_sharing_mode": "fibers"}, "gpu_sharing_mode", "'auto', 'threads' or 'processes'"),
    ({"gpu_sharing_mode": "processes", "nanny": False}, "nanny", "needs? one|a nanny"),
    ({"gpu_sharing_mode": "processes", "processes": 2, "cores": 2}, "processes", "1 in a GPU"),
    ({"gpu_sharing_mode": "threads", "processes": 2, "cores": 2, "gpu_mps": "off"},
     "processes", "at most gpus x gpu_sharing"),
])
def test_bad_sharing_settings_name_the_field(options, field, words) -> None:
    with pytest.raises(ConfigurationError, match=words) as caught:
        PoolSpec.build("gpu", "slurm", gpus=1, **options)
    assert f".{field} " in str(caught.value) or f".{field} =" in str(caught.value)


def test_sharing_settings_come_from_the_configuration_and_round_trip() -> None:
    import dask

    with dask.config.set({"hybrid.worker.gpu-sharing": 4, "hybrid.worker.gpu-mps": "on",
                          "hybrid.worker.gpu-sharing-mode": "threads"}):
        spec = PoolSpec.build("gpu", "htcondor", gpus=1)
    assert (spec.gpu_sharing, spec.gpu_mps, spec.gpu_sharing_mode) == (4, "on", "threads")
    assert PoolSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    with dask.config.set({"hybrid.worker.gpu-mps": "maybe"}):
        with pytest.raises(ConfigurationError, match=r"hybrid\.worker\.gpu-mps"):
            PoolSpec.build("gpu", "htcondor", gpus=1)


def _words(command, *options: str) -> list[str]:
    args = list(command.arguments)
    return [args[args.index(o) + 1] for o in options if o in args]


# --------------------------------------------------------------------------- the scripts
@pytest.mark.parametrize("system", ["slurm", "pbs", "lsf", "local"])
@pytest.mark.parametrize("mps", ["auto", "on", "off"])
def test_every_gpu_job_script_is_valid_bash(system, mps, tmp_path) -> None:
    spec = PoolSpec.build("gpu", system, gpus=2, cores=4, gpu_mps=mps, walltime="01:00")
    script = tmp_path / "job.sh"
    script.write_text(get_system(system).render(WorkerJob("c", spec, PLAIN), tmp_path, 2))
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert ("nvidia-cuda-mps-control -d" in text) == (mps != "off")
    assert ("gpu_mps is on but no CUDA MPS daemon" in text) == (mps == "on")


def test_htcondor_gpu_wrapper_is_valid_bash(tmp_path) -> None:
    spec = PoolSpec.build("gpu", "htcondor", gpus=1)
    wrapper = tmp_path / "worker.sh"
    wrapper.write_text(get_system("htcondor").render_wrapper(WorkerJob("c", spec, PLAIN),
                                                             tmp_path))
    result = subprocess.run(["bash", "-n", str(wrapper)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "nvidia-cuda-mps-control -d" in wrapper.read_text()


@pytest.mark.parametrize("with_mps", [True, False])
def test_the_gpu_pod_command_picks_the_worker_command_by_mps(tmp_path, with_mps) -> None:
    """The pod's container command, run by /bin/sh here: the worker's python is a stand-in
    that writes its argv; the MPS program is the test double on PATH."""
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >"$ARGV_FILE"\n'
                           'env | grep ^CUDA_MPS_ >>"$ARGV_FILE"\nexit 0\n')
    fake_python.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "mps.log"
    if with_mps:
        double = bin_dir / "nvidia-cuda-mps-control"
        double.write_text("#!/bin/sh\n# TEST DOUBLE, not NVIDIA's program\n"
                          + mps_double_body(str(log)))
        double.chmod(0o755)
    spec = PoolSpec.build("gpu", KubernetesPods(), gpus=1, python=str(fake_python),
                          gpu_sharing_mode="threads")
    pod = KubernetesPods().manifests(WorkerJob("c", spec, PLAIN), 1)[0]
    container = pod["spec"]["containers"][0]
    command = [w.replace("$$", "$") for w in container["command"]]  # what Kubernetes expands
    command = [w.replace("$(HYBRID_WORKER_NAME)", "c-gpu-pod") for w in command]
    assert command[:2] == ["/bin/sh", "-c"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_FILE": str(tmp_path / "argv"),
           "TMPDIR": str(tmp_path)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    threads = argv[argv.index("--nthreads") + 1]
    assert argv[argv.index("--name") + 1] == "c-gpu-pod"
    if with_mps:
        assert threads == str(MPS_TASKS_PER_GPU)
        (start, pipe, mode, parent, _), (quit_, pipe_again) = log_lines(log)
        assert (start, quit_, mode, parent) == ("start", "quit", "700", "700")
        assert pipe == pipe_again and pipe.startswith(str(tmp_path))
        assert f"CUDA_MPS_PIPE_DIRECTORY={pipe}" in argv
        assert not Path(pipe).exists()  # removed with the daemon
    else:
        assert threads == "1" and not any(a.startswith("CUDA_MPS_") for a in argv)


# --------------------------------------------------------------------------- real pools
def _sharing_pool(cluster: HybridCluster, log: Path | None, **options) -> None:
    prologue = [mps_double(str(log))] if log is not None else []
    cluster.add_pool("gpu", "local", gpus=1, job_script_prologue=prologue,
                     python=sys.executable, **options)


def test_a_local_gpu_job_shares_its_gpu_under_its_own_mps_daemon(staging, tmp_path,
                                                                   monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "fakegpu0")  # the GPU the local system hands out
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    log = tmp_path / "mps.log"
    with HybridCluster() as cluster:
        _sharing_pool(cluster, log, gpu_sharing_mode="threads")
        cluster.scale(1, pool="gpu")
        cluster.wait_for_workers(1, timeout=120, progress=False)
        with cluster.get_client() as client:
            runs = client.gather(client.map(window, range(16), sleep=1.0, pure=False))
            workers = scheduler_workers(client).values()
        (worker,) = workers
        assert worker["resources"] == {"GPU": MPS_TASKS_PER_GPU, "notGPU": 0}
        assert most_at_once(runs) == MPS_TASKS_PER_GPU
        assert {r["devices"] for r in runs} == {"fakegpu0"}
        (pipe,) = {r["pipe"] for r in runs}
        # in the job's own TMPDIR (a local job's scratch, under this process's TMPDIR)
        assert Path(pipe).parent.name.startswith("hybrid-mps.") and pipe.endswith("/pipe")
        assert Path(pipe).parents[1].parent == tmp_path
        assert {r["pipe_mode"] for r in runs} == {"0o700"}
        assert log_lines(log) == [["start", pipe, "700", "700", "fakegpu0"]]
    # the daemon was told to quit when the job ended, and its directories are gone
    assert log_lines(log)[1:] == [["quit", pipe]]
    assert not Path(pipe).parent.exists()


def test_without_mps_a_local_gpu_job_runs_one_task_at_a_time(staging, tmp_path,
                                                             monkeypatch) -> None:
    """Two tasks asking half a GPU each do not share it: time-sliced, they would both run
    slower than one after the other."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "fakegpu0")
    with HybridCluster() as cluster:
        _sharing_pool(cluster, None)
        cluster.scale(1, pool="gpu")
        cluster.wait_for_workers(1, timeout=120, progress=False)
        with cluster.get_client() as client:
            assert client.annotator.fraction == 0.5
            runs = client.gather(client.map(window, range(4), sleep=0.5, pure=False))
            (worker,) = scheduler_workers(client).values()
        assert worker["resources"] == {"GPU": 1, "notGPU": 0} and worker["nthreads"] == 1
        assert most_at_once(runs) == 1
        assert {r["pipe"] for r in runs} == {None}


def test_shared_as_processes_each_worker_process_takes_one_gpu_task(staging, tmp_path,
                                                                    monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "fakegpu0")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    log = tmp_path / "mps.log"
    with HybridCluster() as cluster:
        _sharing_pool(cluster, log, gpu_sharing=2, gpu_sharing_mode="processes")
        cluster.scale(1, pool="gpu")
        cluster.wait_for_workers(2, timeout=120, progress=False)
        assert len(cluster.jobs("gpu")) == 1  # one job, two worker processes
        names = cluster.connected_workers("gpu")
        assert len(names) == 2 and all(n.startswith(f"{cluster.name}-gpu-") for n in names)
        with cluster.get_client() as client:
            runs = client.gather(client.map(window, range(4), sleep=1.0, pure=False))
        assert most_at_once(runs) == 2 and {r["worker"] for r in runs} == set(names)
        assert len({r["pipe"] for r in runs}) == 1  # one daemon for the job's processes
    assert [line[0] for line in log_lines(log)] == ["start", "quit"]


def test_gpu_mps_on_without_a_daemon_fails_the_job_saying_why(staging, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "fakegpu0")
    with HybridCluster() as cluster:
        _sharing_pool(cluster, None, gpu_mps="on")
        cluster.scale(1, pool="gpu")
        with pytest.raises(HybridError, match="gpu_mps is on but no CUDA MPS daemon"):
            cluster.wait_for_workers(1, timeout=120, progress=False)


@pytest.mark.htcondor
def test_an_htcondor_gpu_job_shares_its_fake_gpu_under_its_own_mps_daemon(
        htcondor_pool, staging) -> None:
    """The CI pool's fake GPUs (MACHINE_RESOURCE_GPUs): HTCondor hands the job one, and the
    job's MPS daemon (the double, logging into the chroot's /tmp) starts and quits."""
    chroot = Path(os.environ["HYBRID_CONDOR_CHROOT"])
    name = f"hybrid-mps-double-{os.getpid()}.log"
    log = chroot / "tmp" / name
    with HybridCluster(security=True) as cluster:
        cluster.add_pool("gpu", "htcondor", gpus=1, gpu_sharing_mode="threads",
                         python=sys.executable,
                         job_script_prologue=[f": >/tmp/{name}", "chmod 666 /tmp/" + name,
                                              mps_double(f"/tmp/{name}")])
        cluster.scale(1, pool="gpu")
        cluster.wait_for_workers(1, timeout=150, progress=False)
        with cluster.get_client() as client:
            runs = client.gather(client.map(window, range(8), sleep=1.0, pure=False))
            (worker,) = scheduler_workers(client).values()
        assert worker["resources"] == {"GPU": MPS_TASKS_PER_GPU, "notGPU": 0}
        assert most_at_once(runs) == MPS_TASKS_PER_GPU
        (pipe,) = {r["pipe"] for r in runs}
        assert {r["pipe_mode"] for r in runs} == {"0o700"}
        (devices,) = {r["devices"] for r in runs}
        assert devices  # HTCondor assigned one of its fake GPUs
        assert log_lines(log)[0][:3] == ["start", pipe, "700"]
    wait_for(lambda: [line[0] for line in log_lines(log)] == ["start", "quit"], 60,
             "the job's MPS daemon to be told to quit")
    log.unlink()
