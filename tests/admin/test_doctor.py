"""``hybrid doctor`` against a real dev gateway and cluster, then each broken variant.

Each broken variant is a real failure (a closed port, a wrong SNI, an expired or foreign
certificate, an HTCondor configuration without a token, a bound port, squeue with no
controller) and each must say so in its OWN words.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import dask.config
import pytest
from click.testing import CliRunner

from hybrid.admin import doctor
from hybrid.admin.doctor import DoctorOptions, Status, run_doctor
from hybrid.batch.htcondor import check_htcondor
from hybrid.cli import cli
from hybrid.errors import ConfigurationError
from tests.admin.conftest import free_port

pytestmark = pytest.mark.timeout(120)

NOW = dt.datetime.now(dt.timezone.utc)
DAY = dt.timedelta(days=1)


def _proxy(dev_gateway) -> str:
    return f"127.0.0.1:{dev_gateway.proxy_port}"


@pytest.fixture
def worker_environments(tmp_path: Path) -> dict[str, str]:
    """An image file, a pixi project (installed) and a conda env directory, as on disk."""
    image = tmp_path / "worker.sif"
    image.write_bytes(b"SIF image bytes")
    pixi = tmp_path / "pixi-project"
    (pixi / ".pixi" / "envs" / "default").mkdir(parents=True)
    (pixi / "pixi.toml").write_text('[workspace]\nname = "w"\nchannels = ["conda-forge"]\n')
    conda = tmp_path / "conda-env"
    (conda / "conda-meta").mkdir(parents=True)
    (conda / "bin").mkdir()
    (conda / "bin" / "python").symlink_to(os.path.realpath(os.sys.executable))
    return {"container_image": str(image), "pixi_project": str(pixi), "conda_env": str(conda)}


@pytest.fixture
def free_worker_ports(free_port_range) -> Iterator[tuple[int, int]]:
    """hybrid.worker.port-range set to 4 ports free right now."""
    first, last = free_port_range(4)
    with dask.config.set({"hybrid.worker.port-range": f"{first}:{last}"}):
        yield first, last


@pytest.mark.gateway
def test_healthy_setup_passes_every_check(dev_gateway, gateway_cluster, worker_environments,
                                          free_worker_ports) -> None:
    options = DoctorOptions(
        gateway_address=dev_gateway.address, proxy_address=_proxy(dev_gateway),
        cluster_name=gateway_cluster.name, cert=str(gateway_cluster.cert),
        key=str(gateway_cluster.key), workers_per_node=4, **worker_environments,
    )
    results = run_doctor(options)
    assert [r.name for r in results] == [
        "gateway", "proxy port", "certificate", "TLS by SNI", "scheduler security",
        "settings", "ports hybrid.worker.port-range", "worker environment",
        "GPU sharing (CUDA MPS)"]
    assert all(r.status is Status.ok for r in results), [r.as_dict() for r in results]
    by_name = {r.name: r.message for r in results}
    assert by_name["gateway"].startswith("dask-gateway 2")
    assert f"daskgateway-{gateway_cluster.name}" in by_name["TLS by SNI"]
    assert "all 4 ports" in by_name["ports hybrid.worker.port-range"]
    assert "pixi project" in by_name["worker environment"]

    result = CliRunner().invoke(cli, [
        "doctor", "--gateway-address", dev_gateway.address, "--proxy-address",
        _proxy(dev_gateway), "--cluster-name", gateway_cluster.name,
        "--cert", str(gateway_cluster.cert), "--key", str(gateway_cluster.key),
        "--workers-per-node", "4", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] is True
    assert {c["status"] for c in report["checks"]} == {"ok"}


def test_proxy_down(make_certificate) -> None:
    cert, key = make_certificate("some-cluster", NOW - DAY, NOW + 300 * DAY)
    closed = f"127.0.0.1:{free_port()}"
    result = doctor.check_proxy_port(closed, timeout=2)
    assert result.status is Status.fail
    assert result.message.startswith("proxy down: cannot connect to")
    tls = doctor.check_tls_sni(closed, "some-cluster", cert, key, timeout=2)
    assert tls.status is Status.fail and tls.message.startswith("cannot connect to")


@pytest.mark.gateway
def test_wrong_sni(dev_gateway, gateway_cluster) -> None:
    result = doctor.check_tls_sni(_proxy(dev_gateway), "no-such-cluster", gateway_cluster.cert,
                                  gateway_cluster.key, timeout=5)
    assert result.status is Status.fail
    assert "closed the connection for SNI daskgateway-no-such-cluster" in result.message
    assert "--cluster-name" in result.fix


@pytest.mark.gateway
def test_wrong_certificate(dev_gateway, gateway_cluster, make_certificate) -> None:
    other_cert, other_key = make_certificate("other-cluster", NOW - DAY, NOW + 300 * DAY)
    result = doctor.check_tls_sni(_proxy(dev_gateway), gateway_cluster.name, other_cert,
                                  other_key, timeout=5)
    assert result.status is Status.fail
    assert result.message.startswith("wrong certificate: the scheduler behind daskgateway-")
    mismatch = doctor.check_certificate(gateway_cluster.cert, other_key)
    assert mismatch.status is Status.fail
    assert "does not belong to the certificate" in mismatch.message


def test_expired_certificate(make_certificate) -> None:
    cert, key = make_certificate("expired", NOW - 30 * DAY, NOW - DAY)
    result = doctor.check_certificate(cert, key)
    assert result.status is Status.fail
    assert result.message.startswith("certificate expired on ")
    soon_cert, soon_key = make_certificate("soon", NOW - DAY, NOW + 3 * DAY)
    soon = doctor.check_certificate(soon_cert, soon_key, warn_days=14)
    assert soon.status is Status.warn and "expires in 3.0 days" in soon.message
    future_cert, _ = make_certificate("future", NOW + 2 * DAY, NOW + 30 * DAY)
    assert "not valid before" in doctor.check_certificate(future_cert).message
    garbage = cert.with_name("garbage.crt")
    garbage.write_text("not a certificate")
    assert "is not a PEM certificate" in doctor.check_certificate(garbage).message


def test_expired_certificate_in_the_tls_handshake(make_certificate) -> None:
    """A real TLS server presenting an expired certificate: the handshake check says so."""
    cert, key = make_certificate("expired-server", NOW - 30 * DAY, NOW - DAY)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_one() -> None:
        connection, _ = listener.accept()
        try:
            with context.wrap_socket(connection, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass  # the client refuses the certificate: that is the point

    server = threading.Thread(target=serve_one, daemon=True)
    server.start()
    try:
        result = doctor.check_tls_sni(f"127.0.0.1:{port}", "expired", cert, timeout=5)
    finally:
        server.join(10)
        listener.close()
    assert result.status is Status.fail
    assert result.message.startswith("the certificate has expired")


def _condor_config(tmp_path: Path, methods: str) -> Path:
    tokens = tmp_path / "tokens.d"
    tokens.mkdir(mode=0o700)
    config = tmp_path / "condor_config"
    config.write_text(
        "CONDOR_HOST = 127.0.0.1\n"
        f"COLLECTOR_HOST = 127.0.0.1:{free_port()}\n"
        f"LOG = {tmp_path}\n"
        f"SEC_CLIENT_AUTHENTICATION_METHODS = {methods}\n"
        f"SEC_DEFAULT_AUTHENTICATION_METHODS = {methods}\n"
        f"SEC_TOKEN_DIRECTORY = {tokens}\n"
    )
    return config


def test_missing_htcondor_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _condor_config(tmp_path, "IDTOKENS")
    monkeypatch.setenv("CONDOR_CONFIG", str(config))
    result = doctor.check_batch_system("htcondor")
    assert result.status is Status.fail
    assert result.message.startswith("IDTOKENS is configured but no token file is in "
                                     f"{tmp_path / 'tokens.d'}")
    assert "condor_token_fetch" in result.fix

    token = tmp_path / "tokens.d" / "pool-token"
    token.write_text("eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl\n")
    token.chmod(0o644)  # HTCondor silently ignores a token others can read
    ignored = doctor.check_batch_system("htcondor")
    assert ignored.status is Status.fail
    assert ignored.message.startswith("IDTOKENS token file(s) ignored, mode not 0600")

    token.chmod(0o600)  # now the token is used, and the (absent) pool is asked
    unreachable = doctor.check_batch_system("htcondor")
    assert unreachable.status is Status.fail
    assert unreachable.message.startswith("the schedd refused or cannot be reached")


def test_htcondor_config_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONDOR_CONFIG", str(tmp_path / "no-such-config"))
    result = doctor.check_batch_system("htcondor")
    assert result.status is Status.fail
    assert result.message == f"CONDOR_CONFIG={tmp_path / 'no-such-config'} does not exist"


def test_htcondor_config_dev_null_is_no_missing_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CONDOR_CONFIG=/dev/null`` (what importing ``htcondor2`` sets where no configuration
    is found: a script or a test that imported it hands it on) is HTCondor's "no
    configuration", not a missing file: the check goes on to the bindings and the schedd."""
    monkeypatch.setenv("CONDOR_CONFIG", os.devnull)
    result = doctor.check_batch_system("htcondor")
    assert "does not exist" not in result.message, result.message
    assert result.message.startswith(("the schedd", "htcondor2 present")), result.message


