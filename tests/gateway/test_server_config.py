"""The settings YAML and the packaged configuration, loaded by the real dask-gateway-server code."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import dask_gateway_server
import pytest
import yaml
from dask_gateway_server.auth import SimpleAuthenticator
from dask_gateway_server.backends.base import ClusterConfig, PublicException
from dask_gateway_server.backends.local import LocalClusterConfig
from dask_gateway_server.models import User
from distributed.utils import open_port
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from hybrid.errors import ConfigurationError
from hybrid.gateway_server import CONFIG_FILE, PRELOAD_MODULE
from hybrid.gateway_server.backend import (
    NO_GATEWAY_WORKERS,
    HybridUnsafeLocalBackend,
    configure,
)
from hybrid.gateway_server.scheduler import CLIENT_TIMEOUT_ENV, LIMITS_ENV, MAX_LIFETIME_ENV
from hybrid.gateway_server.settings import (
    DEFAULT_HEARTBEAT_PERIOD,
    DEFAULT_SCHEDULER_IMAGE,
    GATEWAY_MISSED_HEARTBEATS,
    SETTINGS_ENV,
    SETTINGS_FILE,
    SETTINGS_TEXT_ENV,
    GatewaySettings,
    load_settings,
    parse_settings,
    settings_yaml,
)

IMAGES = ["ghcr.io/facility/scheduler:2026.3", "registry.example.org:5000/dask/sched:gpu-1"]
GIB = 2**30


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def _secrets(directory: Path) -> tuple[Path, Path]:
    return (_private(directory / "password", "s3cret\n"),
            _private(directory / "db-key", "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=\n"))


def _load_packaged_config(monkeypatch, settings_path: Path) -> Config:
    """Load the packaged configuration file with traitlets' loader, as the server does."""
    monkeypatch.setenv(SETTINGS_ENV, str(settings_path))
    monkeypatch.delenv(SETTINGS_TEXT_ENV, raising=False)
    return PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()


def test_settings_round_trip_through_yaml():
    settings = parse_settings({
        "backend": "unsafe-local", "images": IMAGES, "allow_custom_image": True,
        "gateway_workers": True, "worker_options": True, "worker_cores": 2,
        "worker_memory": "3 GiB", "cluster_max_workers": 40, "cluster_max_cores": 80.5,
        "cluster_max_memory": "200 GiB", "idle_timeout": "30 minutes", "max_lifetime": "7d",
        "client_timeout": 600, "environment": {"OMP_NUM_THREADS": "1"},
        "heartbeat_period": 5, "heartbeat_timeout": "1 minute",
        "scheduler_command": ["/opt/env/bin/dask", "scheduler"],
    })
    text = settings_yaml(settings, "a header\nof two lines")
    assert text.startswith("# a header\n# of two lines\nbackend: unsafe-local\n")
    assert parse_settings(yaml.safe_load(text)) == settings
    assert (settings.worker_memory, settings.cluster_max_memory) == (3 * GIB, 200 * GIB)
    assert (settings.idle_timeout, settings.max_lifetime, settings.heartbeat_timeout) == (
        1800, 7 * 86400, 60)
    assert parse_settings({}) == GatewaySettings()
    assert GatewaySettings().images == (DEFAULT_SCHEDULER_IMAGE,)


def test_every_setting_is_documented():
    doc = (Path(__file__).parents[2] / "docs" / "gateway-server.md").read_text()
    missing = [name for name in GatewaySettings.model_fields if f"`{name}`" not in doc]
    assert missing == []


