"""PBS and LSF, end to end, against test doubles of their client tools (tests/batch/doubles).

Neither batch system can run here, so ``qsub``/``qstat``/``qdel`` and ``bsub``/``bjobs``/
``bkill`` are test doubles (``PBSDouble``, ``LSFDouble``): they parse every directive as the
real tools do, really run each job element as a local process and answer in the
documented output formats. Everything else is real: the rendered scripts, hybrid's
``PBS``/``LSF`` modules, a ``distributed`` scheduler and ``dask worker`` processes.

The golden scripts in tests/batch/golden are reviewed by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import distributed
import pytest

from hybrid.batch.base import (
    BatchSystem,
    JobState,
    WorkerJob,
    staging_root,
    worker_name_suffix,
)
from hybrid.batch.lsf import LSF, lsf_state
from hybrid.batch.pbs import PBS, pbs_state
from hybrid.errors import BatchError, ConfigurationError
from hybrid.pools import PoolSpec
from hybrid.worker import Connection, worker_command
from tests.batch.system_pool import SystemPool
from tests.scheduler_workers import worker_names

DOUBLES = Path(__file__).resolve().parent / "doubles"
GOLDEN = Path(__file__).resolve().parent / "golden"
sys.path.insert(0, str(DOUBLES))

import batch_double  # noqa: E402
import lsf_double  # noqa: E402
import pbs_double  # noqa: E402

TAG = "HybridCluster"
MiB = 2**20
#: Pinned so the goldens do not move with the packaged defaults.
PINNED_CONFIG = {
    "hybrid.batch.tag": TAG,
    "hybrid.worker-dask-config": {
        "distributed.worker.daemon": False,
        "distributed.comm.timeouts.connect": "60s",
    },
}


# --------------------------------------------------------------------------- helpers

def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


@dataclass
class Double:
    """One batch system's double, wired into this test's environment."""

    kind: str
    system: BatchSystem
    store: batch_double.StateStore
    tmp: Path

    @property
    def submit_tool(self) -> str:
        return "qsub" if self.kind == "pbs" else "bsub"

    def listed(self, history: bool = False) -> dict[str, str]:
        """Job id -> state, as the double's own status tool lists them (not our parsing)."""
        if self.kind == "pbs":
            argv = ["qstat", "-f", "-F", "json", "-t"] + (["-x"] if history else [])
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            jobs = json.loads(out).get("Jobs", {})
            return {i: a["job_state"] for i, a in jobs.items() if a.get("array") != "True"}
        argv = ["bjobs", "-o", "jobid jobindex stat", "-json"] + (["-a"] if history else [])
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode == 255 and "No unfinished job found" in result.stderr:
            return {}
        records = json.loads(result.stdout)["RECORDS"]
        return {lsf_element(r): r["STAT"] for r in records}

    def active_listed(self) -> dict[str, str]:
        """What the double's status tool still lists as queued, running or held."""
        active = {"Q", "R", "H", "E", "B"} if self.kind == "pbs" else {"PEND", "RUN", "PSUSP"}
        return {i: s for i, s in self.listed().items() if s in active}

    def element(self, job_id: str) -> dict[str, Any]:
        """The double's record of one element (its pids, exit code)."""
        key = job_id.split("[")[0].split(".")[0]
        index = job_id.split("[")[1].split("]")[0] if "[" in job_id else "0"
        job = self.store.load(key)
        assert job is not None, job_id
        return job["elements"][index]


def lsf_element(record: dict[str, str]) -> str:
    return record["JOBID"] + (f"[{record['JOBINDEX']}]" if record["JOBINDEX"] != "0" else "")