def test_htcondor_token_optional_when_other_methods_remain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With FS beside IDTOKENS a missing token does not stop the check: the schedd is asked."""
    monkeypatch.setenv("CONDOR_CONFIG", str(_condor_config(tmp_path, "IDTOKENS, FS")))
    result = check_htcondor()
    assert result.status is Status.fail  # no pool listens there
    assert result.message.startswith("the schedd refused or cannot be reached")
    assert result.message.endswith(f"; also IDTOKENS is configured but no token file is in "
                                   f"{tmp_path / 'tokens.d'}")


def test_slurm_tools_present_but_no_controller(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=doctortest\n"
        f"SlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={free_port()}\n"
        "MessageTimeout=1\nTCPTimeout=1\n"
        "NodeName=localhost CPUs=1\nPartitionName=debug Nodes=ALL Default=YES\n"
    )
    monkeypatch.setenv("SLURM_CONF", str(conf))
    result = doctor.check_batch_system("slurm")
    assert result.status is Status.fail
    assert result.message.startswith("squeue present but not answering")
    assert "Unable to contact slurm controller" in result.message


def test_missing_batch_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no client tools at all
    for system, tools in (("pbs", "qsub, qstat, qdel"), ("lsf", "bsub, bjobs, bkill"),
                          ("slurm", "sbatch, squeue, scancel")):
        result = doctor.check_batch_system(system)
        assert result.status is Status.fail
        assert result.message == f"{tools} not found on PATH"


def test_busy_port_range(free_port_range) -> None:
    first, last = free_port_range(3)
    holder = socket.create_server(("0.0.0.0", first + 1))  # a listener on the middle port
    try:
        busy = doctor.check_port_range((first, last), workers_per_node=3)
        assert busy.status is Status.fail
        assert busy.message.startswith(f"busy port range: 1 of 3 ports in use ({first + 1})")
        enough = doctor.check_port_range((first, last), workers_per_node=2)
        assert enough.status is Status.warn and "2 free" in enough.message
    finally:
        holder.close()
    assert doctor.check_port_range((first, last), workers_per_node=3).status is Status.ok


def test_worker_environment_problems(tmp_path: Path, worker_environments) -> None:
    missing = doctor.check_worker_environment(container_image=str(tmp_path / "no.sif"))
    assert missing.status is Status.fail and "does not exist" in missing.message
    no_pixi = doctor.check_worker_environment(pixi_project=str(tmp_path))
    assert no_pixi.status is Status.fail and "no pixi.toml" in no_pixi.message
    project = tmp_path / "fresh"
    project.mkdir()
    (project / "pixi.toml").write_text("[workspace]\n")
    uninstalled = doctor.check_worker_environment(pixi_project=str(project))
    assert uninstalled.status is Status.warn and "not installed" in uninstalled.message
    not_conda = doctor.check_worker_environment(conda_env=str(tmp_path))
    assert not_conda.status is Status.fail and "not a conda environment" in not_conda.message
    remote = doctor.check_worker_environment(container_image="docker://ghcr.io/dask/dask:latest")
    assert remote.status is Status.ok and "remote" in remote.message
    assert doctor.check_worker_environment(**worker_environments).status is Status.ok


@pytest.mark.gateway
def test_gateway_down_and_not_a_gateway(dev_gateway) -> None:
    down = doctor.check_gateway(f"http://127.0.0.1:{free_port()}", timeout=2)
    assert down.status is Status.fail and down.message.startswith("nothing answers at")
    wrong_path = doctor.check_gateway(dev_gateway.address + "/not-the-prefix", timeout=5)
    assert wrong_path.status is Status.fail and "answered HTTP 404" in wrong_path.message


def test_cli_exit_code_is_one_when_a_check_fails(free_worker_ports) -> None:
    result = CliRunner().invoke(cli, ["doctor", "--proxy-address", f"127.0.0.1:{free_port()}",
                                      "--timeout", "2"])
    assert result.exit_code == 1, result.output
    assert "[FAIL] proxy port: proxy down" in result.output
    assert "fix: Start the gateway's proxy/ingress" in result.output
    assert "1 failed" in result.output


@pytest.mark.parametrize("options, field", [
    ({"gateway_address": "gateway:8000"}, "--gateway-address"),
    ({"proxy_address": "gateway"}, "--proxy-address"),
    ({"cluster_name": "x"}, "--cluster-name"),  # without --proxy-address and --cert
    ({"proxy_address": "h:1", "cert": "c", "cluster_name": "bad name"}, "--cluster-name"),
    ({"system": "torque"}, "--system"),
    ({"key": "k.pem"}, "--key"),
    ({"workers_per_node": 0}, "--workers-per-node"),
    ({"scheduler": "tls://nowhere"}, "--scheduler"),
])
def test_bad_options_are_refused_before_any_check(options: dict, field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        run_doctor(DoctorOptions(**options))
    assert caught.value.field == field


@pytest.mark.parametrize("given, waits", [(None, 20.0), ("45s", 45.0), ("2", 20.0)])
def test_the_batch_system_check_waits_as_long_as_timeout_asks(
        given: str | None, waits: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy schedd can take longer than 20 s to answer: ``--timeout`` reaches the batch
    system's check too (which never waits less than 20 s)."""
    asked = []

    def recorded(system: str, timeout: float = -1.0) -> doctor.CheckResult:
        asked.append(timeout)
        return doctor.ok(f"batch system {system}", "answered")

    monkeypatch.setattr(doctor, "check_batch_system", recorded)
    result = CliRunner().invoke(cli, ["doctor", "--system", "slurm", "--json"]
                                + (["--timeout", given] if given else []))
    assert asked == [waits], result.output