@pytest.mark.parametrize(("settings", "field", "words"), [
    ({"backend": "slurm"}, "backend", "one of"),
    ({"authenticator": "kerberos"}, "authenticator", "one of"),
    ({"preload": "maybe"}, "preload", "one of"),
    ({"address": "localhost"}, "address", "HOST:PORT"),
    ({"proxy_address": "127.0.0.1:99999"}, "proxy_address", "(port 1-65535)"),
    ({"tcp_proxy_address": "tls://127.0.0.1:8786"}, "tcp_proxy_address", "HOST:PORT"),
    ({"scheduler_command": "dask scheduler"}, "scheduler_command", "not one string"),
    ({"scheduler_command": ["dask", "scheduler", "--preload", "x"]}, "scheduler_command",
     "without --preload"),
    ({"images": []}, "images", "non-empty"),
    ({"images": ["Not An Image!"]}, "images[0]", "image reference"),
    ({"images": ["a/b:1", "a/b:1"]}, "images", "without duplicates"),
    ({"idle_timeout": -1}, "idle_timeout", "duration"),
    ({"max_lifetime": "ten minutes"}, "max_lifetime", "duration"),
    ({"client_timeout": "5 kg"}, "client_timeout", "duration"),
    ({"cluster_start_timeout": 0}, "cluster_start_timeout", "longer than zero"),
    ({"heartbeat_period": 0.5}, "heartbeat_period", "whole number"),
    ({"heartbeat_period": 10, "heartbeat_timeout": 10}, "heartbeat_timeout", "longer"),
    # the period given, not the default's (15 s), is the one the error quotes
    ({"heartbeat_period": 10, "heartbeat_timeout": 5}, "heartbeat_timeout", "period (10 s)"),
    ({"db_url": "sqlite:////var/db.sqlite"}, "db_key_file", "openssl rand"),
    ({"backend": "kubernetes", "cluster_start_timeout": 60}, "cluster_start_timeout",
     "Kubernetes backend"),
    ({"authenticator": "jupyterhub", "password_file": "/p"}, "password_file", "jupyterhub"),
    ({"jupyterhub_api_url": "http://hub/api"}, "jupyterhub_api_url", "authenticator"),
    ({"password_file": "relative/password"}, "password_file", "absolute path"),
    ({"environment": {"1BAD": "x"}}, "environment", "variable names"),
    ({"log_level": "LOUD"}, "log_level", "one of"),
    ({"cluster_max_memory": 4}, "cluster_max_memory", "unit"),
    ({"cluster_max_memory": "1 GiB"}, "cluster_max_memory", "scheduler's share"),
    ({"cluster_max_cores": 0.5}, "cluster_max_cores", "scheduler's share"),
    ({"cluster_max_workers": -1}, "cluster_max_workers", "whole number"),
    ({"gateway_workers": "yes"}, "gateway_workers", "True or False"),
    ({"max_workers": 3}, "max_workers", "known option"),
])
def test_bad_settings_name_the_key_what_is_accepted_and_the_file(settings, field, words):
    with pytest.raises(ConfigurationError) as error:
        parse_settings(settings, source="/etc/dask-gateway/hybrid-gateway.yaml")
    assert error.value.field == field
    assert words in str(error.value)
    assert f"Fix `{field}` in /etc/dask-gateway/hybrid-gateway.yaml." in str(error.value)


def test_where_the_settings_are_read_from(tmp_path):
    named = tmp_path / "named.yaml"
    named.write_text("idle_timeout: 60\n")
    beside = tmp_path / "etc"
    beside.mkdir()
    (beside / SETTINGS_FILE).write_text("idle_timeout: 120\n")
    config_file = beside / "dask_gateway_config.py"
    text = "idle_timeout: 180\n"
    assert load_settings(beside=config_file, environ={}).idle_timeout == 120
    assert load_settings(beside=config_file, environ={SETTINGS_TEXT_ENV: text}).idle_timeout == 180
    assert load_settings(beside=config_file, environ={SETTINGS_ENV: str(named),
                                                       SETTINGS_TEXT_ENV: text}).idle_timeout == 60
    assert load_settings(named, environ={}).idle_timeout == 60

    with pytest.raises(ConfigurationError, match=f"Set {SETTINGS_ENV}="):
        load_settings(environ={})
    with pytest.raises(ConfigurationError, match="No such file"):
        load_settings(tmp_path / "missing.yaml", environ={})
    (tmp_path / "broken.yaml").write_text("idle_timeout: [\n")
    with pytest.raises(ConfigurationError, match="Fix the syntax"):
        load_settings(tmp_path / "broken.yaml", environ={})
    (tmp_path / "list.yaml").write_text("- idle_timeout\n")
    with pytest.raises(ConfigurationError, match="a YAML mapping"):
        load_settings(tmp_path / "list.yaml", environ={})
    with pytest.raises(ConfigurationError, match=f"in the {SETTINGS_TEXT_ENV} environment"):
        load_settings(environ={SETTINGS_TEXT_ENV: "idle_timeout: soon\n"})


