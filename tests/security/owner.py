"""A second process of the cluster's owner: re-attaches with the credentials stored for it.

Run as ``python -m tests.security.owner ADDRESS [attach]``; prints JSON: the scheduler's
process id as seen through a :class:`~hybrid.HybridClient` (the stored credentials found
by address), a task's result, and with ``attach`` what the client of an attached
:class:`~hybrid.HybridCluster` gets (then it detaches, leaving everything running).
"""

from __future__ import annotations

import json
import operator
import os
import sys

from tests.scheduler_workers import scheduler_workers


def main(address: str, attach: bool) -> dict:
    from hybrid import HybridClient, HybridCluster

    out: dict = {}
    with HybridClient(address, set_as_default=False, timeout="20s") as client:
        out["scheduler_pid"] = client.run_on_scheduler(os.getpid)
        out["task"] = client.submit(operator.add, 40, 2).result(timeout=60)
    if attach:
        cluster = HybridCluster(scheduler_address=address)
        try:
            with cluster.get_client() as client:
                out["attached_task"] = client.submit(operator.mul, 6, 7).result(timeout=60)
                workers = scheduler_workers(client).values()
                out["workers"] = sorted(str(w["name"]) for w in workers)
            out["dashboard_link"] = cluster.dashboard_link
        finally:
            cluster.detach()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], "attach" in sys.argv[2:])))