@pytest.mark.slurm
def test_slurm_check_reads_the_site_s_max_array_size(slurm_cluster) -> None:
    """The real Slurm's ``MaxArraySize`` (4001 in ci/slurm/up.sh): an array's indexes stop
    below it, so hybrid's ``max-array-size`` above 4000 would have sbatch refuse the largest
    submissions; the doctor says so and what to set."""
    from hybrid.batch.slurm import Slurm

    good = Slurm().check()
    assert good.status is Status.ok, good
    assert "MaxArraySize 4001" in good.message
    bad = Slurm(max_array_size=5000).check()
    assert bad.status is Status.fail
    assert "MaxArraySize of the site is 4001" in bad.message
    assert "hybrid.batch.slurm.max-array-size: 4000" in bad.fix
    assert Slurm(max_array_size=4000).check().status is Status.ok


@pytest.mark.htcondor
def test_htcondor_pool_answers(htcondor_pool) -> None:
    """With the CI pool (ci/htcondor/up.sh, its client configuration loaded by the fixture,
    whatever imported the bindings before): bindings, token and schedd all fine."""
    result = doctor.check_batch_system("htcondor")
    assert result.status is Status.ok, result.as_dict()
    assert "schedd answers" in result.message
    # and how this node's jobs would get their files (root's are always spooled)
    assert "; job files: spool (job-files: auto; running as root)" in result.message \
        if os.geteuid() == 0 else "; job files: " in result.message


