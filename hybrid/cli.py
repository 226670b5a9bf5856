"""The ``hybrid`` command line (also ``dask hybrid ...``)."""

from __future__ import annotations

import json

import click

from hybrid import __version__


@click.group(name="hybrid", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hybrid")
def cli() -> None:
    """hybrid: Dask work on heterogeneous facility resources."""


@cli.command()
@click.option("--gpu-workers", default=2, show_default=True, help="Local GPU-pool workers.")
@click.option("--cpu-workers", default=2, show_default=True, help="Local CPU-pool workers.")
@click.option("--simulations", default=12, show_default=True, help="GPU-style tasks to run.")
@click.option("--packings", default=12, show_default=True, help="CPU packing tasks to run.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
def demo(gpu_workers: int, cpu_workers: int, simulations: int, packings: int, as_json: bool,
         no_progress: bool) -> None:
    """Run simulations (GPU) and box packing (CPU) on local pools, annotated and not.

    Needs no cluster: the workers are local processes. On a machine without GPUs the
    GPU pool still advertises its GPU resource, so routing is shown all the same.
    """
    from hybrid.demo import format_report, run_demo

    if gpu_workers < 1 or cpu_workers < 1:
        raise click.BadParameter("the demo needs at least one worker in each pool",
                                 param_hint="--gpu-workers/--cpu-workers")
    if not as_json:
        click.echo(f"hybrid demo: {gpu_workers} GPU-pool and {cpu_workers} CPU-pool local workers, "
                   f"{simulations} simulations and {packings} packings per run")
    reports = run_demo(gpu_workers, cpu_workers, simulations, packings,
                       progress=not no_progress and not as_json)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in reports], indent=2))
    else:
        for report in reports:
            click.echo(format_report(report))


def _register_commands() -> None:
    """Attach the command groups that live beside the code they drive."""
    import importlib

    for module, names in (
        ("hybrid.batch.cli", ("render", "submit", "status", "cancel", "gc")),
        ("hybrid.gateway.cli", ("gateway",)),
        ("hybrid.admin.cli", ("admin", "doctor")),
    ):
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is None or not module.startswith(error.name):
                raise
            continue
        for name in names:
            command = getattr(loaded, name, None)
            if command is not None:
                cli.add_command(command)


_register_commands()


def main() -> None:
    """Entry point of the ``hybrid`` script."""
    cli(prog_name="hybrid")


if __name__ == "__main__":
    main()
