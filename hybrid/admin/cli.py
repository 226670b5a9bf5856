"""``hybrid admin ...`` (ingress, ports, gateway-config) and ``hybrid doctor``."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import click

from hybrid.admin.doctor import BATCH_CHECK_TIMEOUT, DEFAULT_TIMEOUT, DEFAULT_WARN_DAYS
from hybrid.admin.ingress import (
    DEFAULT_DYNAMIC_FILE,
    DEFAULT_ENTRY_POINT,
    DEFAULT_NAMESPACE,
    DEFAULT_PORT,
    FORMS,
)
from hybrid.admin.ports import DEFAULT_GATEWAY_HTTP_PORT
from hybrid.batch import SYSTEMS
from hybrid.cli import Duration
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


@click.group(epilog="""
\b
Examples:
  hybrid admin ingress --form kubernetes --namespace dask-gateway
  hybrid admin ports --workers-per-node 4 --ingress-host gateway.example.org
  hybrid admin gateway-config --backend local > hybrid-gateway.yaml
""")
def admin() -> None:
    """For the facility admin: the ingress, the firewall, the gateway server."""


@admin.command(epilog="""
\b
Examples:
  hybrid admin ingress --form kubernetes --namespace dask-gateway --port 8786
  hybrid admin ingress --form file --host 0.0.0.0 --service 10.0.0.7 \\
      --dynamic-file /etc/traefik/dynamic/dask-gateway.yml
""")
@click.option("--form", type=click.Choice(FORMS), default="kubernetes", show_default=True,
              help="An IngressRouteTCP manifest, or Traefik's file provider configuration.")
@click.option("--host", default=None,
              help="File form: the address the entry point listens on (default: all).")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int,
              help="The scheduler port workers and clients connect to.")
@click.option("--namespace", default=None, show_default=DEFAULT_NAMESPACE,
              help="Kubernetes form: the namespace of the route (the gateway's).")
@click.option("--entry-point", default=DEFAULT_ENTRY_POINT, show_default=True,
              help="Traefik entry point of its own for the scheduler port.")
@click.option("--service", default=None,
              help="Where the gateway's proxy is: a Kubernetes Service (default "
                   "traefik-dask-gateway) or, file form, its host.")
@click.option("--service-port", default=str(DEFAULT_PORT), show_default=True,
              help="The proxy's port (Kubernetes form: a number or a Service port name).")
@click.option("--dynamic-file", default=None, show_default=DEFAULT_DYNAMIC_FILE,
              help="File form: where the dynamic configuration will be written.")
@_bad_input_is_usage_error
def ingress(form: str, host: str | None, port: int, namespace: str | None, entry_point: str,
            service: str | None, service_port: str, dynamic_file: str | None) -> None:
    """Print the Traefik route: scheduler port, TLS passed through by SNI daskgateway-*."""
    from hybrid.admin.ingress import render_ingress

    click.echo(render_ingress(
        form, host=host, port=port, namespace=namespace, entry_point=entry_point,
        service=service, service_port=service_port, dynamic_file=dynamic_file,
    ), nl=False)


@admin.command(epilog="""
\b
Examples:
  hybrid admin ports
  hybrid admin ports --workers-per-node 8 --no-nanny --ingress-host gw.example.org --json
""")
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
    from hybrid.fields import is_host

    for flag, host in (("--scheduler-host", scheduler_host), ("--ingress-host", ingress_host)):
        if host is not None and not is_host(host):
            raise ConfigurationError(flag, host, "a host name or IP address, e.g. "
                                     "gateway.example.org or 10.0.0.7")

    plan = plan_ports(workers_per_node, nanny=nanny, scheduler_host=scheduler_host,
                      ingress_host=ingress_host, ingress_port=ingress_port,
                      gateway_http_port=gateway_http_port)
    click.echo(json.dumps(plan.as_dict(), indent=2) if as_json else format_plan(plan))


@admin.command("gateway-config", epilog="""
\b
Examples:
  hybrid admin gateway-config --backend local --password-file /etc/dask-gateway/password \\
      --proxy-address :8000 --tcp-proxy-address :8786 --cluster-max-cores 400 \\
      > /etc/dask-gateway/hybrid-gateway.yaml
  hybrid admin gateway-config --helm --backend kubernetes --authenticator jupyterhub \\
      --gateway-image ghcr.io/facility/dask-gateway-server-hybrid:1.0 > hybrid-values.yaml
