"""A call that fails changes nothing (issue 23, item 4), and a closed cluster refuses every
call at once (item 3, asynchronous form), on the REAL HTCondor pool and local processes.

- a ``scale()`` that HTCondor refuses, or whose tool is missing (LSF without ``bsub``), leaves
  the target where it was, and nothing resubmits it in the background;
- the failure is said once: by the exception, not also by a logged warning.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from pathlib import Path

import dask
import pytest

from hybrid import HybridCluster
from hybrid.errors import BatchError, ClusterClosed, PoolFailed, ToolMissing
from tests.batch.test_real_pools import condor_jobs
from tests.gateway.helpers import wait_for

pytestmark = pytest.mark.timeout(180)

#: Reconcile passes to watch for a resubmission (at 0.2 s each).
PASSES = 15


@pytest.fixture
def quick(staging):
    with dask.config.set({"hybrid.batch.poll-interval": "0.2s"}):
        yield staging


def _no_resubmission(cluster: HybridCluster, pool: str) -> None:
    """Let the reconciler run ``PASSES`` times: the pool's target and failures stay."""
    managed = cluster.pools[pool]
    start = cluster.manager.passes
    wait_for(lambda: cluster.manager.passes >= start + PASSES, 60,
             message=f"{PASSES} reconcile passes")
    assert managed.target == 0
    assert managed.failures == 1 and managed.failed is None  # no retry failed again


@pytest.mark.htcondor
def test_a_submission_htcondor_refuses_moves_no_target_and_is_not_retried(
        htcondor_pool, quick, caplog) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "htcondor", job_extra_directives=["requirements = ("])
        with caplog.at_level(logging.WARNING, logger="hybrid"):
            with pytest.raises(BatchError, match="Parse error") as caught:
                cluster.scale(2)
            assert cluster.pools["cpu"].target == 0
            _no_resubmission(cluster, "cpu")
        assert condor_jobs(cluster.name) == []
        said = [r.getMessage() for r in caplog.records if "Parse error" in r.getMessage()]
        assert said == [], said  # the exception says it; no warning repeats it
        assert "Parse error" in str(caught.value)


def test_a_scale_whose_tool_is_missing_moves_no_target(quick, tmp_path, monkeypatch,
                                                       caplog) -> None:
    venv = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{venv}")  # python, but no bsub
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "lsf")
        with caplog.at_level(logging.WARNING, logger="hybrid"):
            with pytest.raises(ToolMissing, match="bsub"):
                cluster.scale(3)
            assert cluster.pools["cpu"].target == 0
            assert cluster.pool_status()["cpu"].target == 0
            # a missing tool stays missing: the pool gave up at once (issue 24), so nothing
            # resubmits, and the next call says why without trying again
            assert "'bsub' was not found" in cluster.pools["cpu"].failed
            with pytest.raises(PoolFailed, match="bsub"):
                cluster.scale(1)
            assert cluster.pools["cpu"].target == 0
        assert [r for r in caplog.records if "bsub" in r.getMessage()] == []  # said once


def test_an_asynchronous_closed_cluster_refuses_scale_and_keeps_its_target(quick) -> None:
    async def main() -> dict:
        async with HybridCluster(asynchronous=True) as cluster:
            cluster.add_pool("cpu", "local")
            await cluster.scale(1)
        found = {}
        for name, call in (("scale", lambda: cluster.scale(2)),
                           ("add_pool", lambda: cluster.add_pool("more", "local")),
                           ("wait_for_workers", lambda: cluster.wait_for_workers(1, 5)),
                           ("jobs", lambda: cluster.jobs()),
                           ("connected_workers", lambda: cluster.connected_workers()),
                           ("get_client", lambda: cluster.get_client())):
            try:
                result = call()
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result
                found[name] = None
            except ClusterClosed as error:
                found[name] = str(error)
        found["target"] = cluster.pools["cpu"].target
        return found

    found = asyncio.run(main())
    assert found.pop("target") == 1  # as it was when the cluster closed
    for name, message in found.items():
        assert message is not None and "is closed" in message, (name, message)


def test_a_worker_that_cannot_start_is_reported_once_citing_a_log_that_stays(
        quick, caplog, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("hybrid.manager.pool.KEPT_LOGS", tmp_path / "kept")
    with caplog.at_level(logging.WARNING, logger="hybrid"):
        with HybridCluster() as cluster:
            cluster.add_pool("cpu", "local", python="/no/such/python3")
            cluster.scale(2)
            with pytest.raises(PoolFailed) as caught:
                cluster.wait_for_workers(2, 60, progress=False)
    # one message: the exception, with the reason, the hint and the log's last line
    message = str(caught.value)
    assert "exit code 127" in message and "/no/such/python3" in message, message
    said = [r.getMessage() for r in caplog.records]
    assert said == [], said  # no warning per job, no "gives up" line beside it
    # the log it cites outlives the cluster (whose staging directory is gone)
    log = Path(re.search(r"Its log \((\S+\.log)\)", message).group(1))
    assert not list(quick.glob(f"{cluster.name}-*")), "the staging directory stayed"
    assert log.exists() and "/no/such/python3" in log.read_text()
    assert log.stat().st_mode & 0o777 == 0o600
