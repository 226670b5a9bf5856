"""Grid Engine workers on the REAL single-node Grid Engine (ci/sge/up.sh: Debian's
gridengine 8.1.9, sge_qmaster + sge_execd on this machine). No double anywhere here.

What hybrid submits is read back with Grid Engine's own tools: ``qstat`` (not hybrid's
parser) says which jobs are in the queue, ``qsub -verify`` parses a job script exactly as
``qsub`` would submit it. The bad-input rows need no daemon and run for every contributor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import dask
import pytest

from hybrid import HybridCluster
from hybrid.backends import DaskSGEBackend
from hybrid.batch import JobState, Staging, WorkerJob, get_system
from hybrid.batch.base import worker_name_suffix
from hybrid.batch.sge import SGE, accounting_state, sge_state, task_numbers
from hybrid.errors import BatchError, ConfigurationError, WorkersDidNotArrive
from hybrid.pools import PoolSpec
from hybrid.resources import ComputeResources, QueueWorkerResources
from hybrid.worker import Connection
from tests.batch import test_real_pools
from tests.batch._tasks import environment_value, pack, simulate, square
from tests.batch.test_real_pools import slurm_jobs, wait_for
from tests.scheduler_workers import scheduler_workers

pytestmark = pytest.mark.timeout(300)

VENV_BIN = os.path.dirname(sys.executable)
#: Real distributed schedulers on 127.0.0.1 (TLS optional), closed at the end of a test.
scheduler_factory = test_real_pools.scheduler_factory


# --------------------------------------------------------------------------- Grid Engine itself
def sge_jobs(cluster: str, tag: str = "HybridCluster") -> list[str]:
    """Our tasks of ``cluster`` still in the real queue (any state), as ``qstat -xml -g d``
    lists them: ``JOB.TASK``."""
    out = subprocess.run(["qstat", "-xml", "-g", "d", "-u", "*"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    ids = []
    for entry in ET.fromstring(out).iter("job_list"):
        if (entry.findtext("JB_name") or "").startswith(f"{tag}-{cluster}-"):
            number = entry.findtext("JB_job_number")
            ids += [f"{number}.{task}" for task in task_numbers(entry.findtext("tasks") or "1")]
    return sorted(ids)


def qsub_verify(script: str) -> dict[str, str]:
    """The job ``qsub`` would submit for ``script``, as ``qsub -verify`` prints it (field ->
    value; the script itself left out)."""
    result = subprocess.run(["qsub", "-verify"], input=script, capture_output=True, text=True,
                            timeout=60, cwd="/tmp")
    assert result.returncode == 0, result.stdout + result.stderr
    before, _, after = result.stdout.partition("script_ptr:")
    last = script.rstrip("\n").rsplit("\n", 1)[-1]  # (hybrid's own last line)
    if script in after:  # the script itself, printed verbatim
        after = after.replace(script, "", 1)
    elif last in after:  # printed with a drawn value's odd characters changed: up to its end
        after = after.rpartition(last)[2]
    fields: dict[str, str] = {}
    for line in (before + after).splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip():
            fields[key.strip()] = value.strip()
    return fields


def qdel(*ids: str) -> None:
    """``qdel`` from outside hybrid (an admin's removal)."""
    subprocess.run(["qdel", *ids], capture_output=True, timeout=60)


# --------------------------------------------------------------------------- real end to end
@pytest.mark.sge
def test_n_workers_in_one_qsub_join_run_and_leave_exactly(
        sge_cell, scheduler_factory, staging: Path) -> None:
    staging_root = staging
    scheduler = scheduler_factory(True)  # TLS: the staged key copies are the job's secret
    cluster = f"t{os.getpid()}-sge"
    secret = "it's \"quoted\" $(touch /tmp/hybrid-pwned) `id` ; rm -rf x\n  #$ -t 1-99\nlast"
    spec = PoolSpec.build("cpu", "sge", cores=2, memory="1 GiB", walltime="00:15",
                          env={"HYBRID_T_VALUE": secret}, nanny=False)
    job = WorkerJob(cluster, spec, Connection(scheduler.address, scheduler.tls))
    system = get_system("sge")
    staging = Staging.create(job)
    ids = system.submit(job, staging.path, 3)
    assert len(ids) == 3 and len({job_id.split(".")[0] for job_id in ids}) == 1  # one qsub
    assert sge_jobs(cluster) == sorted(ids)
    statuses = system.query(cluster=cluster)
    assert {s.scheduler for s in statuses} == {scheduler.address}  # the context, read back
    assert {s.pool for s in statuses} == {"cpu"}

    expected = {f"{cluster}-cpu-{worker_name_suffix(j)}" for j in ids}
    wait_for(lambda: scheduler.worker_names() >= expected, 120, "3 workers to join")
    with scheduler.client() as client:
        assert client.gather(client.map(square, range(20))) == [x * x for x in range(20)]
        values = client.run(environment_value, "HYBRID_T_VALUE")
        assert set(values.values()) == {secret}  # exact, and no command in it ran
        # -pe smp 2 and the memory per slot reached the workers
        assert {w["nthreads"] for w in scheduler_workers(client).values()} == {2}
    assert not Path("/tmp/hybrid-pwned").exists()
    for path in staging.path.glob("*.pem"):
        assert path.stat().st_mode & 0o777 == 0o600

    gone = ids[1]
    system.remove([gone])
    wait_for(lambda: gone not in sge_jobs(cluster), 60, f"task {gone} to leave the queue")
    assert sge_jobs(cluster) == sorted(set(ids) - {gone})
    gone_worker = f"{cluster}-cpu-{worker_name_suffix(gone)}"
    wait_for(lambda: gone_worker not in scheduler.worker_names(), 60, "its worker to leave")
    # qacct has the task once the accounting is flushed; it does not say who deleted it
    wait_for(lambda: system.query(job_ids=[gone], history=True) != [], 30, "its record")
    ended, = system.query(job_ids=[gone], history=True)
    assert ended.state is JobState.failed and ended.reason.endswith("exit status 137")
    states = {s.job_id: s.state for s in system.query(job_ids=ids, history=True)}
    assert all(states[j] is JobState.running for j in ids if j != gone)

    assert sorted(system.remove_cluster(cluster)) == sorted(set(ids) - {gone})
    wait_for(lambda: sge_jobs(cluster) == [], 60, "qstat to list no task")
    staging.remove()
    assert not any(staging_root.glob(f"{cluster}-*"))


@pytest.mark.sge
def test_a_request_beyond_max_array_size_is_split_and_beyond_the_cell_refused(
        sge_cell, staging) -> None:
    cluster = f"split{os.getpid()}"
    spec = PoolSpec.build("cpu", "sge", job_extra_directives=["-h"], nanny=False)  # held
    job = WorkerJob(cluster, spec, Connection("tcp://127.0.0.1:9"))
    made = Staging.create(job)
    try:
        ids = get_system("sge", max_array_size=2).submit(job, made.path, 5)
        assert len(ids) == 5
        assert [len([j for j in ids if j.split(".")[0] == n]) for n in
                dict.fromkeys(j.split(".")[0] for j in ids)] == [2, 2, 1]  # three qsubs
        assert sge_jobs(cluster) == sorted(ids)
        assert {s.state for s in get_system("sge").query(job_ids=ids)} == {JobState.held}
        get_system("sge").remove(ids)
        wait_for(lambda: sge_jobs(cluster) == [], 60, "the held tasks to go")
        # above the cell's max_aj_tasks (75000) qsub itself refuses, in its own words
        with pytest.raises(BatchError, match="more than 75000 tasks"):
            get_system("sge", max_array_size=100_000).submit(job, made.path, 75_001)
        assert sge_jobs(cluster) == []
    finally:
        made.remove()


@pytest.mark.sge
def test_held_and_error_state_jobs_are_reported_with_their_reason(sge_cell, staging) -> None:
    with HybridCluster(name=f"held{os.getpid()}") as cluster:
        pool = cluster.add_pool("cpu", "sge", nanny=False, job_extra_directives=["-h"])
        cluster.scale(1)
        with pytest.raises(WorkersDidNotArrive, match=r"on hold \(hqw") as caught:
            cluster.wait_for_workers(1, timeout=20, progress=False)
        assert "held" in str(caught.value)
        # its directory goes away, then it is released: the shepherd cannot chdir there,
        # and Grid Engine puts the task in error state (Eqw), with why
        job_id, = sge_jobs(cluster.name)
        shutil.rmtree(pool.staging_path())
        subprocess.run(["qrls", job_id], check=True, capture_output=True, timeout=60)
        with pytest.raises(WorkersDidNotArrive, match="can't chdir to") as caught:
            cluster.wait_for_workers(1, timeout=60, progress=False)
        assert "error state Eqw" in str(caught.value) and "qmod -cj" in str(caught.value)
    assert sge_jobs(cluster.name) == []  # close() deleted the task in error state too


@pytest.mark.sge
def test_one_held_task_s_hold_is_not_its_sibling_s_reason(sge_cell, staging) -> None:
    """Grid Engine gives its scheduling messages per job number, for every task of an
    array: one held task's "Job is in hold state" read as the reason of its siblings that
    merely wait (here for their begin time)."""
    import time

    later = time.strftime("%Y%m%d%H%M", time.localtime(time.time() + 3600))
    settings = {"hybrid.batch.poll-interval": "0.5s"}
    with dask.config.set(settings), HybridCluster() as cluster:
        pool = cluster.add_pool("w", "sge", nanny=False, walltime="00:10",
                                job_extra_directives=[f"-a {later}"])
        cluster.scale(2)
        wait_for(lambda: len(pool.jobs) == 2, 60, "two tasks in the queue")
        held, waiting = sorted(pool.jobs)
        subprocess.run(["qhold", held], check=True, capture_output=True, timeout=60)

        def reasons() -> dict[str, str | None]:
            return {j: s.reason for j, s in pool.jobs.items()}

        def said_by_grid_engine() -> bool:
            out = subprocess.run(["qstat", "-j", held.split(".")[0]], capture_output=True,
                                 text=True, timeout=60).stdout
            return "Job is in hold state" in out and "execution time not reached" in out

        wait_for(said_by_grid_engine, 120, "Grid Engine's messages for the job")
        seen = time.monotonic()
        wait_for(lambda: pool.refreshed_at > seen + 0.1, 30, "a refresh of the pool since")
        assert pool.jobs[held].state is JobState.held and "qrls" in reasons()[held]
        assert "hold state" not in reasons()[waiting], reasons()
        assert cluster.pool_status()["w"].jobs["pending"] == 1


@pytest.mark.sge
def test_a_job_waiting_for_a_full_queue_says_why_and_its_wait_is_counted(
        sge_cell, staging, caplog) -> None:
    """A full cell gives a waiting job no message of its own, only the scheduler's global
    ones ("dropped because it is full"): the job had no reason, no stuck warning, and no
    pending clock, so an order of preference never fell back from it (a report)."""
    import logging
    import time

    slots = 16  # the CI cell's one host (ci/sge/up.sh)
    settings = {"hybrid.batch.stuck-timeout": "1s", "hybrid.batch.poll-interval": "0.5s"}
    with dask.config.set(settings), HybridCluster() as cluster, \
            caplog.at_level(logging.WARNING, logger="hybrid"):
        cluster.add_pool("big", "sge", cores=slots // 2, memory="256 MiB", nanny=False)
        cluster.scale(3)  # two fill the cell; the third waits
        started = time.monotonic()

        def waiting_for_the_full_queue() -> bool:
            status = cluster.pool_status()["big"]
            return bool(status.jobs.get("pending")) and "full" in str(status.reasons)

        wait_for(waiting_for_the_full_queue, 120, "a task waiting with the cell's reason")
        wait_for(lambda: cluster.pool_status()["big"].oldest_pending is not None, 30,
                 "the waiting task's pending clock")
        wait_for(lambda: any("queued for more than" in r.getMessage() and "full" in
                             r.getMessage() for r in caplog.records), 30,
                 "the stuck warning with the reason")
        pool = cluster.pools["big"]
        assert pool.stale_pending(time.monotonic(), 0) >= 1
        assert cluster.pool_status()["big"].oldest_pending <= time.monotonic() - started + 1
    assert sge_jobs(cluster.name) == []


@pytest.mark.sge
def test_scale_up_down_up_the_queue_follows_the_target(sge_cell, staging) -> None:
    resources = QueueWorkerResources(per_thread_memory_limit="256 MiB",
                                     wallclock_time_limit="00:10")
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "sge", resources, nanny=False)
        for target in (3, 1, 2):
            cluster.scale(target)
            cluster.scale(target)  # repeating the call never over-submits
            wait_for(lambda t=target: len(sge_jobs(cluster.name)) == t, 60,
                     f"qstat to list {target} task(s)")
            cluster.wait_for_workers(target, timeout=90, progress=False)
            wait_for(lambda t=target: len(cluster.connected_workers()) == t, 60,
                     f"{target} connected worker(s)")
        assert cluster.pools["cpu"].submit_calls == 2  # 3, then +1
    assert sge_jobs(cluster.name) == []


@pytest.mark.sge
@pytest.mark.slurm
def test_gpu_pool_on_sge_cpu_pool_on_slurm_route_every_task(sge_cell, slurm_cluster,
                                                            staging) -> None:
    with HybridCluster(security=True) as cluster:
        # the cell's consumable "gpu" (4 fake GPUs) and the parallel environment smp
        cluster.add_pool("gpu", "sge", ComputeResources(number_of_threads=2, number_of_gpus=1),
                         memory="1 GiB", nanny=False)
        cluster.add_pool("cpu", "slurm", QueueWorkerResources(
            number_of_threads=1, per_thread_memory_limit="512 MiB", wallclock_time_limit="00:15"),
            nanny=False)
        script = cluster.pools["gpu"].job_script()
        assert "#$ -l gpu=1\n" in script and "#$ -pe smp 2\n" in script
        assert "#$ -l mem_free=512M\n" in script  # per slot
        cluster.scale(2, pool="gpu")
        cluster.scale(2, pool="cpu")
        cluster.wait_for_workers(4, timeout=180, progress=False)
        with cluster.get_client() as client:
            sims = client.gather(client.map(simulate, range(12)))
            packs = client.gather(client.map(pack, range(12)))
        assert [r for r, _ in sims] == [s * 3 for s in range(12)]
        assert [r for r, _ in packs] == [s + 1000 for s in range(12)]
        assert {w for _, w in sims} <= set(cluster.connected_workers("gpu"))
        assert {w for _, w in packs} <= set(cluster.connected_workers("cpu"))
        assert len(sge_jobs(cluster.name)) == 2 and len(slurm_jobs(cluster.name)) == 2
    assert sge_jobs(cluster.name) == [] and slurm_jobs(cluster.name) == []


@pytest.mark.sge
def test_evaluator_style_sge_backend(sge_cell, staging) -> None:
    resources = QueueWorkerResources(number_of_gpus=1, per_thread_memory_limit="256 MiB",
                                     wallclock_time_limit="00:10")
    with DaskSGEBackend(resources_per_worker=resources, queue_name="hybrid.q",
                        setup_script_commands=["export HYBRID_SETUP_RAN=yes",
                                               f"export PATH={VENV_BIN}:$PATH"],
                        extra_script_options=["-p -10"], disable_nanny_process=True,
                        system_options={"project": "hybridci"}) as backend:
        script = backend.job_script()
        assert "#$ -l gpu=1\n" in script and "#$ -q hybrid.q\n" in script
        assert "#$ -P hybridci\n" in script and "#$ -p -10\n" in script
        assert backend.submit_task(environment_value, "HYBRID_SETUP_RAN").result() == "yes"
        name = backend.cluster.name
        assert len(sge_jobs(name)) == 1
    assert sge_jobs(name) == []


@pytest.mark.sge
def test_a_rescheduled_task_is_pending_again_and_close_removes_it(sge_cell, staging,
                                                                 caplog) -> None:
    """``qmod -rj`` of a running rerunnable worker task (as an admin, or a host failure):
    while it waits to run again (Rq) Grid Engine prints ``<job ids>`` in ``qstat -xml -j``,
    which made every query of the pool fail and left the job behind at close() (an audit).
    Now the pool keeps querying, reports the task pending with Grid Engine's reason, and
    close() removes it."""
    caplog.set_level(logging.WARNING, logger="hybrid")
    settings = {"hybrid.batch.poll-interval": "0.5s"}
    with dask.config.set(settings):
        cluster = HybridCluster()
    name = cluster.name
    try:
        pool = cluster.add_pool("cpu", "sge", memory="256 MiB", walltime="00:10", nanny=False,
                                job_extra_directives=["-r y"])
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=90, progress=False)
        job_id, = sge_jobs(name)
        subprocess.run(["qmod", "-rj", job_id], check=True, capture_output=True, timeout=60)

        def malformed() -> bool:
            return "<job ids>" in subprocess.run(
                ["qstat", "-xml", "-j", job_id.split(".")[0]], capture_output=True, text=True,
                timeout=60).stdout

        wait_for(malformed, 30, "qstat -xml -j to print <job ids> (the task rescheduled, Rq)")
        status, = pool.system.query(job_ids=[job_id])
        assert status.state is JobState.pending, status
        assert "rescheduled (Rq)" in status.reason and "clean up of a previous run" in \
            status.reason
        wait_for(lambda: cluster.pool_status()["cpu"].jobs.get("pending"), 30,
                 "the pool to list the task pending")
        assert pool.query_error is None
        # said as what Grid Engine did, an eviction (no failure), the wait's reason after it
        said = [r.getMessage() for r in caplog.records if job_id in r.getMessage()
                and "rescheduled (qmod -rj, or its host failed) by sge;" in r.getMessage()]
        assert said and "it waits in the queue to start again (now: rescheduled" in said[0]
        cluster.close()
        wait_for(lambda: sge_jobs(name) == [], 60, "close() to remove the rescheduled task")
    finally:
        with contextlib.suppress(Exception):
            cluster.close()
        qdel(*sge_jobs(name))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hybrid.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.sge
