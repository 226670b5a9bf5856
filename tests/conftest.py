"""Session fixtures for the REAL batch systems: an HTCondor personal pool, a Slurm node and a
Grid Engine cell.

Each fixture brings its system up with the repo's own bring-up script (idempotent, fast when
already up) and, if it was the one that started it, tears it down at the end of the session.
Nothing here is a stand-in: tests that use these fixtures talk to the real daemons.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import dask
import pytest

REPO = Path(__file__).resolve().parents[1]

#: dask-gateway's own tests run in their own pytest (tests/gateway/test_upstream.py).
collect_ignore_glob = ["gateway/upstream/*"]

STATE = Path(os.environ.get("HYBRID_CI_STATE", "/var/tmp/hybrid-ci"))


#: Markers of the tests that need what only root can make here: a real batch system this
#: suite must start, or a network namespace of their own (``netns``).
POOL_MARKERS = ("htcondor", "slurm", "sge", "netns")
#: The fixtures that start a real pool (-> its marker): a test that asks for one needs root
#: as well.
POOL_FIXTURES = {"htcondor_pool": "htcondor", "slurm_cluster": "slurm", "sge_cell": "sge"}


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker starts with Ctrl-C ignored, and so does a pytest that bash starts
    in the background (ci/test.sh's pools' part); an ignored signal stays ignored in every
    program it starts: the scripts the Ctrl-C tests interrupt would never see it. Give such
    a pytest Python's own handler, as a plain ``pytest`` has."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: The parts of the parallel suite (``--part``).
PARTS = ("pools", "rest")

#: The lanes of the pools' part (``--part pools --lane NAME``): lane -> what its tests may
#: hold (a real pool, the docs' fixed ``ports``, the network namespaces). A test goes to the
#: first lane (in this order) that holds all it needs; a test marked ``alongside`` goes to
#: the ``alongside`` lane, which holds nothing: it uses only its own jobs of the HTCondor and
#: Slurm pools and no pool setting (no slot limit, no busy partition, no queue it counts as a
#: whole), so it may run beside the tests that use the same pools.
POOL_LANES: dict[str, frozenset[str]] = {
    "ports": frozenset({"ports"}),
    "sge": frozenset({"sge", "netns"}),
    "htcondor": frozenset({"htcondor", "ports"}),
    "slurm": frozenset({"slurm", "sge", "netns"}),
    "htcondor+slurm": frozenset({"htcondor", "slurm"}),
    "all": frozenset({"htcondor", "slurm", "sge", "ports", "netns"}),
    "alongside": frozenset(),
}
#: What ``alongside`` tests may use.
ALONGSIDE_USES = frozenset({"htcondor", "slurm"})
#: How ``ci/parts.sh`` runs the lanes, one test at a time in each: phase after phase; in a
#: phase, its tracks side by side; in a track, its lanes one after another. The tracks of a
#: phase hold nothing in common, so no test shares a queue or a port with a test of another
#: track.
POOL_PHASES: tuple[tuple[tuple[str, ...], ...], ...] = (
    (("htcondor",), ("slurm", "sge"), ("alongside",)),
    (("htcondor+slurm",), ("ports",)),
    (("all",),),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part", choices=PARTS, default=None,
        help="run one part of the suite: 'pools', every test that uses a real pool or a "
        "fixed port (one at a time: they change the pools' queues and count their jobs), or "
        "'rest', all the others (safe under pytest-xdist's -n). bash ci/test.sh runs both "
        "side by side (ci/parts.sh)")
    parser.addoption(
        "--lane", choices=tuple(POOL_LANES), default=None,
        help="with --part pools: only the pools' tests of this lane (ci/parts.sh runs the "
        "phases one after another, a phase's tracks side by side, a track's lanes (a>b) one "
        "after another: " + "; ".join(
            f"phase {number}: " + ", ".join(">".join(track) for track in phase)
            for number, phase in enumerate(POOL_PHASES, 1)) + "; what each lane holds: "
        + "; ".join(f"{name}: {' '.join(sorted(holds)) or 'nothing (marker alongside)'}"
                    for name, holds in POOL_LANES.items()) + ")")


def in_pools_part(item: pytest.Item) -> bool:
    """Whether ``item`` belongs to the pools' part of the parallel suite."""
    return (item.get_closest_marker("serial") is not None  # (holds a fixed port)
            or _needs_a_pool(item, POOL_MARKERS))


