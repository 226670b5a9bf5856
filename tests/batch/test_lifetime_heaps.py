"""The lifetime check looks only at the jobs whose time comes (two heaps by drain time, fed
by the starts that changed), and decides exactly what a look at every running job decides:
the same jobs become retiring, the same workers drain, whatever happens between two looks
(first starts, evictions, restarts, held jobs, ends, a replacement lead that grows and
shrinks). No batch system or scheduler: the drain is recorded, not sent."""

from __future__ import annotations

import asyncio
import random

import pytest

from hybrid.batch import JobState, JobStatus, get_system
from hybrid.manager import PoolManager
from hybrid.manager.lifetime import spread
from hybrid.manager.records import ChangeLog
from hybrid.pools import PoolSpec
from hybrid.worker import Connection


def every_job(pool, now: float, lead: float, restart: bool) -> tuple[set[str], set[str]]:
    """What a look at every running job decides: (jobs that become retiring, jobs due)."""
    lifetime = pool.spec.lifetime_seconds()
    stagger = pool.spec.lifetime_stagger_seconds()
    retiring, due = set(), set()
    for job_id, started in pool._started.items():
        status = pool.jobs.get(job_id)
        if status is None or status.state is not JobState.running:
            continue
        drain_at = started + lifetime + stagger * spread(job_id)
        if not restart and job_id not in pool.retiring and now >= drain_at - lead:
            retiring.add(job_id)
        if now >= drain_at and job_id not in pool._drained:
            due.add(job_id)
    return retiring, due


def status(job_id: str, state: JobState) -> JobStatus:
    return JobStatus(job_id, state, None, "c1", "cpu")


@pytest.mark.parametrize("restart", [False, True], ids=["retire", "restart"])
@pytest.mark.parametrize("seed", range(6))
def test_the_heaps_decide_what_a_look_at_every_job_decides(seed: int, restart: bool) -> None:
    rng = random.Random(seed)
    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    spec = PoolSpec.build("cpu", "local", cores=1, nanny=restart, lifetime="100s",
                          lifetime_stagger="20s", lifetime_restart=restart)
    pool = manager.add(spec, get_system("local"))
    clock = {"now": 0.0, "lead": 10.0}
    manager.clock = lambda: clock["now"]
    manager.replacement_lead = lambda _pool: clock["lead"]
    drained: list[list[str]] = []

    async def drain(pool, job_ids, restart=False):  # what the real drain does to the pool
        drained.append(list(job_ids))
        for job_id in job_ids:
            pool._drained.add(job_id)
            if restart:
                pool._started[job_id] = clock["now"]
                pool._drained.discard(job_id)

    async def remove(pool, job_ids):
        for job_id in job_ids:
            pool.jobs.pop(job_id, None)
            pool.forget(job_id)

    async def all_drain(pool, entries, now):  # (another worker always takes the results)
        return entries

    manager.drain, manager.remove, manager._keep_a_receiver = drain, remove, all_drain
    names = iter(range(10**6))
    seen = {"retiring": 0, "due": 0}
    for _ in range(400):
        for _ in range(rng.randrange(4)):  # what the reconciles between two looks saw
            running = [j for j, s in pool.jobs.items() if s.state is JobState.running]
            held = [j for j, s in pool.jobs.items() if s.state is JobState.held]
            event = rng.choice(["start", "start", "evict", "restart", "hold", "release",
                                "end"])
            if event == "start" or (not running and event != "release"):
                job_id = f"c1.{next(names)}"
                pool.jobs[job_id] = status(job_id, JobState.running)
                pool._started[job_id] = clock["now"] - rng.uniform(0, 150)
            elif event == "evict":  # it waits again: its run is over
                job_id = rng.choice(running)
                pool.jobs[job_id] = status(job_id, JobState.pending)
                del pool._started[job_id]
                pool.retiring.pop(job_id, None)
                pool._drained.discard(job_id)
            elif event == "restart":  # a new run between two looks
                job_id = rng.choice(running)
                pool._started[job_id] = clock["now"]
                pool._drained.discard(job_id)
            elif event == "hold":  # held, its start kept
                job_id = rng.choice(running)
                pool.jobs[job_id] = status(job_id, JobState.held)
            elif event == "release" and held:
                pool.jobs[held[0]] = status(held[0], JobState.running)
            elif event == "end":
                job_id = rng.choice(running)
                del pool.jobs[job_id]
                pool.forget(job_id)
        clock["now"] += rng.uniform(0, 8)
        clock["lead"] = rng.choice([0.0, 5.0, 10.0, 30.0, 50.0])
        retiring, due = every_job(pool, clock["now"], clock["lead"], restart)
        before = set(pool.retiring)
        drained.clear()
        asyncio.run(manager.check_lifetimes(pool))
        assert set(pool.retiring) - before == retiring
        assert [set(d) for d in drained] == ([due] if due else [])
        assert len(drained) <= 1 and len(drained[0] if drained else []) == len(due)
        seen["retiring"] += len(retiring)
        seen["due"] += len(due)
    assert seen["due"] > 20 and (restart or seen["retiring"] > 20), seen  # (it was tried)
    # nothing is kept for jobs that left once their drain time passed
    for job_id in list(pool.jobs):
        del pool.jobs[job_id]
        pool.forget(job_id)
    clock["now"] += 150
    asyncio.run(manager.check_lifetimes(pool))
    assert pool._to_retire == pool._to_drain == [] and pool._drain_times == {}