def test_submit_status_cancel_gc_on_the_real_sge(sge_cell, staging) -> None:
    name = f"cli{os.getpid()}"
    os.environ["DASK_HYBRID__BATCH__STAGING_DIRECTORY"] = str(staging)
    try:
        # a scheduler that is gone (nothing listens on port 9); the tasks wait for it
        submitted = run_cli("submit", "--system", "sge", "--scheduler", "tcp://127.0.0.1:9",
                            "--cluster", name, "--count", "3", "--walltime", "00:05",
                            "--death-timeout", "120", "--json")
        assert submitted.returncode == 0, submitted.stderr
        ids = json.loads(submitted.stdout)["job_ids"]
        assert len(ids) == 3 and len({i.split(".")[0] for i in ids}) == 1
        assert sge_jobs(name) == sorted(ids)

        status = json.loads(run_cli("status", "--system", "sge", "--cluster", name,
                                    "--json").stdout)
        assert sorted(j["job_id"] for j in status) == sorted(ids)
        assert {j["scheduler"] for j in status} == {"tcp://127.0.0.1:9"}

        cancelled = run_cli("cancel", "--system", "sge", ids[0], "--json")
        assert json.loads(cancelled.stdout) == {"removed": [ids[0]]}
        wait_for(lambda: ids[0] not in sge_jobs(name), 30, "the cancelled task to go")
        stranger = run_cli("cancel", "--system", "sge", "999999.1")
        assert stranger.returncode != 0 and "not jobs of ours" in stranger.stderr

        dry = json.loads(run_cli("gc", "--system", "sge", "--dry-run", "--json").stdout)
        assert sorted(j["job_id"] for j in dry["orphans"] if j["cluster"] == name) \
            == sorted(ids[1:])
        assert sge_jobs(name) == sorted(ids[1:])  # a dry run removes nothing

        collected = json.loads(run_cli("gc", "--system", "sge", "--json").stdout)
        assert sorted(j["job_id"] for j in collected["orphans"] if j["cluster"] == name) \
            == sorted(ids[1:])
        wait_for(lambda: sge_jobs(name) == [], 30, "gc to empty the queue")
        assert not any(staging.glob(f"{name}-*"))  # its staging directory went too
    finally:
        os.environ.pop("DASK_HYBRID__BATCH__STAGING_DIRECTORY", None)
        qdel(*sge_jobs(name))


