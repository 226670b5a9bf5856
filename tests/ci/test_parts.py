"""``ci/parts.sh``, which runs the suite as pytest runs side by side (``ci/test.sh``'s
default): the rest beside the pools' part, whose lanes run phase by phase; how it calls each
run, how it combines their exit statuses, and that stopping it stops every run still going,
each with one Ctrl-C so its fixtures are torn down.

The pytest it runs is a TEST DOUBLE (``PYTEST_DOUBLE`` below): it records its arguments,
prints a line, and exits as the test asks, or waits until it is interrupted. The last test
runs ci/parts.sh with the REAL pytest and this suite's conftest, and stops it."""

from __future__ import annotations

import itertools
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
run = args[args.index("--part") + 1]
if "--lane" in args:
    run += "-" + args[args.index("--lane") + 1]
record = os.path.join(os.environ["RECORD"], run)
if os.environ.get("STARTUP_S"):  # (a pytest still starting: no handler of its own yet)
    with open(record + ".starting", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(float(os.environ["STARTUP_S"]))
with open(record + ".args", "w") as f:
    f.write(" ".join(args))
with open(os.path.join(os.environ["RECORD"], "order"), "a") as f:
    f.write(f"start {run}\\n")
def interrupted(*_):
    with open(record + ".interrupted", "w") as f:
        f.write(str(os.getpid()))
    sys.exit(2)
signal.signal(signal.SIGINT, interrupted)  # (as the suite's pytest_configure does)
print(f"output of {run}", flush=True)
if run == "rest" and os.environ.get("DOTS"):  # as pytest -q's progress: no newline yet
    print("....", end="", flush=True)
    open(os.path.join(os.environ["RECORD"], "dots"), "w").close()
elif os.environ.get("DOTS"):  # (a lane ends after the dots are out)
    while not os.path.exists(os.path.join(os.environ["RECORD"], "dots")):
        time.sleep(0.05)
if os.environ.get("WAIT"):
    with open(record + ".pid", "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)
time.sleep(float(os.environ.get("SECONDS_" + run.upper().replace("+", "_"), "0")))
with open(os.path.join(os.environ["RECORD"], "order"), "a") as f:
    f.write(f"end {run}\\n")
sys.exit(int(os.environ.get(f"RC_{run.upper().replace('+', '_')}", "0")))
"""

#: The lanes of the pools' part by phase (each a list of tracks), as ci/parts.sh runs them.
PHASES = [[["htcondor"], ["slurm", "sge"], ["alongside"]], [["htcondor+slurm"], ["ports"]],
          [["all"]]]
LANES = [lane for phase in PHASES for track in phase for lane in track]
FIRST = ["rest", "pools-htcondor", "pools-slurm", "pools-alongside"]  # (what starts first)


def parts(tmp_path: Path, *extra: str) -> list[str]:
    """The command line of ci/parts.sh with the pytest double."""
    (tmp_path / "pytest_double.py").write_text(PYTEST_DOUBLE)
    return ["bash", str(REPO / "ci" / "parts.sh"), "3", sys.executable,
            str(tmp_path / "pytest_double.py"), "--", *extra]


def codes(rest: int, lanes: int | dict[str, int]) -> dict[str, str]:
    """The double's exit statuses: the rest's, and every lane's (or some lanes')."""
    if isinstance(lanes, int):
        lanes = dict.fromkeys(LANES, lanes)
    return {"RC_REST": str(rest), **{f"RC_POOLS-{lane.upper().replace('+', '_')}": str(code)
                                     for lane, code in lanes.items()}}


def test_the_lanes_are_the_conftests_phase_by_phase() -> None:
    """parts.sh's PHASES are tests/conftest.py's POOL_PHASES, every lane runs once, and no
    two tracks of a phase hold a pool, a port or the namespaces in common."""
    from tests.conftest import POOL_LANES, POOL_PHASES

    script = (REPO / "ci" / "parts.sh").read_text()
    assert 'PHASES=("htcondor slurm>sge alongside" "htcondor+slurm ports" "all")' in script
    assert [[list(track) for track in phase] for phase in POOL_PHASES] == PHASES
    assert sorted(LANES) == sorted(POOL_LANES)
    for phase in POOL_PHASES:
        holds = [frozenset().union(*(POOL_LANES[lane] for lane in track)) for track in phase]
        for i, one in enumerate(holds):
            for other in holds[i + 1:]:
                assert not one & other, (phase, one, other)


@pytest.mark.parametrize("rest, lanes, expected", [
    (0, 0, 0), (5, 0, 0), (0, 5, 0),  # a run the arguments leave without a test
    (0, {"all": 5}, 0), (5, {"htcondor": 5, "sge": 5}, 0),
    (5, 5, 5), (1, 0, 1), (0, 1, 1), (1, 5, 1), (5, 1, 1),
    (0, {"sge": 1}, 1), (0, {"htcondor": 1}, 1)])
def test_the_runs_exit_statuses_combine(tmp_path, rest, lanes, expected) -> None:
    result = subprocess.run(
        parts(tmp_path, "tests/x", "-k", "y"), capture_output=True, text=True,
        timeout=60, env={**os.environ, "RECORD": str(tmp_path), **codes(rest, lanes)})
    assert result.returncode == expected, result.stdout + result.stderr
    assert (tmp_path / "rest.args").read_text() == "--part rest -n 2 tests/x -k y"
    for lane in LANES:
        assert (tmp_path / f"pools-{lane}.args").read_text() == (
            f"--part pools --lane {lane} tests/x -k y")
    out = result.stdout
    lines = out.splitlines()
    # (the rest writes while the script logs: its line is found wherever it landed; the
    # lanes' outputs are printed one after another at the end, each on its own lines)
    rest_at = [i for i, line in enumerate(lines) if "output of rest" in line]
    assert rest_at, out
    positions = rest_at[:1] + [lines.index(f"output of pools-{lane}") for lane in LANES]
    assert positions == sorted(positions), out  # (the rest's, then the lanes' in order)
    lane_codes = lanes if isinstance(lanes, dict) else dict.fromkeys(LANES, lanes)
    assert f"the rest: exit {rest}; " + "; ".join(
        f"pools/{lane}: exit {lane_codes.get(lane, 0)}" for lane in LANES) in out


def test_a_phase_starts_when_the_one_before_it_has_ended(tmp_path) -> None:
    """The tracks of a phase run side by side, a track's lanes one after another, and the
    next phase waits for the slowest track."""
    env = {**os.environ, "RECORD": str(tmp_path), "SECONDS_POOLS-HTCONDOR": "3",
           "SECONDS_POOLS-SLURM": "1", "SECONDS_POOLS-ALONGSIDE": "1",
           "SECONDS_POOLS-HTCONDOR_SLURM": "2", "SECONDS_POOLS-PORTS": "2"}
    result = subprocess.run(parts(tmp_path), capture_output=True, text=True, timeout=60,
                            env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    order = [line for line in (tmp_path / "order").read_text().splitlines() if "pools-" in line]
    for phase, later in itertools.pairwise(PHASES):
        firsts = [order.index(f"start pools-{track[0]}") for track in phase]
        ends = [order.index(f"end pools-{lane}") for track in phase for lane in track]
        assert max(firsts) < min(ends) or len(phase) == 1, order  # (side by side)
        for track in phase:  # (one after another, the next as soon as one has ended)
            for lane, after in itertools.pairwise(track):
                assert (order.index(f"end pools-{lane}")
                        < order.index(f"start pools-{after}")), order
        assert max(ends) < min(order.index(f"start pools-{track[0]}")
                               for track in later), order
    # the Slurm lane ended first: the Grid Engine lane ran while the HTCondor lane still did
    assert order.index("start pools-sge") < order.index("end pools-htcondor"), order
    assert order[-2:] == ["start pools-all", "end pools-all"]


def test_each_lanes_summary_is_logged_when_its_phase_ends(tmp_path) -> None:
    """A CI log shows a lane's pytest summary while later phases still run (its whole
    output comes at the end)."""
    env = {**os.environ, "RECORD": str(tmp_path), "SECONDS_POOLS-HTCONDOR_SLURM": "30",
           "SECONDS_REST": "30", "DOTS": "1"}
    script = subprocess.Popen(parts(tmp_path), env=env, stdout=subprocess.PIPE, text=True)
    try:
        for line in script.stdout:  # type: ignore[union-attr]
            if "pools/htcondor: exit 0: output of pools-htcondor" in line:
                # on a line of its own, even after the rest's progress dots
                assert line.startswith("[ci "), line
                break
        else:
            raise AssertionError("no summary of the htcondor lane")
        assert "end pools-htcondor+slurm" not in (tmp_path / "order").read_text()
    finally:
        script.send_signal(signal.SIGTERM)
        script.communicate(timeout=30)


def test_without_lanes_the_pools_part_is_one_run(tmp_path) -> None:
    env = {**os.environ, "RECORD": str(tmp_path), "HYBRID_POOL_LANES": "0", "RC_POOLS": "1"}
    result = subprocess.run(parts(tmp_path, "-x"), capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 1
    assert (tmp_path / "pools.args").read_text() == "--part pools -x"
    assert not list(tmp_path.glob("pools-*"))
    assert "the rest: exit 0; pools: exit 1" in result.stdout


def _wait_for_records(tmp_path: Path, runs: list[str], suffix: str) -> list[Path]:
    """Wait (30 s at most) until the double has written ``RUN.SUFFIX`` for every run."""
    deadline = time.monotonic() + 30
    records = [tmp_path / f"{run}.{suffix}" for run in runs]
    while not all(p.exists() and p.read_text() for p in records):
        assert time.monotonic() < deadline, "the runs did not start"
        time.sleep(0.05)
    return records


def test_stopping_the_parts_interrupts_every_run_and_leaves_nothing(tmp_path) -> None:
    env = {**os.environ, "RECORD": str(tmp_path), "WAIT": "1"}
    script = subprocess.Popen(parts(tmp_path), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    runs = FIRST  # (the first lanes of the first phase's tracks)
    try:
        _wait_for_records(tmp_path, runs, "pid")
        script.send_signal(signal.SIGTERM)  # (as ci/test.sh's cleanup stops it)
        assert script.wait(timeout=30) == 143
    finally:
        if script.poll() is None:
            script.kill()
    for run in runs:
        assert (tmp_path / f"{run}.interrupted").exists(), f"{run} had no Ctrl-C"
        pid = int((tmp_path / f"{run}.pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # (no lane after them started: neither the rest of a track nor a later phase)
    assert not (tmp_path / "pools-sge.args").exists()
    assert not (tmp_path / "pools-htcondor+slurm.args").exists()


def test_a_run_stopped_while_it_starts_ends_at_once(tmp_path) -> None:
    """A stop that comes while a run's Python is still starting (before pytest has a SIGINT
    handler of its own) ends that run at once: its Ctrl-C is not ignored, as a background
    job's would be, leaving it to the KILL a minute later."""
    env = {**os.environ, "RECORD": str(tmp_path), "STARTUP_S": "300"}
    script = subprocess.Popen(parts(tmp_path), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    runs = FIRST
    try:
        starting = _wait_for_records(tmp_path, runs, "starting")
        stopped = time.monotonic()
        script.send_signal(signal.SIGTERM)
        assert script.wait(timeout=40) == 143
        assert time.monotonic() - stopped < 30  # (not the KILL after 60 s)
    finally:
        if script.poll() is None:
            script.kill()
    for path in starting:
        with pytest.raises(ProcessLookupError):
            os.kill(int(path.read_text()), 0)


class _Item:
    """What ``pool_lane`` reads of a pytest item: its markers and fixtures."""

    def __init__(self, *markers: str, fixtures: tuple[str, ...] = ()):
        self.markers, self.fixturenames = set(markers), list(fixtures)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


@pytest.mark.parametrize("markers, fixtures, lane", [
    (("htcondor",), (), "htcondor"), ((), ("htcondor_pool",), "htcondor"),
    (("htcondor", "serial"), (), "htcondor"), (("slurm", "gateway"), (), "slurm"),
    (("sge", "slurm"), (), "slurm"), (("sge",), (), "sge"), (("serial",), (), "ports"),
    (("netns",), (), "sge"), (("htcondor",), ("slurm_cluster",), "htcondor+slurm"),
    (("htcondor", "sge"), (), "all"), (("slurm", "serial"), (), "all"),
    (("alongside", "htcondor", "slurm"), (), "alongside"),
    (("alongside",), ("slurm_cluster",), "alongside")])
def test_a_pool_test_runs_in_the_lane_that_holds_what_it_uses(markers, fixtures,
                                                               lane) -> None:
    from tests.conftest import POOL_LANES, POOL_PHASES, pool_lane

    assert pool_lane(_Item(*markers, fixtures=fixtures)) == lane
    phase = next(phase for phase in POOL_PHASES if any(lane in track for track in phase))
    others = [other for track in phase if lane not in track for other in track]
    uses = {*markers} | {"htcondor" for f in fixtures if f == "htcondor_pool"} | {
        "slurm" for f in fixtures if f == "slurm_cluster"}
    if lane != "alongside":  # (nothing it uses is in another track of its phase)
        for other in others:
            assert not (uses & POOL_LANES[other]), other


@pytest.mark.parametrize("markers", [("alongside", "sge"), ("alongside", "htcondor", "serial"),
                                     ("alongside", "netns")])
def test_an_alongside_test_may_use_only_htcondor_and_slurm(markers) -> None:
    """A test that uses the Grid Engine cell, a fixed port or the namespaces cannot run
    beside the lanes that hold them: the marker is refused, naming the test and the fix."""
    from tests.conftest import pool_lane

    item = _Item(*markers)
    item.nodeid = "tests/x.py::test_y"
    with pytest.raises(pytest.UsageError, match=r"tests/x.py::test_y: an 'alongside' test "
                       r"may use only htcondor and slurm .* drop the marker"):
        pool_lane(item)


@pytest.mark.parametrize("stop", ["ctrl-c in the terminal", "term"])
def test_a_real_run_is_torn_down_in_full_however_it_is_stopped(tmp_path, stop) -> None:
    """ci/parts.sh with the REAL pytest and this suite's conftest, running one waiting test
    in the rest (a pytest-xdist worker) and one in a lane: a Ctrl-C in the terminal (it
    reaches the script's process group, which ci/test.sh's cleanup then stops with a TERM)
    or a TERM alone (a CI runner stopping ci/test.sh) interrupts both tests once, and
    both fixtures' teardowns run to their end."""
    import psutil

    command = ["bash", str(REPO / "ci" / "parts.sh"), "2", sys.executable, "-m", "pytest",
               "-p", "no:cacheprovider", "-q", "--", "tests/ci/interrupted_run.py"]
    script = subprocess.Popen(  # (Ctrl-C ignored: ci/test.sh starts it in the background)
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, env={**os.environ, "RECORD": str(tmp_path), "TEARDOWN_S": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 180
        while len(list(tmp_path.glob("started-*"))) < 2:
            assert time.monotonic() < deadline and script.poll() is None, "not started"
            time.sleep(0.1)
        runs = [p for p in psutil.Process(script.pid).children(recursive=True)
                if "pytest" in " ".join(p.cmdline())]
        if stop == "term":
            script.send_signal(signal.SIGTERM)
        else:
            # (the pauses space the signals as a person and ci/test.sh would; nothing waits
            # on them: the stop must be clean wherever the next signal lands)
            os.killpg(script.pid, signal.SIGINT)  # the terminal's Ctrl-C
            time.sleep(0.2)
            script.send_signal(signal.SIGTERM)  # (ci/test.sh's cleanup)
            time.sleep(0.2)
            script.send_signal(signal.SIGTERM)  # (and a second one: still a clean stop)
        out, _ = script.communicate(timeout=120)
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
    assert script.returncode == 143, out
    started = sorted(p.name.removeprefix("started-") for p in tmp_path.glob("started-*"))
    torn_down = sorted(p.name.removeprefix("torn-down-") for p in tmp_path.glob("torn-down-*"))
    assert len(started) == 2 and torn_down == started, out
    assert "Traceback" not in out, out
    _, alive = psutil.wait_procs(runs, timeout=10)
    assert not alive, alive
