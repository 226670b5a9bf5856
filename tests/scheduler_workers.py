"""The scheduler's workers, read fresh for every call.

``Client.scheduler_info()`` fetches the scheduler's identity and then returns the client's
cached copy; the client's own periodic refresh (``distributed.client.scheduler-info-interval``)
writes that copy too, with no workers in it, and can land in between: on a busy machine
``scheduler_info()["workers"]`` is then empty while workers are connected (distributed
2026.8). Tests ask the scheduler directly instead.
"""

from __future__ import annotations

from typing import Any

from distributed import Client


def scheduler_workers(client: Client) -> dict[str, dict[str, Any]]:
    """Each connected worker's identity, by address, as the scheduler has it now."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def worker_names(client: Client) -> set[str]:
    """The names of the workers connected now."""
    return {str(info["name"]) for info in scheduler_workers(client).values()}
