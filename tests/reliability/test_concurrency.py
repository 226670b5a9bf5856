"""Concurrency (issue 13, part 5): clusters of different users on the same real pool never
touch each other's jobs; ``scale``, ``shutdown`` and ``hybrid gc`` are scoped by tag and
cluster.

The users are of one Unix user (the test runs as one): two clusters of this process, ``alice``
and ``alice-2`` (a name that starts with the other's, and the same pool name ``w`` in both, so
that only exact scoping keeps them apart), both live; ``dave``, a cluster of the same tag whose
scheduler is gone (submitted with ``hybrid submit`` and left behind); and ``carol``, another
process with its own tag (``hybrid.batch.tag``), also left behind. On the REAL HTCondor pool
and the REAL Slurm, every step is checked by asking the batch system itself which jobs each
cluster has:

1. both live clusters scale to 2 and get their workers;
2. ``alice`` scales to 1: one of hers goes, ``alice-2``'s jobs and workers stay exactly;
3. ``hybrid gc`` (this tag): removes ``dave``'s orphan and its staging directory, nothing of
   the live clusters, nothing of ``carol``'s tag;
4. ``alice`` shuts down: her jobs go; ``alice-2``'s stay, its workers still compute;
5. ``hybrid gc`` in ``carol``'s process (her tag) removes hers, nothing of this tag;
6. ``alice-2`` shuts down: nothing of any of them is left, jobs or staging directories.

The tags are this module's own, so this test and the other reliability tests running on the
same pools (whose ``hybrid gc`` uses the default tag) cannot remove each other's jobs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import dask
import pytest

from hybrid import HybridCluster
from tests.gateway.helpers import wait_for
from tests.reliability._real import condor_ads, squeue

pytestmark = pytest.mark.timeout(420)

RUN = uuid.uuid4().hex[:6]
TAG = f"HybridRel{RUN}"
CAROL_TAG = f"HybridRelCarol{RUN}"
#: How long jobs may take to start and workers to join on the shared pools.
START = 150


def _build():
    def square(x: int) -> int:  # built here: cloudpickle ships it by value to the jobs
        return x * x

    return square


square = _build()


def jobs_of(system: str, cluster: str, tag: str = TAG) -> set[str]:
    """The active jobs of ``cluster`` under ``tag``, as the real batch system lists them."""
    if system == "htcondor":
        return {f"{ad['ClusterId']}.{ad['ProcId']}"
                for ad in condor_ads(f'{tag} == "{cluster}"')}
    return {job_id for job_id, _, comment in squeue() if comment.startswith(f"{tag}:{cluster}:")}


def _dead_address() -> str:
    """A loopback address nothing listens on (a scheduler that is gone)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


def _hybrid(args: list[str], tag: str, staging: Path) -> subprocess.CompletedProcess:
    """``hybrid ARGS`` in a process of its own, with its own tag and staging directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_HYBRID")}
    env.update(DASK_HYBRID__BATCH__TAG=tag, DASK_HYBRID__BATCH__STAGING_DIRECTORY=str(staging))
    result = subprocess.run([sys.executable, "-m", "hybrid.cli", *args], env=env,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(params=[pytest.param("htcondor", marks=pytest.mark.htcondor),
                        pytest.param("slurm", marks=pytest.mark.slurm)])
def system(request: pytest.FixtureRequest) -> str:
    request.getfixturevalue("htcondor_pool" if request.param == "htcondor" else "slurm_cluster")
    return request.param


@pytest.fixture
def clusters(system: str, tmp_path: Path) -> Iterator[dict[str, HybridCluster]]:
    """``alice`` and ``alice-2``, live, with this module's tag; cleaned up whatever happens."""
    settings = {"hybrid.batch.tag": TAG, "hybrid.batch.staging-directory": str(tmp_path / "s"),
                "hybrid.batch.poll-interval": "1s"}
    made: dict[str, HybridCluster] = {}
    with dask.config.set(settings):
        try:
            for user in ("alice", "alice-2"):
                made[user] = HybridCluster(name=f"rel{RUN}-{user}")
                made[user].add_pool("w", system, death_timeout=30)
            yield made
        finally:
            for cluster in made.values():
                cluster.close()
            for tag, name in [(TAG, f"rel{RUN}-dave"), (CAROL_TAG, f"rel{RUN}-carol")]:
                _hybrid(["cancel", "--system", system, "--cluster", name], tag, tmp_path / "s")


