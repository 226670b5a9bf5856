"""The documentation's Python examples, run as users run them (docs/docs-examples.md).

Each ``python`` block of docs/ is a script run with this virtual environment's python, in a
fresh process, with the page's blocks in page order. What a block ``needs`` is really
started: a dev gateway (a real dask-gateway-server on 127.0.0.1), the real HTCondor pool (as
root only, marker ``htcondor``), the LSF test double, the Kubernetes API server test double.
Blocks marked ``skip`` are compiled, not run. After a page: nothing left in the staging
directory, and no process left working in the test's directory.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs.markdown_examples import DOCS, MarkerError, Program, pages, programs

#: The docs' examples name fixed ports (8000, 8786): one at a time, in the pools' part.
pytestmark = pytest.mark.serial

REPO = DOCS.parent
DOUBLES = Path(__file__).resolve().parent / "doubles"
LSF_DOUBLE = REPO / "tests" / "batch" / "doubles" / "lsf"
#: What a ``needs gateway`` block is written for: ``hybrid gateway dev --port 8000
#: --proxy-port 8786 --password dev-password``; the test's own gateway takes their place.
GATEWAY_ADDRESS = "http://127.0.0.1:8000"
GATEWAY_PROXY = "gateway://127.0.0.1:8786"
GATEWAY_PASSWORD = "dev-password"
#: Pages other engineers own whose blocks carry no markers yet: what each one lacks.
NOT_MARKED_YET: dict[str, str] = {}
PROGRAM_TIMEOUT = 400


def _page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def _groups() -> list[Any]:
    """One test per page and kind of machine: programs that need the real HTCondor pool run
    in their own test (marked ``htcondor``), the others where anyone can run them."""
    params = []
    for page in pages():
        if _page_id(page) in NOT_MARKED_YET:
            continue
        try:
            found = programs(page)
        except MarkerError:
            found = []  # test_markers_are_valid reports it
        for group in ("here", "htcondor"):
            chosen = [p for p in found if p.skip is None
                      and (("htcondor" in p.needs) == (group == "htcondor"))]
            if not chosen:
                continue
            marks = [pytest.mark.timeout(PROGRAM_TIMEOUT * len(chosen) + 120)]
            if group == "htcondor":
                marks.append(pytest.mark.htcondor)
            if any("gateway" in p.needs for p in chosen):
                marks.append(pytest.mark.gateway)
            params.append(pytest.param(page, group, marks=marks,
                                       id=f"{_page_id(page)}::{group}"))
    return params


# ---------------------------------------------------------------------------------------------
# what the blocks need
# ---------------------------------------------------------------------------------------------
def _base_environment(tmp_path: Path) -> dict[str, str]:
    """The environment every example gets: the caller's, without its DASK_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        "DASK_HYBRID__SCHEDULER__HOST": "127.0.0.1",
        "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(tmp_path / "staging"),
        "DASK_TEMPORARY_DIRECTORY": str(tmp_path / "dask-scratch"),
        "PYTHONUNBUFFERED": "1",
    })
    return env


