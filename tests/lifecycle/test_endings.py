"""Clean endings (issue 23): a user's script, run as a subprocess, ends the same way whatever
ends it, on the REAL HTCondor pool and a REAL dev gateway.

Each scenario runs ``tests/lifecycle/user_script.py`` and checks what the user sees (every
line of its output: its own markers and at most one line of hybrid's, no traceback, no
warning) and what is left: the jobs, asked of HTCondor itself (local jobs: the processes
themselves), and the gateway's clusters (``list_clusters()``), none within a minute.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from hybrid.gateway.client import HTCGateway
from tests.batch.test_real_pools import condor_jobs
from tests.gateway.helpers import wait_for
from tests.lifecycle.conftest import CLIENT_TIMEOUT

SCRIPT = Path(__file__).with_name("user_script.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.timeout(300),
    # dask_gateway's Gateway.__del__ closes again a gateway already closed: noise, not a fault
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]


class Run:
    """One run of the user's script: its process, its output so far, its cluster."""

    def __init__(self, kind: str, phase: str, env: dict[str, str]):
        self.kind, self.phase = kind, phase
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), kind, phase], cwd=REPO, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.cluster: str | None = None

    def until(self, marker: str, timeout: float = 240) -> None:
        """Read the output up to the line ``phase <marker>...``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self._add(line.rstrip("\n"))
            if line.startswith(f"phase {marker}"):
                return
        raise AssertionError(f"the script never reached phase {marker!r}:\n" + self.text())

    def until_said(self, words: str) -> None:
        """Read the output up to hybrid's line with ``words``."""
        while line := self.process.stdout.readline():
            self._add(line.rstrip("\n"))
            if line.startswith("hybrid: ") and words in line:
                return
        raise AssertionError(f"hybrid never said {words!r}:\n" + self.text())

    def finish(self, timeout: float = 180) -> int:
        try:
            rest, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:  # where it hangs: its threads' stacks, then why
            self.process.send_signal(signal.SIGUSR1)  # (faulthandler, in the script)
            with contextlib.suppress(subprocess.TimeoutExpired):  # (what it wrote is kept)
                self.process.communicate(timeout=3)
            self.process.kill()
            rest, _ = self.process.communicate()
            for line in rest.splitlines():
                self._add(line)
            raise AssertionError(f"the script did not end within {timeout} s:\n"
                                 + self.text()) from None
        for line in rest.splitlines():
            self._add(line)
        return self.process.returncode

    def _add(self, line: str) -> None:
        self.lines.append(line)
        if line.startswith("phase scale "):
            self.cluster = line.split()[2]

    def text(self) -> str:
        return "\n".join(self.lines)

    def hybrid_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith("hybrid: ")]

    def noise(self) -> list[str]:
        """Every line that is neither the script's own nor one of hybrid's messages."""
        return [line for line in self.lines if not line.startswith(("phase ", "hybrid: "))
                and not line.startswith("{")]


@pytest.fixture
def script(request, tmp_path, staging) -> Iterator[Any]:
    """``script(kind, phase)`` starts the user's script; whatever a failed test left (jobs,
    processes, gateway clusters) is removed afterwards."""
    runs: list[Run] = []
    gateway = None

    def start(kind: str, phase: str, nohup: bool = False) -> Run:
        nonlocal gateway
        extra = {"HYBRID_T_NOHUP": "1"} if nohup else {}
        if kind.startswith("gateway"):
            if gateway is None:
                gateway = request.getfixturevalue("lifecycle_gateway")
            extra |= {"HYBRID_T_GATEWAY": gateway.address, "HYBRID_T_PROXY":
                     gateway.proxy_address, "HYBRID_T_USER": gateway.username,
                     "HYBRID_T_PASSWORD": gateway.password}
        if "htcondor" in kind:
            request.getfixturevalue("htcondor_pool")  # (its environment: CONDOR_CONFIG)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        env.update({"PYTHONPATH": str(REPO), "DASK_HYBRID__SCHEDULER__HOST": "127.0.0.1",
                    "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging),
                    "DASK_HYBRID__WORKER__DEATH_TIMEOUT": "20s",
                    "DASK_HYBRID__BATCH__POLL_INTERVAL": "0.5s"})
        run = Run(kind, phase, {**env, **extra})
        run.gateway = gateway
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait(10)
        if run.cluster is None:
            continue
        from hybrid.batch import get_system

        for system in ("htcondor", "local") if "htcondor" in run.kind else ("local",):
            try:
                get_system(system).remove_cluster(run.cluster)
            except Exception as error:  # keep cleaning
                print(f"cleanup: {system} jobs of {run.cluster}: {error}", file=sys.stderr)
        for process in _local_workers(run.cluster):
            process.kill()
        if run.gateway is not None:
            client = run.gateway.gateway()
            try:
                if run.cluster in {r.name for r in client.list_clusters()}:
                    client.stop_cluster(run.cluster)
            finally:
                client.close()


