"""Submit-node commands: ``hybrid render``, ``submit``, ``status``, ``cancel``, ``gc``.

The pool options of ``render`` and ``submit`` are generated from the pool model
(:class:`~hybrid.pools.PoolSpec`): each option has the help text of its field, so a pool
option added there is an option here too.
"""

from __future__ import annotations

import functools
import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import dask.config

from hybrid.batch import SYSTEMS, JobStatus, Staging, WorkerJob, get_system
from hybrid.batch.orphans import (
    find_orphans,
    remove_orphaned_clusters,
    remove_orphaned_staging,
    scheduler_reachable,
)
from hybrid.cli import Duration
from hybrid.errors import HybridError
from hybrid.pools import POOL_OPTIONS, PoolSpec
from hybrid.worker import Connection, TLSFiles

if typing.TYPE_CHECKING:
    from hybrid.security import ClusterCredentials

SYSTEM_NAMES = sorted(SYSTEMS)


def fail_clearly(function: Callable) -> Callable:
    """Turn hybrid's own errors into a one-line message and exit code 1."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except HybridError as error:
            raise click.ClickException(str(error)) from None

    return wrapper


def _kind(field: str) -> tuple[Any, tuple[Any, ...]]:
    """A pool option's type, ``Optional`` taken off: ``(origin or type, arguments)``."""
    annotation = PoolSpec.model_fields[field].annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    return typing.get_origin(annotation) or annotation, typing.get_args(annotation)


def _option_name(field: str) -> tuple[str, bool]:
    """``--job-extra-directive`` for ``job_extra_directives`` (repeatable), and so on."""
    repeatable = _kind(field)[0] in (tuple, dict)
    name = field[:-1] if repeatable and field.endswith("s") else field
    return "--" + name.replace("_", "-"), repeatable


def _help(field: str) -> str:
    text = PoolSpec.model_fields[field].description or ""
    # what only Python can pass (4 * unit.GiB, a time quantity) is no option of a command
    text = re.sub(r" or ``[^`]*\bunit\.[^`]*``", "", text)
    text = re.sub(r",? or a time quantity", "", text)
    return text.replace("``", "").replace(":meth:", "")


def _pool_options(function: Callable) -> Callable:
    """Add one option per pool option (generated from :class:`PoolSpec`)."""
    options = []
    for field in POOL_OPTIONS:
        flag, repeatable = _option_name(field)
        kind, args = _kind(field)
        if kind is dict:
            literal = (" VALUE is read as Dask reads a DASK_ variable: True, None, ['a'], "
                       "{'k': 'v'}, else as text." if field == "system_options" else "")
            options.append(click.option(flag, field, multiple=True, metavar="NAME=VALUE",
                                        help=_help(field) + literal + " (repeatable)"))
        elif repeatable:
            options.append(click.option(flag, field, multiple=True,
                                        help=_help(field) + " (repeatable)"))
        elif kind is bool:
            negative = "--no-" + flag[2:]
            options.append(click.option(f"{flag}/{negative}", field, default=None,
                                        help=_help(field)))
        elif kind is typing.Literal:
            options.append(click.option(flag, field, type=click.Choice(args), default=None,
                                        help=_help(field)))
        else:
            whole = any(getattr(getattr(m, "func", None), "whole_number", False)
                        for m in PoolSpec.model_fields[field].metadata)
            options.append(click.option(flag, field, default=None, help=_help(field),
                                        type=int if whole else None))
    for option in reversed(options):
        function = option(function)
    return function


def _check_tls(tls: TLSFiles) -> None:
    """The CA, certificate and key as the workers' ``ssl`` reads them (the key matches)."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    checks = (("--tls-ca", "a PEM CA certificate", lambda: context.load_verify_locations(tls.ca)),
              ("--tls-cert/--tls-key", "a PEM certificate and its own key",
               lambda: context.load_cert_chain(tls.cert, tls.key)))
    for hint, accepted, load in checks:
        try:
            load()
        except (OSError, ssl.SSLError) as error:
            raise click.BadParameter(f"not {accepted}: {error}", param_hint=hint) from None


def _pairs(values: tuple[str, ...], flag: str, literal: bool = False) -> dict[str, Any]:
    """``NAME=VALUE`` items; ``literal``: each value read as Dask reads a ``DASK_``
    variable's (``True``, ``["a"]``, ``{"k": "v"}``, ``None``; else the text itself)."""
    out: dict[str, Any] = {}
    for pair in values:
        if "=" not in pair:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint=flag)
        name, value = pair.split("=", 1)
        out[name] = dask.config.interpret_value(value) if literal else value
    return out


