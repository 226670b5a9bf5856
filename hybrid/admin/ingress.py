"""The ingress that brings batch workers to their scheduler: Traefik, TLS passthrough by SNI.

A worker opens ``tls://INGRESS:8786`` and names its cluster in the TLS SNI,
``daskgateway-<cluster name>``. Traefik reads the SNI without decrypting (passthrough) and
hands the connection to the gateway's proxy, which routes it to that cluster's scheduler.
The scheduler port gets an entry point of its own: the web entry points carry HTTP.

Two forms of the same route:

* :func:`ingress_route_tcp`: a Kubernetes ``IngressRouteTCP`` (``traefik.io/v1alpha1``).
* :func:`file_provider_configs`: Traefik's static snippet (the entry point) and the file
  provider's dynamic configuration (the TCP router and its service), for a Traefik outside
  Kubernetes.

Both come back as dicts; :func:`render_ingress` gives the YAML the CLI prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from distributed.comm.addressing import unparse_host_port

from hybrid.errors import ConfigurationError
from hybrid.fields import Port, is_host, validate_value
from hybrid.gateway import SNI_PREFIX

#: A cluster name as dask-gateway makes them: a hex uuid, or ``<namespace>.<hex>`` on
#: Kubernetes. Go regexp syntax (Traefik v3 ``HostSNIRegexp``), anchored at both ends.
SNI_REGEXP = f"^{SNI_PREFIX}[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"
#: The Traefik v3 rule: ``HostSNI`` only knows exact names and ``*.domain`` wildcards, so a
#: prefix match needs ``HostSNIRegexp``.
SNI_RULE = f"HostSNIRegexp(`{SNI_REGEXP}`)"

DEFAULT_PORT = 8786
DEFAULT_ENTRY_POINT = "dask-scheduler"
DEFAULT_NAMESPACE = "dask-gateway"
#: The Service of the Traefik that the dask-gateway Helm chart installs (release
#: ``dask-gateway``); it carries the per-cluster routes the gateway's controller creates.
DEFAULT_KUBERNETES_SERVICE = "traefik-dask-gateway"
DEFAULT_ROUTE_NAME = "dask-gateway-schedulers"
DEFAULT_DYNAMIC_FILE = "/etc/traefik/dynamic/dask-gateway.yml"
#: Entry points that carry HTTP in common Traefik setups; the scheduler port must not share them.
WEB_ENTRY_POINTS = frozenset({"web", "websecure", "traefik", "metrics", "http", "https"})

FORMS = ("kubernetes", "file")

_ENTRY_POINT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")


def check_port(value: Any, field: str) -> int:
    """A TCP port number, 1-65535 (digits as text too: ``--service-port`` may be a name)."""
    if isinstance(value, str) and re.fullmatch(r"\s*[1-9][0-9]*\s*", value):
        value = int(value)
    return validate_value(Port, value, field)


def check_dynamic_file(value: Any) -> str:
    """An absolute path on one line: it lands in YAML and in a YAML comment, where a line
    break of any kind (YAML also reads ``\\r``, U+0085, U+2028, U+2029 as one) would start
    new YAML."""
    from hybrid.fields import LINE_BREAKS

    if not isinstance(value, str) or not value.startswith("/") or "\0" in value or any(
            mark in value for mark in LINE_BREAKS):
        raise ConfigurationError(
            "--dynamic-file", value, "an absolute path on one line, without NUL bytes (no "
            "line break of any kind: YAML reads \\r, U+0085, U+2028 and U+2029 as ones)",
            fix=f"Give the file Traefik's file provider watches, e.g. {DEFAULT_DYNAMIC_FILE}.")
    return value


def check_entry_point(value: Any) -> str:
    """A Traefik entry point name of its own (not a web entry point)."""
    if not isinstance(value, str) or not _ENTRY_POINT.match(value):
        raise ConfigurationError("--entry-point", value,
                                 "a Traefik entry point name from A-Z a-z 0-9 _ -")
    if value.lower() in WEB_ENTRY_POINTS:
        raise ConfigurationError(
            "--entry-point", value, "an entry point of its own, not a web one",
            fix=f"The scheduler port carries TLS passed through by SNI, not HTTP: use e.g. "
                f"{DEFAULT_ENTRY_POINT!r} and declare it in Traefik's static configuration.",
        )
    return value


def check_host(value: Any, field: str) -> str:
    """A hostname or an IP address (IPv6 without brackets)."""
    if not is_host(value):
        raise ConfigurationError(field, value, "a hostname or an IP address")
    return value


def ingress_route_tcp(
    namespace: str = DEFAULT_NAMESPACE,
    service: str = DEFAULT_KUBERNETES_SERVICE,
    service_port: int | str = DEFAULT_PORT,
    entry_point: str = DEFAULT_ENTRY_POINT,
    name: str = DEFAULT_ROUTE_NAME,
) -> dict[str, Any]:
    """The ``IngressRouteTCP`` that passes ``daskgateway-*`` TLS to the gateway's proxy.

    ``service``/``service_port``: the Kubernetes Service (and its port, a number or a name)
    of the proxy that routes each cluster by SNI: the dask-gateway chart's Traefik, or the
    gateway's own proxy Service.
    """
    if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
        raise ConfigurationError("--namespace", namespace,
                                 "a Kubernetes namespace: lower-case a-z 0-9 -, 1-63 characters")
    if not isinstance(service, str) or not _DNS_LABEL.match(service):
        raise ConfigurationError("--service", service,
                                 "a Kubernetes Service name: lower-case a-z 0-9 -, 1-63 characters")
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name):
        raise ConfigurationError("name", name, "a Kubernetes object name: lower-case a-z 0-9 . -")
    if isinstance(service_port, str) and not service_port.strip().isdigit():
        if not _PORT_NAME.match(service_port):
            raise ConfigurationError(
                "--service-port", service_port,
                "a port number 1-65535 or a Service port name (a-z 0-9 -, at most 15 characters)",
            )
        port: int | str = service_port
    else:
        port = check_port(service_port, "--service-port")
    return {
        "apiVersion": "traefik.io/v1alpha1",
        "kind": "IngressRouteTCP",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "hybrid"},
        },
        "spec": {
            "entryPoints": [check_entry_point(entry_point)],
            "routes": [{
                "match": SNI_RULE,
                "services": [{"name": service, "port": port}],
            }],
            "tls": {"passthrough": True},
        },
    }


@dataclass(frozen=True)
class FileProviderConfig:
    """Traefik outside Kubernetes: the static snippet and the file provider's dynamic file."""

    static: dict[str, Any]
    dynamic: dict[str, Any]
    dynamic_file: str