def _local_workers(cluster: str) -> list[psutil.Process]:
    """Live processes of a cluster's local jobs (their command lines name the cluster)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        try:
            if process.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(cluster in part for part in process.info["cmdline"] or ()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def _jobs_left(run: Run) -> list[str]:
    """The cluster's jobs that still run, asked of HTCondor and of the process table."""
    assert run.cluster is not None
    left = [f"htcondor {j}" for j in condor_jobs(run.cluster)] if "htcondor" in run.kind else []
    left += [f"process {p.pid}" for p in _local_workers(run.cluster)]
    return left


def _gateway_clusters(run: Run) -> list[str]:
    client = run.gateway.gateway()
    try:
        return [r.name for r in client.list_clusters() if r.name == run.cluster]
    finally:
        client.close()


def _assert_nothing_left(run: Run, within: float = 60) -> None:
    wait_for(lambda: not _jobs_left(run), within, message=f"no job of {run.cluster} left")
    if run.kind.startswith("gateway"):
        wait_for(lambda: not _gateway_clusters(run), within,
                 message=f"gateway cluster {run.cluster} gone")


def _assert_one_clean_message(run: Run, *words: str) -> None:
    assert run.noise() == [], "the user saw more than hybrid's one line:\n" + run.text()
    lines = run.hybrid_lines()
    assert len(lines) == 1, run.text()
    for word in words:
        assert word in lines[0], run.text()


MARKS = {"htcondor": [pytest.mark.htcondor], "gateway-local": [pytest.mark.gateway],
         "gateway-htcondor": [pytest.mark.htcondor, pytest.mark.gateway],
         "backend-htcondor": [pytest.mark.htcondor]}
HTCONDOR, GATEWAY_HTCONDOR, GATEWAY_LOCAL, BACKEND_HTCONDOR = (
    pytest.param(kind, marks=MARKS[kind], id=kind)
    for kind in ("htcondor", "gateway-htcondor", "gateway-local", "backend-htcondor"))


def _with_phase(kind: str, phase: str) -> Any:
    return pytest.param(kind, phase, marks=MARKS[kind], id=f"{kind}-{phase}")


def _ended(run: Run) -> str:
    return "shut down" if run.kind.startswith("gateway") else "closed"


@pytest.mark.parametrize("kind", [HTCONDOR, GATEWAY_HTCONDOR, GATEWAY_LOCAL, BACKEND_HTCONDOR])
def test_a_script_that_ends_without_close_leaves_nothing_and_says_nothing(script, kind):
    run = script(kind, "exit")
    assert run.finish() == 0, run.text()
    assert run.noise() == [] and run.hybrid_lines() == [], run.text()
    _assert_nothing_left(run)


@pytest.mark.parametrize("kind", [HTCONDOR, GATEWAY_HTCONDOR, GATEWAY_LOCAL])
def test_ctrl_c_inside_wait_for_workers_closes_with_one_line(script, kind):
    run = script(kind, "wait")
    run.until("wait")
    run.process.send_signal(signal.SIGINT)
    assert run.finish() == -signal.SIGINT, run.text()  # as Python ends on Ctrl-C
    _assert_one_clean_message(run, "interrupted (Ctrl-C)", run.cluster, _ended(run),
                              "2 ")
    _assert_nothing_left(run)