def test_the_job_files_line_says_the_mode_and_why(tmp_path, monkeypatch) -> None:
    """What ``hybrid doctor --system htcondor`` adds once the schedd answers."""
    from hybrid.batch import get_system

    staging = tmp_path / "jobs"
    chosen = get_system("htcondor", job_files="transfer").files_line(staging)
    assert chosen == "job files: transfer (job-files: transfer)"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a site's user
    shared = get_system("htcondor", shared_directories=[str(tmp_path)])
    assert shared.files_line(staging) == (
        f"job files: shared (job-files: auto; the staging directory {staging} is under "
        "shared-directories)")
    spooled = get_system("htcondor").files_line(staging)
    assert spooled.startswith(f"job files: spool (job-files: auto; the staging directory "
                              f"{staging} is under none of shared-directories)")
    assert "job-files: transfer submits without spooling" in spooled
    # a schedd found elsewhere cannot read this node's files: no such hint
    assert "transfer" not in get_system("htcondor", schedd_name="s@elsewhere").files_line(
        staging)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert get_system("htcondor").files_line(staging) == (
        "job files: spool (job-files: auto; running as root)")


def test_gpu_sharing_check_says_whether_cuda_mps_is_here(tmp_path, monkeypatch) -> None:
    """``nvidia-cuda-mps-control`` here is a TEST DOUBLE (an empty executable): the check
    only looks it up. Without it, a node with GPUs (``CUDA_VISIBLE_DEVICES``) warns."""
    from hybrid.admin.doctor import check_gpu_sharing

    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    found = check_gpu_sharing()
    assert found.status is Status.ok and "not on PATH" in found.message
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    missing = check_gpu_sharing()
    assert missing.status is Status.warn and "one GPU task at a time" in missing.message
    assert "nvidia-cuda-mps-control" in missing.fix
    double = tmp_path / "nvidia-cuda-mps-control"
    double.write_text("#!/bin/sh\n")
    double.chmod(0o755)
    there = check_gpu_sharing()
    assert there.status is Status.ok and str(double) in there.message
    assert "8 GPU tasks at once per GPU" in there.message


