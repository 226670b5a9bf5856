"""``hybrid gateway ...``: the development gateway (``hybrid gateway dev``)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from hybrid.cli import Duration
from hybrid.errors import ConfigurationError


@click.group(epilog="""
\b
Examples:
  hybrid gateway dev
  hybrid gateway dev --state-dir ~/.cache/hybrid/dev-gateway --port 8000
""")
def gateway() -> None:
    """A real dask-gateway-server on your machine, for development and tests."""


@gateway.command(epilog="""
\b
Examples:
  hybrid gateway dev
  hybrid gateway dev --port 8000 --proxy-port 8786 --state-dir ~/.cache/hybrid/dev-gateway
  hybrid gateway dev --no-gateway-workers --idle-timeout "30 minutes"
""")
@click.option("--port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="HTTP port clients connect to (0: a free one).")
@click.option("--proxy-port", default=0, show_default=True, type=click.IntRange(0, 65535),
              help="TCP proxy port schedulers are reached through (0: a free one).")
@click.option("--password", default=None,
              help="Shared password (default: generated, or reused from --state-dir).")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False),
              help="Keep settings, password, database and log here (default: a temporary "
                   "directory removed on exit). An existing one must be yours and writable "
                   "by no one else.")
@click.option("--gateway-workers/--no-gateway-workers", default=True, show_default=True,
              help="Let the gateway start its own local workers (scale without a batch pool).")
@click.option("--heartbeat-period", default=None, type=int,
              help="Seconds between scheduler heartbeats (default: the gateway's, 15).")
@click.option("--heartbeat-timeout", default=None,
              help='Stop a cluster whose scheduler sent no heartbeat for this long, e.g. '
                   '"1 minute" (default: the gateway\'s, twice --heartbeat-period; give more '
                   "where a busy machine can hold a scheduler up).")
@click.option("--idle-timeout", default="0",
              help='Shut idle clusters down after this long, e.g. "30 minutes" (0: never).')
@click.option("--start-timeout", default=60.0, show_default=True, type=Duration(),
              help='How long to wait for the server\'s API to answer, e.g. "90s" (seconds).')
def dev(port: int, proxy_port: int, password: str | None, state_dir: str | None,
        gateway_workers: bool, heartbeat_period: int | None, heartbeat_timeout: str | None,
        idle_timeout: str, start_timeout: float) -> None:
    """Run a real dask-gateway-server on 127.0.0.1 until Ctrl-C or SIGTERM.

    Prints the addresses, the credentials, the Python to connect and how to get workers:
    the gateway's own local workers (``new_cluster().scale(2)``), or batch-style local
    workers that join through the TCP proxy (``new_cluster(pool="local")``). On exit the
    gateway stops its clusters and nothing it started is left running.
    """
    from hybrid.gateway_server.dev import DevGatewayError, start_dev_gateway

    stop_requested = threading.Event()
    received: list[int] = []

    def request_stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        stop_requested.set()

    settings: dict[str, Any] = {"gateway_workers": gateway_workers, "idle_timeout": idle_timeout}
    for name, value in (("heartbeat_period", heartbeat_period),
                        ("heartbeat_timeout", heartbeat_timeout)):
        if value is not None:
            settings[name] = value
    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            dev_gateway = start_dev_gateway(port=port, proxy_port=proxy_port, password=password,
                                            state_dir=state_dir, start_timeout=start_timeout,
                                            **settings)
        except ConfigurationError as error:
            raise _as_option_error(error) from None
        except DevGatewayError as error:
            raise click.ClickException(str(error)) from None
        with dev_gateway:
            click.echo(dev_gateway.banner(), nl=False)
            sys.stdout.flush()
            while not stop_requested.wait(0.5):
                if not dev_gateway.running:
                    raise click.ClickException(
                        f"dask-gateway-server exited by itself (code "
                        f"{dev_gateway.process.returncode}). Its log ends with:\n"
                        f"{dev_gateway.log_tail()}")
            name = signal.Signals(received[0]).name if received else "a signal"
            click.echo(f"Received {name}: stopping the gateway and its clusters...")
            sys.stdout.flush()
        click.echo("Gateway stopped.")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _as_option_error(error: ConfigurationError) -> click.UsageError:
    """The error of a bad value, naming the option that gave it where one did."""
    context = click.get_current_context()
    option = next((p for p in context.command.params if p.name == error.field), None)
    if option is None:
        return click.UsageError(str(error))
    message = f"{error.value!r} is not valid: expected {error.accepted}."
    return click.BadParameter(f"{message} {error.fix}" if error.fix else message,
                              ctx=context, param=option)