""")
@click.option("--backend", type=click.Choice(["local", "unsafe-local", "kubernetes"]),
              default="local", show_default=True,
              help="The gateway's backend (the Helm chart is kubernetes).")
@click.option("--authenticator", type=click.Choice(["simple", "jupyterhub"]), default=None,
              help="How users log in (default: dask-gateway's, simple).")
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
              help="How schedulers load hybrid's plugin (default: module; inline on "
                   "Kubernetes).")
@click.option("--gateway-workers/--no-gateway-workers", default=None,
              help="Let the gateway start workers itself (default: no, batch workers only).")
@click.option("--worker-options", is_flag=True, default=None,
              help="Offer worker_cores and worker_memory (GiB) as cluster options.")
@click.option("--cluster-max-workers", default=None, type=int,
              help="At most this many workers per cluster, batch workers included.")
@click.option("--cluster-max-cores", default=None, type=float,
              help="At most this many cores per cluster, its scheduler's included.")
@click.option("--cluster-max-memory", default=None,
              help='At most this much memory per cluster, e.g. "800 GiB".')
@click.option("--idle-timeout", default=None, help='Stop idle clusters after, e.g. "30 minutes".')
@click.option("--max-lifetime", default=None, help="Stop every cluster after this long.")
@click.option("--client-timeout", default=None,
              help="Stop a cluster this long after its last client left.")
@click.option("--helm", is_flag=True,
              help="Print values for the dask-gateway Helm chart instead of the settings YAML.")
@click.option("--gateway-image", default=None,
              help="Helm: the gateway pod's image, with hybrid installed.")
@_bad_input_is_usage_error
def gateway_config(helm: bool, gateway_image: str | None, images: tuple[str, ...],
                   **options: Any) -> None:
    """Print the settings YAML of hybrid's gateway server (or Helm values).

    The server runs the configuration file packaged with hybrid, the same for every site
    (``dask-gateway-server -f PATH``; PATH printed in the header), which reads these settings
    from the file named by $HYBRID_GATEWAY_SETTINGS. Batch workers join gateway clusters and
    stay; the cluster limits apply to them. No secret is written: passwords and keys stay in
    0600 files, a JupyterHub token in the server's environment.
    """
    from hybrid.gateway_server import CONFIG_FILE
    from hybrid.gateway_server.helm import render_helm_values
    from hybrid.gateway_server.settings import SETTINGS_ENV, parse_settings, settings_yaml

    given = {name: value for name, value in options.items() if value is not None}
    if images:
        given["images"] = list(images)
    labels = {name: "--" + name.replace("_", "-") for name in given}
    settings = parse_settings(given, labels={**labels, "images": "--scheduler-image"})
    if helm:
        click.echo(render_helm_values(settings, gateway_image=gateway_image), nl=False)
        return
    if gateway_image is not None:
        raise ConfigurationError("--gateway-image", gateway_image, "nothing without --helm",
                                 "The gateway image is a Helm value; add --helm.")
    click.echo(settings_yaml(settings, (
        "hybrid gateway server settings (hybrid admin gateway-config).\n"
        f"Run: {SETTINGS_ENV}=THIS_FILE dask-gateway-server -f {CONFIG_FILE}")), nl=False)


@click.command(epilog="""
\b
Examples:
  hybrid doctor --system slurm
  hybrid doctor --scheduler tls://10.0.0.5:40123   # refuses clients without credentials?
  hybrid doctor --gateway-address https://gateway.example.org \\
      --proxy-address gateway.example.org:8786 --cluster-name NAME --cert dask.crt
  hybrid doctor --container-image /shared/images/worker.sif --workers-per-node 4 --json
""")
@click.option("--gateway-address", default=None,
              help="The gateway's HTTP address (default: dask config gateway.address).")
@click.option("--proxy-address", default=None,
              help="The scheduler proxy/ingress, host:port (default: gateway.proxy-address).")
@click.option("--cluster-name", default=None, help="A running cluster, for the TLS check.")
@click.option("--cert", type=click.Path(dir_okay=False), default=None,
              help="The cluster's certificate (PEM), also its CA.")
@click.option("--key", type=click.Path(dir_okay=False), default=None,
              help="The cluster's key (PEM): the TLS check then presents the certificate.")
@click.option("--system", type=click.Choice(sorted(SYSTEMS)), default=None,
              help="The batch system to check.")
@click.option("--scheduler", default=None,
              help="A running scheduler's address: check that it refuses clients without "
                   "its credentials.")
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
@click.option("--timeout", default=DEFAULT_TIMEOUT, show_default=True, type=Duration(),
              help='How long each network check waits: seconds, or e.g. "10s" (the batch '
                   f"system's check waits this long, and at least {BATCH_CHECK_TIMEOUT:g} s).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@_bad_input_is_usage_error
def doctor(gateway_address: str | None, proxy_address: str | None, cluster_name: str | None,
           cert: str | None, key: str | None, system: str | None, scheduler: str | None,
           container_image: str | None,
           pixi_project: str | None, conda_env: str | None, workers_per_node: int,
           warn_days: int, timeout: float, as_json: bool) -> None:
    """Check this node before it starts workers; exit 1 when a check fails."""
    import dask.config

    from hybrid.admin.doctor import (
        DoctorOptions,
        Status,
        format_results,
        parse_gateway_address,
        parse_proxy_address,
        run_doctor,
    )

    # an address from the dask config is named by its key, not by the option not given
    if gateway_address is None and dask.config.get("gateway.address", None):
        gateway_address = parse_gateway_address(dask.config.get("gateway.address"),
                                                "gateway.address (dask config)")
    if proxy_address is None and dask.config.get("gateway.proxy-address", None):
        proxy_address = str(dask.config.get("gateway.proxy-address"))
        parse_proxy_address(proxy_address, "gateway.proxy-address (dask config)")
    options = DoctorOptions(
        gateway_address=gateway_address, proxy_address=proxy_address,
        cluster_name=cluster_name, cert=cert, key=key, system=system, scheduler=scheduler,
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