def test_the_packaged_config_loads_into_the_real_classes(tmp_path, monkeypatch):
    password, key = _secrets(tmp_path)
    settings_path = tmp_path / SETTINGS_FILE
    settings_path.write_text(settings_yaml(parse_settings({
        "backend": "unsafe-local", "password_file": str(password), "address": "127.0.0.1:8001",
        "proxy_address": "127.0.0.1:8000", "tcp_proxy_address": "127.0.0.1:8786",
        "heartbeat_period": 5, "heartbeat_timeout": 30, "cluster_start_timeout": "2 minutes",
        "idle_timeout": "30 minutes", "max_lifetime": "12h", "client_timeout": 600,
        "db_url": f"sqlite:///{tmp_path}/db.sqlite", "db_key_file": str(key), "images": IMAGES,
        "environment": {"OMP_NUM_THREADS": "1"}, "cluster_max_cores": 9,
        "cluster_max_memory": "18 GiB",
    })))
    assert "s3cret" not in settings_path.read_text()
    config = _load_packaged_config(monkeypatch, settings_path)
    assert config.DaskGateway.backend_class == (
        "hybrid.gateway_server.backend.HybridUnsafeLocalBackend")
    assert (config.DaskGateway.address, config.Proxy.address, config.Proxy.tcp_address) == (
        "127.0.0.1:8001", "127.0.0.1:8000", "127.0.0.1:8786")
    assert SimpleAuthenticator(config=config).password == "s3cret"
    cluster = LocalClusterConfig(config=config)
    assert cluster.scheduler_cmd == ["dask", "scheduler", "--preload", PRELOAD_MODULE]
    assert cluster.worker_cmd == ["dask", "worker"]
    assert cluster.idle_timeout == 1800
    assert cluster.environment == {"OMP_NUM_THREADS": "1"}
    assert (cluster.cluster_max_cores, cluster.cluster_max_memory) == (9, 18 * GIB)
    assert cluster.cluster_max_workers == 8  # dask-gateway's own: (9 - 1) cores / 1 per worker
    backend = HybridUnsafeLocalBackend(config=config)
    assert (backend.cluster_start_timeout, backend.cluster_heartbeat_period,
            backend.cluster_heartbeat_timeout) == (120, 5, 30)
    assert len(backend.db_encrypt_keys) == 1
    assert (backend.gateway_workers, backend.max_lifetime, backend.client_timeout) == (
        False, 43200, 600)

    # the scheduler image option: offered, validated, ignored by a local backend
    spec = backend.cluster_options.get_specification()
    assert spec == [{"field": "image", "label": "Scheduler image", "default": IMAGES[0],
                     "spec": {"type": "select", "options": IMAGES}}]
    requested, chosen = asyncio.run(
        backend.process_cluster_options(User("alice"), {"image": IMAGES[1]}))
    assert requested == {"image": IMAGES[1]}
    assert chosen.scheduler_cmd == cluster.scheduler_cmd
    # the cluster's limits and hybrid's lifetimes reach its scheduler's environment
    assert chosen.environment == {
        "OMP_NUM_THREADS": "1", MAX_LIFETIME_ENV: "43200", CLIENT_TIMEOUT_ENV: "600",
        LIMITS_ENV: '{"max_cores": 8.0, "max_memory": 17179869184, "max_workers": 8}'}
    with pytest.raises(Exception, match="not a valid option"):
        asyncio.run(backend.process_cluster_options(User("alice"), {"image": "evil/x:1"}))


