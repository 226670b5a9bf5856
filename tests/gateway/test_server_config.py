"""render_gateway_config / render_helm_values, loaded by the real dask-gateway-server code."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dask_gateway_server
import pytest
import yaml
from dask_gateway_server.backends.base import ClusterConfig
from dask_gateway_server.models import User
from traitlets.config.loader import PyFileConfigLoader

from hybrid.errors import ConfigurationError
from hybrid.gateway import PRELOAD_MODULE
from hybrid.gateway.dev import free_port
from hybrid.gateway.preload import CLIENT_TIMEOUT_ENV, MAX_LIFETIME_ENV
from hybrid.gateway.server_config import (
    DEFAULT_SCHEDULER_IMAGE,
    GatewayServerConfig,
    render_gateway_config,
    render_helm_values,
)

IMAGES = ["ghcr.io/facility/scheduler:2026.3", "registry.example.org:5000/dask/sched:gpu-1"]


def _load(text: str, directory: Path):
    """Load a rendered config with traitlets' loader, as dask-gateway-server does."""
    path = directory / "dask_gateway_config.py"
    path.write_text(text)
    compile(text, str(path), "exec")
    return PyFileConfigLoader(path.name, path=str(directory)).load_config()


def _secret_files(directory: Path) -> tuple[Path, Path]:
    password = directory / "password"
    password.write_text("s3cret\n")
    key = directory / "db-key"
    key.write_text("YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=\n")
    return password, key


def test_local_config_loads_into_the_real_classes(tmp_path):
    from dask_gateway_server.auth import SimpleAuthenticator
    from dask_gateway_server.backends.local import LocalClusterConfig, UnsafeLocalBackend

    password, key = _secret_files(tmp_path)
    text = render_gateway_config(
        backend="unsafe-local", password_file=str(password), address="127.0.0.1:8001",
        proxy_address="127.0.0.1:8000", tcp_proxy_address="127.0.0.1:8786",
        scheduler_command=["dask", "scheduler"], heartbeat_period=5, heartbeat_timeout=30,
        cluster_start_timeout="2 min", idle_timeout="30 min", max_lifetime="12 h",
        client_timeout=600, db_url=f"sqlite:///{tmp_path}/db.sqlite", db_key_file=str(key),
        images=IMAGES, environment={"OMP_NUM_THREADS": "1"},
    )
    assert "s3cret" not in text
    config = _load(text, tmp_path)
    assert config.DaskGateway.backend_class.endswith("UnsafeLocalBackend")
    assert (config.DaskGateway.address, config.Proxy.address, config.Proxy.tcp_address) == (
        "127.0.0.1:8001", "127.0.0.1:8000", "127.0.0.1:8786")
    cluster = LocalClusterConfig(config=config)
    assert cluster.cluster_max_workers == 0
    assert cluster.scheduler_cmd == ["dask", "scheduler", "--preload", PRELOAD_MODULE]
    assert cluster.idle_timeout == 1800
    assert cluster.environment == {"OMP_NUM_THREADS": "1", MAX_LIFETIME_ENV: "43200",
                                   CLIENT_TIMEOUT_ENV: "600"}
    assert SimpleAuthenticator(config=config).password == "s3cret"
    backend = UnsafeLocalBackend(config=config)
    assert (backend.cluster_start_timeout, backend.cluster_heartbeat_period,
            backend.cluster_heartbeat_timeout) == (120, 5, 30)
    assert len(backend.db_encrypt_keys) == 1

    # the image option: offered, validated, and ignored by the local backend
    spec = backend.cluster_options.get_specification()
    assert spec == [{"field": "image", "label": "Scheduler image", "default": IMAGES[0],
                     "spec": {"type": "select", "options": IMAGES}}]
    requested, overrides = asyncio.run(
        backend.process_cluster_options(User("alice"), {"image": IMAGES[1]}))
    assert requested == {"image": IMAGES[1]}
    assert overrides.scheduler_cmd == cluster.scheduler_cmd
    with pytest.raises(Exception, match="not a valid option"):
        asyncio.run(backend.process_cluster_options(User("alice"), {"image": "evil/x:1"}))


def _kube_cluster_traits() -> set[str]:
    """Traits of the installed KubeClusterConfig, read from its source (its module needs
    kubernetes_asyncio to import, which the Kubernetes backend's server image has)."""
    source = Path(dask_gateway_server.__file__).parent / "backends/kubernetes/backend.py"
    tree = ast.parse(source.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef)
              and n.name == "KubeClusterConfig"]
    own = {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets
           if isinstance(t, ast.Name)}
    return own | set(ClusterConfig.class_trait_names())


@pytest.mark.parametrize("allow_custom_image", [False, True])
def test_kubernetes_config_sets_real_traits_and_maps_the_image(tmp_path, allow_custom_image):
    text = render_gateway_config(
        backend="kubernetes", authenticator="jupyterhub",
        jupyterhub_api_url="http://hub:8081/hub/api", images=IMAGES,
        allow_custom_image=allow_custom_image, idle_timeout=3600, max_lifetime="1 day",
    )
    config = _load(text, tmp_path)
    assert config.DaskGateway.backend_class == (
        "dask_gateway_server.backends.kubernetes.KubeBackend")
    assert config.JupyterHubAuthenticator.jupyterhub_api_url == "http://hub:8081/hub/api"
    kube = config.KubeClusterConfig
    assert set(kube) <= _kube_cluster_traits()
    assert kube.cluster_max_workers == 0 and kube.idle_timeout == 3600
    command = kube.scheduler_cmd
    assert command[:3] == ["dask", "scheduler", "--preload"]
    assert "def dask_setup" in command[3]  # inline: the image needs no hybrid
    compile(command[3], "preload", "exec")
    options = config.Backend.cluster_options
    chosen = options.get_configuration(options.parse_options({"image": IMAGES[1]}),
                                       User("alice"))
    assert chosen == {"image": IMAGES[1]}
    assert options.get_configuration(options.parse_options({}), User("a")) == {
        "image": IMAGES[0]}
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


