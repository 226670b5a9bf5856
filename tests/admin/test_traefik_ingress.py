"""THE end-to-end proof of the ingress: a REAL Traefik runs what ``hybrid admin ingress --form
file`` prints, in front of a REAL dask-gateway-server's TCP proxy.

An external worker started with hybrid's own worker command (``worker_command()``: the
command every batch job runs) dials Traefik's entry point with SNI ``daskgateway-<cluster>``,
joins the cluster's scheduler THROUGH Traefik, stays past the gateway's heartbeats (hybrid's
preload) and runs a task; the client goes through Traefik too. Workers with a wrong SNI are
refused: one Traefik drops (no router matches), one the gateway's proxy drops (no such
cluster).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from distributed import get_worker

from hybrid.admin import doctor
from hybrid.admin.doctor import Status
from hybrid.cli import cli
from hybrid.gateway import scheduler_sni
from hybrid.pools import PoolSpec
from hybrid.worker import Connection, TLSFiles, worker_command
from tests.admin.conftest import free_port, wait_for
from tests.gateway.helpers import heartbeats
from tests.scheduler_workers import scheduler_workers

pytestmark = [pytest.mark.gateway, pytest.mark.timeout(150)]


def _start_worker(address: str, sni: str, cluster, name: str, log: Path,
                  death_timeout: int) -> subprocess.Popen:
    """``dask worker`` exactly as hybrid's batch jobs run it (no nanny: the SNI needs none)."""
    tls = TLSFiles(str(cluster.cert), str(cluster.cert), str(cluster.key))
    spec = PoolSpec.build("ingress", "local", nanny=True, death_timeout=death_timeout)
    command = worker_command(spec, Connection(address, tls, sni), tls)
    argv = [*command.argv(sys.executable), "--name", name]
    assert "--no-nanny" in argv and argv[argv.index("--scheduler-sni") + 1] == sni
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()  # a --no-nanny worker can hang in close on SIGTERM (see recipe)
            process.wait(10)


def _worker_name() -> str:
    return get_worker().name


def test_worker_joins_through_real_traefik_and_wrong_sni_is_refused(
        dev_gateway, gateway_cluster, start_traefik, tmp_path: Path) -> None:
    entry_port = free_port()
    rendered = CliRunner().invoke(cli, [
        "admin", "ingress", "--form", "file", "--host", "127.0.0.1", "--port", str(entry_port),
        "--service", "127.0.0.1", "--service-port", str(dev_gateway.proxy_port),
        "--dynamic-file", str(tmp_path / "dask-gateway.yml")])
    assert rendered.exit_code == 0, rendered.output
    static, dynamic = yaml.safe_load_all(rendered.output)
    traefik = start_traefik(static, dynamic)
    ingress = f"127.0.0.1:{entry_port}"

    # Traefik is up and routes by SNI when the doctor's TLS check passes through it.
    last: list[doctor.CheckResult] = []

    def handshake_ok() -> bool:
        if traefik.process.poll() is not None:
            pytest.fail(f"traefik exited ({traefik.process.returncode}):\n{traefik.log()}")
        last[:] = [doctor.check_tls_sni(ingress, gateway_cluster.name, gateway_cluster.cert,
                                        gateway_cluster.key, timeout=2)]
        return last[0].status is Status.ok

    wait_for(handshake_ok, 20, "a TLS handshake through Traefik",
             details=lambda: f"last check: {last[0].message if last else '-'}\n"
                             f"traefik log:\n{traefik.log()}\nrendered:\n{rendered.output}")
    assert entry_port != dev_gateway.proxy_port  # the worker really dials Traefik

    worker = _start_worker(f"tls://{ingress}", scheduler_sni(gateway_cluster.name),
                           gateway_cluster, "through-traefik", tmp_path / "worker.log", 60)
    bad_workers = {
        sni: _start_worker(f"tls://{ingress}", sni, gateway_cluster, f"bad-{i}",
                           tmp_path / f"bad-{i}.log", 5)
        for i, sni in enumerate(("daskgateway-no-such-cluster", "evil.example.org"))
    }
    client_gateway = dev_gateway.gateway(proxy_address=f"gateway://{ingress}")
    try:
        cluster = client_gateway.connect(gateway_cluster.name)
        client = cluster.get_client(set_as_default=False)
        try:
            client.wait_for_workers(1, timeout=60)
            # the client's own connection goes through Traefik as well
            assert client.scheduler.address == f"gateway://{ingress}/{gateway_cluster.name}"
            # the worker talks to its scheduler at Traefik's address
            through = client.run(lambda dask_worker: dask_worker.scheduler.address)
            assert list(through.values()) == [f"tls://{ingress}"]
            assert client.submit(_worker_name, pure=False).result(timeout=30) == (
                "through-traefik")
            assert client.submit(sum, [1, 2, 3]).result(timeout=30) == 6
            # three more gateway heartbeats later it is still there (hybrid's plugin): counted
            # in the gateway's log, not waited for by the clock
            before = len(heartbeats(dev_gateway.log_text(), gateway_cluster.name))
            wait_for(lambda: len(heartbeats(dev_gateway.log_text(), gateway_cluster.name))
                     >= before + 3, 30, "three gateway heartbeats")
            names = [w["name"] for w in scheduler_workers(client).values()]
            assert names == ["through-traefik"], names

            # the wrong-SNI workers give up (death timeout) without ever registering
            for sni, process in bad_workers.items():
                code = process.wait(40)
                log = (tmp_path / f"bad-{list(bad_workers).index(sni)}.log").read_text()
                assert code != 0, f"worker with SNI {sni} exited 0:\n{log}"
                assert "Registered to" not in log, log
            names = [w["name"] for w in scheduler_workers(client).values()]
            assert names == ["through-traefik"], names
        finally:
            client.close()
            cluster.close()
    finally:
        client_gateway.close()
        for process in (worker, *bad_workers.values()):
            _stop(process)

    # and the doctor says why, through the same Traefik: "no-such-cluster" passes Traefik's
    # rule and the gateway's proxy drops it; "Not_A_Cluster" matches no router, so Traefik
    # answers the TLS itself, with its default certificate
    dropped = doctor.check_tls_sni(ingress, "no-such-cluster", gateway_cluster.cert,
                                   gateway_cluster.key)
    assert dropped.status is Status.fail
    assert "closed the connection for SNI daskgateway-no-such-cluster" in dropped.message
    unrouted = doctor.check_tls_sni(ingress, "Not_A_Cluster", gateway_cluster.cert,
                                    gateway_cluster.key)
    assert unrouted.status is Status.fail
    assert unrouted.message.startswith("the ingress has no route for SNI "
                                       "daskgateway-Not_A_Cluster: Traefik answered")
