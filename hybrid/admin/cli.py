"""``hybrid admin ...`` (ingress, ports, gateway-config) and ``hybrid doctor``."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from hybrid.admin.doctor import DEFAULT_TIMEOUT, DEFAULT_WARN_DAYS, SYSTEM_TOOLS
from hybrid.admin.ingress import (
    DEFAULT_DYNAMIC_FILE,
    DEFAULT_ENTRY_POINT,
    DEFAULT_NAMESPACE,
    DEFAULT_PORT,
    FORMS,
)
from hybrid.admin.ports import DEFAULT_GATEWAY_HTTP_PORT
from hybrid.errors import ConfigurationError


def _bad_input_is_usage_error(command: Callable[..., Any]) -> Callable[..., Any]:
    """A :class:`ConfigurationError` becomes a usage error (exit 2) naming field and fix."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ConfigurationError as error:
            raise click.UsageError(str(error)) from None

    return wrapper


@click.group()
def admin() -> None:
    """For the facility admin: the ingress, the firewall, the gateway server."""


@admin.command()
@click.option("--form", type=click.Choice(FORMS), default="kubernetes", show_default=True,
              help="An IngressRouteTCP manifest, or Traefik's file provider configuration.")
@click.option("--host", default=None,
              help="File form: the address the entry point listens on (default: all).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int,
              help="The scheduler port workers and clients connect to.")
@click.option("--namespace", default=DEFAULT_NAMESPACE, show_default=True,
              help="Kubernetes form: the namespace of the route (the gateway's).")
@click.option("--entry-point", default=DEFAULT_ENTRY_POINT, show_default=True,
              help="Traefik entry point of its own for the scheduler port.")
@click.option("--service", default=None,
              help="Where the gateway's proxy is: a Kubernetes Service (default "
                   "traefik-dask-gateway) or, file form, its host.")
@click.option("--service-port", default=str(DEFAULT_PORT), show_default=True,
              help="The proxy's port (Kubernetes form: a number or a Service port name).")
@click.option("--dynamic-file", default=DEFAULT_DYNAMIC_FILE, show_default=True,
              help="File form: where the dynamic configuration will be written.")
@_bad_input_is_usage_error
def ingress(form: str, host: str | None, port: int, namespace: str, entry_point: str,
            service: str | None, service_port: str, dynamic_file: str) -> None:
    """Print the Traefik route: scheduler port, TLS passed through by SNI daskgateway-*."""
    from hybrid.admin.ingress import render_ingress

    click.echo(render_ingress(
        form, host=host, port=port, namespace=namespace, entry_point=entry_point,
        service=service, service_port=service_port, dynamic_file=dynamic_file,
    ), nl=False)


@admin.command()
@click.option("--workers-per-node", default=1, show_default=True, type=int,
              help="Workers one batch node runs at the same time.")
@click.option("--nanny/--no-nanny", default=None,
              help="Workers run a nanny (default: hybrid.worker.nanny). Workers that reach "
                   "the scheduler through the SNI ingress run without one.")
@click.option("--scheduler-host", default=None,
              help="The address the scheduler's connections come from (egress/NAT).")
@click.option("--ingress-host", default=None, help="The ingress address workers connect to.")
@click.option("--ingress-port", default=DEFAULT_PORT, show_default=True, type=int)
@click.option("--gateway-http-port", default=DEFAULT_GATEWAY_HTTP_PORT, show_default=True,
              type=int, help="The gateway's HTTP port (API and dashboards).")
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON.")
@_bad_input_is_usage_error
def ports(workers_per_node: int, nanny: bool | None, scheduler_host: str | None,
          ingress_host: str | None, ingress_port: int, gateway_http_port: int,
          as_json: bool) -> None:
    """Check the worker port ranges and print the firewall rules to open."""
    from hybrid.admin.ports import format_plan, plan_ports

    plan = plan_ports(workers_per_node, nanny=nanny, scheduler_host=scheduler_host,
                      ingress_host=ingress_host, ingress_port=ingress_port,
                      gateway_http_port=gateway_http_port)
    click.echo(json.dumps(plan.as_dict(), indent=2) if as_json else format_plan(plan))


@admin.command("gateway-config")
@click.option("--backend", type=click.Choice(["local", "unsafe-local", "kubernetes"]),
              default="local", show_default=True,
              help="The backend of the dask_gateway_config.py (the Helm values are Kubernetes).")
@click.option("--authenticator", type=click.Choice(["simple", "jupyterhub"]), default=None,
              help="How users log in (default: simple in the config, jupyterhub in Helm).")
@click.option("--password-file", default=None,
              help="Simple authenticator: a 0600 file with the shared password.")
@click.option("--jupyterhub-api-url", default=None, help="JupyterHub authenticator: the Hub API.")
@click.option("--address", default=None, help="The private API address, HOST:PORT.")
@click.option("--proxy-address", default=None,
              help="The HTTP proxy address users connect to, HOST:PORT.")
@click.option("--tcp-proxy-address", default=None,
              help="The TCP proxy address schedulers are reached through, HOST:PORT.")
