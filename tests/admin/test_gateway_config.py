"""``hybrid admin gateway-config`` prints what hybrid.gateway.server_config renders."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from hybrid.cli import cli
from hybrid.gateway.server_config import render_gateway_config, render_helm_values

pytestmark = pytest.mark.timeout(60)

IMAGES = ("ghcr.io/example/scheduler:1.0", "ghcr.io/example/scheduler:2.0")


def _sections(output: str) -> tuple[str, str]:
    config, _, helm = output.partition(
        "\n# ---- Helm values for the dask-gateway chart (values.yaml) ----\n")
    assert config.startswith("# ---- dask_gateway_config.py ----\n")
    return config.split("\n", 1)[1], helm


def test_prints_the_config_and_helm_values_with_the_scheduler_image_option() -> None:
    result = CliRunner().invoke(cli, [
        "admin", "gateway-config", "--scheduler-image", IMAGES[0], "--scheduler-image",
        IMAGES[1], "--idle-timeout", "30 min"])
    assert result.exit_code == 0, result.output
    config, helm = _sections(result.output)
    assert config.rstrip("\n") == render_gateway_config(
        backend="local", images=IMAGES, idle_timeout="30 min").rstrip("\n")
    assert helm.rstrip("\n") == render_helm_values(
        images=IMAGES, idle_timeout="30 min").rstrip("\n")
    compile(config, "dask_gateway_config.py", "exec")  # valid Python
    assert "cluster_max_workers = 0" in config
    assert "hybrid.gateway.preload" in config
    assert repr(list(IMAGES)) in config  # the scheduler image option offers both
    assert "idle_timeout = 1800.0" in config
    values = yaml.safe_load(helm)
    assert values["gateway"]["backend"]["image"] == {"name": "ghcr.io/example/scheduler",
                                                     "tag": "1.0"}
    assert "cluster_max_workers = 0" in values["gateway"]["extraConfig"]["hybrid"]


def test_kubernetes_backend_without_helm() -> None:
    result = CliRunner().invoke(cli, ["admin", "gateway-config", "--backend", "kubernetes",
                                      "--no-helm"])
    assert result.exit_code == 0, result.output
    config, helm = _sections(result.output)
    assert helm == ""
    assert "KubeBackend" in config and "KubeClusterConfig.cluster_max_workers = 0" in config


def test_bad_input_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["admin", "gateway-config", "--scheduler-image",
                                      "not an image!"])
    assert result.exit_code == 2
    assert "images = 'not an image!' is not valid" in result.output
