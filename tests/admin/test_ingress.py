"""``hybrid admin ingress``: the IngressRouteTCP against Traefik's CRD, the file form, bad input.

The end-to-end proof (a real Traefik running the file form in front of a real gateway) is in
test_traefik_ingress.py.
"""

from __future__ import annotations

import copy
import re

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from hybrid.admin.ingress import (
    SNI_REGEXP,
    SNI_RULE,
    file_provider_configs,
    ingress_route_tcp,
    render_ingress,
)
from hybrid.cli import cli
from hybrid.errors import ConfigurationError

pytestmark = pytest.mark.timeout(60)


def _validator(schema: dict) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def _errors(schema: dict, document: dict) -> list[str]:
    return [error.message for error in _validator(schema).iter_errors(document)]


def test_rendered_ingress_route_tcp_is_valid_against_the_crd(crd_schema: dict) -> None:
    manifest = ingress_route_tcp(namespace="dask", service="traefik-dask-gateway",
                                 service_port=8786, entry_point="dask-scheduler")
    assert _errors(crd_schema, manifest) == []
    assert manifest["apiVersion"] == "traefik.io/v1alpha1"
    assert manifest["kind"] == "IngressRouteTCP"
    assert manifest["spec"]["entryPoints"] == ["dask-scheduler"]
    assert manifest["spec"]["tls"] == {"passthrough": True}
    (route,) = manifest["spec"]["routes"]
    assert route["match"] == SNI_RULE
    assert route["services"] == [{"name": "traefik-dask-gateway", "port": 8786}]


def test_cli_prints_the_manifest_and_the_entry_point_it_needs(crd_schema: dict) -> None:
    result = CliRunner().invoke(cli, ["admin", "ingress", "--namespace", "gw", "--service",
                                      "traefik-dask-gateway", "--service-port", "tcp"])
    assert result.exit_code == 0, result.output
    (manifest,) = [d for d in yaml.safe_load_all(result.output) if d is not None]
    assert _errors(crd_schema, manifest) == []
    assert manifest["metadata"]["namespace"] == "gw"
    assert manifest["spec"]["routes"][0]["services"][0]["port"] == "tcp"  # a named port
    # the static side (an entry point of its own on 8786) is said in comments
    assert "#   ports:\n#     dask-scheduler:\n#       port: 8786" in result.output


@pytest.mark.parametrize("breakage, expected", [
    (lambda m: m["spec"].pop("routes"), "'routes' is a required property"),
    (lambda m: m["spec"]["routes"][0].pop("match"), "'match' is a required property"),
    (lambda m: m["spec"]["routes"][0]["services"][0].update(port=["8786"]), "is not valid under"),
    (lambda m: m["spec"]["tls"].update(passthrough="yes"), "is not of type 'boolean'"),
    (lambda m: m["spec"].update(entryPoints="dask-scheduler"), "is not of type 'array'"),
    (lambda m: m.pop("metadata"), "'metadata' is a required property"),
])
def test_the_crd_schema_rejects_broken_manifests(crd_schema: dict, breakage, expected) -> None:
    """The validation bites: each broken variant of a valid manifest is rejected."""
    manifest = copy.deepcopy(ingress_route_tcp())
    assert _errors(crd_schema, manifest) == []
    breakage(manifest)
    errors = _errors(crd_schema, manifest)
    assert errors, "the CRD schema accepted a broken manifest"
    assert any(expected in message for message in errors), errors


def test_the_sni_rule_matches_gateway_cluster_names_only() -> None:
    """Go's RE2 and Python agree on this simple syntax: check the pattern on real names."""
    assert SNI_RULE == f"HostSNIRegexp(`{SNI_REGEXP}`)"
    pattern = re.compile(SNI_REGEXP)
    for name in ("daskgateway-0123456789abcdef0123456789abcdef",  # local backends: uuid hex
                 "daskgateway-dask-gateway.0123456789abcdef"):     # Kubernetes: namespace.hex
        assert pattern.match(name), name
    for name in ("daskgateway-", "example.org", "xdaskgateway-abc", "daskgateway-abc.",
                 "daskgateway-ABC", "daskgateway-a_b"):
        assert not pattern.match(name), name