def test_doctor_names_a_hybrid_key_nobody_reads_with_the_one_meant() -> None:
    """An admin's typo (``death-timout``, ``wroker``, ``batch.slurmm``) did nothing and the
    doctor passed (a report); keys of the user's own mappings are not typos."""
    typos = {"hybrid.worker.death-timout": "30s", "hybrid.wroker.python": "/x",
             "hybrid.batch.slurmm.queue": "debug",
             "hybrid.worker-dask-config": {"distributed.anything": 1},
             "hybrid.batch.slurm.env": {"SITE": "1"}}
    with dask.config.set(typos):
        result = doctor.check_settings()
    assert result.status is Status.warn, result
    for said in ("hybrid.worker.death-timout (did you mean hybrid.worker.death-timeout?)",
                 "hybrid.wroker (did you mean hybrid.worker?)",
                 "hybrid.batch.slurmm (did you mean hybrid.batch.slurm?)"):
        assert said in result.message, result.message
    assert "distributed.anything" not in result.message and "SITE" not in result.message
    assert "3 key(s)" in result.message
    assert doctor.check_settings().status is Status.ok  # (none set)


@pytest.mark.parametrize(("settings", "status", "words"), [
    ({"hybrid.batch.slurm.partiton": "debug"}, Status.fail, "hybrid.batch.slurm.partiton"),
    ({"hybrid.batch.slurm.walltime": 90}, Status.fail, "a bare number has no unit"),
    ({"hybrid.batch.slurm.job-script-prologue": ["module load x"]}, Status.ok,
     "workers run the python3 its job finds on PATH after its prologue"),
    ({"hybrid.batch.slurm.python": "/opt/py/bin/python3"}, Status.ok,
     "workers run /opt/py/bin/python3"),
])
def test_doctor_builds_the_pool_a_system_s_settings_give(settings, status, words) -> None:
    """A section that made every pool fail passed the doctor, which also named the wrong
    python where a prologue makes the job look it up (a report)."""
    with dask.config.set(settings):
        result = doctor.check_pool_settings("slurm")
    assert result.status is status and words in result.message, result