def pool_lane(item: pytest.Item) -> str:
    """The lane of the pools' part that runs ``item`` (see ``POOL_LANES``)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    needs = {system for fixture, system in POOL_FIXTURES.items()
             if item.get_closest_marker(system) or fixture in fixtures}
    needs |= {"ports"} if item.get_closest_marker("serial") else set()
    needs |= {"netns"} if item.get_closest_marker("netns") else set()
    if item.get_closest_marker("alongside"):
        if not needs <= ALONGSIDE_USES:
            raise pytest.UsageError(
                f"{getattr(item, 'nodeid', item)}: an 'alongside' test may use only "
                f"{' and '.join(sorted(ALONGSIDE_USES))} (it uses {', '.join(sorted(needs))}): "
                "drop the marker")
        return "alongside"
    return next(name for name, holds in POOL_LANES.items() if needs <= holds)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A contributor who is not root cannot start the real pools: their tests are left out
    (deselected, not skipped) and the summary says so. ``ci/test.sh`` (root) runs them all.

    ``--part pools`` / ``--part rest`` keep one part of the suite (the other is deselected):
    ``bash ci/test.sh`` (``ci/parts.sh``) runs the pools' part lane by lane (``--lane``,
    see ``POOL_LANES``), one test at a time in file order in each, and the rest in another
    pytest, with pytest-xdist, side by side. (pytest-xdist's own ``--dist loadgroup`` does not group
    with pytest 9.2: pytest-dev/pytest-xdist#1386.)"""
    part = config.getoption("part", None)
    if part is not None:
        _deselect(config, items, lambda item: in_pools_part(item) != (part == "pools"))
    lane = config.getoption("lane", None)
    if lane is not None:
        if part != "pools":
            raise pytest.UsageError("--lane LANE goes with --part pools")
        _deselect(config, items, lambda item: pool_lane(item) != lane)
    if os.geteuid() == 0:
        return  # ci/test.sh installs chromium and starts the pools: everything runs
    from tests.views.browser import chromium_missing

    markers = POOL_MARKERS + (("browser",) if chromium_missing() else ())
    left = _deselect(config, items, lambda item: _needs_a_pool(item, markers))
    if left:
        config.stash[_LEFT_OUT] = left


def _deselect(config: pytest.Config, items: list[pytest.Item],
              leave: Callable[[pytest.Item], bool]) -> int:
    """Deselect (and report) the items for which ``leave(item)`` is true; how many."""
    kept, left = [], []
    for item in items:
        (left if leave(item) else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    return len(left)


def _needs_a_pool(item: pytest.Item, markers: tuple[str, ...]) -> bool:
    """A marker says so, or the test asks for a pool's fixture (``getfixturevalue`` hides
    that: such a fixture puts the markers on its params)."""
    return (any(item.get_closest_marker(m) for m in markers)
            or bool(POOL_FIXTURES.keys() & set(getattr(item, "fixturenames", ()))))


_LEFT_OUT = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_OUT, 0)
    if left:
        terminalreporter.write_line(
            f"hybrid: left out {left} tests that need the real HTCondor pool, Slurm or Grid "
            "Engine, or a network namespace of their own (only root can make them here), or "
            "Debian's chromium where it is missing; run them all with `sudo bash ci/test.sh`",
            yellow=True)


def _source(env_file: Path) -> None:
    """Apply the ``export NAME=value`` lines of a bring-up script's env.sh to this process."""
    for line in env_file.read_text().splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            name, value = line[len("export "):].split("=", 1)
            os.environ[name] = value.strip().strip('"').strip("'")


