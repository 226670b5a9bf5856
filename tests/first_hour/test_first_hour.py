"""A new user's first hour (issue 12): each numbered item has its test here, or a pointer to
the test that covers it where it lives beside related tests.

- 11 (every openff ``dask_kubernetes`` name importable): tests/kubernetes/test_k8s_seeds.py
- 12 (a stuck-job report takes the batch system's reason when it arrives):
  tests/batch/test_cli_and_templates.py::test_adaptive_reports_a_job_stuck_in_the_queue...
- 13 (the HTCondor chroot's mirror only from the host's apt sources): tests/ci/
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import dask
import pytest
from click.testing import CliRunner

from hybrid import HybridCluster
from hybrid.backends import BatchToolMissingWarning, DaskLSFBackend, DaskSLURMBackend
from hybrid.cli import COMMANDS, cli
from hybrid.errors import ConfigurationError, PoolFailed
from hybrid.resources import QueueWorkerResources
from tests.batch._tasks import environment_value
from tests.foundation.conftest import clean_environment
from tests.scheduler_workers import scheduler_workers

pytestmark = pytest.mark.timeout(180)

VENV_BIN = str(Path(sys.executable).parent)


@pytest.fixture
def quick(staging):
    """Short reconcile periods, so the tests see the manager's decisions soon."""
    with dask.config.set({"hybrid.batch.poll-interval": "0.3s"}):
        yield staging


def test_1_client_wait_for_workers_takes_distributeds_arguments(quick) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local")
        cluster.scale(2)
        with cluster.get_client() as client:
            client.wait_for_workers(2, 30)  # n, timeout: as distributed's Client has it
            assert len(scheduler_workers(client)) == 2
        with pytest.raises(ConfigurationError, match="n_workers"):
            cluster.wait_for_workers(0, 5)


def test_2_a_pool_that_never_submitted_does_not_ask_its_batch_system_on_close(
        quick, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue, bjobs, ... anywhere
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "slurm")
        cluster.add_pool("gpu", "lsf", gpus=1)
    assert cluster.status.name == "closed"  # and no error about leftover jobs


def test_2_the_missing_submit_tool_is_the_error_cleanup_does_not_replace_it(
        quick, tmp_path, monkeypatch) -> None:
    """The backend starts, as openff-evaluator's does (issue 24), with a warning; the missing
    tool is the error waiting raises, and leaving the block adds nothing to it."""
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{VENV_BIN}")  # python, no bsub
    with pytest.warns(BatchToolMissingWarning, match="bsub"), pytest.raises(
            PoolFailed) as caught:
        with DaskLSFBackend(resources_per_worker=QueueWorkerResources()) as backend:
            backend.client.wait_for_workers(1, 60)
    message = str(caught.value)
    assert "'bsub' was not found" in message
    assert "left work behind" not in message


def test_3_an_adaptive_pool_whose_tool_is_missing_fails_its_tasks_with_the_reason(
        quick, tmp_path, monkeypatch) -> None:
    from tests.batch._tasks import pack

    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{VENV_BIN}")  # no bsub here
    backend = DaskLSFBackend(minimum_number_of_workers=0, maximum_number_of_workers=2,
                             adaptive_interval="0.2s")
    with backend:
        future = backend.submit_task(pack, 1)
        with pytest.raises(RuntimeError, match="'bsub' was not found") as caught:
            future.result(timeout=60)  # not forever
        assert "gave up" in str(caught.value)
        pool = backend.cluster.pools["cpu"]
        assert pool.failed and pool.submit_calls == 0


def test_4_gpu_workers_in_a_container_get_the_gpu_flag_and_container_options() -> None:
    result = CliRunner().invoke(cli, ["render", "--system", "htcondor", "--gpus", "1",
                                      "--container-image", "/img/x.sif",
                                      "--container-option=--cleanenv"])
    assert result.exit_code == 0, result.output
    assert "request_gpus = 1" in result.output
    assert "\napptainer exec --nv --cleanenv /img/x.sif python " in result.output
    amd = CliRunner().invoke(cli, ["render", "--system", "slurm", "--gpus", "1",
                                   "--container-image", "/img/x.sif", "--gpu-vendor", "amd"])
    assert "\napptainer exec --rocm /img/x.sif" in amd.output
    cpu = CliRunner().invoke(cli, ["render", "--system", "slurm",
                                   "--container-image", "/img/x.sif"])
    assert "--nv" not in cpu.output