@pytest.mark.sge
def test_doctor_checks_the_real_cell(sge_cell) -> None:
    from hybrid.admin.doctor import Status

    good = SGE().check()
    assert good.status is Status.ok, good
    assert "parallel environment smp" in good.message and "max_aj_tasks 75000" in good.message
    bad = SGE(parallel_environment="nosuchpe", memory_resources=["h_vmem", "nosuchmem"],
              max_array_size=100_000).check()
    assert bad.status is Status.fail
    assert "'nosuchpe' does not exist (qconf -spl: smp)" in bad.message
    assert "'nosuchmem' is not a requestable complex" in bad.message
    assert "max_aj_tasks of the cell is 75000" in bad.message
    assert "hybrid.batch.sge.max-array-size: 75000" in bad.fix


def test_doctor_names_the_missing_grid_engine_tools(monkeypatch, tmp_path) -> None:
    from hybrid.admin import doctor

    monkeypatch.setenv("PATH", str(tmp_path))
    result = doctor.check_batch_system("sge")
    assert result.status is doctor.Status.fail
    assert result.message == "qsub, qstat, qdel not found on PATH"


# --------------------------------------------------------------------------- the real parser
@pytest.mark.sge
def test_qsub_reads_exactly_the_directives_hybrid_writes(sge_cell, tmp_path) -> None:
    """``qsub -verify``: the job Grid Engine would make of hybrid's script."""
    spec = PoolSpec.build(
        "gpu", "sge", cores=4, gpus=1, memory="8 GiB", walltime="01:30", queue="hybrid.q",
        account="chem-42", env={"X": "a\n #$ -N x (indented: not a directive)"},
        job_extra_directives=["-l arch=lx-amd64", "-m n"],
        system_options={"project": "hybridci", "memory_resources": ["h_vmem", "mem_free"]})
    job = WorkerJob("c1", spec, Connection("tcp://127.0.0.1:8786"))
    fields = qsub_verify(get_system("sge", **spec.system_options).render(job, tmp_path, 7))
    assert fields["job_name"] == "HybridCluster-c1-gpu"
    assert fields["job-array tasks"] == "1-7:1"
    assert fields["context"].endswith("HYBRID_TAG=HybridCluster:c1:gpu:tcp://127.0.0.1:8786")
    assert fields["hard resource_list"] == (
        "h_rt=01:30:00,h_vmem=2048M,mem_free=2048M,gpu=1,arch=lx-amd64")  # memory per slot
    assert fields["parallel environment"] == "smp range: 4"
    assert fields["hard_queue_list"] == "hybrid.q"
    assert fields["project"] == "hybridci" and fields["account"] == "chem-42"
    assert fields["shell_list"] == "NONE:/bin/bash"
    assert fields["cwd"] == str(tmp_path) and fields["merge"] == "y"
    assert fields["stdout_path_list"] == f"NONE:NONE:{tmp_path}/worker-$JOB_ID.$TASK_ID.log"
    assert fields["job_name"] != "x"  # the indented line in the value stayed data


