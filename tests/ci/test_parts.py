"""``ci/parts.sh``, which runs the suite as two pytest runs side by side (``ci/test.sh``'s
default): how it calls each part, how it combines their exit statuses, and that stopping it
stops both parts, each with a Ctrl-C first so its fixtures are torn down.

The pytest it runs is a TEST DOUBLE (``PYTEST_DOUBLE`` below): it records its arguments,
prints a line, and exits as the test asks, or waits until it is interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PYTEST_DOUBLE = """\
import os, signal, sys, time
args = sys.argv[1:]
part = args[args.index("--part") + 1]
record = os.path.join(os.environ["RECORD"], part)
with open(record + ".args", "w") as f:
    f.write(" ".join(args))
def interrupted(*_):
    with open(record + ".interrupted", "w") as f:
        f.write(str(os.getpid()))
    sys.exit(2)
signal.signal(signal.SIGINT, interrupted)  # (as the suite's pytest_configure does)
print(f"output of the {part} part", flush=True)
if os.environ.get("WAIT"):
    with open(record + ".pid", "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)
sys.exit(int(os.environ[f"RC_{part.upper()}"]))
"""


def parts(tmp_path: Path, *extra: str) -> list[str]:
    """The command line of ci/parts.sh with the pytest double."""
    (tmp_path / "pytest_double.py").write_text(PYTEST_DOUBLE)
    return ["bash", str(REPO / "ci" / "parts.sh"), "3", sys.executable,
            str(tmp_path / "pytest_double.py"), "--", *extra]


@pytest.mark.parametrize("pools, rest, expected", [
    (0, 0, 0), (5, 0, 0), (0, 5, 0),  # a part the arguments leave without a test
    (5, 5, 5), (1, 0, 1), (0, 1, 1), (1, 5, 1), (5, 1, 1)])
def test_the_parts_exit_statuses_combine(tmp_path, pools, rest, expected) -> None:
    result = subprocess.run(
        parts(tmp_path, "tests/x", "-k", "y"), capture_output=True, text=True,
        timeout=60, env={**os.environ, "RECORD": str(tmp_path), "RC_POOLS": str(pools),
                         "RC_REST": str(rest)})
    assert result.returncode == expected, result.stdout + result.stderr
    assert (tmp_path / "pools.args").read_text() == "--part pools tests/x -k y"
    assert (tmp_path / "rest.args").read_text() == "--part rest -n 2 tests/x -k y"
    out = result.stdout
    assert out.index("output of the rest part") < out.index("output of the pools part")
    assert f"the pools' part (exit {pools}; the rest: exit {rest})" in out


def test_stopping_the_parts_interrupts_both_and_leaves_nothing(tmp_path) -> None:
    env = {**os.environ, "RECORD": str(tmp_path), "WAIT": "1"}
    script = subprocess.Popen(parts(tmp_path), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        pids = [tmp_path / f"{part}.pid" for part in ("pools", "rest")]
        while not all(p.exists() and p.read_text() for p in pids):
            assert time.monotonic() < deadline, "the parts did not start"
            time.sleep(0.05)
        script.send_signal(signal.SIGTERM)  # (as ci/test.sh's cleanup stops it)
        assert script.wait(timeout=30) == 143
    finally:
        if script.poll() is None:
            script.kill()
    for part in ("pools", "rest"):
        assert (tmp_path / f"{part}.interrupted").exists(), f"{part} had no Ctrl-C"
        pid = int((tmp_path / f"{part}.pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
