"""Submit-node commands: ``hybrid render``, ``submit``, ``status``, ``cancel``, ``gc``."""

from __future__ import annotations

import functools
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click

from hybrid.annotator import worker_resources
from hybrid.batch import SYSTEMS, BatchPool, JobSpec, JobStatus, get_system
from hybrid.batch.base import BatchSystem, remove_staging_of
from hybrid.errors import HybridError
from hybrid.units import parse_memory, parse_walltime, to_bytes
from hybrid.worker import ContainerOptions, TLSFiles, WorkerOptions, default_worker_settings

SYSTEM_NAMES = sorted(SYSTEMS)


def _fail_clearly(function: Callable) -> Callable:
    """Turn hybrid's own errors into a one-line message and exit code 1."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except HybridError as error:
            raise click.ClickException(str(error)) from None

    return wrapper


def _job_options(function: Callable) -> Callable:
    options = [
        click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True,
                     help="Batch system the jobs go to."),
        click.option("--scheduler", "scheduler_address", default="tls://scheduler.example:8786",
                     show_default=True, help="Address the workers dial."),
        click.option("--cluster", "cluster_name", default="hybrid-cli", show_default=True,
                     help="Cluster name: tags the jobs and names the workers."),
        click.option("--pool", "pool_name", default="default", show_default=True,
                     help="Pool name within the cluster."),
        click.option("--count", default=1, show_default=True, type=click.IntRange(1),
                     help="Workers (jobs) in the one submit transaction."),
        click.option("--cores", default=1, show_default=True, type=click.IntRange(1),
                     help="Threads of each worker."),
        click.option("--memory", default=None, help='Memory per job, e.g. "4 GiB".'),
        click.option("--gpus", default=0, show_default=True, type=click.IntRange(0),
                     help="GPUs per job."),
        click.option("--walltime", default=None, help='Wall time "HH:MM".'),
        click.option("--queue", default=None, help="Queue / partition."),
        click.option("--account", default=None, help="Account / project."),
        click.option("--env", "env_pairs", multiple=True, metavar="NAME=VALUE",
                     help="Environment variable for the worker (repeatable)."),
        click.option("--job-extra-directive", "extra", multiple=True,
                     help="Extra batch directive, as dask-jobqueue's job_extra_directives."),
        click.option("--worker-extra-arg", "worker_args", multiple=True,
                     help="Extra `dask worker` argument (repeatable)."),
        click.option("--tls-ca", default=None, type=click.Path(dir_okay=False),
                     help="CA certificate file for a tls:// scheduler."),
        click.option("--tls-cert", default=None, type=click.Path(dir_okay=False),
                     help="Worker certificate file."),
        click.option("--tls-key", default=None, type=click.Path(dir_okay=False),
                     help="Worker key file (shipped 0600 with the job)."),
        click.option("--sni", default=None,
                     help="TLS SNI, e.g. daskgateway-NAME (forces --no-nanny)."),
        click.option("--container-image", default=None,
                     help="Apptainer image to run the worker in."),
        click.option("--python", default=None, help="Python on the execute side."),
        click.option("--image", default=None, help="Container image (kubernetes only)."),
        click.option("--namespace", default="default", show_default=True,
                     help="Namespace (kubernetes only)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _build(system_name: str, scheduler_address: str, cluster_name: str, pool_name: str,
           cores: int, memory: str | None, gpus: int, walltime: str | None, queue: str | None,
           account: str | None, env_pairs: tuple[str, ...], extra: tuple[str, ...],
           worker_args: tuple[str, ...], tls_ca: str | None, tls_cert: str | None,
           tls_key: str | None, sni: str | None, container_image: str | None,
           python: str | None, image: str | None, namespace: str,
           for_submit: bool = False, **_: Any) -> tuple[BatchSystem, JobSpec]:
    env = {}
    for pair in env_pairs:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        name, value = pair.split("=", 1)
        env[name] = value
    tls = None
    if any((tls_ca, tls_cert, tls_key)):
        if not all((tls_ca, tls_cert, tls_key)):
            raise click.BadParameter("give all three of --tls-ca, --tls-cert and --tls-key",
                                     param_hint="--tls-*")
        tls = TLSFiles(str(Path(tls_ca).resolve()), str(Path(tls_cert).resolve()),
                       str(Path(tls_key).resolve()))
    elif for_submit and scheduler_address.startswith("tls://"):
        raise click.BadParameter("a tls:// scheduler needs --tls-ca, --tls-cert and --tls-key",
                                 param_hint="--scheduler")
    settings = default_worker_settings()
    if container_image:
        settings["container"] = ContainerOptions(container_image)
    memory_bytes = to_bytes(parse_memory(memory, "--memory")) if memory else None
    worker = WorkerOptions(
        scheduler_address=scheduler_address, nthreads=cores, memory_limit=memory_bytes,
        resources=worker_resources(gpus, cores), tls=tls or (
            TLSFiles("ca.pem", "cert.pem", "key.pem") if scheduler_address.startswith("tls://")
            else None),
        scheduler_sni=sni, python=python,
        **{**settings, "extra_args": tuple(settings["extra_args"]) + worker_args},
    )
    spec = JobSpec(
        cluster=cluster_name, pool=pool_name, worker=worker, cores=cores, memory=memory_bytes,
        gpus=gpus, walltime=parse_walltime(walltime, "--walltime") if walltime else None,
        queue=queue, account=account, job_extra_directives=extra, env=env, tls_source=tls,
    )
    options: dict[str, Any] = {}
    if system_name == "kubernetes":
        options = {"image": image or "ghcr.io/dask/dask:latest", "namespace": namespace}
    return _system(system_name, **options), spec


def _system(name: str, **options: Any) -> BatchSystem:
    return get_system(name, **options)


@click.command()
@_job_options
@_fail_clearly
def render(system: str, count: int, **options: Any) -> None:
    """Print the job script (or submit description, or manifest) without submitting.

    Secrets are not printed: TLS files appear by the path the job reads them from.
    """
    batch_system, spec = _build(system, **options)
    pool = BatchPool(batch_system, spec)
    try:
        if system == "htcondor":
            click.echo("# --- submit description ---")
            click.echo(pool.job_script(count))
            click.echo("# --- worker.sh (the job's executable) ---")
            click.echo(batch_system.render_wrapper(spec, pool.staging))
        else:
            click.echo(pool.job_script(count))
    finally:
        pool.close_staging()


@click.command()
@_job_options
@click.option("--json", "as_json", is_flag=True, help="Print the job ids as JSON.")
@_fail_clearly
def submit(system: str, count: int, as_json: bool, **options: Any) -> None:
    """Submit COUNT workers in one transaction and print their job ids.

    The jobs carry the cluster's tag, a lease and the worker's --death-timeout, so
    `hybrid gc` removes them once their scheduler is gone.
    """
    batch_system, spec = _build(system, for_submit=True, **options)
    pool = BatchPool(batch_system, spec)
    ids = pool.submit(count)  # the staging directory stays: `hybrid gc` removes it later
    if as_json:
        click.echo(json.dumps({"system": system, "cluster": spec.cluster, "pool": spec.pool,
                               "job_ids": ids, "staging": str(pool.staging)}))
    else:
        click.echo(f"submitted {len(ids)} worker job(s) to {system}: {' '.join(ids)}")


def _print_jobs(jobs: list[JobStatus], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([j.as_dict() for j in jobs], indent=2))
        return
    if not jobs:
        click.echo("no jobs of ours")
        return
    for job in jobs:
        reason = f"  ({job.reason})" if job.reason else ""
        click.echo(f"{job.job_id:<16} {job.state.value:<9} {job.cluster or '-'}/{job.pool or '-'}"
                   f"{reason}")


@click.command()
@click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True)
@click.option("--cluster", "cluster_name", default=None, help="Only this cluster's jobs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_fail_clearly
def status(system: str, cluster_name: str | None, as_json: bool) -> None:
    """List our jobs (those carrying hybrid's tag) as the batch system reports them."""
    _print_jobs(_system(system).query(cluster=cluster_name), as_json)


@click.command()
@click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True)
@click.option("--cluster", "cluster_name", default=None, help="Remove every job of this cluster.")
@click.argument("job_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_fail_clearly
def cancel(system: str, cluster_name: str | None, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Remove exactly the JOB_IDS given, or every job of --cluster."""
    if bool(cluster_name) == bool(job_ids):
        raise click.UsageError("give either JOB_IDS or --cluster NAME")
    batch_system = _system(system)
    if cluster_name:
        removed = batch_system.remove_cluster(cluster_name)
    else:
        ours = {j.job_id for j in batch_system.query(job_ids=list(job_ids))}
        strangers = [j for j in job_ids if j not in ours]
        if strangers:
            raise click.ClickException(
                f"not jobs of ours (no hybrid tag) or unknown: {' '.join(strangers)}")
        batch_system.remove(job_ids)
        removed = list(job_ids)
    if as_json:
        click.echo(json.dumps({"removed": removed}))
    else:
        click.echo(f"removed {len(removed)} job(s)" + (f": {' '.join(removed)}" if removed else ""))


def scheduler_reachable(address: str | None, timeout: float = 3.0) -> bool:
    """True when something accepts TCP connections at the scheduler address."""
    if not address:
        return True  # unknown: never remove what we cannot judge
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    if not parsed.hostname or not parsed.port:
        return True
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout):
            return True
    except OSError:
        return False


def find_orphans(batch_system: BatchSystem, timeout: float = 3.0) -> list[JobStatus]:
    """Active jobs of ours whose scheduler no longer answers."""
    jobs = [j for j in batch_system.query() if j.state.active]
    verdict: dict[str | None, bool] = {}
    orphans = []
    for job in jobs:
        if job.scheduler not in verdict:
            verdict[job.scheduler] = scheduler_reachable(job.scheduler, timeout)
        if not verdict[job.scheduler]:
            orphans.append(job)
    return orphans


@click.command()
@click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--timeout", default=3.0, show_default=True, help="Seconds to wait per scheduler.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_fail_clearly
def gc(system: str, dry_run: bool, timeout: float, as_json: bool) -> None:
    """Remove our jobs whose cluster is gone (their scheduler no longer answers)."""
    batch_system = _system(system)
    orphans = find_orphans(batch_system, timeout)
    if orphans and not dry_run:
        batch_system.remove([j.job_id for j in orphans])
        for cluster in {j.cluster for j in orphans if j.cluster}:
            remove_staging_of(cluster)
            closed = getattr(batch_system, "cluster_closed", None)
            if closed is not None:
                closed(cluster)  # e.g. the cluster's Kubernetes TLS secret
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "orphans": [j.as_dict() for j in orphans]}))
    else:
        verb = "would remove" if dry_run else "removed"
        click.echo(f"{verb} {len(orphans)} orphaned job(s)"
                   + "".join(f"\n  {j.job_id} ({j.cluster}/{j.pool}, scheduler {j.scheduler})"
                             for j in orphans))