@click.option("--scheduler-image", "images", multiple=True,
              help="A scheduler image users may choose (repeat; the first is the default).")
@click.option("--allow-custom-image", is_flag=True, default=None,
              help="Let users give any image reference, not only the listed ones.")
@click.option("--preload", type=click.Choice(["module", "inline", "none"]), default=None,
              help="How schedulers get hybrid's preload (default: module; inline on Kubernetes).")
@click.option("--idle-timeout", default=None, help='Stop idle clusters after, e.g. "30 min".')
@click.option("--max-lifetime", default=None, help="Stop every cluster after this long.")
@click.option("--client-timeout", default=None,
              help="Stop a cluster this long after its last client left.")
@click.option("--helm/--no-helm", default=True, show_default=True,
              help="Also print the dask-gateway Helm chart values.")
@_bad_input_is_usage_error
def gateway_config(backend: str, authenticator: str | None, password_file: str | None,
                   jupyterhub_api_url: str | None, address: str | None,
                   proxy_address: str | None, tcp_proxy_address: str | None,
                   images: tuple[str, ...], allow_custom_image: bool | None,
                   preload: str | None, idle_timeout: str | None, max_lifetime: str | None,
                   client_timeout: str | None, helm: bool) -> None:
    """Print dask-gateway-server's configuration for scheduler-only clusters and Helm values.

    The gateway starts schedulers only, with hybrid's preload so that workers from batch
    jobs are not retired; users pick the scheduler image with ``new_cluster(image=...)``.
    """
    from hybrid.gateway.server_config import render_gateway_config, render_helm_values

    given = {"authenticator": authenticator, "jupyterhub_api_url": jupyterhub_api_url,
             "images": images or None, "allow_custom_image": allow_custom_image,
             "preload": preload, "idle_timeout": idle_timeout, "max_lifetime": max_lifetime,
             "client_timeout": client_timeout}
    shared = {name: value for name, value in given.items() if value is not None}
    server_only = {name: value for name, value in (
        ("password_file", password_file), ("address", address),
        ("proxy_address", proxy_address), ("tcp_proxy_address", tcp_proxy_address),
    ) if value is not None}
    config_text = render_gateway_config(backend=backend, **shared, **server_only)
    helm_text = render_helm_values(**shared) if helm else None
    click.echo("# ---- dask_gateway_config.py ----\n" + config_text.rstrip("\n"))
    if helm_text is not None:
        click.echo("\n# ---- Helm values for the dask-gateway chart (values.yaml) ----\n"
                   + helm_text.rstrip("\n"))


@click.command()
@click.option("--gateway-address", default=None,
              help="The gateway's HTTP address (default: dask config gateway.address).")
@click.option("--proxy-address", default=None,
              help="The scheduler proxy/ingress, host:port (default: gateway.proxy-address).")
@click.option("--cluster-name", default=None, help="A running cluster, for the TLS check.")
@click.option("--cert", type=click.Path(dir_okay=False), default=None,
              help="The cluster's certificate (PEM), also its CA.")
@click.option("--key", type=click.Path(dir_okay=False), default=None,
              help="The cluster's key (PEM): the TLS check then presents the certificate.")
@click.option("--system", type=click.Choice(list(SYSTEM_TOOLS)), default=None,
              help="The batch system to check.")
@click.option("--container-image", default=None,
              help="The workers' image (default: hybrid.worker.container.image).")
@click.option("--pixi-project", type=click.Path(file_okay=False), default=None,
              help="A pixi project directory the workers run in.")
@click.option("--conda-env", type=click.Path(file_okay=False), default=None,
              help="A conda environment directory the workers run in.")
@click.option("--workers-per-node", default=1, show_default=True, type=int,
              help="Workers this node would run (free ports needed).")
@click.option("--warn-days", default=DEFAULT_WARN_DAYS, show_default=True, type=int,
              help="Warn when the certificate expires within this many days.")
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=float,
              help="Seconds each network check waits.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@_bad_input_is_usage_error
def doctor(gateway_address: str | None, proxy_address: str | None, cluster_name: str | None,
           cert: str | None, key: str | None, system: str | None, container_image: str | None,
           pixi_project: str | None, conda_env: str | None, workers_per_node: int,
           warn_days: int, timeout: float, as_json: bool) -> None:
    """Check this node before it starts workers; exit 1 when a check fails."""
    import dask.config

    from hybrid.admin.doctor import DoctorOptions, Status, format_results, run_doctor

    options = DoctorOptions(
        gateway_address=gateway_address or dask.config.get("gateway.address", None),
        proxy_address=proxy_address or dask.config.get("gateway.proxy-address", None),
        cluster_name=cluster_name, cert=cert, key=key, system=system,
        container_image=container_image, pixi_project=pixi_project, conda_env=conda_env,
        workers_per_node=workers_per_node, warn_days=warn_days, timeout=timeout,
    )
    results = run_doctor(options)
    failed = any(result.status is Status.fail for result in results)
    if as_json:
        click.echo(json.dumps({"ok": not failed, "checks": [r.as_dict() for r in results]},
                              indent=2))
    else:
        click.echo(format_results(results))
    if failed:
        raise SystemExit(1)