class Needs:
    """Starts what a page's programs need and stops it afterwards."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path, needs: set[str]):
        self.tmp_path = tmp_path
        self.env = _base_environment(tmp_path)
        self.replacements: dict[str, str] = {}
        self._stops: list[Any] = []
        self.setup_log = tmp_path / "setup-commands.log"
        if "htcondor" in needs:
            request.getfixturevalue("htcondor_pool")  # root only; sets CONDOR_CONFIG
            self.env["CONDOR_CONFIG"] = os.environ["CONDOR_CONFIG"]
        if "gateway" in needs:
            self._start_gateway()
        if "lsf" in needs:
            self._use_lsf_double()
        if "kubernetes" in needs:
            self._start_kubernetes_double()

    def _start_gateway(self) -> None:
        from hybrid.gateway_server.dev import start_dev_gateway

        dev = start_dev_gateway()
        self._stops.append(dev.stop)
        self.replacements = {GATEWAY_ADDRESS: dev.address, GATEWAY_PROXY: dev.proxy_address,
                             GATEWAY_PASSWORD: dev.password}

    def _use_lsf_double(self) -> None:
        self.env["PATH"] = os.pathsep.join([str(LSF_DOUBLE), str(DOUBLES), self.env["PATH"]])
        self.env.update({"HYBRID_DOUBLE_PYTHON": sys.executable,
                         "HYBRID_LSF_DOUBLE_STATE": str(self.tmp_path / "lsf-state"),
                         "HYBRID_LSF_DOUBLE_TERMINATE_INTERVAL": "5",
                         "HYBRID_DOCS_SETUP_LOG": str(self.setup_log)})

    def _start_kubernetes_double(self) -> None:
        from tests.kubernetes.conftest import TOKEN
        from tests.kubernetes.kube_api_double import KubeAPIServerDouble, NodeDouble

        nodes = [NodeDouble("cpu-node-1"),
                 NodeDouble("gpu-node-1", allocatable={
                     "cpu": "16", "memory": "64Gi", "pods": "110",
                     "ephemeral-storage": "500Gi", "nvidia.com/gpu": "4"})]
        double = KubeAPIServerDouble(self.tmp_path / "kubernetes", nodes=nodes, token=TOKEN,
                                     storage_classes=("rook-cephfs-central", "rook-cephfs"),
                                     default_storage_class=None, bind_delay=0,
                                     termination_delay=0.5).start()
        self._stops.append(double.stop)
        kubeconfig = double.write_kubeconfig(self.tmp_path / "kubeconfig",
                                             namespace="openforcefield")
        self.env["KUBECONFIG"] = str(kubeconfig)
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        from kubernetes import client

        # the Secret the page tells users to create with kubectl first
        client.CoreV1Api(double.api_client()).create_namespaced_secret("openforcefield", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "oe-license"},
            "data": {"oe_license.txt": base64.b64encode(b"a test license").decode()}})

    def stop(self) -> None:
        stops, self._stops = self._stops, []
        for stop in reversed(stops):
            stop()

    def source(self, program: Program) -> str:
        code = program.code
        if "gateway" in program.needs and GATEWAY_ADDRESS not in code:
            pytest.fail(f"{program.where}: 'needs gateway' but the code never names "
                        f"{GATEWAY_ADDRESS} (the address the test's gateway stands in for)")
        for placeholder, value in self.replacements.items():
            code = code.replace(placeholder, value)
        return code


@pytest.fixture
def needs_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    started: list[Needs] = []

    def start(needs: set[str]) -> Needs:
        made = Needs(request, tmp_path, needs)
        started.append(made)
        return made

    yield start
    for made in started:
        made.stop()


# ---------------------------------------------------------------------------------------------
# checks after a page
# ---------------------------------------------------------------------------------------------
def _processes_working_in(root: Path) -> list[Any]:
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and Path(process.cwd()).is_relative_to(root):
                found.append(process)
        except (psutil.Error, ValueError):
            continue
    return found


def _assert_nothing_left(tmp_path: Path, where: str) -> None:
    staging = tmp_path / "staging"
    left = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()) \
        if staging.exists() else []
    assert left == [], f"{where}: files left in the staging directory: {left}"
    deadline = time.monotonic() + 30
    while (running := _processes_working_in(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running == [], f"{where}: processes still running: " + ", ".join(
        f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in running)


def _run(program: Program, source: str, env: dict[str, str], directory: Path) -> str:
    script = directory / f"example_{program.blocks[0].line}.py"
    script.write_text(source)
    try:
        result = subprocess.run([sys.executable, script.name], cwd=directory, env=env,
                                capture_output=True, text=True, timeout=PROGRAM_TIMEOUT,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{program.where}: still running after {PROGRAM_TIMEOUT} s\n"
                    f"--- stdout ---\n{(expired.stdout or '')[-3000:]}\n"
                    f"--- stderr ---\n{(expired.stderr or '')[-3000:]}", pytrace=False)
    if result.returncode != 0:
        pytest.fail(f"{program.where} exited {result.returncode} (mark the block "
                    "'% docs-test: skip <why>' only if it cannot run here)\n"
                    f"--- stdout ---\n{result.stdout[-3000:]}\n"
                    f"--- stderr ---\n{result.stderr[-6000:]}", pytrace=False)
    return result.stdout


# ---------------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("page", pages(), ids=_page_id)
def test_markers_are_valid_and_every_block_compiles(page: Path) -> None:
    for program in programs(page):  # a bad marker raises MarkerError, naming the line
        try:
            compile(program.code, program.where, "exec")
        except SyntaxError as error:
            if _page_id(page) in NOT_MARKED_YET and program.skip is None:
                continue  # an unmarked fragment of a page listed above
            pytest.fail(f"{program.where}: {error}", pytrace=False)


def test_pages_not_marked_yet_still_exist_and_still_lack_markers() -> None:
    """The exemption list shrinks as owners mark their pages: an entry for a page that
    has markers now (or is gone) must be removed."""
    for name in NOT_MARKED_YET:
        page = REPO / name
        assert page.exists(), f"{name} is gone: remove it from NOT_MARKED_YET"
        marked = [b for p in programs(page) for b in p.blocks if b.markers]
        assert not marked, f"{name} has docs-test markers now: remove it from NOT_MARKED_YET"


@pytest.mark.parametrize(("page", "group"), _groups())
def test_the_examples_of_a_page_run(page: Path, group: str, needs_for: Any,
                                    tmp_path: Path) -> None:
    chosen = [p for p in programs(page) if p.skip is None
              and (("htcondor" in p.needs) == (group == "htcondor"))]
    needs = needs_for(set().union(*(p.needs for p in chosen)))
    try:
        for program in chosen:
            _run(program, needs.source(program), needs.env, tmp_path)
    finally:
        needs.stop()
    _assert_nothing_left(tmp_path, _page_id(page))
    for check in AFTER_PAGE.get((_page_id(page), group), ()):
        check(needs)


def _setup_commands_ran(needs: Needs) -> None:
    """openff-evaluator's LSF snippet: its job ran the setup commands, in order."""
    ran = needs.setup_log.read_text().splitlines() if needs.setup_log.exists() else []
    assert ran[:2] == ["conda activate evaluator", "module load cuda/10.1"], ran


#: Checks of what a page's examples did, beyond exiting 0.
AFTER_PAGE = {("docs/openff-evaluator.md", "here"): (_setup_commands_ran,)}