@pytest.mark.gateway
def test_ctrl_c_the_kernel_gives_another_thread_still_closes_with_one_line(script):
    """A process-wide signal may reach any thread; the main thread, blocked in a wait with
    no timeout, never ran Python's handler and the script hung in wait_for_workers (seen
    once on CI, 180 s). Sent here to one thread that is not the main one (tgkill)."""
    import ctypes

    run = script("gateway-local", "wait")
    run.until("wait")
    pid = run.process.pid
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the script runs threads besides its main one"
    import platform

    tgkill = {"x86_64": 234, "aarch64": 131}[platform.machine()]  # the syscall's number
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(tgkill, pid, others[0], signal.SIGINT) == 0
    assert run.finish() == -signal.SIGINT, run.text()
    _assert_one_clean_message(run, "interrupted (Ctrl-C)", run.cluster, "shut down")
    _assert_nothing_left(run)


@pytest.mark.parametrize("kind", [HTCONDOR, GATEWAY_LOCAL, BACKEND_HTCONDOR])
def test_ctrl_c_while_the_workers_run_closes_with_one_line(script, kind):
    run = script(kind, "sleep")
    run.until("sleep")
    run.process.send_signal(signal.SIGINT)
    assert run.finish() == -signal.SIGINT, run.text()
    _assert_one_clean_message(run, "interrupted (Ctrl-C)", run.cluster, _ended(run))
    _assert_nothing_left(run)


@pytest.mark.htcondor
def test_ctrl_c_while_waiting_for_results_closes_with_one_line(script):
    """Ctrl-C inside ``client.gather``: distributed's waits that the close ended printed
    "Task exception was never retrieved ... AllExit" tracebacks beside hybrid's line."""
    run = script("htcondor", "gather")
    run.until("gather")
    run.process.send_signal(signal.SIGINT)
    assert run.finish() == -signal.SIGINT, run.text()
    _assert_one_clean_message(run, "interrupted (Ctrl-C)", run.cluster, "closed")
    _assert_nothing_left(run)


@pytest.mark.gateway
def test_ctrl_c_while_the_gateway_starts_the_cluster_stops_it(script, lifecycle_gateway):
    client = lifecycle_gateway.gateway()
    try:
        before = {r.name for r in client.list_clusters()}
        run = script("gateway-local", "sleep")
        run.until("start")
        new = wait_for(lambda: {r.name for r in client.list_clusters()} - before, 60,
                       interval=0.05, message="the gateway to list the new cluster")
        run.cluster = next(iter(new))
        run.process.send_signal(signal.SIGINT)  # while new_cluster waits for it to start
        assert run.finish() == -signal.SIGINT, run.text()
        _assert_one_clean_message(run, "interrupted (Ctrl-C)", run.cluster, "shut down")
        assert "phase scale" not in run.text()  # it was interrupted inside new_cluster
        wait_for(lambda: not ({r.name for r in client.list_clusters()} - before), 60,
                 message="the gateway to list no new cluster")
    finally:
        client.close()


@pytest.mark.parametrize("kind", [HTCONDOR, GATEWAY_HTCONDOR])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_closing_does_not_cut_the_close_short_then_goes_on(script, kind,
                                                                           signum):
    """The close finishes; then the signal does what it does: the script is interrupted, the
    process terminated (it went on to the script's next line, and SIGTERM ended as exit 0:
    a report)."""
    run = script(kind, "close")
    run.until("close")
    # inside close(): it removed the jobs (HTCondor says so) and waits for them to leave
    wait_for(lambda: not condor_jobs(run.cluster), 60, interval=0.05,
             message="close() to remove the jobs")
    run.process.send_signal(signum)
    assert run.finish() == -signum, run.text()
    _assert_one_clean_message(run, "still closing")
    assert "phase done" not in run.lines
    _assert_nothing_left(run)


