"""Every ``hybrid.`` setting the documentation names exists, is read, and changes what the
documentation says it changes (issue 23: the docs named ``hybrid.batch.job-max-vacate-time``
while the code read ``hybrid.batch.htcondor.job-max-vacate-time``).

A mention ``hybrid.a.b`` in README.md or docs/ is a setting unless it names Python (a module
or an attribute, e.g. ``hybrid.batch.htcondor``'s ``HTCondor``) or a file. Each documented
setting is set to another value (``dask.config.set``, as a user's YAML does), and what it
governs is observed through the code that uses it: the observation must change.
"""

from __future__ import annotations

import asyncio
import importlib
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MENTION = re.compile(r"hybrid\.[a-z][a-z0-9_-]*(?:\.[a-zA-Z0-9_<>-]+)*")
#: Mentions that are examples of bad input (the docs show them refused).
REFUSED_EXAMPLES = {"hybrid.batch.slurm.bogus-key", "hybrid.batch.slurm.memory"}


def _names_python(mention: str) -> bool:
    parts = mention.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attribute in parts[i:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return False
        return True
    return False


def documented_keys() -> dict[str, set[str]]:
    """Setting -> the documents that name it."""
    documents = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    found: dict[str, set[str]] = {}
    for document in documents:
        for mention in MENTION.findall(document.read_text()):
            mention = mention.rstrip(".-_")
            if "<" in mention or mention.endswith((".md", ".yaml", ".py")) or (
                    mention in REFUSED_EXAMPLES or _names_python(mention)):
                continue
            found.setdefault(mention, set()).add(str(document.relative_to(REPO)))
    return found


def packaged() -> tuple[set[str], set[str]]:
    """(leaf settings, sections) of the packaged hybrid.yaml, as ``hybrid.a.b``."""
    leaves: set[str] = set()
    sections: set[str] = set()

    def walk(prefix: str, tree: dict[str, Any]) -> None:
        for key, value in tree.items():
            name = f"{prefix}.{key}"
            if isinstance(value, dict) and value and name != "hybrid.worker-dask-config":
                sections.add(name)
                walk(name, value)
            else:
                leaves.add(name)

    walk("hybrid", yaml.safe_load((REPO / "hybrid" / "hybrid.yaml").read_text())["hybrid"])
    return leaves, sections


def test_the_documents_name_settings() -> None:  # the reader itself finds them
    found = documented_keys()
    assert "hybrid.batch.htcondor.job-max-vacate-time" in found
    assert "hybrid.batch.htcondor" not in found  # a module: Python, not a setting
    assert len(found) > 20


def test_every_setting_the_documents_name_exists() -> None:
    leaves, sections = packaged()
    unknown = {key: sorted(where) for key, where in documented_keys().items()
               if key not in leaves | sections}
    assert not unknown, f"settings the docs name that hybrid.yaml does not have: {unknown}"


# ---------------------------------------------------------------------- what each changes
def _spec(system: str = "local", **options: Any) -> Any:
    from hybrid.pools import PoolSpec

    return PoolSpec.build("p", system, **options)


def _system(name: str) -> Any:
    from hybrid.batch import get_system

    return get_system(name)


def _settings(system: str, field: str) -> Callable[[], Any]:
    return lambda: getattr(_system(system).settings, field)


def _spec_field(system: str, field: str) -> Callable[[], Any]:
    return lambda: getattr(_spec(system), field)


def _refused(call: Callable[[], Any]) -> Callable[[], Any]:
    def observe() -> Any:
        try:
            call()
        except Exception as error:
            return f"refused: {type(error).__name__}"
        return "accepted"
    return observe


def _max_failures() -> Any:
    """How many failures in a row make a pool give up."""
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    async def count() -> int:
        manager = PoolManager("keys", Connection("tcp://127.0.0.1:9"), scheduler=None)
        pool = manager.add(_spec())
        failures = 0
        while pool.failed is None:
            manager._failure(pool, "a test failure")
            failures += 1
        await asyncio.wait_for(pool.giving_up, 10)
        manager.shutdown_executor()
        return failures

    return asyncio.run(count())


def _held_jobs() -> Any:
    """What waiting does about a held job: report it, or leave it to be replaced."""
    from hybrid.batch import JobState, JobStatus
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    manager = PoolManager("keys", Connection("tcp://127.0.0.1:9"), scheduler=None)
    pool = manager.add(_spec())
    pool.track([JobStatus("1", JobState.held, "held for a test", "keys", "p")])
    try:
        manager._check_progress([pool], 1, 0)
        return "waits"
    except Exception as error:
        return type(error).__name__
    finally:
        manager.shutdown_executor()


def _stuck_after() -> Any:
    """After how long a queued job is reported stuck (read at each reconcile)."""
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    return PoolManager("keys", Connection("tcp://127.0.0.1:9"), scheduler=None).stuck_after()


def _poll_interval() -> Any:
    from hybrid.manager import PoolManager
    from hybrid.worker import Connection

    return PoolManager("keys", Connection("tcp://127.0.0.1:9"), scheduler=None).poll_interval()


def _pacing_intervals() -> tuple[float, float]:
    from hybrid.manager.pacing import intervals

    return intervals()


def _scheduler() -> Any:
    """Where HybridCluster's own scheduler listens, and whether SIGTERM and SIGHUP are
    handled."""
    from hybrid import HybridCluster

    # (as in a terminal: a run under nohup would pass SIGHUP ignored, which hybrid keeps)
    inherited = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with HybridCluster() as cluster:
            return (cluster.scheduler_address.rsplit(":", 1)[0],
                    signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
                    signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGHUP, inherited)


def _fallback_after() -> Any:
    """How long a preferred pool's job may pend before the next pool takes its demand."""
    from hybrid import HybridCluster

    with HybridCluster() as cluster:
        cluster.add_pool("first", "local")
        cluster.add_pool("then", "local")
        cluster.prefer(["first", "then"])
        return cluster._manager().preferences.fallback_of("first")


def _distributed_says() -> Any:
    """Whether distributed's INFO lines reach a script's terminal while a cluster runs (a
    fresh process: distributed sets up its console handler there, pytest does not)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update({"PYTHONPATH": str(REPO), "DASK_HYBRID__SCHEDULER__HOST": "127.0.0.1",
                "DASK_HYBRID__LOGGING__VERBOSE": str(dask.config.get("hybrid.logging.verbose"))})
    result = subprocess.run([sys.executable, "-c", "from hybrid import HybridCluster\n"
                             "HybridCluster().close()\n"], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return "INFO" in result.stderr


def _template_directory(tmp: Path) -> Callable[[], Any]:
    (tmp / "local.sh.j2").write_text("#!/bin/bash\n# the site's own local template\n")

    def observe() -> Any:
        from hybrid.batch import WorkerJob
        from hybrid.worker import Connection

        job = WorkerJob("keys", _spec(), Connection("tcp://127.0.0.1:9"))
        return "the site's own" in _system("local").job_script(job, tmp)
    return observe


def _job_environment() -> Any:
    from hybrid.gateway.options import job_environment

    return _refused(lambda: job_environment({}))()


def _gateway_pool() -> Any:
    from hybrid.gateway.options import pool_specs

    return sorted(pool_specs({}, {}, set()))


def _worker_proxy() -> Any:
    from hybrid.gateway.options import batch_worker_address

    return batch_worker_address("gateway://127.0.0.1:8786", None)


def _script(system: str, **options: Any) -> Callable[[], Any]:
    """The job script ``system`` renders for a pool with ``options``."""
    def observe() -> Any:
        from hybrid.batch import WorkerJob
        from hybrid.worker import Connection

        job = WorkerJob("keys", _spec(system, **options), Connection("tcp://127.0.0.1:9"))
        return _system(system).job_script(job, Path("/tmp/keys-staging"))
    return observe


def _own_security() -> Any:
    """Whether a cluster's own scheduler speaks TLS (with no security= given)."""
    from hybrid.security import own_security

    security = own_security(None, "HybridCluster.security")
    return None if security is None else security.require_encryption


def _dashboard_listen() -> Any:
    from hybrid.security import dashboard_listen

    return dashboard_listen(True)


def _credentials_root() -> Any:
    from hybrid.security import credentials_root

    return credentials_root()


def _feed_priority() -> Any:
    """The priority a GPU task gets when a graph is annotated (and the tasks it waits for)."""
    from hybrid.annotator import feed_priority

    return feed_priority()


#: Setting -> (another value, what it changes), for every setting the documents name.
def effects(tmp: Path) -> dict[str, tuple[Any, Callable[[], Any]]]:
    from hybrid import config
    from hybrid.annotator import ResourceAnnotator
    from hybrid.batch.jobs import tag_prefix
    from hybrid.routing import gpu_fraction

    image = tmp / "image.sif"
    image.write_text("")
    return {
        "hybrid.annotator.enabled": (False, lambda: ResourceAnnotator(None).enabled),
        "hybrid.annotator.gpu-fraction": (0.25, lambda: gpu_fraction()),
        "hybrid.batch.held-jobs": ("replace", _held_jobs),
        "hybrid.batch.lease": ("2h", _spec_field("local", "lease")),
        "hybrid.batch.max-failures": (5, _max_failures),
        "hybrid.batch.poll-interval": ("7s", _poll_interval),
        "hybrid.batch.poll-interval-max": ("3 minutes", lambda: _pacing_intervals()[1]),
        "hybrid.batch.stuck-timeout": ("1 minute", _stuck_after),
        "hybrid.batch.staging-directory": (str(tmp / "staged"), config.staging_root),
        "hybrid.batch.tag": ("KeysTag", tag_prefix),
        "hybrid.batch.htcondor.job-extra-directives": (
            ["+KeysTest = 1"], _spec_field("htcondor", "job_extra_directives")),
        "hybrid.batch.htcondor.job-max-vacate-time": (
            "7s", _settings("htcondor", "job_max_vacate_time")),
        "hybrid.batch.htcondor.walltime": ("01:23", _spec_field("htcondor", "walltime")),
        "hybrid.batch.htcondor.job-files": ("shared", _settings("htcondor", "job_files")),
        "hybrid.batch.htcondor.shared-directories": (
            [str(tmp)], _settings("htcondor", "shared_directories")),
        "hybrid.adaptive.fallback-after": ("17 minutes", _fallback_after),
        "hybrid.batch.kubernetes.volumes": (
            [{"kind": "empty_dir", "name": "scratch", "mount_path": "/scratch"}],
            _settings("kubernetes", "volumes")),
        "hybrid.batch.pbs.resource-spec": ("select=1:ncpus=3:mem=7gb", _script("pbs")),
        "hybrid.batch.sge.max-array-size": (7, _settings("sge", "max_array_size")),
        "hybrid.batch.sge.parallel-environment": ("mpi", _script("sge", cores=2)),
        "hybrid.batch.sge.project": ("keysproject", _script("sge")),
        "hybrid.batch.sge.resource-spec": ("arch=lx-amd64", _script("sge")),
        "hybrid.annotator.feed-priority": (5, _feed_priority),
        "hybrid.scheduler.credentials-directory": (str(tmp / "credentials"),
                                                   _credentials_root),
        "hybrid.scheduler.dashboard-address": ("127.0.0.1:8799", _dashboard_listen),
        "hybrid.scheduler.tls": (False, _own_security),
        "hybrid.batch.kubernetes.image": ("keys/image:1", _settings("kubernetes", "image")),
        "hybrid.batch.kubernetes.namespace": ("keys-ns", _settings("kubernetes", "namespace")),
        "hybrid.batch.slurm.job-script-prologue": (
            ["echo keys"], _spec_field("slurm", "job_script_prologue")),
        "hybrid.batch.slurm.max-array-size": (7, _settings("slurm", "max_array_size")),
        "hybrid.gateway.pool": ("slurm", _gateway_pool),
        "hybrid.gateway.required-env": (["HYBRID_T_KEYS_NOWHERE"], _job_environment),
        "hybrid.gateway.worker-proxy-address": ("tls://gateway.example.org:8786",
                                                _worker_proxy),
        "hybrid.logging.verbose": (True, _distributed_says),
        "hybrid.lifecycle.sigterm": (False, _scheduler),
        "hybrid.lifecycle.sighup": (False, _scheduler),
        "hybrid.scheduler.host": ("127.0.0.2", _scheduler),
        "hybrid.templates.directory": (str(tmp), _template_directory(tmp)),
        "hybrid.worker-dask-config": ({"distributed.worker.daemon": True},
                                      config.worker_dask_environment),
        "hybrid.worker.check-paths": (False, _refused(
            lambda: _spec(container_image="/no/such/image.sif"))),
        "hybrid.worker.contact-address": ("tcp://203.0.113.5:10000",
                                          _spec_field("local", "contact_address")),
        "hybrid.worker.container.binds": (["/data"], lambda: _spec(
            container_image=str(image)).container_binds),
        "hybrid.worker.container.image": (str(image), _spec_field("local", "container_image")),
        "hybrid.worker.container.runtime": ("singularity", lambda: _spec(
            container_image=str(image)).container_runtime),
        "hybrid.worker.death-timeout": ("7s", _spec_field("local", "death_timeout")),
        "hybrid.worker.extra-args": (["--lifetime", "1h"],
                                     _spec_field("local", "worker_extra_args")),
        "hybrid.worker.nanny": (True, _spec_field("local", "nanny")),
        "hybrid.worker.nanny-port-range": ("20071:20140", _spec_field("local", "nanny_port")),
        "hybrid.worker.port-range": ("20000:20070", _spec_field("local", "worker_port")),
        "hybrid.worker.python": ("/usr/bin/python3", _spec_field("local", "python")),
    }


def test_every_documented_setting_has_its_check(tmp_path) -> None:
    leaves, _ = packaged()
    documented = {key for key in documented_keys() if key in leaves}
    missing = documented - set(effects(tmp_path))
    assert not missing, f"settings the docs name with no check of what they change: {missing}"


@pytest.mark.parametrize("key", sorted(
    k for k in documented_keys() if k in packaged()[0]))
def test_a_documented_setting_changes_what_it_says(key, tmp_path, staging) -> None:
    value, observe = effects(tmp_path)[key]
    before = observe()
    with dask.config.set({key: value}):
        after = observe()
    assert after != before, f"{key}: {value!r} changed nothing ({before!r})"
