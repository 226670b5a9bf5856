"""Runs INSIDE a network namespace of its own (tests/security/test_network_namespace.py).

The namespace has loopback and one interface carrying ``HOST_ADDRESS``, its default route:
"the host's address" exists, and reaches nothing outside the namespace. With the packaged
defaults (every interface), each cluster kind starts and is looked at from the host's
address by processes without credentials: an outsider (another process, another home), and
a stranger (the user ``nobody``, the system's python, the standard library only).

Usage: ``python -m tests.security.netns_scenario HOST_ADDRESS WORKDIR OUT.json``.
"""

from __future__ import annotations

import json
import operator
import os
import socket
import ssl
import subprocess
import sys
import urllib.request
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[2]

#: What the user nobody tries, with the system's python: read the stored credentials, list
#: the directories, and speak TLS to the scheduler without a certificate.
STRANGER = r"""
import json, os, socket, ssl, sys
files, parent, host, port = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
out = {}
for path in files:
    try:
        open(path).read()
        out[path] = "READ"
    except OSError as error:
        out[path] = type(error).__name__
try:
    out["parent"] = sorted(os.listdir(parent))
except OSError as error:
    out["parent"] = type(error).__name__
context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
try:
    with context.wrap_socket(socket.create_connection((host, port), 5)) as tls:
        tls.sendall(b"\0" * 64)
        data = tls.recv(64)
        out["tls"] = "answered" if data else "closed"
except (OSError, ssl.SSLError) as error:
    out["tls"] = type(error).__name__
print(json.dumps(out))
"""


def outsider(address: str, work: Path) -> dict[str, str]:
    home = work / "outsider-home"
    home.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO),
           "DASK_HYBRID__SCHEDULER__CREDENTIALS_DIRECTORY": str(home / "credentials")}
    result = subprocess.run([sys.executable, "-m", "tests.security.outsider", address],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def stranger(files: list[str], parent: str, address: str) -> dict[str, Any]:
    host, port = urlparse(address).hostname, urlparse(address).port
    result = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3",
         "-c", STRANGER, ",".join(files), parent, str(host), str(port)],
        cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout)


def second_owner(address: str) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-m", "tests.security.owner", address, "attach"],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=180)
    if result.returncode:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout.strip().splitlines()[-1])


def http(host: str, port: int, ca: str | None) -> str:
    """``served <status>`` over https (verified with the cluster's CA), else why not."""
    context = ssl.create_default_context(cafile=ca)
    context.check_hostname = False
    try:
        with urllib.request.urlopen(f"https://{host}:{port}/status", context=context,
                                    timeout=10) as response:
            return f"served {response.status}"
    except OSError as error:
        reason = getattr(error, "reason", error)
        return f"{type(reason).__name__}: {reason}"


def connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True


def hybrid_cluster(host: str, work: Path) -> dict[str, Any]:
    from hybrid import ComputeResources, HybridCluster
    from hybrid.security import credentials_root, find_credentials

    out: dict[str, Any] = {}
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", ComputeResources(number_of_threads=1), nanny=False)
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=120, progress=False)
        address = cluster.scheduler_address
        out["address"] = address
        out["dashboard_link"] = cluster.dashboard_link
        stored = find_credentials(name=cluster.name)
        files = [stored.files.ca, stored.files.cert, stored.files.key]
        out["outsider"] = outsider(address, work)
        out["stranger"] = stranger(files, str(credentials_root().parent), address)
        port = urlparse(cluster.dashboard_link).port
        out["dashboard_on_loopback"] = http("127.0.0.1", port, stored.files.ca)
        out["dashboard_on_host_address"] = http(host, port, stored.files.ca)
        with cluster.get_client() as client:
            out["owner_task"] = client.submit(operator.add, 20, 22).result(timeout=60)
        out["second_owner"] = second_owner(address)
    return out


def configured_dashboard(host: str) -> dict[str, Any]:
    import dask

    from hybrid import HybridCluster
    from hybrid.security import find_credentials

    with dask.config.set({"hybrid.scheduler.dashboard-address": ":0"}), \
            HybridCluster() as cluster:
        port = urlparse(cluster.dashboard_link).port
        ca = find_credentials(name=cluster.name).files.ca
        return {"dashboard_link": cluster.dashboard_link,
                "dashboard_on_host_address": http(host, port, ca)}


def local_backend(host: str, work: Path) -> dict[str, Any]:
    from hybrid.backends import DaskLocalCluster

    with DaskLocalCluster(number_of_workers=1) as backend:
        address = backend.cluster.scheduler_address
        port = urlparse(backend.cluster.dashboard_link).port
        return {"address": address, "dashboard_link": backend.cluster.dashboard_link,
                "scheduler_on_host_address": connects(host, urlparse(address).port),
                "dashboard_on_host_address": connects(host, port),
                "outsider": outsider(address, work),
                "owner_task": backend.submit_task(operator.add, 1, 2).result(timeout=60),
                "second_owner": second_owner(address)}


def pbs_backend(work: Path) -> dict[str, Any]:
    """The evaluator-style batch backend, on the PBS TEST DOUBLE (it runs the jobs here)."""
    from hybrid.backends import DaskPBSBackend
    from hybrid.resources import QueueWorkerResources
    from tests.batch.doubles import batch_double

    doubles = Path(batch_double.__file__).parent / "pbs"
    state = work / "pbs-double-state"
    os.environ["PATH"] = f"{doubles}{os.pathsep}{os.environ['PATH']}"
    os.environ["HYBRID_DOUBLE_PYTHON"] = sys.executable
    os.environ["HYBRID_PBS_DOUBLE_STATE"] = str(state)
    try:
        with DaskPBSBackend(resources_per_worker=QueueWorkerResources(
                wallclock_time_limit="00:10"), disable_nanny_process=True) as backend:
            address = backend.cluster.scheduler_address
            return {"address": address, "dashboard_link": backend.cluster.dashboard_link,
                    "owner_task": backend.submit_task(operator.add, 1, 2).result(timeout=150),
                    "outsider": outsider(address, work)}
    finally:
        store = batch_double.StateStore(state)
        for pid in batch_double.job_pids(store):
            if batch_double.process_alive(pid):
                os.killpg(pid, 9)


def plain_when_asked(work: Path) -> dict[str, Any]:
    from hybrid import HybridCluster
    from hybrid.security import InsecureClusterWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with HybridCluster(security=False, dashboard_address=None) as cluster:
            address = cluster.scheduler_address
            attempts = outsider(address, work)
    return {"address": address, "outsider": attempts,
            "warnings": [str(w.message) for w in caught
                         if issubclass(w.category, InsecureClusterWarning)]}


def main(host: str, work: Path, out: Path) -> None:
    from distributed.utils import get_ip

    results: dict[str, Any] = {"host_address": get_ip()}
    for name, run in (("hybrid_cluster", lambda: hybrid_cluster(host, work)),
                      ("configured_dashboard", lambda: configured_dashboard(host)),
                      ("local_backend", lambda: local_backend(host, work)),
                      ("pbs_backend", lambda: pbs_backend(work)),
                      ("plain_when_asked", lambda: plain_when_asked(work))):
        try:
            results[name] = run()
        except Exception as error:  # reported to the test, which fails on it
            import traceback

            results[name] = {"error": f"{type(error).__name__}: {error}",
                             "traceback": traceback.format_exc()[-4000:]}
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