def test_clusters_on_one_pool_never_touch_each_others_jobs(
        system: str, clusters: dict[str, HybridCluster], tmp_path: Path) -> None:
    alice, bob = clusters["alice"], clusters["alice-2"]
    staging = tmp_path / "s"

    # 1. both scale to 2 and get their workers
    alice.scale(2)
    bob.scale(2)
    alice.wait_for_workers(2, timeout=START, progress=False)
    bob.wait_for_workers(2, timeout=START, progress=False)
    alices, bobs = jobs_of(system, alice.name), jobs_of(system, bob.name)
    assert len(alices) == 2 and len(bobs) == 2 and not alices & bobs
    bob_workers = set(bob.connected_workers())
    assert len(bob_workers) == 2

    # two users left behind: dave (this tag) and carol (another process, another tag, her
    # own staging directory: see test_gc_leaves_another_tags_staging_directory_alone)
    dave, carol = f"rel{RUN}-dave", f"rel{RUN}-carol"
    _left_behind(system, dave, TAG, staging)
    _left_behind(system, carol, CAROL_TAG, tmp_path / "carol")
    assert len(jobs_of(system, dave)) == 1
    assert len(jobs_of(system, carol, CAROL_TAG)) == 1
    assert _staged(staging) == {alice.name, bob.name, dave}

    # 2. alice scales down: only hers go
    alice.scale(1)
    wait_for(lambda: len(jobs_of(system, alice.name)) == 1, timeout=60,
             message="alice down to one job")
    assert jobs_of(system, alice.name) < alices
    assert jobs_of(system, bob.name) == bobs
    assert set(bob.connected_workers()) == bob_workers

    # 3. gc with this tag: dave's orphan and his staging go, nothing live, nothing of carol's
    orphans, directories = _gc(system, TAG, staging)
    assert orphans == {dave} and directories == {dave}
    wait_for(lambda: not jobs_of(system, dave), timeout=60, message="dave's orphan removed")
    assert len(jobs_of(system, alice.name)) == 1 and jobs_of(system, bob.name) == bobs
    assert len(jobs_of(system, carol, CAROL_TAG)) == 1
    assert _staged(staging) == {alice.name, bob.name}

    # 4. alice shuts down: hers go, bob's stay and still compute
    alice.close()
    assert jobs_of(system, alice.name) == set()
    assert jobs_of(system, bob.name) == bobs
    assert set(bob.connected_workers()) == bob_workers
    with bob.get_client() as client:
        assert client.gather(client.map(square, range(8))) == [x * x for x in range(8)]

    # 5. carol's own gc (her tag, her process) removes hers, nothing of this tag
    assert _gc(system, CAROL_TAG, tmp_path / "carol") == ({carol}, {carol})
    wait_for(lambda: not jobs_of(system, carol, CAROL_TAG), timeout=60,
             message="carol's orphan removed")
    assert jobs_of(system, bob.name) == bobs
    assert _staged(staging) == {bob.name}

    # 6. bob shuts down: nothing is left
    bob.close()
    for name, tag in ((alice.name, TAG), (bob.name, TAG), (dave, TAG), (carol, CAROL_TAG)):
        assert jobs_of(system, name, tag) == set(), name
    assert list(staging.iterdir()) == [] and list((tmp_path / "carol").iterdir()) == []


def test_gc_leaves_another_tags_staging_directory_alone(system: str, tmp_path: Path) -> None:
    """Two tags, one staging directory (two users of one Unix user keep theirs in
    ~/.cache/hybrid/jobs): a gc of one tag must not remove the other's files while its job
    is queued (a Slurm job reads them from there when it starts)."""
    staging = tmp_path / "s"
    carol = f"rel{RUN}-carol2"
    try:
        _left_behind(system, carol, CAROL_TAG, staging)
        orphans, directories = _gc(system, TAG, staging)
        assert carol not in orphans and len(jobs_of(system, carol, CAROL_TAG)) == 1
        assert directories == set() and _staged(staging) == {carol}
    finally:
        _hybrid(["cancel", "--system", system, "--cluster", carol], CAROL_TAG, staging)


def _left_behind(system: str, cluster: str, tag: str, staging: Path) -> None:
    """A job of ``cluster`` whose scheduler is gone, as a client that died leaves one."""
    _hybrid(["submit", "--system", system, "--cluster", cluster, "--pool", "w",
             "--scheduler", _dead_address(), "--death-timeout", "5 minutes"], tag, staging)


def _gc(system: str, tag: str, staging: Path) -> tuple[set[str], set[str]]:
    """``hybrid gc`` with ``tag``: the clusters of the jobs and staging directories removed."""
    found = json.loads(_hybrid(["gc", "--system", system, "--json"], tag, staging).stdout)
    return ({job["cluster"] for job in found["orphans"]},
            {Path(path).name.rsplit("-", 2)[0] for path in found["staging"]})


def _staged(staging: Path) -> set[str]:
    """The clusters with a staging directory (named ``<cluster>-<pool>-<random>``)."""
    return {p.name.rsplit("-", 2)[0] for p in staging.iterdir()} if staging.exists() else set()