def test_worker_options_size_the_gateways_workers_and_its_limits(tmp_path, monkeypatch):
    settings_path = tmp_path / SETTINGS_FILE
    settings_path.write_text(settings_yaml(parse_settings({
        "backend": "unsafe-local", "worker_options": True, "worker_cores": 2,
        "worker_memory": "4 GiB", "cluster_max_memory": "34 GiB"})))
    backend = HybridUnsafeLocalBackend(config=_load_packaged_config(monkeypatch, settings_path))
    spec = {s["field"]: s for s in backend.cluster_options.get_specification()}
    assert (spec["worker_cores"]["default"], spec["worker_memory"]["default"]) == (2, 4.0)
    _, chosen = asyncio.run(backend.process_cluster_options(
        User("alice"), {"worker_cores": 1, "worker_memory": 8}))
    assert (chosen.worker_cores, chosen.worker_memory) == (1, 8 * GIB)
    assert chosen.cluster_max_workers == 4  # (34 - 2) GiB / 8 GiB, as dask-gateway counts
    assert '"max_memory": 34359738368' in chosen.environment[LIMITS_ENV]  # 32 GiB for workers


def test_a_gateway_without_its_own_workers_refuses_to_scale_them():
    backend = HybridUnsafeLocalBackend(config=Config())
    for msg in ({"op": "scale", "count": 2}, {"op": "adapt", "minimum": 0, "maximum": 4}):
        with pytest.raises(PublicException) as refused:
            asyncio.run(backend.forward_message_to_scheduler(None, msg))
        assert str(refused.value) == NO_GATEWAY_WORKERS
    assert "new_cluster(pool=...)" in NO_GATEWAY_WORKERS


@pytest.mark.parametrize("name", ["password_file", "db_key_file"])
def test_secrets_must_be_files_only_their_owner_reads(tmp_path, name):
    secret = tmp_path / "secret"
    secret.write_text("YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=\n")
    secret.chmod(0o644)
    settings = parse_settings({"backend": "unsafe-local", name: str(secret)})
    with pytest.raises(ConfigurationError) as error:
        configure(Config(), settings)
    assert error.value.field == name
    assert f"chmod 600 {secret}" in str(error.value)


def test_jupyterhub_needs_its_token_in_the_environment():
    settings = parse_settings({"authenticator": "jupyterhub",
                               "jupyterhub_api_url": "http://hub:8081/hub/api"})
    with pytest.raises(ConfigurationError, match="JUPYTERHUB_API_TOKEN"):
        configure(Config(), settings, environ={})
    config = Config()
    configure(config, settings, environ={"JUPYTERHUB_API_TOKEN": "hub-token-4d2f"})
    assert config.JupyterHubAuthenticator.jupyterhub_api_url == "http://hub:8081/hub/api"
    assert "hub-token-4d2f" not in repr(config)  # dask-gateway reads it from the environment


def _kube_cluster_traits() -> set[str]:
    """Traits of the installed KubeClusterConfig, read from its source (its module needs
    kubernetes_asyncio to import, which the Helm chart's gateway image has)."""
    source = Path(dask_gateway_server.__file__).parent / "backends/kubernetes/backend.py"
    tree = ast.parse(source.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)
              and n.name == "KubeClusterConfig"]
    own = {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets
           if isinstance(t, ast.Name)}
    return own | set(ClusterConfig.class_trait_names())


@pytest.mark.parametrize("allow_custom_image", [False, True])
def test_kubernetes_settings_set_real_traits_and_map_the_image(allow_custom_image):
    config = Config()
    configure(config, parse_settings({
        "backend": "kubernetes", "images": IMAGES, "allow_custom_image": allow_custom_image,
        "idle_timeout": 3600, "max_lifetime": "1 day", "cluster_max_workers": 10}), helm=True)
    assert config.DaskGateway.backend_class == "hybrid.gateway_server.backend.HybridKubeBackend"
    kube = config.KubeClusterConfig
    assert set(kube) <= _kube_cluster_traits()
    assert (kube.cluster_max_workers, kube.idle_timeout) == (10, 3600)
    command = kube.scheduler_cmd
    assert command[:3] == ["dask", "scheduler", "--preload"]
    assert "def dask_setup" in command[3]  # inline: the scheduler image needs no hybrid
    compile(command[3], "preload", "exec")
    assert "DaskGateway" in config and "authenticator_class" not in config.DaskGateway
    options = config.Backend.cluster_options
    assert options.get_configuration(options.parse_options({"image": IMAGES[1]}),
                                     User("a")) == {"image": IMAGES[1]}
    if allow_custom_image:
        custom = "quay.io/someone/dask:1.0"
        assert options.get_configuration(options.parse_options({"image": custom}),
                                         User("a")) == {"image": custom}
        with pytest.raises(ValueError, match="container image reference"):
            options.get_configuration(options.parse_options({"image": "x; rm -rf /"}),
                                      User("a"))
    else:
        with pytest.raises(ValueError, match="not a valid option"):
            options.parse_options({"image": "quay.io/someone/dask:1.0"})


