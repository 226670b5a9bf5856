"""Waits that show progress: ``scale(..., wait=True)`` and ``hybrid submit --wait``, on REAL
workers (local pool), the REAL HTCondor pool (a job its START expression holds back), and
Ctrl-C in the middle of a wait, which leaves no job behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from distributed import LocalCluster

from hybrid import HybridCluster
from tests.batch.test_real_pools import condor_jobs, wait_for

pytestmark = pytest.mark.timeout(240)

HYBRID = [sys.executable, "-m", "hybrid.cli"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_scale_with_wait_takes_progress_as_wait_for_workers_does(staging, capsys) -> None:
    """``scale(..., wait=True, progress=...)``, as docs/views.md offers (it was refused)."""
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(1, pool="cpu", wait=True, timeout=60, progress=False)
        assert len(cluster.connected_workers("cpu")) == 1
        assert "workers (cpu)" not in capsys.readouterr().err  # nothing shown
        cluster.scale(2, pool="cpu", wait=True, timeout=60, progress="lines")
        assert "workers (cpu): 2/2 connected in" in capsys.readouterr().err


def test_scale_with_wait_returns_once_the_workers_joined_and_shows_progress(
        staging, capsys) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.add_pool("idle", "local", nanny=False)
        cluster.scale(2, pool="cpu", wait=True, timeout=60)
        assert len(cluster.connected_workers("cpu")) == 2
        shown = capsys.readouterr().err
        assert "workers (cpu): 2/2 connected in" in shown
        assert "pool cpu (local): 2 pending; target 2; 0 workers connected" in shown


@pytest.mark.htcondor
def test_ctrl_c_in_scale_wait_ends_the_script_and_leaves_no_job(htcondor_pool, staging) -> None:
    name = f"ctrlc-{os.getpid()}"
    later = int(time.time()) + 3600
    script = textwrap.dedent(f"""
        import dask
        dask.config.set({{"hybrid.scheduler.host": "127.0.0.1",
                          "hybrid.batch.staging-directory": {str(staging)!r}}})
        from hybrid import HybridCluster
        with HybridCluster(name={name!r}) as cluster:
            cluster.add_pool("queued", "htcondor", nanny=False,
                             job_extra_directives=["+HybridCIStartAfter = {later}"])
            cluster.scale(1, wait=True)
        """)
    process = subprocess.Popen([sys.executable, "-c", script], env=_env(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = ""
        deadline = time.monotonic() + 120
        while "workers (queued): 0/1 connected" not in seen:
            line = process.stderr.readline()
            assert line or process.poll() is None, f"the script ended: {seen}"
            seen += line
            assert time.monotonic() < deadline, seen
        assert condor_jobs(name), "the job is in the queue while the wait shows it"
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert "workers (queued): interrupted at 0/1" in seen + rest
    wait_for(lambda: not condor_jobs(name), 60, "no job of the interrupted script left")


@pytest.fixture
def scheduler():
    with LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None, scheduler_port=0,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster:
        yield cluster.scheduler_address


def test_submit_wait_shows_progress_until_the_workers_joined(scheduler, staging) -> None:
    name = f"submitwait-{os.getpid()}"
    result = subprocess.run(
        [*HYBRID, "submit", "--system", "local", "--scheduler", scheduler, "--cluster", name,
         "--count", "2", "--no-nanny", "--wait", "--timeout", "90"],
        env=_env(), capture_output=True, text=True, timeout=150)
    try:
        assert result.returncode == 0, result.stderr
        assert "submitted 2 worker job(s) to local" in result.stdout
        assert "workers (default): 2/2 connected in" in result.stderr
        assert "pool default (local):" in result.stderr and "\x1b" not in result.stderr
    finally:
        subprocess.run([*HYBRID, "cancel", "--system", "local", "--cluster", name],
                       env=_env(), capture_output=True, timeout=60)


@pytest.mark.htcondor
def test_submit_wait_that_times_out_removes_its_jobs(htcondor_pool, scheduler, staging) -> None:
    name = f"submittimeout-{os.getpid()}"
    later = int(time.time()) + 3600
    result = subprocess.run(
        [*HYBRID, "submit", "--system", "htcondor", "--scheduler", scheduler, "--cluster",
         name, "--no-nanny", "--job-extra-directive", f"+HybridCIStartAfter = {later}",
         "--wait", "--timeout", "5"], env=_env(), capture_output=True, text=True, timeout=150)
    assert result.returncode == 1, result
    assert "Error: 0 of 1 workers of default connected after 5 s" in result.stderr
    assert "removed the 1 job(s) this command submitted" in result.stderr
    assert "Traceback" not in result.stderr
    wait_for(lambda: not condor_jobs(name), 60, "the jobs of the failed wait removed")
    assert not any(staging.glob("*")), "no staged copy of the files left"


def test_submit_timeout_needs_wait() -> None:
    result = subprocess.run([*HYBRID, "submit", "--system", "local", "--timeout", "5"],
                            env=_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--timeout" in result.stderr and "only with --wait" in (
        result.stderr)


def test_submit_wait_ends_when_its_job_fails(scheduler, staging) -> None:
    """Nothing replaces the jobs of ``hybrid submit``: once its only job failed (a python
    that is not there: exit 127), the wait ends with the job's reason, at once, not at its
    timeout (it waited out the whole timeout, or forever without one)."""
    name = f"submitfails-{os.getpid()}"
    started = time.monotonic()
    result = subprocess.run(
        [*HYBRID, "submit", "--system", "local", "--scheduler", scheduler, "--cluster", name,
         "--no-nanny", "--python", "/nonexistent/bin/python3", "--wait", "--timeout", "600"],
        env=_env(), capture_output=True, text=True, timeout=150)
    assert result.returncode == 1, result
    assert "exit code 127" in result.stderr, result.stderr
    assert "connected after 600 s" not in result.stderr
    assert "removed the 1 job(s) this command submitted" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 150
    assert not any(staging.glob("*")), "no staged copy of the files left"