def _job_options(function: Callable) -> Callable:
    function = _pool_options(function)
    for option in reversed([
        click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True,
                     help="Batch system the jobs go to."),
        click.option("--scheduler", "scheduler_address", default=None,
                     help="Address the workers dial (default: that of the --cluster of yours "
                          "that runs, with its TLS files, as stored for your other "
                          "processes; render: tls://scheduler.example:8786)."),
        click.option("--cluster", "cluster_name", default="hybrid-cli", show_default=True,
                     help="Cluster name: tags the jobs and names the workers."),
        click.option("--pool", "pool_name", default="default", show_default=True,
                     help="Pool name within the cluster."),
        click.option("--count", default=1, show_default=True, type=click.IntRange(1, 100_000),
                     help="Workers (jobs) in one submit transaction (one per "
                          "hybrid.batch.<system>.max-array-size where the request is larger)."),
        click.option("--tls-ca", default=None, type=click.Path(exists=True, dir_okay=False),
                     help="CA certificate file for a tls:// scheduler (default: the stored "
                          "files of the cluster of yours at that address)."),
        click.option("--tls-cert", default=None, type=click.Path(exists=True, dir_okay=False),
                     help="Worker certificate file."),
        click.option("--tls-key", default=None, type=click.Path(exists=True, dir_okay=False),
                     help="Worker key file (staged 0600 for the job)."),
        click.option("--sni", default=None,
                     help="TLS SNI, e.g. daskgateway-NAME (forces --no-nanny)."),
    ]):
        function = option(function)
    return function


def _stored(scheduler_address: str | None, cluster_name: str) -> ClusterCredentials | None:
    """The stored credentials of the cluster the workers join: by address, else by name."""
    from hybrid.security import find_credentials

    if scheduler_address is not None:
        return find_credentials(address=scheduler_address)
    return find_credentials(name=cluster_name)


def _build(system: str, scheduler_address: str | None, cluster_name: str, pool_name: str,
           tls_ca: str | None, tls_cert: str | None, tls_key: str | None, sni: str | None,
           for_submit: bool = False, **pool: Any) -> WorkerJob:
    from hybrid.fields import Name, validate_value

    given_tls = any((tls_ca, tls_cert, tls_key))
    stored = None if given_tls and scheduler_address else _stored(scheduler_address,
                                                                  cluster_name)
    if scheduler_address is None:
        if stored is not None and stored.worker_scheduler_address:
            scheduler_address = stored.worker_scheduler_address
        elif for_submit:
            raise click.BadParameter(
                f"give the address the workers dial, or --cluster NAME of a running cluster "
                f"of yours (none called {cluster_name!r} is stored)", param_hint="--scheduler")
        else:
            scheduler_address = "tls://scheduler.example:8786"
    tls = None
    if given_tls:
        if not all((tls_ca, tls_cert, tls_key)):
            raise click.BadParameter("give all three of --tls-ca, --tls-cert and --tls-key",
                                     param_hint="--tls-*")
        tls = TLSFiles(str(Path(tls_ca).resolve()), str(Path(tls_cert).resolve()),
                       str(Path(tls_key).resolve()))
        if for_submit:  # workers that could not connect would wait in the queue for nothing
            _check_tls(tls)
    elif scheduler_address.startswith("tls://") and stored is not None and stored.tls:
        tls = stored.files  # 0600 in the user's own directory; staged 0600 for the job
    elif scheduler_address.startswith("tls://"):
        if for_submit:
            raise click.BadParameter("a tls:// scheduler needs --tls-ca, --tls-cert and "
                                     "--tls-key", param_hint="--scheduler")
        tls = TLSFiles("ca.pem", "cert.pem", "key.pem")  # shown by name only
    options = {key: value for key, value in pool.items() if value not in (None, ())}
    if "env" in options:
        options["env"] = _pairs(options["env"], "--env")
    if "system_options" in options:
        options["system_options"] = _pairs(options["system_options"], "--system-option",
                                           literal=True)
    labels = {key: _option_name(key)[0] for key in POOL_OPTIONS}
    spec = PoolSpec.build(pool_name, system, prefix="--", labels={**labels, "name": "--pool"},
                          check_paths=for_submit, **options)
    cluster = validate_value(Name, cluster_name, "--cluster")
    connection = Connection(scheduler_address, tls, sni,
                            labels=("--scheduler", "--tls-ca", "--sni"))
    connection.check_pool(spec, "--pool")
    if for_submit and connection.scheduler_address.startswith("tcp://"):
        from hybrid.security import listen_host, warn_if_open

        address = connection.scheduler_address
        warn_if_open(f"the scheduler at {address}", address, listen_host(address),
                     "--scheduler tcp://...")
    return WorkerJob(cluster, spec, connection)