@pytest.mark.htcondor
def test_stopping_the_wait_for_a_close_still_shows_the_user_s_own_error(script):
    """Ctrl-C twice while leaving a ``with`` block on an error: the wait stops with one line,
    and the error that ended the block is still shown (it vanished, and the close ran a
    second time: a report)."""
    run = script("htcondor", "error")
    run.until("error")
    wait_for(lambda: not condor_jobs(run.cluster), 60, interval=0.05,
             message="the close to remove the jobs")
    run.process.send_signal(signal.SIGINT)
    run.until_said("still closing")
    run.process.send_signal(signal.SIGINT)
    assert run.finish() == -signal.SIGINT, run.text()
    lines = run.hybrid_lines()
    assert len(lines) == 2 and "stopped waiting" in lines[1], run.text()
    assert "ValueError: the user's own error" in run.text()
    _assert_nothing_left(run)


@pytest.mark.parametrize(("kind", "phase"), [
    _with_phase("htcondor", "sleep"), _with_phase("gateway-htcondor", "sleep"),
    _with_phase("gateway-local", "wait"), _with_phase("gateway-local", "swallow"),
    _with_phase("backend-htcondor", "sleep"), _with_phase("htcondor", "locked"),
    _with_phase("gateway-local", "locked")])
def test_sigterm_closes_like_ctrl_c_then_ends_the_process_as_sigterm_does(script, kind, phase):
    _ends_by(script(kind, phase), signal.SIGTERM, "terminated (SIGTERM)")  # a shell says 143


def _ends_by(run: Run, signum: int, words: str) -> None:
    """``signum`` closes the script's cluster with one line, then ends it as it ends a
    process, even where the script catches every exception."""
    run.until("sleep" if run.phase == "swallow" else run.phase)
    run.process.send_signal(signum)
    assert run.finish() == -signum, run.text()
    assert "phase swallowed" not in run.lines  # (nothing was raised into it)
    _assert_one_clean_message(run, words, run.cluster, _ended(run))
    _assert_nothing_left(run)


@pytest.mark.parametrize(("kind", "phase"), [
    _with_phase("htcondor", "sleep"), _with_phase("gateway-local", "wait"),
    _with_phase("gateway-local", "swallow")])
def test_a_closed_terminal_closes_like_sigterm_then_ends_the_process_as_sighup_does(
        script, kind, phase):
    """A script on a submit node whose ssh session dropped got SIGHUP, died of it and left
    its jobs, staging and credentials behind (a report)."""
    _ends_by(script(kind, phase), signal.SIGHUP, "hung up (SIGHUP")  # a shell says 129


@pytest.mark.gateway
def test_a_script_started_with_nohup_keeps_running_through_sighup(script):
    run = script("gateway-local", "wait", nohup=True)
    run.until("wait")
    run.process.send_signal(signal.SIGHUP)  # ignored, as nohup asked: SIGTERM ends it
    run.process.send_signal(signal.SIGTERM)
    assert run.finish() == -signal.SIGTERM, run.text()
    _assert_one_clean_message(run, "terminated (SIGTERM)", run.cluster, "shut down")
    _assert_nothing_left(run)


@pytest.mark.htcondor
def test_a_killed_script_s_workers_end_with_their_scheduler(script):
    run = script("htcondor", "sleep")
    run.until("sleep")
    assert len(condor_jobs(run.cluster)) == 2
    run.process.kill()  # SIGKILL: nothing of the script runs any more
    run.finish()
    _assert_nothing_left(run)  # the workers lose their scheduler, their jobs end


