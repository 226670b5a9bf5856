"""A process without the cluster's credentials (another user, another host): what it tries.

Run as ``python -m tests.security.outsider ADDRESS``; prints JSON: for each attempt, what
happened (``refused: ...`` or ``RAN CODE ...``). It uses distributed as anyone would, then
hybrid's own raw probes (:func:`hybrid.security.outsider_attempts`).
"""

from __future__ import annotations

import json
import os
import sys


def attempts(address: str) -> dict[str, str]:
    from distributed import Client
    from distributed.security import Security

    from hybrid.security import outsider_attempts

    host_port = address.split("://", 1)[1]
    tries = {
        "Client(address)": lambda: Client(address, timeout="5s", set_as_default=False),
        "Client(tcp://...)": lambda: Client(f"tcp://{host_port}", timeout="5s",
                                            set_as_default=False),
        "Client(tls://..., a certificate of its own)": lambda: Client(
            f"tls://{host_port}", security=Security.temporary(), timeout="5s",
            set_as_default=False),
    }
    results: dict[str, str] = {}
    for label, make in tries.items():
        try:
            client = make()
        except Exception as error:
            results[label] = f"refused: {type(error).__name__}: {error}"[:200]
            continue
        try:
            pid = client.run_on_scheduler(os.getpid)
            results[label] = f"RAN CODE on the scheduler (process {pid})"
        except Exception as error:
            results[label] = f"refused: {type(error).__name__}: {error}"[:200]
        finally:
            client.close()
    for label, refusal in outsider_attempts(address, timeout=5).items():
        results[f"raw {label}"] = "RAN CODE: the scheduler answered an RPC" \
            if refusal is None else f"refused: {refusal}"[:200]
    return results


if __name__ == "__main__":
    print(json.dumps(attempts(sys.argv[1])))
