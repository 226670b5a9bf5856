"""The ``hybrid`` command line (also ``dask hybrid ...``).

Subcommands live beside the code they drive and are imported only when run (or listed by
``--help``), so ``dask`` loading this plugin costs next to nothing.
"""

from __future__ import annotations

import importlib
import json
import logging

import click

#: Subcommand -> "module:attribute".
COMMANDS = {
    "demo": "hybrid.cli:demo",
    "render": "hybrid.batch.cli:render",
    "submit": "hybrid.batch.cli:submit",
    "status": "hybrid.batch.cli:status",
    "cancel": "hybrid.batch.cli:cancel",
    "gc": "hybrid.batch.cli:gc",
    "gateway": "hybrid.gateway_server.cli:gateway",
    "admin": "hybrid.admin.cli:admin",
    "doctor": "hybrid.admin.cli:doctor",
}


class Duration(click.ParamType):
    """A duration option: seconds, or "90s", "5 minutes" (the library's own rules)."""

    name = "duration"

    def convert(self, value, param, ctx) -> float:
        from hybrid.errors import ConfigurationError
        from hybrid.fields import Interval, validate_value

        if isinstance(value, float):
            return value
        try:
            return validate_value(Interval, value, param.name if param else "duration")
        except ConfigurationError as error:
            self.fail(f"{value!r} is not {error.accepted}", param, ctx)


class LazyGroup(click.Group):
    """A group whose subcommands are imported when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attribute)


def _version() -> str:
    from hybrid import __version__

    return __version__


@click.group(name="hybrid", cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"]},
             epilog="""
\b
Examples:
  hybrid demo                      # GPU and CPU pools of local workers, no cluster needed
  hybrid render --system slurm --cores 4 --memory "8 GiB"
  hybrid gateway dev               # a real dask-gateway server on this machine
  hybrid doctor --system htcondor

Run `hybrid COMMAND --help` for a command's options and examples.""")
@click.version_option(package_name="hybrid", prog_name="hybrid")
@click.option("-v", "--verbose", is_flag=True,
              help="Show hybrid's and distributed's INFO messages (default: warnings only).")
def cli(verbose: bool) -> None:
    """hybrid: Dask work on heterogeneous facility resources."""
    import dask.config

    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # distributed sets its loggers' levels from this setting when it is imported (later)
    dask.config.set({"logging.distributed": logging.getLevelName(level).lower(),
                     "hybrid.logging.verbose": verbose})
    for name in ("hybrid", "distributed"):
        logging.getLogger(name).setLevel(level)


@click.command(epilog="""
\b
Examples:
  hybrid demo
  hybrid demo --gpu-workers 1 --cpu-workers 3 --simulations 20 --json
  hybrid demo --workload md          # OpenMM + packmol: pip install 'hybrid[md]'
  hybrid demo --workload md --simulations 8 --packings 4 --waters 500 --steps 5000
""")
@click.option("--workload", type=click.Choice(["toy", "md"]), default="toy",
              show_default=True,
              help="toy: pure-Python stand-ins. md: packmol packs water boxes (CPU tasks) and "
                   "OpenMM simulates them (GPU tasks; CUDA where a GPU is found, else CPU); "
                   "needs the md extra.")
@click.option("--gpu-workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Local GPU-pool workers.")
@click.option("--cpu-workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Local CPU-pool workers.")
@click.option("--simulations", type=click.IntRange(0, 10_000),
              help="GPU(-style) tasks to run.  [default: 12; md: 4]")
@click.option("--packings", type=click.IntRange(0, 10_000),
              help="CPU packing tasks to run (md: the boxes the simulations use, at least 1).  "
                   "[default: 12; md: 4]")
@click.option("--waters", default=216, show_default=True, type=click.IntRange(10, 100_000),
              help="md: water molecules per box.")
@click.option("--steps", default=1000, show_default=True, type=click.IntRange(1, 10_000_000),
              help="md: 2 fs steps per simulation.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
def demo(workload: str, gpu_workers: int, cpu_workers: int, simulations: int | None,
         packings: int | None, waters: int, steps: int, as_json: bool,
         no_progress: bool) -> None:
    """Run simulations (GPU) and box packing (CPU) on local pools, annotated and not.

    Needs no cluster: the workers are local processes. On a machine without GPUs the
    GPU pool still advertises its GPU resource, so routing is shown all the same.
    """
    from hybrid.demo import format_report, md_missing, run_demo, summary

    default = 4 if workload == "md" else 12
    simulations = default if simulations is None else simulations
    packings = default if packings is None else packings
    if workload == "md":
        if missing := md_missing():
            raise click.UsageError(f"--workload md: {missing}")
        if simulations and not packings:
            raise click.BadParameter("the md simulations need at least one packed box",
                                     param_hint="--packings")
    if not as_json:
        click.echo(f"hybrid demo: {gpu_workers} GPU-pool and {cpu_workers} CPU-pool local "
                   f"workers, {simulations} simulations and {packings} packings per run"
                   + (f" (md: {waters} waters per box, {steps} steps)" if workload == "md"
                      else ""))
    reports = run_demo(gpu_workers, cpu_workers, simulations, packings,
                       progress=not no_progress and not as_json, workload=workload,
                       sizes={"waters": waters, "steps": steps})
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in reports], indent=2))
    else:
        for report in reports:
            click.echo(format_report(report))
        click.echo(summary(reports))


def main() -> None:
    """Entry point of the ``hybrid`` script."""
    cli(prog_name="hybrid")


if __name__ == "__main__":
    main()
