"""``hybrid admin gateway-config``: the settings YAML, or values for the dask-gateway chart.

The Helm values are checked against the chart's own values schema (vendored from
dask-gateway 2026.3.0 under schemas/dask-gateway-chart-2026.3.0, merged into the chart's
defaults as Helm does).
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from traitlets.config import Config

from hybrid.cli import cli
from hybrid.gateway_server import CONFIG_FILE
from hybrid.gateway_server.helm import HELM_SNIPPET
from hybrid.gateway_server.settings import SETTINGS_ENV, SETTINGS_TEXT_ENV, parse_settings

pytestmark = pytest.mark.timeout(60)

IMAGES = ("ghcr.io/example/scheduler:1.0", "ghcr.io/example/scheduler:2.0")
CHART = Path(__file__).with_name("schemas") / "dask-gateway-chart-2026.3.0"


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["admin", "gateway-config", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _merged(defaults: dict, values: dict) -> dict:
    """``values`` over the chart's defaults, as Helm merges them (lists replace)."""
    out = dict(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _check_against_the_chart(values: dict) -> None:
    schema = yaml.safe_load((CHART / "values.schema.yaml").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(_merged(defaults, values))


def test_prints_settings_the_server_reads_back(tmp_path):
    password = tmp_path / "password"
    password.write_text("a-secret-password\n")
    output = _run("--password-file", str(password), "--proxy-address", ":8000",
                  "--tcp-proxy-address", ":8786", "--scheduler-image", IMAGES[0],
                  "--scheduler-image", IMAGES[1], "--idle-timeout", "30 minutes",
                  "--cluster-max-cores", "400", "--cluster-max-memory", "800 GiB",
                  "--gateway-workers")
    assert output.startswith("# hybrid gateway server settings")
    assert f"{SETTINGS_ENV}=THIS_FILE dask-gateway-server -f {CONFIG_FILE}" in output
    assert "a-secret-password" not in output
    settings = parse_settings(yaml.safe_load(output))
    assert settings == parse_settings({
        "password_file": str(password), "proxy_address": ":8000", "tcp_proxy_address": ":8786",
        "images": list(IMAGES), "idle_timeout": 1800, "cluster_max_cores": 400,
        "cluster_max_memory": "800 GiB", "gateway_workers": True})
    assert "import" not in output and "c." not in output  # settings, not Python


def test_helm_values_fit_the_charts_schema_and_carry_the_settings(monkeypatch):
    output = _run("--helm", "--backend", "kubernetes", "--authenticator", "jupyterhub",
                  "--jupyterhub-api-url", "http://hub:8081/hub/api", "--scheduler-image",
                  IMAGES[0], "--max-lifetime", "1 day", "--cluster-max-workers", "50",
                  "--gateway-image", "ghcr.io/example/gateway-hybrid:1.0")
    assert output.startswith("# Values for the dask-gateway Helm chart")
    values = yaml.safe_load(output)
    _check_against_the_chart(values)
    gateway = values["gateway"]
    assert gateway["image"] == {"name": "ghcr.io/example/gateway-hybrid", "tag": "1.0"}
    assert gateway["auth"] == {"type": "jupyterhub",
                               "jupyterhub": {"apiUrl": "http://hub:8081/hub/api"}}
    assert gateway["backend"]["image"] == {"name": "ghcr.io/example/scheduler", "tag": "1.0"}
    assert gateway["extraConfig"] == {"hybrid": HELM_SNIPPET}  # the same text at every site
    (env,) = gateway["env"]
    assert env["name"] == SETTINGS_TEXT_ENV
    settings = parse_settings(yaml.safe_load(env["value"]))
    assert (settings.backend, settings.max_lifetime, settings.cluster_max_workers) == (
        "kubernetes", 86400, 50)

    # The chart's config runs the snippet after its own part (emulated here: the chart
    # itself renders with Helm): hybrid's backend and clusters, the chart's environment kept.
    config = Config()
    config.DaskGateway.backend_class = "dask_gateway_server.backends.kubernetes.KubeBackend"
    config.DaskGateway.authenticator_class = "dask_gateway_server.auth.JupyterHubAuthenticator"
    config.KubeClusterConfig.environment = {"FROM_THE_CHART": "1"}
    monkeypatch.setenv(SETTINGS_TEXT_ENV, env["value"])
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    exec(compile(HELM_SNIPPET, "dask_gateway_config.py", "exec"), {"c": config})
    assert config.DaskGateway.backend_class == "hybrid.gateway_server.backend.HybridKubeBackend"
    assert config.DaskGateway.authenticator_class.endswith("JupyterHubAuthenticator")
    assert config.KubeClusterConfig.environment == {"FROM_THE_CHART": "1"}
    assert config.KubeClusterConfig.cluster_max_workers == 50
    assert config.HybridBackend.max_lifetime == 86400
    assert "def dask_setup" in config.KubeClusterConfig.scheduler_cmd[3]


def test_helm_values_without_a_gateway_image_say_what_it_needs():
    output = _run("--helm", "--backend", "kubernetes")
    values = yaml.safe_load(output)
    _check_against_the_chart(values)
    assert "image" not in values["gateway"]
    assert "gateway.image is not set here" in output and "hybrid installed" in output


@pytest.mark.parametrize(("args", "words"), [
    (["--scheduler-image", "not an image!"], "--scheduler-image[0] = 'not an image!' is not valid"),
    (["--idle-timeout", "soon"], "--idle-timeout = 'soon' is not valid"),
    (["--cluster-max-memory", "800"], "--cluster-max-memory = '800' is not valid"),
    (["--helm"], "backend = 'local' is not valid"),
    (["--helm", "--backend", "kubernetes", "--password-file", "/etc/p"],
     "password_file = '/etc/p' is not valid"),
    (["--helm", "--backend", "kubernetes", "--proxy-address", ":8000"],
     "the chart sets the addresses"),
    (["--gateway-image", "ghcr.io/a/b:1"], "The gateway image is a Helm value"),
    (["--helm", "--backend", "kubernetes", "--gateway-image", "Bad Image"],
     "gateway_image = 'Bad Image' is not valid"),
])
def test_bad_input_is_a_usage_error_naming_the_setting(args, words):
    result = CliRunner().invoke(cli, ["admin", "gateway-config", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output
