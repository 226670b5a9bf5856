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