def test_helm_values_carry_the_same_scheduler_only_section(tmp_path):
    text = render_helm_values(images=IMAGES, jupyterhub_api_url="http://hub:8081/hub/api",
                              idle_timeout="1 h",
                              scheduler_extra_pod_config={"nodeSelector": {"role": "dask"}})
    values = yaml.safe_load(text)
    gateway = values["gateway"]
    assert gateway["auth"] == {"type": "jupyterhub",
                               "jupyterhub": {"apiUrl": "http://hub:8081/hub/api"}}
    assert gateway["backend"]["image"] == {"name": "ghcr.io/facility/scheduler",
                                           "tag": "2026.3"}
    assert gateway["backend"]["scheduler"] == {"extraPodConfig": {"nodeSelector": {"role": "dask"}}}
    snippet = gateway["extraConfig"]["hybrid"]
    assert snippet == GatewayServerConfig(
        backend="kubernetes", authenticator="jupyterhub",
        jupyterhub_api_url="http://hub:8081/hub/api", images=IMAGES, idle_timeout=3600,
    ).cluster_section()
    config = _load(snippet, tmp_path)  # the chart appends it to its own config
    assert config.KubeClusterConfig.cluster_max_workers == 0
    assert config.KubeClusterConfig.idle_timeout == 3600


def test_jupyterhub_config_runs_in_the_real_server(tmp_path):
    """A facility-style config (LocalBackend, JupyterHub auth) starts dask-gateway-server."""
    api, proxy, tcp = free_port(), free_port(), free_port()
    text = render_gateway_config(
        backend="local", authenticator="jupyterhub",
        jupyterhub_api_url="http://127.0.0.1:9/hub/api", address=f"127.0.0.1:{api}",
        proxy_address=f"127.0.0.1:{proxy}", tcp_proxy_address=f"127.0.0.1:{tcp}",
        cluster_start_timeout=60, log_level="INFO",
    )
    path = tmp_path / "dask_gateway_config.py"
    path.write_text(text)
    log = tmp_path / "server.log"
    env = {**os.environ, "JUPYTERHUB_API_TOKEN": "not-used-in-this-test"}
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "dask_gateway_server", "-f", str(path)],
                                  stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                                  start_new_session=True)
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
        assert "JupyterHubAuthenticator" in log.read_text()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)
    assert server.returncode == 0, log.read_text()


@pytest.mark.parametrize(("settings", "field"), [
    ({"backend": "slurm"}, "backend"),
    ({"authenticator": "kerberos"}, "authenticator"),
    ({"preload": "maybe"}, "preload"),
    ({"address": "localhost"}, "address"),
    ({"proxy_address": "127.0.0.1:99999"}, "proxy_address"),
    ({"scheduler_command": "dask scheduler"}, "scheduler_command"),
    ({"scheduler_command": ["dask", "scheduler", "--preload", "x"]}, "scheduler_command"),
    ({"images": []}, "images"),
    ({"images": ["Not An Image!"]}, "images"),
    ({"images": ["a/b:1", "a/b:1"]}, "images"),
    ({"idle_timeout": -1}, "idle_timeout"),
    ({"max_lifetime": "ten minutes"}, "max_lifetime"),
    ({"client_timeout": "5 kg"}, "client_timeout"),
    ({"cluster_start_timeout": 0}, "cluster_start_timeout"),
    ({"heartbeat_period": 0.5}, "heartbeat_period"),
    ({"heartbeat_period": 10, "heartbeat_timeout": 10}, "heartbeat_timeout"),
    ({"db_url": "sqlite:////var/db.sqlite"}, "db_key_file"),
    ({"backend": "kubernetes", "cluster_start_timeout": 60}, "cluster_start_timeout"),
    ({"authenticator": "jupyterhub", "password_file": "/p"}, "password_file"),
    ({"jupyterhub_api_url": "http://hub/api"}, "jupyterhub_api_url"),
    ({"environment": {"1BAD": "x"}}, "environment"),
    ({"log_level": "LOUD"}, "log_level"),
])
def test_bad_settings_are_refused_naming_the_field(settings, field):
    with pytest.raises(ConfigurationError) as error:
        render_gateway_config(**settings)
    assert error.value.field.startswith(field)
    assert field in str(error.value)


def test_helm_values_refuse_bad_settings():
    with pytest.raises(ConfigurationError, match="images"):
        render_helm_values(images=["ghcr.io/Org/image:1"])
    with pytest.raises(ConfigurationError, match="scheduler_extra_pod_config"):
        render_helm_values(scheduler_extra_pod_config=["not", "a", "mapping"])


def test_defaults_render_the_recipe():
    config = GatewayServerConfig()
    assert config.images == (DEFAULT_SCHEDULER_IMAGE,)
    assert config.scheduler_cmd == ["dask", "scheduler", "--preload", PRELOAD_MODULE]
    assert GatewayServerConfig(backend="kubernetes").preload == "inline"