EXAMPLES_RENDER = """
\b
Examples:
  hybrid render --system slurm --cores 4 --memory "8 GiB" --walltime 02:00 \\
      --queue short --job-script-prologue "module load cuda"
  hybrid render --system htcondor --gpus 1 --container-image /img/worker.sif
  hybrid render --system kubernetes --system-option image=ghcr.io/dask/dask:latest
"""


@click.command(epilog=EXAMPLES_RENDER)
@_job_options
@fail_clearly
def render(count: int, **options: Any) -> None:
    """Print the job script (or submit description, or manifest) without submitting.

    Nothing is written: TLS files appear by the path the job reads them from.
    """
    job = _build(**options)
    system = get_system(job.spec.system, **job.spec.system_options)
    staging = Path(str(Staging.would_be(job)))
    click.echo(system.job_script(job, staging, count), nl=False)


@click.command(epilog="""
\b
Examples:
  hybrid submit --system slurm --cluster hybrid-1a2b3c4d --count 4 --cores 2
  hybrid submit --system htcondor --scheduler tls://gw.example.org:8786 \\
      --tls-ca ca.pem --tls-cert cert.pem --tls-key key.pem --sni daskgateway-NAME --json
""")
@_job_options
@click.option("--json", "as_json", is_flag=True, help="Print the job ids as JSON.")
@click.option("--wait", is_flag=True,
              help="Then wait until every job's workers joined the scheduler, showing "
                   "progress (jobs by state, with the batch system's reasons) on stderr; "
                   "Ctrl-C, a held or failed job, or --timeout removes the jobs this "
                   "command submitted.")
@click.option("--timeout", default=None, type=Duration(),
              help='With --wait: how long to wait at most, seconds or e.g. "10m".')
@fail_clearly
def submit(count: int, as_json: bool, wait: bool, timeout: float | None,
           **options: Any) -> None:
    """Submit COUNT workers in one transaction and print their job ids.

    The jobs carry the cluster's tag, a lease and the worker's --death-timeout, so
    `hybrid gc` removes them (and their staging directory) once their scheduler is gone.
    With --cluster NAME of a running cluster of yours and no --scheduler, the workers dial
    its address with its TLS files (stored for your processes, staged 0600 for the jobs);
    a plain tcp:// scheduler beyond loopback gets a warning: anyone reaching it runs code.
    """
    if timeout is not None and not wait:
        raise click.BadParameter("only with --wait", param_hint="--timeout")
    job = _build(for_submit=True, **options)
    system = get_system(job.spec.system, **job.spec.system_options)
    staging = Staging.create(job)
    try:
        ids = system.submit(job, staging.path, count)
    except BaseException:
        staging.remove()  # nothing was submitted: no TLS copy stays behind
        raise
    if as_json:
        click.echo(json.dumps({"system": job.spec.system, "cluster": job.cluster,
                               "pool": job.pool, "job_ids": ids,
                               "staging": str(staging.path)}))
    else:
        click.echo(f"submitted {len(ids)} worker job(s) to {job.spec.system}: {' '.join(ids)}")
    if wait:
        wait_or_remove(job, system, staging, ids, timeout)