@pytest.fixture(params=["pbs", "lsf"])
def double(request, tmp_path, monkeypatch) -> Iterator[Double]:
    """The PBS or LSF double first on PATH, its state in tmp, hybrid staging in tmp."""
    kind = request.param
    state = tmp_path / f"{kind}-state"
    monkeypatch.setenv("PATH", f"{DOUBLES / kind}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("HYBRID_DOUBLE_PYTHON", sys.executable)
    monkeypatch.setenv(f"HYBRID_{kind.upper()}_DOUBLE_STATE", str(state))
    monkeypatch.setenv("HYBRID_PBS_DOUBLE_KILL_DELAY", "5")
    monkeypatch.setenv("HYBRID_LSF_DOUBLE_TERMINATE_INTERVAL", "5")
    store = batch_double.StateStore(state)
    system: BatchSystem = PBS() if kind == "pbs" else LSF()
    with dask.config.set({**PINNED_CONFIG,
                          "hybrid.batch.staging-directory": str(tmp_path / "staging")}):
        yield Double(kind, system, store, tmp_path)
    for pid in batch_double.job_pids(store):  # never leave a process behind, even on failure
        if batch_double.process_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def probe(tmp_path) -> Path:
    """An executable that stands in for python: it records its argv and environment."""
    out = tmp_path / "probe-out"
    out.mkdir()
    path = tmp_path / "probe.py"
    path.write_text(f"""#!{sys.executable}
import json, os, pathlib, sys
name = os.environ.get("HYBRID_JOB_ID", "none").replace("/", "_")
record = {{"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}}
partial = pathlib.Path({str(out)!r}, "." + name + ".json.part")
partial.write_text(json.dumps(record))
partial.rename(partial.with_name(name + ".json"))  # whole, or not there: read at once
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
""")
    path.chmod(0o755)
    return path


def probe_record(probe: Path, job_id: str, timeout: float = 30) -> dict[str, Any]:
    path = probe.parent / "probe-out" / f"{job_id}.json"
    wait_for(path.exists, timeout, f"the probe of job {job_id} to run")
    return json.loads(path.read_text())


def probe_pool(double: Double, probe: Path, pool: str = "probe", **options: Any) -> SystemPool:
    return SystemPool.of(double.system, "unit", pool, "tcp://127.0.0.1:9", python=str(probe),
                         **options)


def golden_jobs() -> dict[str, tuple[WorkerJob, int]]:
    """The jobs whose renderings are pinned in tests/batch/golden/."""
    python = "/opt/hybrid/venv/bin/python"
    connection = Connection("tcp://10.1.2.3:8786")

    def job(pool: str, system: str, **options: Any) -> WorkerJob:
        spec = PoolSpec.build(pool, system, python=python, worker_port="10000:10070",
                              nanny_port="10071:10140", death_timeout=60, lease="24h",
                              **options)
        return WorkerJob("demo", spec, connection)

    gpu = dict(cores=4, memory=f"{16 * 2**30 + 1} B", gpus=2, walltime="06:30", queue="gpuq",
               account="proj-7", env={"OMP_NUM_THREADS": "4"},
               job_script_prologue=["module load cuda/12.2"])
    return {
        "pbs:cpu_array": (job("cpu", "pbs", cores=2, memory="4 GiB", walltime="01:30"), 3),
        "pbs:cpu_single": (job("cpu", "pbs", cores=2, memory="4 GiB", walltime="01:30"), 1),
        "pbs:gpu_full": (job("gpu", "pbs", **gpu,
                             job_extra_directives=["-l place=excl", "-W group_list=chem"]), 2),
        "lsf:cpu_array": (job("cpu", "lsf", cores=2, memory="4 GiB", walltime="01:30"), 3),
        "lsf:cpu_single": (job("cpu", "lsf", cores=2, memory="4 GiB", walltime="01:30"), 1),
        "lsf:gpu_full": (job("gpu", "lsf", **gpu, job_extra_directives=["-x", "-app chem"]), 2),
    }


GOLDEN_STAGING = Path("/scratch/hybrid/jobs/demo-pool-0a1b2c3d")


def rendering(kind: str, name: str) -> str:
    system = PBS() if kind == "pbs" else LSF()
    with dask.config.set(PINNED_CONFIG):
        job, count = golden_jobs()[f"{kind}:{name}"]
        return system.render(job, GOLDEN_STAGING, count)


# --------------------------------------------------------------------------- renderings

@pytest.mark.parametrize("kind", ["pbs", "lsf"])
@pytest.mark.parametrize("name", ["cpu_array", "gpu_full", "cpu_single"])
def test_rendering_matches_golden_file(kind: str, name: str) -> None:
    assert rendering(kind, name) == (GOLDEN / f"{kind}_{name}.sh").read_text()


def test_pbs_directives_parse_as_qsub_reads_them() -> None:
    with dask.config.set(PINNED_CONFIG):
        job, _ = golden_jobs()["pbs:gpu_full"]
    script = rendering("pbs", "gpu_full")
    options = pbs_double.parse_directives(script)
    memory_mb = -(-job.spec.memory // MiB)
    assert memory_mb == 16385  # rounded up, never below what was asked
    assert options == [
        ("-N", f"{TAG}-demo-gpu"),
        ("-J", "1-2"),
        ("-l", f"select=1:ncpus=4:mem={memory_mb}mb:ngpus=2"),
        ("-l", "walltime=06:30:00"),
        ("-q", "gpuq"),
        ("-A", "proj-7"),
        ("-v", f"HYBRID_TAG={TAG}:demo:gpu:tcp://10.1.2.3:8786"),
        ("-S", "/bin/bash"),
        ("-o", f"{GOLDEN_STAGING}/"),
        ("-j", "oe"),
        ("-l", "place=excl"),
        ("-W", "group_list=chem"),
    ]
    directive_lines = [line for line in script.splitlines() if line.startswith("#PBS")]
    assert len(directive_lines) == len(options)  # one option per line, none skipped
    assert pbs_double.chk_jrange("1-2") == (1, 2, 1)
    assert pbs_double.parse_select(f"1:ncpus=4:mem={memory_mb}mb:ngpus=2") == [
        (1, {"ncpus": "4", "mem": f"{memory_mb}mb", "ngpus": "2"})]
    single = pbs_double.parse_directives(rendering("pbs", "cpu_single"))
    assert [o for o, _ in single].count("-J") == 0
    assert ("-l", "select=1:ncpus=2:mem=4096mb") in single


@pytest.mark.parametrize("queue", ["0+", "a@b@c", "gpu+fast@pbs01"])
def test_a_queue_qsub_would_refuse_is_refused_at_the_edge(queue: str) -> None:
    """Words the other systems take but qsub's ``-q`` does not: one clear error naming the
    field, before anything is rendered (the double refuses them as qsub does)."""
    with pytest.raises(pbs_double.DoubleUsageError, match="-q"):
        pbs_double.check_option("-q", queue)
    with pytest.raises(ConfigurationError, match=r"queue = .*qstat -Q"):
        PoolSpec.build("p", "pbs", check_paths=False, queue=queue)
    for good in ("workq", "gpu@pbs01.example.org"):
        assert PoolSpec.build("p", "pbs", check_paths=False, queue=good).queue == good


@pytest.mark.parametrize("queue", ["0+", "gpu@host"])
def test_a_queue_bsub_would_refuse_is_refused_at_the_edge(queue: str) -> None:
    with pytest.raises(batch_double.DoubleUsageError, match="-q"):
        lsf_double.check_option("-q", queue)
    with pytest.raises(ConfigurationError, match=r"queue = .*bqueues"):
        PoolSpec.build("p", "lsf", check_paths=False, queue=queue)
    assert PoolSpec.build("p", "lsf", check_paths=False, queue="short_gpu").queue == "short_gpu"


def test_lsf_directives_parse_as_bsub_reads_them() -> None:
    with dask.config.set(PINNED_CONFIG):
        job, _ = golden_jobs()["lsf:gpu_full"]
    script = rendering("lsf", "gpu_full")
    options = lsf_double.parse_directives(script)
    memory_mb = -(-job.spec.memory // MiB)
    assert options == [
        ("-J", f"{TAG}-demo-gpu[1-2]"),
        ("-Jd", f"{TAG}:demo:gpu:tcp://10.1.2.3:8786"),
        ("-n", "4"),
        ("-R", "span[hosts=1]"),
        ("-M", f"{memory_mb}MB"),
        ("-R", f"rusage[mem={memory_mb}MB]"),
        ("-gpu", "num=2"),
        ("-W", "06:30"),
        ("-q", "gpuq"),
        ("-P", "proj-7"),
        ("-o", f"{GOLDEN_STAGING}/worker-%J_%I.log"),
        ("-x", ""),
        ("-app", "chem"),
    ]
    directive_lines = [line for line in script.splitlines() if line.startswith("#BSUB")]
    assert len(directive_lines) == len(options)
    assert lsf_double.parse_job_name(f"{TAG}-demo-gpu[1-2]") == (f"{TAG}-demo-gpu", [1, 2])
    single = dict(lsf_double.parse_directives(rendering("lsf", "cpu_single")))
    assert single["-J"] == f"{TAG}-demo-cpu[1-1]"
    assert "-gpu" not in single


@pytest.mark.parametrize("kind", ["pbs", "lsf"])
def test_the_doubles_refuse_what_the_real_tools_refuse(kind: str) -> None:
    parse = pbs_double.parse_directives if kind == "pbs" else lsf_double.parse_directives
    prefix = "#PBS" if kind == "pbs" else "#BSUB"
    bad = (["-Z", "-J 1-1", "-J 3-2", "-l walltime=soon", "-l gpus=1", "-l select=1:ncpu=2",
            "-N 'has space'", "-j xo", "-l select=1:ncpus=2 extra"] if kind == "pbs" else
           ["-Z", '-J "x[0-3]"', '-J "x[3-1]"', "-n 0", "-M lots", "-W 1:75",
            '-R "spam[x]"', '-R "span[everywhere]"', '-gpu "count=2"', "-Is"])
    for directive in bad:
        with pytest.raises(batch_double.DoubleUsageError):
            parse(f"#!/bin/sh\n{prefix} {directive}\necho\n")
    # Directives after the first command are not directives (the tools stop reading there).
    assert parse(f"#!/bin/sh\necho hi\n{prefix} -Z\n") == []


# --------------------------------------------------------------------------- submission

def test_newline_in_extra_directive_is_refused_before_submitting(double: Double,
                                                                 probe: Path) -> None:
    for mark in ("\n", "\r", "\x85", "\u2028"):
        with pytest.raises(ConfigurationError, match="line break"):
            probe_pool(double, probe,
                       job_extra_directives=[f"-m n{mark}#PBS -l select=64:ncpus=128"])
    assert double.store.calls(double.submit_tool) == []
    assert double.store.all_jobs() == []


@pytest.mark.parametrize("directive", ["-J 1-1000", "-N other", "-v HYBRID_TAG=x", "-o /tmp",
                                       "-Jd other"])
def test_directives_that_override_hybrids_own_are_refused(double: Double, probe: Path,
                                                           directive: str) -> None:
    if double.kind == "pbs" and directive == "-Jd other":
        directive = "-J 1-2"
    if double.kind == "lsf" and directive in ("-N other", "-v HYBRID_TAG=x"):
        directive = "-J name[1-1000]"
    with pytest.raises(ConfigurationError, match=r"job_extra_directives\[0\].*hybrid sets it"):
        probe_pool(double, probe, job_extra_directives=[directive])
    assert double.store.calls(double.submit_tool) == []


def test_a_directive_the_tool_refuses_is_a_batch_error(double: Double, probe: Path) -> None:
    bad = "-Z nonsense" if double.kind == "pbs" else "-Z"
    pool = probe_pool(double, probe, job_extra_directives=[bad])
    with pytest.raises(BatchError, match=r"(invalid|illegal) option"):
        pool.submit(2)
    assert len(double.store.calls(double.submit_tool)) == 1
    assert double.store.all_jobs() == []


def test_a_scheduler_address_the_tag_cannot_carry_is_refused() -> None:
    # refused when the connection is described, before any system renders or submits it
    for address in ("tcp://host,evil:8786", "tcp://host:8786\n#PBS -Z", "tcp://h'x:1"):
        with pytest.raises(ConfigurationError, match="scheduler_address"):
            Connection(address)


def test_values_arrive_as_inert_text(double: Double, probe: Path) -> None:
    sentinel = double.tmp / "pwned"
    env = {
        "HYBRID_T_SPACES": "two  spaces\tand a tab ",
        "HYBRID_T_QUOTES": "it's \"quoted\" `backticks` \\ backslash",
        "HYBRID_T_SUBST": f"$(touch {sentinel}) ${{HOME}} $HOME `touch {sentinel}`",
        "HYBRID_T_NEWLINE": f"line one\nline two; touch {sentinel}\n",
        "HYBRID_T_GLOB": "* ? [a-z] ~ & | ; < > ! #",
        "HYBRID_T_EMPTY": "",
        "HYBRID_T_UNICODE": "héllo ✓",
    }
    extra_args = (f"--x=$(touch {sentinel})", "it's", "a b", f"`touch {sentinel}`", "*",
                  ";", "&&", "'", '"', "$HOME", "", "--y=\\")
    pool = probe_pool(double, probe, env=env, worker_extra_args=list(extra_args))
    ids = pool.submit(2)
    assert len(ids) == 2
    assert len(double.store.calls(double.submit_tool)) == 1
    command = worker_command(pool.job.spec, pool.job.connection, None)
    for job_id in ids:
        record = probe_record(probe, job_id)
        expected = [*command.arguments, "--name",
                    f"{pool.job.name_prefix}-{worker_name_suffix(job_id)}"]
        assert record["argv"][1:] == expected
        assert record["argv"][-1] == f"unit-probe-{worker_name_suffix(job_id)}"
        assert record["env"]["HYBRID_JOB_ID"] == job_id
        for name, value in env.items():
            assert record["env"][name] == value, name
    assert not sentinel.exists()
    pool.close()


@pytest.mark.parametrize("count", [1, 3])
def test_one_submission_gives_every_worker_its_own_id(double: Double, probe: Path,
                                                      count: int) -> None:
    pool = probe_pool(double, probe)
    ids = pool.submit(count)
    assert len(set(ids)) == count
    assert len(double.store.calls(double.submit_tool)) == 1
    if double.kind == "pbs" and count == 1:
        assert "[" not in ids[0]  # a plain job: qsub refuses -J 1-1
    for job_id in ids:
        record = probe_record(probe, job_id)
        variable = "PBS_JOBID" if double.kind == "pbs" else "LSB_JOBID"
        assert record["env"][variable] == (job_id if double.kind == "pbs"
                                           else job_id.split("[")[0])
    wait_for(lambda: all(s.state is JobState.finished for s in pool.refresh().values()),
             20, "every probe job to finish")
    assert pool.active() == []
    pool.close()


# --------------------------------------------------------------------------- states

def test_pending_then_removed_before_it_ran(double: Double, probe: Path, monkeypatch) -> None:
    monkeypatch.setenv(f"HYBRID_{double.kind.upper()}_DOUBLE_START_DELAY", "120")
    pool = probe_pool(double, probe)
    ids = pool.submit(2)
    states = pool.refresh()
    assert {s.state for s in states.values()} == {JobState.pending}
    assert all(s.reason for s in states.values())
    assert {(s.cluster, s.pool, s.scheduler) for s in states.values()} == {
        ("unit", "probe", "tcp://127.0.0.1:9")}
    pool.remove([ids[0]])
    assert set(double.active_listed()) == {ids[1]}
    # LSF's fields do not say who ended an EXIT job (the pool manager remembers it)
    assert not pool.refresh()[ids[0]].state.active
    gone = double.system.query(job_ids=[ids[0]], history=True)
    assert len(gone) == 1 and not gone[0].state.active
    if double.kind == "pbs":
        assert gone[0].state is JobState.removed  # substate 91
    assert double.element(ids[0])["pid"] is None  # it never ran
    pool.close()
    assert double.active_listed() == {}


def test_held_jobs_report_why(double: Double, probe: Path) -> None:
    hold = "-h" if double.kind == "pbs" else "-H"
    pool = probe_pool(double, probe, job_extra_directives=[hold])
    ids = pool.submit(2)
    states = pool.refresh()
    assert [states[i].state for i in ids] == [JobState.held, JobState.held]
    reason = states[ids[0]].reason or ""
    assert ("user hold" in reason) if double.kind == "pbs" else ("suspended by the user"
                                                                  in reason)
    pool.close()
    assert double.active_listed() == {}
    assert all(double.element(i)["pid"] is None for i in ids)


@pytest.mark.parametrize("code", [0, 3])
def test_exit_status_maps_to_finished_or_failed(double: Double, probe: Path, code: int) -> None:
    pool = probe_pool(double, probe, env={"PROBE_EXIT": str(code)})
    ids = pool.submit(2)
    states = wait_for(lambda: (lambda s: s if not any(x.state.active for x in s.values())
                               else None)(pool.refresh()), 20, "the probe jobs to end")
    for job_id in ids:
        if code == 0:
            assert states[job_id].state is JobState.finished
        else:
            assert states[job_id].state is JobState.failed
            assert "3" in (states[job_id].reason or "")
    pool.close()


@pytest.mark.parametrize(("attributes", "state", "words"), [
    ({"job_state": "Q", "comment": "Not Running: Insufficient amount of resource: ngpus"},
     JobState.pending, "ngpus"),
    ({"job_state": "H", "Hold_Types": "s"}, JobState.held, "system hold"),
    ({"job_state": "S"}, JobState.suspended, "suspended"),
    ({"job_state": "U"}, JobState.suspended, "workstation is busy"),
    ({"job_state": "E"}, JobState.running, None),
    ({"job_state": "X", "substate": 91, "Exit_status": 271}, JobState.removed, None),
    ({"job_state": "F", "substate": 92, "Exit_status": 0}, JobState.finished, None),
    ({"job_state": "F", "substate": 93, "Exit_status": 265}, JobState.failed, "signal 9"),
    ({"job_state": "F", "substate": 92, "Exit_status": -3}, JobState.failed, "could not run"),
    ({"job_state": "M"}, JobState.removed, "moved"),
])
def test_pbs_states_the_double_cannot_reach(attributes, state, words) -> None:
    mapped, reason = pbs_state(attributes)
    assert mapped is state
    if words:
        assert words in (reason or "")


@pytest.mark.parametrize(("record", "state", "words"), [
    ({"STAT": "PEND", "PEND_REASON": "Job dependency condition not satisfied;"},
     JobState.pending, "dependency condition not satisfied"),
    ({"STAT": "PSUSP", "PEND_REASON": ""}, JobState.held, "suspended by the user while pending"),
    ({"STAT": "USUSP", "PEND_REASON": ""}, JobState.suspended, "suspended by the user"),
    ({"STAT": "SSUSP", "PEND_REASON": ""}, JobState.suspended, "suspended by LSF"),
    ({"STAT": "UNKWN"}, JobState.running, "lost contact"),
    ({"STAT": "EXIT", "EXIT_CODE": "1"}, JobState.failed, "exit code 1"),
    ({"STAT": "DONE", "EXIT_CODE": ""}, JobState.finished, None),
    ({"STAT": "ZOMBI"}, JobState.removed, "cannot reach"),
])
def test_lsf_states_the_double_cannot_reach(record, state, words) -> None:
    mapped, reason = lsf_state(record)
    assert mapped is state
    if words:
        assert words in (reason or "")


def test_staging_directory_is_the_configured_tmp_dir(double: Double) -> None:
    assert staging_root() == double.tmp / "staging"


# --------------------------------------------------------------------------- end to end

@pytest.fixture
def scheduler() -> Iterator[distributed.Client]:
    """A real distributed scheduler on 127.0.0.1 (no workers of its own)."""
    http = {"dashboard_address": "127.0.0.1:0"}  # (not port 8787)
    with distributed.LocalCluster(n_workers=0, host="127.0.0.1", protocol="tcp://",
                                  scheduler_port=0, dashboard_address=None,
                                  scheduler_kwargs=http) as cluster, \
            distributed.Client(cluster) as client:
        yield client


@pytest.mark.timeout(150)
def test_end_to_end_workers_join_compute_and_leave(double: Double,
                                                   scheduler: distributed.Client) -> None:
    client = scheduler
    address = client.scheduler.address
    pool = SystemPool.of(double.system, "e2e", "cpu", address, cores=1, memory="512 MiB",
                         walltime="00:20", death_timeout=30, nanny=False)
    ids = pool.submit(3)

    # One transaction, three workers, each named after its own job id.
    assert len(double.store.calls(double.submit_tool)) == 1
    assert len(set(ids)) == 3
    expected = {f"e2e-cpu-{worker_name_suffix(i)}" for i in ids}
    client.wait_for_workers(3, timeout=90)
    assert worker_names(client) == expected
    assert {pool.job_id_of_worker(n) for n in expected} == set(ids)
    assert {s.state for s in pool.refresh().values()} == {JobState.running}
    listed = double.system.query(cluster="e2e")
    assert {(s.job_id, s.pool, s.scheduler) for s in listed} == {(i, "cpu", address) for i in ids}
    assert double.system.query(cluster="another-cluster") == []

    # Real work on the batch workers.
    assert client.gather(client.map(lambda x: x * x, range(12))) == [x * x for x in range(12)]
    assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6

    # Removing one job removes exactly that worker.
    victim, survivors = ids[1], [ids[0], ids[2]]
    victim_pid = double.element(victim)["pid"]
    pool.remove([victim])
    assert len(double.store.calls("qdel" if double.kind == "pbs" else "bkill")) == 1
    wait_for(lambda: worker_names(client) == expected - {f"e2e-cpu-{worker_name_suffix(victim)}"},
             30, "the removed job's worker to leave the scheduler")
    wait_for(lambda: not batch_double.process_alive(victim_pid), 15, "the victim to exit")
    wait_for(lambda: set(double.active_listed()) == set(survivors), 15,
             "the double's status tool to list only the survivors")
    states = pool.refresh()
    assert not states[victim].state.active
    assert [states[i].state for i in survivors] == [JobState.running, JobState.running]
    [history] = double.system.query(job_ids=[victim], history=True)
    assert not history.state.active
    assert client.submit(lambda: 42).result(timeout=30) == 42

    # Closing the pool leaves no job in the queue and no process behind.
    pool.close(timeout=60)
    assert double.active_listed() == {}
    wait_for(lambda: not any(batch_double.process_alive(p)
                             for p in batch_double.job_pids(double.store)),
             15, "every job and runner process to exit")
    wait_for(lambda: not worker_names(client), 30, "the workers to leave the scheduler")
