"""Issue 25 with the PACKAGED defaults: schedulers on every interface, seen from the host's
address, in a network namespace this test makes (root; left out of the non-root tier).

``unshare --net`` gives the scenario (tests/security/netns_scenario.py) a namespace of its
own: loopback, and a veth pair whose one end carries :data:`HOST_ADDRESS`, the namespace's
default route. "The host's address" exists there, so a scheduler listening on every
interface advertises it, and nothing sent to it leaves the namespace (the namespace dies
with the scenario). Every connection stays on this machine, as the project's rules ask.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The namespace's own address: private, and routed nowhere outside the namespace.
HOST_ADDRESS = "10.213.0.7"

SETUP = f"""set -e
ip link set lo up
ip link add hyb0 type veth peer name hyb1
ip addr add {HOST_ADDRESS}/24 dev hyb0
ip link set hyb0 up
ip link set hyb1 up
ip route add default via 10.213.0.1 dev hyb0 onlink
exec "$@"
"""


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict:
    """Run the scenario once in its namespace; its results."""
    # The credentials' parent is readable by everyone, so that only hybrid's own modes
    # (0700 directory, 0600 files) keep the user nobody out of them.
    work = Path(tempfile.mkdtemp(prefix="hybrid-netns-", dir="/tmp"))
    try:
        work.chmod(0o755)
        out = tmp_path_factory.mktemp("netns") / "results.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        env.update({"PYTHONPATH": str(REPO),
                    "DASK_HYBRID__SCHEDULER__CREDENTIALS_DIRECTORY": str(work / "clusters"),
                    "DASK_HYBRID__BATCH__STAGING_DIRECTORY": str(work / "staging"),
                    "DASK_HYBRID__BATCH__POLL_INTERVAL": "0.5s"})
        result = subprocess.run(
            ["unshare", "--net", "--", "bash", "-c", SETUP, "netns", sys.executable, "-m",
             "tests.security.netns_scenario", HOST_ADDRESS, str(work), str(out)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
        assert result.returncode == 0, result.stderr[-4000:]
        results = json.loads(out.read_text())
        assert not list((work / "clusters").iterdir()), "credentials outlived their clusters"
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _part(scenario: dict, name: str) -> dict:
    part = scenario[name]
    assert "error" not in part, part.get("traceback", part)
    return part


def _refused(attempts: dict) -> None:
    assert len(attempts) >= 4
    assert all(v.startswith("refused") for v in attempts.values()), attempts


pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]


def test_the_namespace_has_a_host_address(scenario) -> None:
    assert scenario["host_address"] == HOST_ADDRESS


def test_hybrid_cluster_listens_on_the_host_address_and_refuses_outsiders(scenario) -> None:
    part = _part(scenario, "hybrid_cluster")
    assert part["address"].startswith(f"tls://{HOST_ADDRESS}:")
    _refused(part["outsider"])
    assert part["owner_task"] == 42
    second = part["second_owner"]
    assert second["task"] == second["attached_task"] == 42 and len(second["workers"]) == 1


def test_another_user_cannot_read_the_credentials_or_speak_to_the_scheduler(scenario) -> None:
    stranger = _part(scenario, "hybrid_cluster")["stranger"]
    assert "clusters" in stranger["parent"], stranger  # it can look around the parent...
    files = [k for k in stranger if k.endswith(".pem")]
    assert len(files) == 3 and all(stranger[f] == "PermissionError" for f in files), stranger
    assert stranger["tls"] != "answered", stranger  # ...but neither reads nor connects


def test_the_dashboard_is_on_loopback_unless_configured(scenario) -> None:
    part = _part(scenario, "hybrid_cluster")
    assert part["dashboard_link"].startswith("https://127.0.0.1:")
    assert part["dashboard_on_loopback"] == "served 200"
    assert "ConnectionRefusedError" in part["dashboard_on_host_address"], part
    configured = _part(scenario, "configured_dashboard")
    assert configured["dashboard_link"].startswith(f"https://{HOST_ADDRESS}:")
    assert configured["dashboard_on_host_address"] == "served 200"  # over TLS, as asked


def test_local_backend_stays_on_loopback_with_tls(scenario) -> None:
    part = _part(scenario, "local_backend")
    assert part["address"].startswith("tls://127.0.0.1:")
    assert part["dashboard_link"].startswith("https://127.0.0.1:")
    assert part["scheduler_on_host_address"] is False
    assert part["dashboard_on_host_address"] is False
    _refused(part["outsider"])
    assert part["owner_task"] == 3 and part["second_owner"]["task"] == 42


def test_evaluator_batch_backend_listens_on_the_host_address_with_tls(scenario) -> None:
    part = _part(scenario, "pbs_backend")
    assert part["address"].startswith(f"tls://{HOST_ADDRESS}:")
    assert part["dashboard_link"].startswith("https://127.0.0.1:")
    assert part["owner_task"] == 3
    _refused(part["outsider"])


def test_plain_tcp_when_asked_warns_naming_the_open_address(scenario) -> None:
    part = _part(scenario, "plain_when_asked")
    address = part["address"]
    assert address.startswith(f"tcp://{HOST_ADDRESS}:")
    [warning] = part["warnings"]
    assert f"anyone who can reach {address} runs code as you" in warning
    assert "security=False" in warning
    assert part["outsider"]["Client(address)"].startswith("RAN CODE")  # the warning is true