def test_a_jupyterhub_config_runs_in_the_real_server(tmp_path):
    """A facility-style setup (LocalBackend, JupyterHub auth) starts dask-gateway-server."""
    api, proxy, tcp = open_port("127.0.0.1"), open_port("127.0.0.1"), open_port("127.0.0.1")
    settings_path = tmp_path / SETTINGS_FILE
    settings_path.write_text(settings_yaml(parse_settings({
        "backend": "local", "authenticator": "jupyterhub",
        "jupyterhub_api_url": "http://127.0.0.1:9/hub/api", "address": f"127.0.0.1:{api}",
        "proxy_address": f"127.0.0.1:{proxy}", "tcp_proxy_address": f"127.0.0.1:{tcp}",
        "cluster_start_timeout": 60, "log_level": "INFO"})))
    log = tmp_path / "server.log"
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "not-used-in-this-test",
           SETTINGS_ENV: str(settings_path)}
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "dask_gateway_server", "-f", str(CONFIG_FILE)],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        status = None
        while status != 200 and time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{proxy}/api/health",
                                            timeout=2) as response:
                    status = response.status
            except OSError:
                time.sleep(0.2)
        assert status == 200, log.read_text()
        text = log.read_text()
        assert "JupyterHubAuthenticator" in text and "HybridLocalBackend" in text, text
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)
    assert server.returncode == 0, log.read_text()


def test_a_bad_settings_file_stops_the_real_server_with_the_key_and_the_fix(tmp_path):
    settings_path = tmp_path / SETTINGS_FILE
    settings_path.write_text("backend: unsafe-local\nidle_timeout: soon\n")
    result = subprocess.run(
        [sys.executable, "-m", "dask_gateway_server", "-f", str(CONFIG_FILE)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, SETTINGS_ENV: str(settings_path)})
    assert result.returncode != 0
    assert "idle_timeout = 'soon' is not valid" in result.stdout + result.stderr
    assert f"Fix `idle_timeout` in {settings_path}." in result.stdout + result.stderr


def test_a_short_heartbeat_period_without_a_timeout_warns_with_dask_gateways_own_timeout():
    """dask-gateway stops a cluster whose scheduler missed two heartbeats: with a period of
    1 s and no timeout, a scheduler a busy machine holds up 2 s loses its cluster (what the
    test gateways met in CI). The settings say so, with the timeout the server will use."""
    with pytest.warns(UserWarning, match="heartbeat_timeout") as record:
        settings = parse_settings({"backend": "unsafe-local", "heartbeat_period": 1},
                                  source="/etc/dask-gateway/hybrid-gateway.yaml")
    (warning,) = record
    config = Config()
    configure(config, settings, environ={})
    backend = HybridUnsafeLocalBackend(config=config)
    assert backend.cluster_heartbeat_timeout == 2  # dask-gateway's own: two periods
    message = str(warning.message)
    assert "heartbeat_period: 1 s" in message and "2 s" in message
    assert "/etc/dask-gateway/hybrid-gateway.yaml" in message
    # the two numbers the warning relies on are dask-gateway's own (hybrid does not
    # import dask-gateway-server to read them: it is an optional dependency)
    config = Config()
    configure(config, parse_settings({"backend": "unsafe-local"}), environ={})
    stock = HybridUnsafeLocalBackend(config=config)
    assert (stock.cluster_heartbeat_period, stock.cluster_heartbeat_timeout) == (
        DEFAULT_HEARTBEAT_PERIOD, GATEWAY_MISSED_HEARTBEATS * DEFAULT_HEARTBEAT_PERIOD)
    # a timeout given, or the period left at dask-gateway's default: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_settings({"heartbeat_period": 1, "heartbeat_timeout": "1 minute"})
        parse_settings({"heartbeat_period": 15})
        parse_settings({})
