"""Batch workers on the REAL HTCondor pool and the REAL Slurm (no double anywhere here).

Each test submits n workers in one transaction, sees them join a real Dask scheduler (TLS on
the HTCondor path), runs tasks, removes k of them and checks with the batch system itself,
not with hybrid's bookkeeping, that exactly those jobs went and that none of ours is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import htcondor2
import pytest
from distributed import Client, Scheduler, Security
from distributed.utils import LoopRunner, sync

from hybrid.batch import JobState, Staging, WorkerJob, get_system
from hybrid.batch.base import worker_name_suffix, write_private
from hybrid.errors import WorkersDidNotArrive
from hybrid.pools import PoolSpec
from hybrid.worker import Connection, TLSFiles
from tests.batch._tasks import environment_value, square

pytestmark = pytest.mark.timeout(240)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class RealScheduler:
    """A real distributed Scheduler on 127.0.0.1 in a background loop (TLS optional)."""

    def __init__(self, tls: bool, directory: Path):
        self.security = Security.temporary() if tls else Security()
        self.runner = LoopRunner(asynchronous=False)
        self.runner.start()
        self.scheduler: Scheduler = sync(self.runner.loop, self._start)
        self.tls: TLSFiles | None = None
        if tls:
            directory.mkdir(mode=0o700, exist_ok=True)
            paths = []
            for name, text in (("ca.pem", self.security.tls_ca_file),
                               ("cert.pem", self.security.tls_client_cert),
                               ("key.pem", self.security.tls_client_key)):
                paths.append(str(write_private(directory / name, text)))
            self.tls = TLSFiles(*paths)

    async def _start(self) -> Scheduler:
        return await Scheduler(host="127.0.0.1", port=0, dashboard=False,
                               dashboard_address="127.0.0.1:0",
                               security=self.security)

    @property
    def address(self) -> str:
        return self.scheduler.address

    def worker_names(self) -> set[str]:
        return {str(ws.name) for ws in self.scheduler.workers.values()}

    def client(self) -> Client:
        return Client(self.address, security=self.security, set_as_default=False)

    def close(self) -> None:
        sync(self.runner.loop, self.scheduler.close)
        self.runner.stop()


@pytest.fixture
def scheduler_factory(tmp_path: Path) -> Iterator[Callable[[bool], RealScheduler]]:
    made: list[RealScheduler] = []

    def make(tls: bool) -> RealScheduler:
        made.append(RealScheduler(tls, tmp_path / "tls"))
        return made[-1]

    yield make
    for scheduler in made:
        scheduler.close()


def condor_jobs(cluster: str) -> list[str]:
    """Our jobs of ``cluster`` still in the real schedd's queue (not removed/completed)."""
    ads = htcondor2.Schedd().query(constraint=f'HybridCluster == "{cluster}"',
                                   projection=["ClusterId", "ProcId", "JobStatus"])
    return [f"{ad['ClusterId']}.{ad['ProcId']}" for ad in ads
            if int(ad["JobStatus"]) not in (3, 4)]


def slurm_jobs(cluster: str) -> list[str]:
    """Our active array tasks of ``cluster`` in the real squeue."""
    import subprocess

    out = subprocess.run(["squeue", "--noheader", "--array", "--format=%i|%T|%k"],
                         capture_output=True, text=True, check=True).stdout
    ids = []
    for line in out.splitlines():
        job_id, state, comment = line.split("|", 2)
        if comment.startswith(f"HybridCluster:{cluster}:") and state not in (
                "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"):
            ids.append(job_id)
    return ids


SYSTEMS = {
    "htcondor": {"fixture": "htcondor_pool", "tls": True, "live": condor_jobs},
    "slurm": {"fixture": "slurm_cluster", "tls": False, "live": slurm_jobs},
}


@pytest.fixture(params=sorted(SYSTEMS), ids=sorted(SYSTEMS))
def real_system(request):
    name = request.param
    request.getfixturevalue(SYSTEMS[name]["fixture"])
    return name, SYSTEMS[name]