def _bring_up(script: str, *args: str) -> bool:
    """Run a bring-up script; True when this call started the system (it was not up)."""
    result = subprocess.run(["bash", str(REPO / script), *args], capture_output=True,
                            text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"{script} failed (exit {result.returncode}):\n{result.stdout[-3000:]}\n"
                    f"{result.stderr[-3000:]}", pytrace=False)
    return "already up" not in (result.stdout + result.stderr)


def _bring_down(script: str) -> None:
    subprocess.run(["bash", str(REPO / script)], capture_output=True, timeout=300)


@pytest.fixture(scope="session")
def credentials_directory(tmp_path_factory) -> Path:
    """Where this session's clusters store their credentials (not the user's own home):
    give a second process ``DASK_HYBRID__SCHEDULER__CREDENTIALS_DIRECTORY`` to find them."""
    return tmp_path_factory.mktemp("credentials") / "clusters"


@pytest.fixture(autouse=True)
def loopback_schedulers(request, credentials_directory) -> Iterator[None]:
    """Every scheduler a test starts listens on loopback only: the CI pools share this
    machine's network, and no test traffic may leave it. Tests of the packaged
    configuration itself (marker ``packaged_config``) see it unchanged."""
    if request.node.get_closest_marker("packaged_config"):
        yield
        return
    with dask.config.set({"hybrid.scheduler.host": "127.0.0.1",
                          "hybrid.scheduler.credentials-directory": str(credentials_directory)}):
        yield


@pytest.fixture(autouse=True, scope="session")
def http_servers_on_loopback() -> Iterator[None]:
    """A scheduler's or worker's HTTP server (dashboard, health, metrics) that a test starts in
    its own process and that listens beyond loopback fails that test at once: distributed's
    ``dashboard_address=None`` still serves its HTTP routes, on port 8787 of the scheduler's
    host, and of EVERY interface for an in-process cluster (``processes=False``). Give such a
    cluster ``scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}``."""
    import ipaddress

    from distributed.node import ServerNode

    original = ServerNode.start_http_server

    def start_http_server(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        address = self.http_server.address
        if not ipaddress.ip_address(address).is_loopback:
            self.http_server.stop()
            raise AssertionError(
                f"{type(self).__name__}'s HTTP server listens on {address}:"
                f"{self.http_server.port}: a test keeps every server on loopback (give it "
                "dashboard_address='127.0.0.1:0'; a LocalCluster without a dashboard: "
                "scheduler_kwargs={'dashboard_address': '127.0.0.1:0'})")
        return result

    ServerNode.start_http_server = start_http_server
    try:
        yield
    finally:
        ServerNode.start_http_server = original


@pytest.fixture(scope="session")
def htcondor_pool() -> Iterator[Path]:
    """The real HTCondor personal pool (ci/htcondor/up.sh); yields its client config path."""
    started = _bring_up("ci/htcondor/up.sh", sys.prefix)
    _source(STATE / "htcondor" / "env.sh")
    import htcondor2

    htcondor2.reload_config()  # the bindings read CONDOR_CONFIG at import time
    try:
        yield Path(os.environ["CONDOR_CONFIG"])
    finally:
        if started:
            _bring_down("ci/htcondor/down.sh")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Path]:
    """The real single-node Slurm (ci/slurm/up.sh); yields its state directory."""
    started = _bring_up("ci/slurm/up.sh")
    _source(STATE / "slurm" / "env.sh")
    try:
        yield STATE / "slurm"
    finally:
        if started:
            _bring_down("ci/slurm/down.sh")


@pytest.fixture(scope="session")
def sge_cell() -> Iterator[Path]:
    """The real single-node Grid Engine (ci/sge/up.sh); yields its state directory."""
    started = _bring_up("ci/sge/up.sh")
    _source(STATE / "sge" / "env.sh")
    try:
        yield STATE / "sge"
    finally:
        if started:
            _bring_down("ci/sge/down.sh")


@pytest.fixture
def staging(tmp_path: Path) -> Iterator[Path]:
    """hybrid's staging directory for this test, checked empty of leftovers at the end."""
    path = tmp_path / "staging"
    with dask.config.set({"hybrid.batch.staging-directory": str(path)}):
        yield path