def file_provider_configs(
    service: str,
    service_port: int = DEFAULT_PORT,
    port: int = DEFAULT_PORT,
    host: str | None = None,
    entry_point: str = DEFAULT_ENTRY_POINT,
    dynamic_file: str = DEFAULT_DYNAMIC_FILE,
) -> FileProviderConfig:
    """The same route for Traefik's file provider.

    ``service``/``service_port``: where the gateway's TCP proxy listens. ``host``/``port``:
    where the entry point listens (``host`` ``None``: every interface).
    """
    if service is None:
        raise ConfigurationError(
            "--service", service, "the host of the gateway's TCP proxy",
            fix="The file form routes to an address: give --service HOST --service-port PORT.",
        )
    backend = unparse_host_port(check_host(service, "--service"),
                        check_port(service_port, "--service-port"))
    listen_port = check_port(port, "--port")
    listen_host = "" if host in (None, "") else check_host(host, "--host")
    entry = check_entry_point(entry_point)
    check_dynamic_file(dynamic_file)
    router = f"{entry}-by-sni"
    address = unparse_host_port(listen_host, listen_port) if listen_host else f":{listen_port}"
    static = {
        "entryPoints": {entry: {"address": f"{address}/tcp"}},
        "providers": {"file": {"filename": dynamic_file, "watch": True}},
    }
    dynamic = {
        "tcp": {
            "routers": {
                router: {
                    "entryPoints": [entry],
                    "rule": SNI_RULE,
                    "service": "dask-gateway-proxy",
                    "tls": {"passthrough": True},
                },
            },
            "services": {
                "dask-gateway-proxy": {"loadBalancer": {"servers": [{"address": backend}]}},
            },
        },
    }
    return FileProviderConfig(static=static, dynamic=dynamic, dynamic_file=dynamic_file)


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _commented(text: str) -> str:
    return "".join(f"#   {line}\n" for line in text.splitlines())


def render_ingress(
    form: str = "kubernetes",
    *,
    host: str | None = None,
    port: int = DEFAULT_PORT,
    namespace: str | None = None,
    entry_point: str = DEFAULT_ENTRY_POINT,
    service: str | None = None,
    service_port: int | str = DEFAULT_PORT,
    dynamic_file: str | None = None,
) -> str:
    """The YAML ``hybrid admin ingress`` prints.

    ``kubernetes``: the ``IngressRouteTCP`` manifest (in ``namespace``, default
    ``dask-gateway``), with the entry point Traefik needs as a comment. ``file``: two YAML
    documents, the static snippet then the dynamic file (``dynamic_file``). A setting of
    the other form is refused, not ignored.
    """
    if form not in FORMS:
        raise ConfigurationError("--form", form, " or ".join(FORMS))
    listen_port = check_port(port, "--port")
    if form == "kubernetes":
        for flag, given, fix in (
                ("--host", host, "Traefik in Kubernetes listens where its Service does; --host "
                 "sets the listen address of --form file."),
                ("--dynamic-file", dynamic_file, "Traefik in Kubernetes reads the manifest, "
                 "not a file; --dynamic-file is the file of --form file.")):
            if given not in (None, ""):
                raise ConfigurationError(flag, given, f"no {flag} with --form kubernetes",
                                         fix=fix)
        manifest = ingress_route_tcp(
            namespace=namespace or DEFAULT_NAMESPACE,
            service=service or DEFAULT_KUBERNETES_SERVICE,
            service_port=service_port, entry_point=entry_point,
        )
        helm_ports = {"ports": {entry_point: {
            "port": listen_port, "expose": {"default": True}, "exposedPort": listen_port,
            "protocol": "TCP",
        }}}
        return (
            f"# Workers open tls://<this ingress>:{listen_port} with SNI daskgateway-<cluster>;\n"
            "# Traefik passes the TLS through to the gateway's proxy without decrypting it.\n"
            f"# Traefik needs the entry point {entry_point!r} in its static configuration,\n"
            "# for instance in the values of the Traefik Helm chart:\n"
            + _commented(_dump(helm_ports))
            + "---\n" + _dump(manifest)
        )
    if namespace is not None:
        raise ConfigurationError("--namespace", namespace, "no --namespace with --form file",
                                 fix="The file provider has no namespace; --namespace is the "
                                     "IngressRouteTCP's, of --form kubernetes.")
    configs = file_provider_configs(
        service=service, service_port=service_port, port=listen_port, host=host,
        entry_point=entry_point, dynamic_file=dynamic_file or DEFAULT_DYNAMIC_FILE,
    )
    return (
        "# Traefik static configuration (traefik.yml): the scheduler entry point and the\n"
        "# file provider. Merge into your static configuration.\n"
        + "---\n" + _dump(configs.static)
        + f"# Dynamic configuration: write this document to {configs.dynamic_file}\n"
        + "---\n" + _dump(configs.dynamic)
    )
