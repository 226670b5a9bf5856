"""The job script's memory watch (jobtemplates/memory-watch.sh.j2), run by bash and by dash.

It does what a nanny would for a worker without one: past the limit it kills the worker and
its processes. Every turn reads /proc; under bash it waits between turns with the read builtin,
so it starts no process per turn (16 watches forking ``sleep`` twice a second cost about a
second of the CPU while 16 workers start on 2 cores, docs/benchmarks.md); under a POSIX sh it
falls back to ``sleep``. Its first turn comes a second after the worker started, so it
starts no process while the worker imports. Here a stand-in worker (a Python process, named as
such) grows a child past the limit after a few turns; a ``sleep`` on PATH that counts its calls
shows who forked what.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid.templates import render

#: The stand-in worker: it starts a child that grows to LIMIT * 2 resident only after ``grow``
#: appears, so the watch must add the child's memory to find it past the limit.
STAND_IN = """
import os, subprocess, sys, time
directory = sys.argv[1]
open(os.path.join(directory, "started"), "w").close()
while not os.path.exists(os.path.join(directory, "grow")):
    time.sleep(0.05)
child = subprocess.Popen([sys.executable, "-c",
    "import sys, time; open(sys.argv[2], 'w').close(); b = bytearray(int(sys.argv[1])); "
    "b[::4096] = b'x' * len(b[::4096]); time.sleep(600)", str(200 * 2**20),
    os.path.join(directory, "growing")])
child.wait()
"""
LIMIT_KIB = 100 * 1024
SHELLS = ["bash", "dash"]


def _shim(tmp_path: Path, tool: str, record: str) -> dict[str, str]:
    """An environment whose ``tool`` on PATH runs ``record`` (shell), then the real one."""
    shims = tmp_path / "bin"
    shims.mkdir(exist_ok=True)
    shim = shims / tool
    shim.write_text(f"#!/bin/sh\n{record}\nexec /usr/bin/{tool} \"$@\"\n")
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}


def _job_script(tmp_path: Path, worker: str, after: str) -> Path:
    """A job script as the templates write one: ``worker`` (a command) started, the watch
    rendered around it, then ``after``."""
    watch = render("memory-watch.sh.j2", memory_watch_kib=LIMIT_KIB, memory_watch_share="95%")
    script = tmp_path / "job.sh"
    script.write_text(f'{worker} &\nhybrid_worker=$!\n{watch}wait "$hybrid_worker"\n{after}')
    return script


def _run_watch(shell: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, int]:
    """The watch, rendered as a job script includes it, around the stand-in worker under
    ``shell``: the script's result and the ``sleep`` processes it started."""
    counter = tmp_path / "sleeps"
    env = _shim(tmp_path, "sleep", f"echo x >> {counter}")
    stand_in = tmp_path / "stand_in_worker.py"
    stand_in.write_text(STAND_IN)
    script = _job_script(tmp_path, f'"{sys.executable}" "{stand_in}" "{tmp_path}"',
                         'echo "worker status $?"\n')
    process = subprocess.Popen([shell, str(script)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():  # the watch has had its first turns
            assert time.monotonic() < deadline and process.poll() is None, "no stand-in"
            time.sleep(0.05)
        quiet_turns = time.monotonic() + 2.1
        while time.monotonic() < quiet_turns:  # the first second, then two turns or more
            assert process.poll() is None, "the watch killed a worker under its limit"
            time.sleep(0.05)
        (tmp_path / "grow").touch()
        out, err = process.communicate(timeout=60)
    finally:  # the stand-in and its child too, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    # (the watch may kill the child while it is still growing: that is its job)
    assert (tmp_path / "growing").exists(), f"the stand-in's child never grew: {err}"
    calls = len(counter.read_text().splitlines()) if counter.exists() else 0
    return subprocess.CompletedProcess(process.args, process.returncode, out, err), calls


@pytest.mark.parametrize("shell", SHELLS)
def test_the_watch_kills_a_worker_whose_processes_outgrow_the_limit(shell, tmp_path) -> None:
    result, calls = _run_watch(shell, tmp_path)
    assert "killing it, as a nanny would" in result.stderr
    assert f"past {LIMIT_KIB} KiB" in result.stderr
    assert "worker status 137" in result.stdout  # SIGKILL, as a nanny's kill
    if shell == "bash":  # every turn waited with the read builtin
        assert calls == 0, f"the watch started {calls} sleep processes under bash"
    else:  # POSIX sh: one sleep per turn, and the turns went on
        assert calls >= 3


def test_the_watch_leaves_nothing_behind_when_the_worker_ends(tmp_path) -> None:
    """A worker that exits on its own ends the watch too (within a turn)."""
    script = _job_script(tmp_path, f'"{sys.executable}" -c "import time; time.sleep(1)"',
                         "wait\necho done\n")
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert result.stdout == "done\n" and "killing" not in result.stderr


def test_the_watch_starts_no_process_while_the_worker_starts(tmp_path) -> None:
    """Its one process under bash (``getconf PAGESIZE``) comes with the first turn, a second
    after the worker started: none beside the worker's imports (a lower bound, which a busy
    machine only makes later)."""
    called = tmp_path / "getconf-called"
    env = _shim(tmp_path, "getconf", f"touch {called}")
    # the stand-in worker lives until the watch's first turn (a minute at most)
    lives = (f"import os, time; end = time.monotonic() + 60\nwhile not os.path.exists("
             f"{str(called)!r}) and time.monotonic() < end: time.sleep(0.05)")
    script = _job_script(tmp_path, f"\"{sys.executable}\" -c '{lives}'", "wait\necho done\n")
    started = time.time()
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                            env=env)
    assert result.stdout == "done\n", result.stderr
    assert called.exists(), "the watch never took a turn"
    assert called.stat().st_mtime - started >= 0.9
