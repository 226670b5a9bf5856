"""Runs ON the scheduler (pickled by value, so the scheduler needs no hybrid install).

Only the standard library may be imported here.
"""

from __future__ import annotations

_BACKLOG_STATES = ("no-worker", "queued", "processing", "waiting")


def resource_demand(dask_scheduler=None, resource_names=("GPU", "notGPU")) -> dict:
    """Per resource: tasks waiting or running that need it, and the unrestricted count."""
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
    for ws in dask_scheduler.workers.values():
        busy[str(ws.name)] = len(ws.processing) + len(getattr(ws, "long_running", ()))
    return {"demand": demand, "unrestricted": unrestricted, "busy": busy}


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