def test_5_scripts_are_shown_before_anything_starts() -> None:
    backend = DaskLSFBackend(resources_per_worker=QueueWorkerResources(number_of_gpus=1),
                             queue_name="gpuqueue",
                             setup_script_commands=["conda activate evaluator"])
    script = backend.job_script()  # before start(): nothing submitted, nothing written
    assert '#BSUB -gpu "num=1"' in script and "#BSUB -q gpuqueue" in script
    assert backend.cluster is None
    render = CliRunner().invoke(cli, [
        "render", "--system", "slurm", "--pixi-project", "/p/pixi.toml", "--pixi-env", "gpu",
        "--job-script-prologue", "module load cuda"])
    assert render.exit_code == 0, render.output
    assert "pixi run --manifest-path /p/pixi.toml --environment gpu --executable" in (
        render.output)
    conda = CliRunner().invoke(cli, ["render", "--system", "slurm", "--conda-env", "ana"])
    assert "conda run --no-capture-output -n ana python" in conda.output


def test_6_setup_commands_run_in_bash_before_the_workers_python_is_found(quick) -> None:
    backend = DaskSLURMBackend(
        resources_per_worker=QueueWorkerResources(number_of_threads=1),
        setup_script_commands=["conda activate evaluator", "module load cuda/10.1"])
    script = backend.job_script()
    assert script.startswith("#!/bin/bash\n")
    prologue = script.index("conda activate evaluator")
    lookup = script.index("hybrid_python=$(command -v python3 || command -v python)")
    assert prologue < lookup and sys.executable not in script
    # and for real, on local workers: the setup puts a python on PATH, the worker runs it
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", job_script_prologue=[
            "export HYBRID_T_SETUP=done", f'export PATH="{VENV_BIN}:$PATH"'])
        cluster.scale(1)
        with cluster.get_client() as client:
            client.wait_for_workers(1, 60)
            [value] = client.run(environment_value, "HYBRID_T_SETUP").values()
            assert value == "done"


def test_7_a_dying_worker_says_why_where_its_log_is_and_what_to_do(quick) -> None:
    with dask.config.set({"hybrid.worker.check-paths": False}), HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", container_image="/no/such/image.sif")
        cluster.scale(1)
        with pytest.raises(PoolFailed) as caught:
            cluster.wait_for_workers(1, timeout=60, progress=False)
    message = str(caught.value)
    assert "exit code 127" in message
    assert "a command was not found" in message  # the hint
    log = re.search(r"Its log \((\S+worker-\S+\.log)\)", message)
    assert log, message
    assert "apptainer" in message  # the log's own last line names the missing command
    assert "gave up" in message and "hybrid.batch.max-failures" in message


def test_8_worker_paths_that_do_not_exist_are_refused_when_the_pool_is_added(
        quick, tmp_path) -> None:
    with HybridCluster() as cluster:
        for option, value in (("container_image", "/no/such.sif"),
                              ("pixi_project", "/no/such/pixi.toml"),
                              ("conda_env", "/no/such/env")):
            with pytest.raises(ConfigurationError) as caught:
                cluster.add_pool(option.replace("_", "-"), "local", **{option: value})
            assert caught.value.field.endswith(option) and "check-paths" in str(caught.value)
        (tmp_path / "image.sif").write_text("")
        cluster.add_pool("ok", "local", container_image=str(tmp_path / "image.sif"))
        cluster.add_pool("remote", "local", container_image="docker://ghcr.io/dask/dask")


SECOND_PROCESS_JOBS = """
import json, sys
from dask_gateway import BasicAuth
from hybrid import HTCGateway
address, proxy, user, password, name = sys.argv[1:]
gateway = HTCGateway(address=address, proxy_address=proxy, auth=BasicAuth(user, password))
cluster = gateway.connect(name)
print(json.dumps(sorted(status.job_id for status in cluster.jobs())))
cluster.close()
gateway.close()
"""