def test_a_pool_without_a_lifetime_keeps_no_change_log() -> None:
    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    pool = manager.add(PoolSpec.build("cpu", "local", cores=1, nanny=False),
                       get_system("local"))
    for n in range(100):
        pool._started[f"c1.{n}"] = float(n)
    asyncio.run(manager.check_lifetimes(pool))
    assert pool._started.changed == set() and pool._to_retire == []


def test_the_change_log_records_every_way_a_key_changes() -> None:
    log = ChangeLog({"a": 1})
    assert log.take_changes() == {"a"} and log.take_changes() == set()
    log["b"] = 2
    del log["a"]
    log.pop("c", None)
    log.setdefault("b", 5)  # (already there: no change)
    log.setdefault("d", 4)
    log.update({"e": 5}, f=6)
    log |= {"g": 7}
    assert log.take_changes() == {"a", "b", "c", "d", "e", "f", "g"}
    assert dict(log) == {"b": 2, "d": 4, "e": 5, "f": 6, "g": 7}
    key, _ = log.popitem()
    assert log.take_changes() == {key}
    kept = set(log)
    log.clear()
    assert log.take_changes() == kept and not log


def test_the_last_worker_due_waits_to_drain_until_another_can_take_its_results(caplog) -> None:
    """Two workers due at the same look and no other worker in the cluster (a full
    partition: their replacements wait for their slots): the first drains, the second's
    entry goes back on the heap until a worker joins, or until half its time between the
    drain and its own --lifetime is gone. The scheduler's view is a TEST DOUBLE."""
    manager = PoolManager("c1", Connection("tcp://127.0.0.1:1"), None)
    spec = PoolSpec.build("cpu", "local", cores=1, nanny=False, walltime="01:00",
                          lifetime="1800s", lifetime_stagger="0s")
    pool = manager.add(spec, get_system("local"))
    live = {"tls://a:1": {}, "tls://b:1": {}}
    workers = {"j1": ("tls://a:1",), "j2": ("tls://b:1",)}

    async def live_workers():
        return dict(live)

    async def pool_workers(pool, live=None, names=None):
        return {j: a for j, a in workers.items() if a[0] in (live or {})}

    manager.live_workers, manager.pool_workers = live_workers, pool_workers
    entries = [(1800.0, "j1", 0.0), (1800.0, "j2", 0.0)]
    keep = manager._keep_a_receiver
    caplog.set_level("INFO", logger="hybrid")
    assert asyncio.run(keep(pool, list(entries), 1800.0)) == entries[:1]
    assert pool._to_drain == [entries[1]]  # (back on the heap, for a later look)
    pool._drained.add("j1")  # (as the drain of the first does)
    assert asyncio.run(keep(pool, [entries[1]], 1805.0)) == []
    assert caplog.text.count("waits to drain until another worker") == 1  # said once
    pool._to_drain.clear()
    live["tls://c:1"] = {}  # its replacement joined: it drains now
    assert asyncio.run(keep(pool, [entries[1]], 1810.0)) == [entries[1]]
    del live["tls://c:1"]
    deadline = spec.worker_deadline_seconds()
    late = 1800.0 + (deadline - 1800.0) / 2
    assert asyncio.run(keep(pool, [entries[1]], late)) == [entries[1]]  # no longer