def wait_or_remove(job: WorkerJob, system: Any, staging: Staging, ids: list[str],
                   timeout: float | None) -> None:
    """``submit --wait``: wait for the jobs' workers with the pool manager's progress; on
    Ctrl-C or a failed wait, remove exactly these jobs (and their staged files)."""
    import asyncio

    try:
        asyncio.run(_wait_for_jobs(job, system, staging, ids, timeout))
    except BaseException as error:
        try:
            system.remove(ids)
            staging.remove()
        except Exception as cleanup:
            click.echo(f"removing the jobs failed too ({cleanup}): `hybrid cancel --system "
                       f"{job.spec.system} {' '.join(ids)}` removes them", err=True)
        else:
            click.echo(f"removed the {len(ids)} job(s) this command submitted", err=True)
        if isinstance(error, KeyboardInterrupt):
            raise click.Abort() from None
        raise


async def _wait_for_jobs(job: WorkerJob, system: Any, staging: Staging, ids: list[str],
                         timeout: float | None) -> None:
    from distributed.core import rpc
    from distributed.security import Security

    from hybrid.batch import JobState
    from hybrid.manager import PoolManager

    connection = job.connection
    security = Security()
    if connection.tls is not None:
        security = Security(tls_ca_file=connection.tls.ca, tls_client_cert=connection.tls.cert,
                            tls_client_key=connection.tls.key, require_encryption=True)
    args = security.get_connection_args("client")
    if connection.sni:
        args["server_hostname"] = connection.sni
    scheduler = rpc(connection.scheduler_address, connection_args=args)
    manager = PoolManager(job.cluster, connection, scheduler)
    try:
        pool = manager.add(job.spec, system)
        pool.staging, pool.target, pool.submit_calls = staging, len(ids), 1
        pool.replaces_jobs = False  # (no reconciler: a lost job is not replaced)
        pool.track(JobStatus(j, JobState.pending, None, job.cluster, job.pool,
                             connection.scheduler_address) for j in ids)
        await manager.wait_for_workers(len(ids) * job.spec.processes, pool=job.pool,
                                       timeout=timeout)
    finally:
        await scheduler.close_rpc()
        manager.shutdown_executor()


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