# --------------------------------------------------------------------------- bad input
def _pool(**options: Any) -> Any:
    return lambda: PoolSpec.build("x", "sge", check_paths=False, prefix="add_pool('x').",
                                  **options)


BAD = [
    # directives that would override what hybrid sets
    *[(f"directive {d!r}", _pool(job_extra_directives=["-m n", d]), "job_extra_directives[1]")
      for d in ("-t 1-100", "-N other", "-o /tmp/x", "-e /tmp/x", "-j n", "-wd /tmp", "-cwd",
                "-S /bin/sh", "-ac X=1", "-dc HYBRID_TAG", "-sc HYBRID_TAG=x", "-pe mpi 4",
                "-b y", "-clear", "-C '#PBS'", "-@ /tmp/options", "-sync y", "-terse",
                "-w v", "#$ -N x", "-m n -t 1-5", "-l h_rt=10:00:00",
                "-hard -l arch=lx-amd64,h_rt=1:00:00", "-l s_rt=100")],
    ("directive -l mem_free with memory",
     _pool(memory="1 GiB", job_extra_directives=["-l mem_free=4G"]), "job_extra_directives[0]"),
    ("directive -l mf (mem_free's shortcut) with memory",
     _pool(memory="1 GiB", job_extra_directives=["-l mf=4G"]), "job_extra_directives[0]"),
    ("directive -l gpu with gpus", _pool(gpus=1, job_extra_directives=["-l gpu=2"]),
     "job_extra_directives[0]"),
    ("directive with a line break", _pool(job_extra_directives=["-m n\n#$ -t 1-9"]),
     "job_extra_directives"),
    # values that would put a directive line into the script
    ("env value with a #$ line", _pool(env={"X": "a\n#$ -t 1-1000"}), "env['X']"),
    ("prologue #$ line", _pool(job_script_prologue=["#$ -N evil"]), "job_script_prologue[0]"),
    ("prologue second line #$", _pool(job_script_prologue=["true", "echo\n#$ -q evil"]),
     "job_script_prologue[1]"),
    ("worker argument with a #$ line", _pool(worker_extra_args=["--x\n#$ -l gpu=9"]),
     "worker_extra_args[0]"),
    ("python with a #$ line", _pool(python="/usr/bin/python3\n#$ -N x"), "python"),
    # words that reach a directive line
    ("queue with a command", _pool(queue="q; rm -rf /"), "queue"),
    ("account with a substitution", _pool(account="$(id)"), "account"),
    ("project with a space", _pool(system_options={"project": "a b"}),
     "system_options.project"),
    ("resource_spec with an option", _pool(system_options={"resource_spec": "h_vmem=1G -t 1-5"}),
     "system_options.resource_spec"),
    ("resource_spec with a ;", _pool(system_options={"resource_spec": "a=b;id"}),
     "system_options.resource_spec"),
    ("resource_spec h_rt", _pool(system_options={"resource_spec": "arch=x,h_rt=100"}),
     "system_options"),
    ("resource_spec mem_free with memory",
     _pool(memory="1 GiB", system_options={"resource_spec": "mem_free=9G"}), "system_options"),
    ("parallel environment with a ;",
     _pool(system_options={"parallel_environment": "smp;id"}),
     "system_options.parallel_environment"),
    ("memory resource with a space", _pool(system_options={"memory_resources": ["h vmem"]}),
     "system_options.memory_resources"),
    ("gpu resource with =", _pool(system_options={"gpu_resource": "gpu=1"}),
     "system_options.gpu_resource"),
    ("max array size 0", _pool(system_options={"max_array_size": 0}),
     "system_options.max_array_size"),
    ("unknown setting", _pool(system_options={"max_aj_tasks": 5}),
     "system_options.max_aj_tasks"),
    ("cores without a parallel environment",
     _pool(cores=2, system_options={"parallel_environment": None}), "cores"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_refused_naming_the_field(case, staging) -> None:
    _, call, field = case
    with pytest.raises(ConfigurationError) as caught:
        call()
    assert caught.value.field == f"add_pool('x').{field}", str(caught.value)
    assert not staging.exists() or not any(staging.iterdir())  # nothing staged


def test_bad_settings_in_hybrid_yaml_and_staging_name_the_key(tmp_path) -> None:
    with dask.config.set({"hybrid.batch.sge.resource-spec": "x y"}), \
            pytest.raises(ConfigurationError) as caught:
        PoolSpec.build("x", "sge")
    assert caught.value.field == "hybrid.batch.sge.resource-spec"
    with dask.config.set({"hybrid.batch.staging-directory": str(tmp_path / "a:b")}), \
            HybridCluster(scheduler_address=None) as cluster, \
            pytest.raises(ConfigurationError) as caught:
        cluster.add_pool("x", "sge")
    assert caught.value.field == "hybrid.batch.staging-directory" and "':'" in str(caught.value)
    assert not (tmp_path / "a:b").exists()


def test_jobqueue_keys_in_hybrid_yaml_keep_their_meaning() -> None:
    settings = {"hybrid.batch.sge.project": "chem", "hybrid.batch.sge.resource-spec":
                "arch=lx-amd64", "hybrid.batch.sge.walltime": "00:30:00",
                "hybrid.batch.sge.queue": "all.q",
                "hybrid.batch.sge.job-extra-directives": ["-m n"],
                "hybrid.batch.sge.memory-resources": ["h_vmem"]}
    with dask.config.set(settings), HybridCluster(scheduler_address=None) as cluster:
        script = cluster.add_pool("cpu", "sge", cores=2, memory="4 GiB").job_script()
    for line in ("#$ -P chem", "#$ -l arch=lx-amd64", "#$ -l h_rt=00:30:00", "#$ -q all.q",
                 "#$ -m n", "#$ -l h_vmem=2048M", "#$ -pe smp 2"):
        assert f"\n{line}\n" in script, line


# --------------------------------------------------------------------------- parsing
def test_task_ranges_and_states_read_as_grid_engine_writes_them() -> None:
    assert task_numbers("3") == ["3"]
    assert task_numbers("2-4:1") == ["2", "3", "4"]
    assert task_numbers("1,3,5-9:2") == ["1", "3", "5", "7", "9"]
    assert sge_state("qw", None, ["queue instance full"]) == (JobState.pending,
                                                            "queue instance full")
    assert sge_state("hqw")[0] is JobState.held
    # (the scheduler's messages are the job number's: a sibling's hold is not this task's)
    both = ["Job is in hold state", "execution time not reached"]
    assert sge_state("qw", None, both) == (JobState.pending, "execution time not reached")
    assert sge_state("hqw", None, both)[0] is JobState.held
    state, reason = sge_state("Eqw", "error: can't chdir to /x: No such file or directory")
    assert state is JobState.held and "can't chdir to /x" in reason
    assert sge_state("dr")[0] is JobState.removing
    assert sge_state("r") == (JobState.running, None)
    assert sge_state("S") == (JobState.suspended, "suspended with its queue (qmod -sq)")
    assert sge_state("T")[0] is JobState.suspended and sge_state("s")[0] is JobState.suspended
    assert accounting_state({"failed": "0", "exit_status": "0"}) == (JobState.finished, None)
    state, reason = accounting_state({"failed": "100 : assumedly after job",
                                      "exit_status": "137                  (Killed)"})
    assert state is JobState.failed and reason.endswith("exit status 137")
    assert "killed by signal 9" in reason
    assert accounting_state({"failed": "0", "exit_status": "127"}) == (
        JobState.failed, "exit status 127")
    assert SGE().parse_submit("1234.1-3:1\n", 3) == ["1234.1", "1234.2", "1234.3"]
    with pytest.raises(BatchError, match="not a job array id"):
        SGE().parse_submit("Your job 12 has been submitted", 1)


#: ``qstat -xml -g d -u root`` of Grid Engine 8.1.9 (the CI cell) while task 19.1 of a
#: rerunnable job waits rescheduled (``qmod -rj 19.1``: state Rq) and 19.2 runs.
RESCHEDULED_LISTING = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>19</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>HybridCluster-rqfixture-cpu</JB_name>
      <JB_owner>root</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-11-29T20:32:32</JAT_start_time>
      <queue_name>hybrid.q@vm</queue_name>
      <slots>1</slots>
      <tasks>2</tasks>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>19</JB_job_number>
      <JAT_prio>0.50000</JAT_prio>
      <JB_name>HybridCluster-rqfixture-cpu</JB_name>
      <JB_owner>root</JB_owner>
      <state>Rq</state>
      <JB_submission_time>2026-11-29T20:32:34</JB_submission_time>
      <queue_name></queue_name>
      <slots>1</slots>
      <tasks>1</tasks>
    </job_list>
  </job_info>
</job_info>
"""
#: ``qstat -xml -j 19`` at the same moment (trimmed to what hybrid reads): the message of
#: the rescheduled task names its job in ``<job ids>``, which is not XML.
RESCHEDULED_DETAILS = (Path(__file__).parent / "sge_rescheduled_task.xml").read_text()


def _answers(monkeypatch, listing: str, details: str) -> list[list[str]]:
    """``qstat`` answers ``listing`` and ``qstat -j`` ``details``; ``qdel`` is recorded."""
    calls: list[list[str]] = []

    def run(argv, **_: Any) -> subprocess.CompletedProcess:
        calls.append(list(argv))
        out = {"-j": details, "-g": listing}.get(argv[2], "") if argv[0] == "qstat" else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr("hybrid.batch.sge.run_command", run)
    return calls


def test_a_rescheduled_task_is_read_from_grid_engines_malformed_document(monkeypatch) -> None:
    """The real documents of a rescheduled task (Rq): the ``<job ids>`` element made every
    query of the pool fail, so its status went stale and nothing could remove the job (an
    audit). Now the task is pending again, with Grid Engine's reason, and removable."""
    with pytest.raises(ET.ParseError):
        ET.fromstring(RESCHEDULED_DETAILS)  # (the document is as Grid Engine prints it)
    assert "<job ids>" in RESCHEDULED_DETAILS
    calls = _answers(monkeypatch, RESCHEDULED_LISTING, RESCHEDULED_DETAILS)
    statuses = {s.job_id: s for s in SGE().query(cluster="rqfixture")}
    assert sorted(statuses) == ["19.1", "19.2"]
    waiting, running = statuses["19.1"], statuses["19.2"]
    assert waiting.state is JobState.pending
    assert waiting.reason == ('rescheduled (Rq), waiting to run again: cannot run on host "vm" '
                              "until clean up of a previous run has finished")
    assert running.state is JobState.running and running.reason is None
    assert {(s.cluster, s.pool, s.scheduler) for s in statuses.values()} == {
        ("rqfixture", "cpu", "tcp://127.0.0.1:8786")}
    assert sorted(SGE().remove_cluster("rqfixture")) == ["19.1", "19.2"]
    assert calls[-1] == ["qdel", "19.1-2"]


def test_a_document_that_stays_broken_is_read_job_by_job(monkeypatch, caplog) -> None:
    """Past the known repair (here a raw ``<`` and ``&`` in a message, as a careless writer
    would print them): each job's number, name, state and tag are still read, so the pool
    keeps its jobs (and can remove them) without the reasons; what has none raises."""
    broken = RESCHEDULED_DETAILS.replace("previous run", "previous <run> & co")
    listing = RESCHEDULED_LISTING.replace("<JAT_prio>", "<JAT_prio a&b>")
    _answers(monkeypatch, listing, broken)
    monkeypatch.setattr("hybrid.batch.sge_documents._warned", set())  # (said once per process)
    with caplog.at_level("WARNING", logger="hybrid"):
        statuses = {s.job_id: s for s in SGE().query(cluster="rqfixture")}
        SGE().query(cluster="rqfixture")
    assert {j: (s.state, s.reason) for j, s in statuses.items()} == {
        "19.1": (JobState.pending, "rescheduled (Rq), waiting to run again"),
        "19.2": (JobState.running, None)}
    assert {s.scheduler for s in statuses.values()} == {"tcp://127.0.0.1:8786"}
    said = [r.getMessage() for r in caplog.records if "job by job" in r.getMessage()]
    assert len(said) == 2 and all("not XML" in m for m in said)  # once for each document
    _answers(monkeypatch, RESCHEDULED_LISTING, "<detailed_job_info><djob_info>&")
    with pytest.raises(BatchError, match="qstat -xml -j printed something that is not XML"):
        SGE().query(cluster="rqfixture")
    _answers(monkeypatch, "<job_info><job_list>&", RESCHEDULED_DETAILS)
    with pytest.raises(BatchError, match="qstat -xml printed something that is not XML"):
        SGE().query(cluster="rqfixture")


def test_restarted_tasks_follow_qstats_state_letters() -> None:
    """qstat(1): R is "restarted", not running. Rr and Rt run again; Rq waits again."""
    assert sge_state("Rr") == (JobState.running, None)
    assert sge_state("Rt") == (JobState.running, None)
    assert sge_state("Rq", None, ["cannot run on host"]) == (
        JobState.pending, "rescheduled (Rq), waiting to run again: cannot run on host")
    assert sge_state("Rq")[0] is JobState.pending
    assert sge_state("hRwq")[0] is JobState.held
    assert sge_state("EhRqw")[0] is JobState.held
    assert sge_state("dRr")[0] is JobState.removing
    assert sge_state("Rs")[0] is JobState.suspended  # (a restarted task, suspended)


def test_render_refuses_a_directive_line_below_the_header(tmp_path) -> None:
    """The last guard (a user's own template, say): no #$ line after the first command."""
    template_dir = tmp_path / "templates"
    template_dir.mkdir()
    packaged = Path(__file__).resolve().parents[2] / "jobtemplates" / "sge.sh.j2"
    (template_dir / "sge.sh.j2").write_text(packaged.read_text() + "#$ -t 1-1000\n")
    spec = PoolSpec.build("x", "sge")
    job = WorkerJob("c", spec, Connection("tcp://127.0.0.1:8786"))
    with dask.config.set({"hybrid.templates.directory": str(template_dir)}):
        from hybrid.errors import TemplateError

        with pytest.raises(TemplateError, match="directive line after its first command"):
            SGE().render(job, tmp_path, 1)
    assert "#$ -t 1-1\n" in SGE().render(job, tmp_path, 1)


# --------------------------------------------------------------------------- the property
#: What an attacker would try against qsub's reading of "#$" anywhere: lines hybrid refuses.
SGE_INJECTIONS = ("\n#$ -t 1-1000\n", "\n#$-q x", "\r\n#$ -j n")
#: "#$" that is no directive (not at a line's start): accepted, and must stay data.
SGE_INERT = ("\n #$ -N indented", "x #$ -N mid-line", "#$ -N first")


def _sge_values() -> Any:
    from hypothesis import strategies as st

    from tests.reliability import test_templates_property as prop

    text = st.lists(st.one_of(prop.free_text, st.sampled_from(SGE_INERT)),
                    max_size=4).map("".join)

    @st.composite
    def values(draw: Any) -> dict[str, Any]:
        drawn = draw(prop.user_values())
        drawn["env"] = {f"HYP_{i}": v for i, v in enumerate(draw(st.lists(text, max_size=3)))}
        drawn["args"] = draw(st.lists(text, max_size=3))
        if drawn["image"]:
            drawn["options"] = draw(st.lists(text, max_size=2))
        # one example in three carries an injection, in one value of one field
        where = draw(st.sampled_from(["", "", "env", "args", "options"]))
        if where == "env":
            drawn["env"]["HYP_X"] = draw(text) + draw(st.sampled_from(SGE_INJECTIONS))
        elif where == "args" or (where == "options" and not drawn["image"]):
            drawn["args"].append(draw(st.sampled_from(SGE_INJECTIONS)) + draw(text))
        elif where == "options":
            drawn["options"].append(draw(st.sampled_from(SGE_INJECTIONS)))
        drawn["word"] = draw(prop.words)
        return drawn

    return values()


def _refused_field(values: dict[str, Any]) -> str | None:
    """The field hybrid must refuse: the first value with a line that starts with #$."""
    for index, value in enumerate(values["args"]):
        if "\n#$" in value:
            return f"worker_extra_args[{index}]"
    for index, value in enumerate(values["options"]):
        if "\n#$" in value:
            return f"container_options[{index}]"
    for name, value in values["env"].items():
        if "\n#$" in value:
            return f"env[{name!r}]"
    return None


def _verified(script: str) -> dict[str, str]:
    fields = qsub_verify(script)
    for key in ("script_size", "sge_o_workdir"):
        fields.pop(key, None)
    return fields


def _sge_job(values: dict[str, Any], plain: bool) -> tuple[WorkerJob, SGE]:
    from tests.reliability import test_templates_property as prop

    options: dict[str, Any] = {"python": str(prop.RECORDER), "queue": values["queue"],
                               "account": values["account"],
                               "job_extra_directives": [f"-v HYP_D={values['word']}"]}
    if not plain:
        options.update(env=values["env"], worker_extra_args=values["args"])
        if values["image"]:
            options.update(container_image=values["image"], container_binds=values["binds"],
                           container_options=values["options"])
    spec = PoolSpec.build(values["pool"], "sge", check_paths=False, **options)
    return WorkerJob(values["cluster"], spec, Connection(prop.SCHEDULER)), SGE()


@pytest.mark.sge
def test_user_strings_arrive_as_data_and_qsub_reads_only_hybrids_directives(sge_cell) -> None:
    """The property of tests/reliability/test_templates_property.py for Grid Engine, with
    ``qsub -verify`` (the real parser) as the reader: a drawn value either is refused naming
    its field (a line starting with #$), or arrives exactly in the worker's arguments and
    environment while qsub makes the same job of the script as of one without the user's
    free text."""
    from hypothesis import HealthCheck, Phase, given, settings

    from tests.reliability import test_templates_property as prop

    @settings(max_examples=25, deadline=None, derandomize=True,
              phases=[Phase.explicit, Phase.reuse, Phase.generate],
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(values=_sge_values())
    def check(values: dict[str, Any]) -> None:
        staging = prop.WORK / "staging" / values["staging"]
        staging.mkdir(parents=True, exist_ok=True)
        refused = _refused_field(values)
        if refused is not None:
            with pytest.raises(ConfigurationError) as caught:
                _sge_job(values, plain=False)
            assert caught.value.field == f"add_pool({values['pool']!r}).{refused}"
            return
        job, system = _sge_job(values, plain=False)
        if ":" in str(staging) or "#" in str(staging):
            with pytest.raises(ConfigurationError, match="staging-directory"):
                system.render(job, staging, prop.COUNT)
            return
        script = system.render(job, staging, prop.COUNT)
        argv, env = prop.run_script(script, {"JOB_ID": "77", "SGE_TASK_ID": "2"})
        assert argv == prop.expected_argv(job, values, "77.2")
        prop.assert_user_values_arrived(argv, env, values)
        base_job, _ = _sge_job(values, plain=True)
        seen, baseline = (_verified(script),
                          _verified(system.render(base_job, staging, prop.COUNT)))
        assert seen == baseline
        assert seen["job-array tasks"] == f"1-{prop.COUNT}:1"
        assert seen["cwd"] == str(staging)
        assert seen["context"].endswith(
            f"HYBRID_TAG=HybridCluster:{values['cluster']}:{values['pool']}:{prop.SCHEDULER}")
        assert f"HYP_D={values['word']}" in seen["env_list"]
        assert not prop.CANARY.exists()

    workdir = prop.WORK
    (workdir / "bin").mkdir(parents=True, exist_ok=True)
    (workdir / "record").mkdir(exist_ok=True)
    prop.RECORDER.write_text('#!/bin/bash\nprintf \'%s\\0\' "$@" > "$RECORD/argv"\n'
                             'env -0 > "$RECORD/env"\n')
    prop.RECORDER.chmod(0o755)
    if not (workdir / "bin" / "apptainer").exists():
        (workdir / "bin" / "apptainer").symlink_to(prop.RECORDER)
    try:
        check()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
