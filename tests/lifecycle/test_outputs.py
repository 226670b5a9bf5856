"""What a user sees and what listens (issue 23): a run that went well prints only its own
output; ``HybridCluster(host=...)`` puts the scheduler, its dashboard and local workers on
that host only, as the dev gateway does its own workers; ``wait_for_workers`` shows the
workers that already joined (item 2)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dask
import psutil
import pytest

from hybrid import HybridCluster
from hybrid.errors import WorkersDidNotArrive
from tests.gateway.helpers import wait_for
from tests.scheduler_workers import scheduler_workers

pytestmark = [
    pytest.mark.timeout(180),
    # dask_gateway's Gateway.__del__ closes again a gateway already closed: noise, not a fault
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]

REPO = Path(__file__).resolve().parents[2]

HAPPY_RUN = """
from hybrid import HybridCluster

with HybridCluster(host="127.0.0.1") as cluster:
    cluster.add_pool("cpu", "local")
    cluster.scale(2)
    client = cluster.get_client()
    client.wait_for_workers(2, 60)
    futures = client.map(lambda x: x * 2, range(20))
    print(sum(client.gather(futures)))
"""

LISTENERS = """
import json, psutil
from hybrid import HybridCluster

def listening(process):
    return [[c.laddr.ip, c.laddr.port] for c in process.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN]

with HybridCluster(host="127.0.0.1") as cluster:
    cluster.add_pool("cpu", "local")
    cluster.scale(1)
    cluster.wait_for_workers(1, 60)
    found = {"scheduler": listening(psutil.Process()), "workers": []}
    for process in psutil.Process().children(recursive=True):
        try:
            if any(cluster.name in part for part in process.cmdline()):
                found["workers"] += listening(process)
        except psutil.Error:
            pass
    print(json.dumps(found))
"""


def _run(code: str, staging: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({"PYTHONPATH": str(REPO), "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(staging)})
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=150)


def test_a_run_that_went_well_prints_only_its_own_output(staging) -> None:
    result = _run(HAPPY_RUN, staging)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "380\n", result.stdout
    # no "Removing worker ... lose computed tasks" warning at the end, nor anything else but
    # the wait's progress (plain lines where stderr is no terminal: hybrid.manager.progress)
    other = [line for line in result.stderr.splitlines()
             if not re.match(r"(workers \(cpu\): |  pool cpu \(local\): )", line)]
    assert other == [], result.stderr


def test_host_puts_the_scheduler_its_dashboard_and_local_workers_there_only(staging) -> None:
    result = _run(LISTENERS, staging)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(found["scheduler"]) >= 2 and found["workers"], found  # scheduler, dashboard
    hosts = {ip for ip, _ in found["scheduler"] + found["workers"]}
    assert hosts == {"127.0.0.1"}, found


@pytest.mark.gateway
def test_the_dev_gateways_own_workers_listen_on_loopback(lifecycle_gateway) -> None:
    gateway = lifecycle_gateway.gateway()
    cluster = gateway.new_cluster()
    try:
        cluster.scale(1)
        with cluster.get_client() as client:
            client.wait_for_workers(1, 60)
            [name] = [w["name"] for w in scheduler_workers(client).values()]

        def worker() -> list[psutil.Process]:
            found = []
            for process in psutil.Process(lifecycle_gateway.pid).children(recursive=True):
                try:
                    if "worker" in process.cmdline() and name in process.cmdline():
                        found.append(process)
                except psutil.Error:
                    pass
            return found

        [process] = wait_for(worker, 30, message="the gateway's worker process")
        listening = [c.laddr.ip for c in process.net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening and set(listening) == {"127.0.0.1"}, listening
    finally:
        cluster.shutdown()
        gateway.close()


def test_wait_for_workers_shows_the_workers_that_already_joined(staging, capfd) -> None:
    with dask.config.set({"hybrid.batch.poll-interval": "0.3s"}), HybridCluster() as cluster:
        cluster.add_pool("cpu", "local")
        cluster.scale(2)
        cluster.wait_for_workers(2, 60, progress=False)
        capfd.readouterr()
        with pytest.raises(WorkersDidNotArrive):
            cluster.wait_for_workers(3, timeout=3, progress=True)  # a third never comes
        shown = capfd.readouterr().err
    assert "2/3" in shown, shown


def test_after_hybrid_s_line_a_ctrl_c_shows_only_the_error_a_close_cleaned_up_after(
        capsys, monkeypatch) -> None:
    """The Ctrl-C handler showed the exception a Ctrl-C happened to interrupt (its
    ``__context__``: an AttributeError that pydantic handles inside itself, on the CI run of
    the gateway's Ctrl-C test). It shows only the error ``cleanup_after`` gives as cause:
    the one that ended a ``with`` block whose close the Ctrl-C stopped."""
    from collections.abc import Callable

    from hybrid import lifecycle
    from hybrid.errors import cleanup_after

    monkeypatch.setattr(lifecycle, "_reported", True)  # (hybrid's one line was said)

    def interrupted(make: Callable[[], None]) -> KeyboardInterrupt:
        try:
            make()
        except KeyboardInterrupt as interrupt:
            return interrupt
        raise AssertionError("no Ctrl-C")

    def inside_a_library() -> None:
        try:
            raise AttributeError("handled inside a library")
        except AttributeError:
            raise KeyboardInterrupt  # (its __context__: the AttributeError) # noqa: B904

    def stopping_a_close() -> None:
        def close() -> None:
            raise KeyboardInterrupt

        cleanup_after(ValueError("the user's own error"), close, "closing the cluster")

    for make, shown in ((inside_a_library, ""), (stopping_a_close, "the user's own error")):
        interrupt = interrupted(make)
        lifecycle._excepthook(KeyboardInterrupt, interrupt, interrupt.__traceback__)
        err = capsys.readouterr().err
        assert "handled inside a library" not in err and shown in err
