"""A signal that ends the process (or Ctrl-C), taken by another thread while the main
thread sleeps in one long call, still closes the open clusters and ends the process at once
(CI saw a user's script stay asleep 180 s after its SIGTERM, its jobs left running: the
kernel had given the signal to another thread, or between Python's last look and the
sleep)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

SCRIPT = Path(__file__).with_name("lost_signal_script.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "words"), [("SIGTERM", "terminated (SIGTERM)"),
                                             ("SIGHUP", "hung up (SIGHUP"),
                                             ("SIGINT", "interrupted (Ctrl-C)")])
def test_a_signal_another_thread_took_still_ends_the_sleeping_script(name, words):
    signum = getattr(signal, name)
    process = subprocess.Popen([sys.executable, str(SCRIPT), name], cwd=REPO,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    children: list[psutil.Process] = []
    try:
        lines: list[str] = []
        while (line := process.stdout.readline()) and not line.startswith("phase sleep"):
            lines.append(line.rstrip("\n"))
        children = psutil.Process(process.pid).children(recursive=True)
        assert children, "the script's pool started no worker:\n" + "\n".join(lines)
        try:  # (the close itself takes a few seconds; a lost signal, the whole sleep)
            rest, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGUSR1)  # where it hangs (faulthandler)
            with contextlib.suppress(subprocess.TimeoutExpired):
                rest, _ = process.communicate(timeout=5)
            raise AssertionError("the script slept on after the signal:\n" + rest) from None
        assert process.returncode == -signum, rest
        said = [line for line in rest.splitlines() if line.startswith("hybrid: ")]
        assert len(said) == 1 and words in said[0] and "closed" in said[0], rest
        assert "phase sent" in rest and "phase woke" not in rest, rest
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"the local worker outlived the script: {alive}"
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


CHAINED = r"""
import os, signal, sys, threading
from hybrid import lifecycle

class Owner:  # (a test double of a cluster: lifecycle's bookkeeping is what is tested)
    def close(self):
        pass

read, write = os.pipe()
os.set_blocking(write, False)
signal.set_wakeup_fd(write)  # a program's own wakeup file, set before hybrid's
owner = Owner()
ending = lifecycle.register("cluster double", owner.close)
assert signal.getsignal(signal.SIGWINCH) is lifecycle._on_wake
waker = lifecycle._waker
current = signal.set_wakeup_fd(-1)
assert current == waker._write != write, current  # hybrid's, for now
signal.set_wakeup_fd(current)
signal.signal(signal.SIGUSR2, lambda *_: None)
signal.pthread_kill(threading.get_ident(), signal.SIGUSR2)
os.set_blocking(read, True)
handed = os.read(read, 1)  # handed on by hybrid's thread
assert handed == bytes([signal.SIGUSR2]), handed
ending.finished()  # the cluster is closed: everything as it was
assert signal.set_wakeup_fd(write) == write
assert signal.getsignal(signal.SIGWINCH) == signal.SIG_DFL
assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
waker._thread.join(30)  # (its pipe closed: the thread ends)
assert not waker._thread.is_alive()
print("ok")
"""


def test_the_waker_hands_each_signal_on_and_leaves_everything_as_it_was():
    """A program's own wakeup file (an event loop's) still gets every signal's byte while a
    cluster is open, and once the last one is closed its wakeup file, SIGWINCH and SIGTERM
    are as they were."""
    done = subprocess.run([sys.executable, "-c", CHAINED], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "ok", done.stdout
