"""start_dev_gateway / DevGateway.stop and ``hybrid gateway dev``: start, answer, leave nothing."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from click.testing import CliRunner
from dask_gateway import BasicAuth, Gateway
from distributed.utils import open_port

from hybrid.cli import cli
from hybrid.errors import ConfigurationError
from hybrid.gateway_server.dev import SETTINGS_FILE, DevGatewayError, start_dev_gateway
from tests.gateway.helpers import wait_for
from tests.scheduler_workers import scheduler_workers

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.timeout(120),
    # dask_gateway's Gateway.__del__ closes again a gateway already closed: noise, not a fault
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*Gateway.__del__:pytest.PytestUnraisableExceptionWarning"),
]


def _all_gone(processes: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)


def test_state_dir_is_kept_password_reused_and_processes_ended(tmp_path):
    state = tmp_path / "state"
    first = start_dev_gateway(state_dir=state)
    try:
        gateway = first.gateway()
        cluster = gateway.new_cluster(shutdown_on_close=False)
        cluster.scale(1)  # one of the gateway's own workers, left running too
        client = cluster.get_client()
        wait_for(lambda: scheduler_workers(client), timeout=60,
                 message="the gateway's worker")
        client.close()
        cluster.close()
        gateway.close()
        started = psutil.Process(first.pid).children(recursive=True)
        assert len(started) >= 3  # the proxy, the cluster's scheduler and its worker
    finally:
        first.stop()
    assert not first.running
    wait_for(lambda: _all_gone(started), timeout=10, message="no process left")
    assert {p.name for p in state.iterdir()} >= {"password", "db-key", "gateway.sqlite",
                                                  "hybrid-gateway.yaml", "gateway.log"}
    assert list((state / "clusters").iterdir()) == []  # its cluster directory was removed
    assert first.password not in first.log_text()

    with start_dev_gateway(state_dir=state) as second:
        assert second.password == first.password
        assert second.gateway().list_clusters() == []  # the stopped cluster stayed stopped
    assert state.exists()


def test_a_server_that_fails_to_start_reports_its_log_and_leaves_nothing(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "db-key").write_text("not a key\n")  # a corrupted state directory
    with pytest.raises(DevGatewayError, match="exited") as error:
        start_dev_gateway(state_dir=state, start_timeout=60)
    assert "db_key_file" in str(error.value)  # hybrid's check of the key file's mode
    assert "Its log ends with" in str(error.value)
    (state / "db-key").chmod(0o600)
    with pytest.raises(DevGatewayError, match="db_encrypt_keys"):  # dask-gateway's own check
        start_dev_gateway(state_dir=state, start_timeout=60)


def test_bad_settings_are_refused_before_anything_starts(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    a_file = tmp_path / "file"
    a_file.write_text("")
    try:
        for kwargs, field in [({"port": 70000}, "port"), ({"proxy_port": -1}, "proxy_port"),
                              ({"port": busy_port}, "port"),
                              ({"port": 20001, "proxy_port": 20001}, "proxy_port"),
                              ({"password": " padded "}, "password"),
                              ({"username": "a:b"}, "username"),
                              ({"state_dir": a_file}, "state_dir"),
                              ({"heartbeat_period": 0}, "heartbeat_period"),
                              ({"preload": "sometimes"}, "preload"),
                              ({"backend": "kubernetes"}, "backend"),
                              ({"password_file": "/etc/passwd"}, "password_file"),
                              ({"cluster_max_workers": "many"}, "cluster_max_workers"),
                              ({"no_such_setting": 1}, "no_such_setting")]:
            before = set(os.listdir(tmp_path))
            with pytest.raises(ConfigurationError) as error:
                start_dev_gateway(**kwargs)
            assert error.value.field == field, kwargs
            assert set(os.listdir(tmp_path)) == before
    finally:
        busy.close()
    result = CliRunner().invoke(cli, ["gateway", "dev", "--port", "70000"])
    assert result.exit_code == 2 and "port" in result.output


class _LineReader:
    """Reads a process's output lines in a thread, so the test can wait with a timeout."""

    def __init__(self, stream) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.text = ""
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.put(line)

    def until(self, marker: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while marker not in self.text:
            try:
                self.text += self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{marker!r} not printed; output:\n{self.text}") from None
        return self.text

    def rest(self, timeout: float = 5) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.text += self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.lines.empty():
                    break
        return self.text


@pytest.mark.parametrize(("sig", "password"), [(signal.SIGINT, None),
                                                (signal.SIGTERM, "given-password-123")])
def test_cli_dev_banner_answers_and_exits_cleanly(sig, password):
    argv = [sys.executable, "-m", "hybrid.cli", "gateway", "dev", "--heartbeat-period", "1",
            "--heartbeat-timeout", "1 minute", "--proxy-port", str(open_port("127.0.0.1"))]
    if password:
        argv += ["--password", password]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    descendants: list[psutil.Process] = []
    try:
        output = _LineReader(process.stdout)
        banner = output.until("Ctrl-C stops the gateway", timeout=90)
        address = re.search(r"address:\s+(http://127\.0\.0\.1:\d+)", banner)[1]
        proxy = re.search(r"proxy \(TCP\):\s+(gateway://127\.0\.0\.1:\d+)", banner)[1]
        user, shown_password = re.search(r"user/password:\s+(\S+) / (\S+)", banner).groups()
        assert f"HTCGateway(address={address!r}, proxy_address={proxy!r}" in banner
        assert "cluster = gateway.new_cluster()" in banner  # the gateway's own workers
        assert 'cluster = gateway.new_cluster(pool="local")' in banner  # batch-style ones
        assert "cluster.scale(2)" in banner
        if password:
            assert shown_password == password
        gateway = Gateway(address=address, proxy_address=proxy,
                          auth=BasicAuth(user, shown_password))
        cluster = gateway.new_cluster(shutdown_on_close=False)  # a scheduler to clean up
        cluster.close()
        gateway.close()
        descendants = psutil.Process(process.pid).children(recursive=True)
        server = [p for p in descendants if "dask_gateway_server" in " ".join(p.cmdline())]
        state_dir = Path(server[0].cwd())  # the server runs in its state directory
        assert state_dir.exists() and len(descendants) >= 3  # server, proxy, scheduler
        written = yaml.safe_load((state_dir / SETTINGS_FILE).read_text())
        assert (written["heartbeat_period"], written["heartbeat_timeout"]) == (1, 60)
        process.send_signal(sig)
        process.wait(60)
        text = output.rest()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        for leftover in descendants:
            if leftover.is_running():
                leftover.kill()
    assert process.returncode == 0, text
    assert f"Received {signal.Signals(sig).name}" in text and "Gateway stopped." in text
    wait_for(lambda: _all_gone(descendants), timeout=10, message="no process left")
    assert not state_dir.exists()
    assert text.count(shown_password) == 2  # the banner's two lines, nowhere else


@pytest.mark.parametrize("command", [["gateway"], ["gateway", "dev"],
                                     ["admin", "gateway-config"]])
def test_every_help_ends_with_examples(command):
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    text = result.output.rstrip()
    options_at, examples_at = text.find("Options:"), text.rfind("Examples:")
    assert 0 < options_at < examples_at
    examples = [line.strip() for line in text[examples_at:].splitlines()[1:]]
    assert examples and all(line.startswith(("hybrid ", "--", ">")) for line in examples), (
        examples)
    assert examples[0].startswith("hybrid " + " ".join(command))


def _owned_by_another_user(tmp_path: Path) -> Path:
    """A directory another user owns: made and given away as root, else one root owns."""
    if os.geteuid() != 0:
        return Path("/usr")  # (root's; every Linux has it)
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)  # nobody
    return directory


def test_a_state_dir_that_others_control_is_refused_before_anything_is_written(tmp_path):
    """An existing state directory another user owns, or one others may write to, could
    hand the gateway a password they planted (it is read from there) or take its files:
    refused, naming the fix, before anything is written or started."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # (as a group's project directory, without the sticky bit)
    theirs = _owned_by_another_user(tmp_path)
    for state_dir, words in [(shared, "chmod go-w"), (theirs, "a directory of your own")]:
        before = sorted(os.listdir(state_dir))
        with pytest.raises(ConfigurationError) as error:
            start_dev_gateway(state_dir=state_dir)
        assert error.value.field == "state_dir", error.value
        assert words in str(error.value), error.value
        assert sorted(os.listdir(state_dir)) == before
    result = CliRunner().invoke(cli, ["gateway", "dev", "--state-dir", str(shared)])
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert "'--state-dir'" in errors[0] and f"chmod go-w {shared}" in errors[0], errors
    assert "Traceback" not in result.output