@pytest.mark.gateway
def test_9_the_dev_gateway_with_local_workers_from_banner_to_shutdown(quick) -> None:
    import json

    from hybrid import HTCGateway
    from hybrid.gateway_server.dev import start_dev_gateway

    with start_dev_gateway() as dev:
        banner = dev.banner()
        assert 'new_cluster(pool="local")' in banner  # how to get workers, in the banner
        gateway = dev.gateway(HTCGateway)
        cluster = gateway.new_cluster(pool="local")
        cluster.scale(2)
        client = cluster.get_client()
        client.wait_for_workers(2, 60)
        cluster.close(shutdown=False)  # this view goes; the cluster and its jobs stay
        listed = subprocess.run(
            [sys.executable, "-c", SECOND_PROCESS_JOBS, dev.address, dev.proxy_address,
             dev.username, dev.password, cluster.name],
            capture_output=True, text=True, timeout=120, env=clean_environment(
                {"DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(quick)}))  # the same user's
        assert listed.returncode == 0, listed.stderr[-2000:]
        assert len(json.loads(listed.stdout.strip().splitlines()[-1])) == 2
        again = gateway.connect(cluster.name)
        client = again.get_client()
        again.shutdown()
        assert client.status == "closed"  # no reconnecting to a scheduler that is gone
        gateway.close()


SEED_004_SCRIPT = """\
import logging

from hybrid.backends import DaskLocalCluster
from hybrid.resources import ComputeResources, GPUToolkit

worker_resources = ComputeResources(
    number_of_threads=1,
    number_of_gpus=1,
    preferred_gpu_toolkit=GPUToolkit.CUDA,
)

with DaskLocalCluster(number_of_workers=1, resources_per_worker=worker_resources) as local_backend:
    local_backend.submit_task(logging.info, "Hello World")
    print("result:", local_backend.submit_task(sum, [1, 2, 3]).result())
"""


#: What asyncio prints, rarely and only on a busy machine, when a worker process stops while
#: distributed's ``BatchedSend`` still waits on tornado's ``Event.wait(timeout)``: Dask's
#: own shutdown race, three lines with no traceback; anything else still counts.
DASK_SHUTDOWN_NOTICE = {
    "Future exception was never retrieved",
    "future: <Future finished exception=TimeoutError('Timeout')>",
    "TimeoutError: Timeout",
}


def test_10_seed_004_as_written_runs_without_a_main_guard(tmp_path) -> None:
    """openff-evaluator's example is a plain script: no ``if __name__ == "__main__":``."""
    script = tmp_path / "evaluate.py"
    script.write_text(SEED_004_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env=clean_environment())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "result: 6" in result.stdout
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and line not in DASK_SHUTDOWN_NOTICE]
    assert len(lines) <= 4, result.stderr  # the no-GPU warning, not pages of tracebacks
    assert "Traceback" not in result.stderr
    assert "Nanny failed to start" not in result.stderr and "INFO" not in result.stderr


def test_10_warnings_point_at_the_callers_line_and_logs_are_quiet(quick, capsys) -> None:
    from hybrid.backends import DaskLocalCluster, NoGPUWarning
    from hybrid.backends.local import local_worker_specs
    from hybrid.resources import ComputeResources

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local_worker_specs("gpu", 1, ComputeResources(number_of_gpus=1), devices=[])
    [warning] = [w for w in caught if issubclass(w.category, NoGPUWarning)]
    assert warning.filename == __file__
    del DaskLocalCluster
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local")
        cluster.scale(1)
        cluster.wait_for_workers(1, 60)
    assert "INFO" not in capsys.readouterr().err  # no Dask INFO lines by default


def _command_paths() -> list[list[str]]:
    import click

    paths = [[]]
    for name in sorted(COMMANDS):
        command = cli.get_command(None, name)
        paths.append([name])
        if isinstance(command, click.Group):
            paths += [[name, sub] for sub in sorted(command.commands)]
    return paths


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "hybrid")
def test_10_every_help_has_an_example(path) -> None:
    result = subprocess.run([sys.executable, "-m", "hybrid.cli", *path, "--help"],
                            capture_output=True, text=True, env=clean_environment())
    assert result.returncode == 0, result.stderr
    assert "Examples:" in result.stdout or not path, result.stdout
    if not path:  # the top level points at the commands' own examples
        assert "COMMAND --help" in result.stdout