@click.command(epilog="""
\b
Examples:
  hybrid status --system slurm
  hybrid status --system slurm --all    # with the jobs that ended
  hybrid status --system htcondor --cluster hybrid-1a2b3c4d --json
""")
@click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True)
@click.option("--cluster", "cluster_name", default=None, help="Only this cluster's jobs.")
@click.option("--all", "show_ended", is_flag=True,
              help="Also the jobs that ended (finished, failed, removed) and that the batch "
                   "system still reports for a while.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@fail_clearly
def status(system: str, cluster_name: str | None, show_ended: bool, as_json: bool) -> None:
    """List our jobs (those carrying hybrid's tag) in the queue, as the batch system
    reports them: pending, held, running, suspended or being removed; --all adds those
    that ended.

    With --cluster NAME of a cluster of yours that runs, a first line says what its
    scheduler reports (asked with the credentials stored for your processes); not with
    --json, whose output stays the list of jobs.
    """
    if cluster_name and not as_json:
        line = _scheduler_line(cluster_name)
        if line:
            click.echo(line)
    jobs = get_system(system).query(cluster=cluster_name)
    shown = jobs if show_ended else [job for job in jobs if job.state.active]
    if shown or as_json:
        _print_jobs(shown, as_json)
    else:
        click.echo("no jobs of ours" + ("" if show_ended else " in the queue"))
    if len(shown) < len(jobs) and not as_json:
        click.echo(f"({len(jobs) - len(shown)} ended job(s) of ours not shown: --all lists "
                   "them)")


def _scheduler_line(cluster_name: str) -> str | None:
    """What the scheduler of a stored cluster of this user says: its connected workers."""
    from hybrid.security import ask_scheduler, find_credentials

    stored = find_credentials(name=cluster_name)
    if stored is None or not stored.scheduler_address:
        return None
    address = stored.scheduler_address
    try:
        identity = ask_scheduler(address, stored.security() if stored.tls else None)
    except Exception as error:
        return f"cluster {cluster_name}: scheduler {address} does not answer ({error})"
    workers = sorted(str(w.get("name")) for w in identity.get("workers", {}).values())
    dashboard = f"; dashboard {stored.dashboard_link}" if stored.dashboard_link else ""
    return (f"cluster {cluster_name}: scheduler {address}, {len(workers)} worker(s) "
            f"connected{': ' + ' '.join(workers) if workers else ''}{dashboard}")


@click.command(epilog="""
\b
Examples:
  hybrid cancel --system slurm --cluster hybrid-1a2b3c4d
  hybrid cancel --system htcondor 1234.0 1234.1
""")
@click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True)
@click.option("--cluster", "cluster_name", default=None, help="Remove every job of this cluster.")
@click.argument("job_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@fail_clearly
def cancel(system: str, cluster_name: str | None, job_ids: tuple[str, ...], as_json: bool) -> None:
    """Remove exactly the JOB_IDS given, or every job of --cluster (found by listing them:
    a listing that fails, a busy controller's timeout, is asked again up to 3 times)."""
    if bool(cluster_name) == bool(job_ids):
        raise click.UsageError("give either JOB_IDS or --cluster NAME")
    batch_system = get_system(system)
    if cluster_name:
        removed = batch_system.remove_cluster(cluster_name)
        batch_system.cluster_closed(cluster_name)
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


@click.command(epilog="""
\b
Examples:
  hybrid gc --system htcondor --dry-run
  hybrid gc --system slurm --json
""")
@click.option("--system", type=click.Choice(SYSTEM_NAMES), required=True)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--timeout", default="3s", show_default=True, type=Duration(),
              help='How long to wait per scheduler: seconds, or e.g. "10s".')
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@fail_clearly
def gc(system: str, dry_run: bool, timeout: float, as_json: bool) -> None:
    """Remove our jobs whose cluster is gone (their scheduler no longer answers), the
    staging directories (with their TLS copies) that no job of a live cluster needs, what
    the system keeps for a gone cluster (a Kubernetes cluster's Secret), and the stored
    credentials of your clusters whose process is gone."""
    batch_system = get_system(system)
    orphans = find_orphans(batch_system, timeout)
    if orphans and not dry_run:
        batch_system.remove([j.job_id for j in orphans])
        for cluster in sorted({j.cluster for j in orphans if j.cluster}):
            batch_system.cluster_closed(cluster)
    directories = remove_orphaned_staging(batch_system, timeout, dry_run=dry_run,
                                          removed=[j.job_id for j in orphans])
    clusters = remove_orphaned_clusters(batch_system, timeout, dry_run=dry_run,
                                        removed=[j.job_id for j in orphans])
    from hybrid.security import stale_credentials

    credentials = stale_credentials(lambda address: scheduler_reachable(address, timeout),
                                    remove=not dry_run)
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "orphans": [j.as_dict() for j in orphans],
                               "staging": [str(p) for p in directories],
                               "clusters": clusters,
                               "credentials": [str(c.directory) for c in credentials]}))
    else:
        verb = "would remove" if dry_run else "removed"
        click.echo(f"{verb} {len(orphans)} orphaned job(s)"
                   + "".join(f"\n  {j.job_id} ({j.cluster}/{j.pool}, scheduler {j.scheduler})"
                             for j in orphans))
        if clusters:
            click.echo(f"{verb} what {len(clusters)} gone cluster(s) kept in {system}"
                       + "".join(f"\n  {name}" for name in clusters))
        click.echo(f"{verb} {len(directories)} staging director"
                   f"{'y' if len(directories) == 1 else 'ies'}"
                   + "".join(f"\n  {p}" for p in directories))
        if credentials:
            click.echo(f"{verb} the stored credentials of {len(credentials)} gone cluster(s)"
                       + "".join(f"\n  {c.directory}" for c in credentials))
