"""Runs ON the scheduler or a worker (pickled by value: neither needs hybrid installed).

Only the standard library may be imported at module level here (a function that runs on
a worker may import distributed inside, which every worker has).
"""

from __future__ import annotations

#: Tasks that can run now (on a worker, queued on the scheduler, or waiting for a worker
#: that can run them); "waiting" tasks still wait for their dependencies.
_BACKLOG_STATES = ("no-worker", "queued", "processing")
#: The scheduler metadata key a closing client sets before it removes the cluster's jobs:
#: the managers of its other clients then replace and add none.
CLOSING_KEY = "hybrid-closing"


def resource_demand(dask_scheduler=None, resource_names=("GPU", "notGPU")) -> dict:
    """Per resource: tasks that can run now (queued, waiting for a worker, or running) and
    need it, and the unrestricted count; per worker name: tasks it runs (``busy``) and
    results it holds (``holds``); ``closing``: whether a client is closing the cluster."""
    demand = {name: 0 for name in resource_names}
    unrestricted = 0
    for ts in dask_scheduler.tasks.values():
        if ts.state not in _BACKLOG_STATES:
            continue
        restrictions = ts.resource_restrictions or {}
        matched = False
        for name in resource_names:
            if restrictions.get(name):
                demand[name] += 1
                matched = True
        if not matched:
            unrestricted += 1
    busy = {}
    holds = {}
    for ws in dask_scheduler.workers.values():
        busy[str(ws.name)] = len(ws.processing) + len(getattr(ws, "long_running", ()))
        holds[str(ws.name)] = len(ws.has_what)
    closing = bool(dask_scheduler.task_metadata.get(CLOSING_KEY))
    return {"demand": demand, "unrestricted": unrestricted, "busy": busy, "holds": holds,
            "closing": closing}


def fail_unrunnable(dask_scheduler=None, resources=(), message="") -> int:
    """Make waiting tasks that ask for one of ``resources`` fail with ``message``.

    ``None`` among ``resources`` stands for unrestricted tasks. Returns how many tasks
    failed. Their futures raise ``RuntimeError(message)`` in the client instead of waiting
    forever for a worker that will not come.
    """
    import pickle

    exception = pickle.dumps(RuntimeError(message))
    keys = []
    for ts in list(dask_scheduler.unrunnable) + list(dask_scheduler.queued):
        restrictions = ts.resource_restrictions or {}
        if (not restrictions and None in resources) or any(
                restrictions.get(name) for name in resources if name is not None):
            keys.append(ts.key)
    stimulus_id = "hybrid-pool-failed"
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is None or ts.state not in ("no-worker", "queued"):
            continue
        recommendations, client_msgs, worker_msgs = dask_scheduler._transition(
            key, "erred", stimulus_id, cause=key, exception=exception, traceback=None,
            exception_text=message, traceback_text="")
        dask_scheduler._transitions(recommendations, client_msgs, worker_msgs, stimulus_id)
        dask_scheduler.send_all(client_msgs, worker_msgs)
    return len(keys)


async def drain_worker(dask_worker=None, deadline=None, restart=False,
                       reason="hybrid: end of the worker's lifetime") -> None:
    """Runs ON a worker (sent by the pool manager, in the background): take no new task,
    let the running ones finish (for at most ``deadline`` seconds), then retire: the
    scheduler moves this worker's results to other workers before it closes, once another
    worker can take them (``restart``: its nanny starts a fresh worker in the same job)."""
    import asyncio
    import time

    from distributed.core import Status

    if dask_worker.status not in (Status.running, Status.paused):
        return  # already closing (its own --lifetime, a retirement, a signal)
    dask_worker.status = Status.closing_gracefully  # the scheduler sends it nothing more
    end = None if deadline is None else time.monotonic() + max(0.0, deadline)
    state = dask_worker.state
    while (state.executing or state.long_running) and (end is None or time.monotonic() < end):
        await asyncio.sleep(0.2)
    # what Worker.close_gracefully does (which returns at once for a worker that is already
    # closing_gracefully), retried while no other worker can take the results yet (e.g. its
    # replacement has not joined), until the deadline
    address = dask_worker.address
    while True:
        late = end is not None and time.monotonic() >= end
        running = await dask_worker.scheduler.ncores_running()
        if late or any(other != address for other in running):
            retired = await dask_worker.scheduler.retire_workers(
                workers=[address], close_workers=False, remove=True,
                stimulus_id=f"hybrid-drain-{time.time()}")
            if address in (retired or {}) or late:
                break
        await asyncio.sleep(2.0)
    await dask_worker.close(nanny=not restart, reason=reason)
