"""``hybrid gateway ...``: the development gateway (``hybrid gateway dev``)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click

from hybrid.errors import ConfigurationError


@click.group()
def gateway() -> None:
    """dask-gateway servers for hybrid's scheduler-only clusters."""


@gateway.command()
@click.option("--port", default=0, show_default=True, type=int,
              help="HTTP port clients connect to (0: a free one).")
@click.option("--proxy-port", default=0, show_default=True, type=int,
              help="TCP proxy port schedulers are reached through (0: a free one).")
@click.option("--password", default=None,
              help="Shared password (default: generated, or reused from --state-dir).")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False),
              help="Keep config, password, database and log here (default: a temporary "
                   "directory removed on exit).")
@click.option("--heartbeat-period", default=None, type=int,
              help="Seconds between scheduler heartbeats (default: the gateway's, 15).")
@click.option("--idle-timeout", default="0",
              help='Shut idle clusters down after this long, e.g. "30 min" (0: never).')
@click.option("--start-timeout", default=60.0, show_default=True, type=float,
              help="Seconds to wait for the server's API to answer.")
def dev(port: int, proxy_port: int, password: str | None, state_dir: str | None,
        heartbeat_period: int | None, idle_timeout: str, start_timeout: float) -> None:
    """Run a real dask-gateway-server on 127.0.0.1 until Ctrl-C or SIGTERM.

    Clusters are scheduler-only, with hybrid's preload; workers from batch jobs join them
    through the TCP proxy. Prints the addresses, the credentials and the Python to connect.
    On exit the gateway stops its clusters and nothing it started is left running.
    """
    from hybrid.gateway.dev import DevGatewayError, start_dev_gateway

    stop_requested = threading.Event()
    received: list[int] = []

    def request_stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            dev_gateway = start_dev_gateway(
                port=port, proxy_port=proxy_port, password=password, state_dir=state_dir,
                heartbeat_period=heartbeat_period, idle_timeout=idle_timeout,
                start_timeout=start_timeout,
            )
        except ConfigurationError as error:
            raise click.UsageError(str(error)) from None
        except DevGatewayError as error:
            raise click.ClickException(str(error)) from None
        with dev_gateway:
            click.echo(dev_gateway.banner(), nl=False)
            sys.stdout.flush()
            while not stop_requested.wait(0.5):
                if not dev_gateway.running:
                    tail = dev_gateway.log_tail()
                    raise click.ClickException(
                        f"dask-gateway-server exited by itself (code "
                        f"{dev_gateway.process.returncode}). Its log ends with:\n{tail}")
            name = signal.Signals(received[0]).name if received else "a signal"
            click.echo(f"Received {name}: stopping the gateway and its clusters...")
            sys.stdout.flush()
        click.echo("Gateway stopped.")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