@pytest.mark.htcondor
@pytest.mark.slurm
def test_n_workers_in_one_transaction_join_run_and_leave_exactly(
        real_system, scheduler_factory, staging: Path) -> None:
    staging_root = staging
    name, info = real_system
    scheduler = scheduler_factory(info["tls"])
    cluster = f"t{os.getpid()}-{name}"
    secret = "it's \"quoted\" $(touch /tmp/hybrid-pwned) `id` ; rm -rf x\nsecond line"
    spec = PoolSpec.build("cpu", name, cores=1, memory="512 MiB", walltime="00:15",
                          env={"HYBRID_T_VALUE": secret}, nanny=False)
    job = WorkerJob(cluster, spec, Connection(scheduler.address, scheduler.tls))
    system = get_system(name)
    staging = Staging.create(job)
    ids = system.submit(job, staging.path, 3)
    # one transaction: one HTCondor cluster id / one Slurm array id for all three
    assert len({job_id.split(".")[0].split("_")[0] for job_id in ids}) == 1
    assert sorted(info["live"](cluster)) == sorted(ids)

    expected = {f"{cluster}-cpu-{worker_name_suffix(j)}" for j in ids}
    wait_for(lambda: scheduler.worker_names() >= expected, 90, "3 workers to join")
    if info["tls"]:
        assert scheduler.address.startswith("tls://")

    with scheduler.client() as client:
        assert client.gather(client.map(square, range(20))) == [x * x for x in range(20)]
        # the env value arrived as inert text: exact, and no command in it ran
        values = client.run(environment_value, "HYBRID_T_VALUE")
        assert set(values.values()) == {secret}
    assert not Path("/tmp/hybrid-pwned").exists()

    # staged secrets are private
    for path in staging.path.glob("*.pem"):
        assert path.stat().st_mode & 0o777 == 0o600

    # remove exactly one job: its worker leaves, the other two stay
    gone = ids[1]
    system.remove([gone])
    wait_for(lambda: gone not in info["live"](cluster), 60, f"job {gone} to leave the queue")
    assert sorted(info["live"](cluster)) == sorted(set(ids) - {gone})
    gone_worker = f"{cluster}-cpu-{worker_name_suffix(gone)}"
    wait_for(lambda: gone_worker not in scheduler.worker_names(), 60, "its worker to leave")
    assert scheduler.worker_names() >= expected - {gone_worker}
    # HTCondor lists a removed job (JobStatus 3, "removing") until its processes stopped
    wait_for(lambda: all(not s.state.active for s in system.query(job_ids=[gone],
                                                                  history=True)),
             60, f"the batch system to report job {gone} gone")
    states = {s.job_id: s.state for s in system.query(job_ids=ids, history=True)}
    assert states[gone] is JobState.removed
    assert all(states[j] is JobState.running for j in ids if j != gone)

    assert sorted(system.remove_cluster(cluster)) == sorted(set(ids) - {gone})
    wait_for(lambda: info["live"](cluster) == [], 60, "the batch system to list no job")
    staging.remove()
    assert not any(staging_root.glob(f"{cluster}-*"))  # no stray job files


@pytest.mark.htcondor
def test_a_held_htcondor_job_is_reported_with_its_hold_reason(htcondor_pool, staging) -> None:
    from hybrid.cluster import HybridCluster

    # the worker gives up quickly (nothing listens at its scheduler address); its job then
    # cannot send back an output file that was never written, so HTCondor holds it
    with HybridCluster(name=f"held{os.getpid()}",
                       worker_scheduler_address="tls://127.0.0.1:9") as cluster:
        cluster.add_pool("cpu", "htcondor", death_timeout=2, nanny=False,
                         job_extra_directives=["transfer_output_files = never-written.txt"])
        cluster.scale(1)
        with pytest.raises(WorkersDidNotArrive, match=r"never-written\.txt") as caught:
            cluster.wait_for_workers(1, timeout=120, progress=False)
        assert "held" in str(caught.value)
    assert condor_jobs(cluster.name) == []