@pytest.mark.htcondor
def test_a_killed_script_s_queued_jobs_are_found_by_hybrid_gc(script, staging):
    run = script("htcondor", "queued")
    run.until("queued")
    jobs = condor_jobs(run.cluster)
    assert len(jobs) == 2
    run.process.kill()
    run.finish()
    env = {**os.environ, "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging)}
    hybrid = str(Path(sys.executable).with_name("hybrid"))
    found = subprocess.run([hybrid, "gc", "--system", "htcondor", "--dry-run", "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
    assert found.returncode == 0, found.stderr
    orphans = {o["job_id"] for o in json.loads(found.stdout)["orphans"]
               if o["cluster"] == run.cluster}
    assert orphans == set(jobs), found.stdout
    # (the shared pool holds other tests' jobs: this removes only this cluster's)
    removed = subprocess.run([hybrid, "cancel", "--system", "htcondor", "--cluster",
                              run.cluster], capture_output=True, text=True, timeout=120,
                             env=env)
    assert removed.returncode == 0, removed.stderr
    _assert_nothing_left(run)


@pytest.mark.parametrize("kind", [GATEWAY_HTCONDOR, GATEWAY_LOCAL])
def test_a_killed_script_leaves_a_gateway_cluster_the_server_reclaims(script, kind):
    run = script(kind, "sleep")
    run.until("sleep")
    assert _gateway_clusters(run) == [run.cluster]
    run.process.kill()
    run.finish()
    # nothing beats for it any more: client_timeout stops it, its workers go with it
    _assert_nothing_left(run, within=CLIENT_TIMEOUT + 60)


@pytest.mark.parametrize(("kind", "phase"), [
    _with_phase("htcondor", "after-close"), _with_phase("gateway-local", "after-close"),
    _with_phase("gateway-local", "after-close-keep")])
def test_a_closed_cluster_refuses_every_call_with_one_clear_error(script, kind, phase):
    run = script(kind, phase)
    assert run.finish() == 0, run.text()
    assert run.noise() == [] and run.hybrid_lines() == [], run.text()
    found = json.loads(next(line for line in run.lines if line.startswith("{")))
    # (a gateway cluster's is also dask-gateway's GatewayClusterError: GatewayClusterClosed)
    expected = "GatewayClusterClosed" if kind.startswith("gateway") else "ClusterClosed"
    for call, outcome in found.items():
        assert outcome["raised"] == expected, (call, outcome)
        assert f"{run.cluster} is closed" in outcome["message"], (call, outcome)
        assert outcome["seconds"] < 2, (call, outcome)  # refused at once, no timeout
    if phase == "after-close-keep":  # still there for another process, no worker of its own
        assert _gateway_clusters(run) == [run.cluster]
        client = run.gateway.gateway(HTCGateway)
        try:
            kept = client.connect(run.cluster)
            workers = kept.scheduler_info.get("workers", {}).values()
            assert all(w["name"].startswith(f"{run.cluster}-local-") for w in workers), workers
            kept.shutdown()  # its batch jobs too
        finally:
            client.close()
    _assert_nothing_left(run)


ASYNC_SCRIPT = """
import asyncio
from hybrid import HybridCluster

async def main():
    cluster = await HybridCluster(asynchronous=True)
    cluster.add_pool("cpu", "local")
    await cluster.scale(2)
    await cluster.wait_for_workers(2, 120)
    print("phase scale", cluster.name, flush=True)

asyncio.run(main())  # ends without closing the cluster
"""


def test_an_asynchronous_cluster_left_open_closes_with_its_event_loop(staging,
                                                                     tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({"PYTHONPATH": str(REPO), "DASK_HYBRID__SCHEDULER__HOST": "127.0.0.1",
                "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging), "HOME": str(tmp_path)})
    result = subprocess.run([sys.executable, "-c", ASYNC_SCRIPT], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    cluster = result.stdout.split()[2]
    # its two local workers are gone (asked of the process table), and so are their records
    wait_for(lambda: not _local_workers(cluster), 60, message="no worker process left")
    assert not list(staging.glob(f"{cluster}-*")), "its staging directory stayed"
    # and its credentials (the loop's end cancelled distributed's close, which skipped this)
    stored = tmp_path / ".cache" / "hybrid" / "clusters"
    assert stored.is_dir() and not list(stored.iterdir()), "its TLS key stayed"