def test_file_form_has_an_entry_point_of_its_own_and_passthrough() -> None:
    configs = file_provider_configs(service="10.0.0.5", service_port=8786, port=8786,
                                    dynamic_file="/etc/traefik/dynamic/dask.yml")
    assert configs.static == {
        "entryPoints": {"dask-scheduler": {"address": ":8786/tcp"}},
        "providers": {"file": {"filename": "/etc/traefik/dynamic/dask.yml", "watch": True}},
    }
    (router,) = configs.dynamic["tcp"]["routers"].values()
    assert router == {"entryPoints": ["dask-scheduler"], "rule": SNI_RULE,
                      "service": "dask-gateway-proxy", "tls": {"passthrough": True}}
    servers = configs.dynamic["tcp"]["services"]["dask-gateway-proxy"]["loadBalancer"]["servers"]
    assert servers == [{"address": "10.0.0.5:8786"}]
    ipv6 = file_provider_configs(service="fd00::5", host="::1", port=9000)
    assert ipv6.static["entryPoints"]["dask-scheduler"]["address"] == "[::1]:9000/tcp"
    assert ipv6.dynamic["tcp"]["services"]["dask-gateway-proxy"]["loadBalancer"]["servers"] == [
        {"address": "[fd00::5]:8786"}]


def test_cli_file_form_prints_static_then_dynamic() -> None:
    result = CliRunner().invoke(cli, [
        "admin", "ingress", "--form", "file", "--host", "127.0.0.1", "--port", "9786",
        "--service", "gateway.internal", "--service-port", "8000",
        "--dynamic-file", "/srv/traefik/dask.yml"])
    assert result.exit_code == 0, result.output
    static, dynamic = yaml.safe_load_all(result.output)
    assert static["entryPoints"]["dask-scheduler"]["address"] == "127.0.0.1:9786/tcp"
    assert static["providers"]["file"]["filename"] == "/srv/traefik/dask.yml"
    servers = dynamic["tcp"]["services"]["dask-gateway-proxy"]["loadBalancer"]["servers"]
    assert servers == [{"address": "gateway.internal:8000"}]


@pytest.mark.parametrize("kwargs, field", [
    ({"entry_point": "web"}, "--entry-point"),
    ({"entry_point": "websecure"}, "--entry-point"),
    ({"entry_point": "bad name"}, "--entry-point"),
    ({"port": 0}, "--port"),
    ({"port": 70000}, "--port"),
    ({"namespace": "Not_A_Namespace"}, "--namespace"),
    ({"service": "svc;rm -rf /"}, "--service"),
    ({"service_port": "not a port name"}, "--service-port"),
    ({"service_port": 0}, "--service-port"),
    ({"host": "127.0.0.1"}, "--host"),  # --host belongs to the file form
    ({"dynamic_file": "/etc/x.yml"}, "--dynamic-file"),  # and so does this (was ignored)
])
def test_bad_kubernetes_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        render_ingress("kubernetes", **kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("kwargs, field", [
    ({}, "--service"),  # the file form must be told where the proxy is
    ({"service": "two words"}, "--service"),
    ({"service": "gw", "service_port": "tcp"}, "--service-port"),
    ({"service": "gw", "host": "a host"}, "--host"),
    ({"service": "gw", "dynamic_file": "relative.yml"}, "--dynamic-file"),
    ({"service": "gw", "entry_point": "web"}, "--entry-point"),
    ({"service": "gw", "namespace": "ns"}, "--namespace"),  # the manifest's (was ignored)
])
def test_bad_file_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        render_ingress("file", **kwargs)
    assert caught.value.field == field


def test_cli_bad_input_is_a_usage_error_with_the_fix() -> None:
    result = CliRunner().invoke(cli, ["admin", "ingress", "--entry-point", "web"])
    assert result.exit_code == 2
    assert "--entry-point = 'web' is not valid" in result.output
    assert "entry point of its own" in result.output
    result = CliRunner().invoke(cli, ["admin", "ingress", "--form", "yaml"])
    assert result.exit_code == 2
