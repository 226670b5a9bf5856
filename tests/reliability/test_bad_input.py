"""Bad input (issue 13, part 1): one clear error naming the field, nothing submitted, nothing
left behind.

Every value a user or a site gives goes in through the public API, the command line,
``hybrid.yaml`` or a ``DASK_HYBRID__...`` variable. Each row of :data:`BAD_INPUTS` is one bad
value: where it enters, the value, and the field the error must name. It must be answered by
ONE :class:`~hybrid.errors.ConfigurationError` (no chained traceback from inside a library),
or on the command line by one ``Error:`` line (exit status 1 or 2, no traceback). After each
row the REAL Slurm and HTCondor are asked for jobs of this module's clusters (none), the
staging directory must be empty (no job file, no TLS copy) and the dev gateway must list no
cluster.

Rows whose ``open`` says what is still wrong (the module and the fault) are measured cases
not fixed yet: they run as strict xfails, so the day one is fixed its row fails until it
moves to the fixed ones. :data:`ACCEPTED`
lists values that are fine as they are and checks how they land; :data:`REFUSED_BY_SYSTEM`
lists values only the batch system can judge: its own words, and nothing left behind.
docs/reliability.md shows these tables; test_reliability_page.py checks it matches them.

YAML rows are read by ``dask.config.collect`` from a real file, ``DASK_HYBRID__`` rows by
``dask.config.collect_env`` (what dask runs at import), both merged as ``dask.config.refresh``
merges them; test_fresh_processes_read_them_the_same proves the same in fresh processes.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import pytest
import yaml
from click.testing import CliRunner, Result
from distributed import Security

from hybrid import HybridCluster
from hybrid.backends.batch import DaskHTCondorBackend, DaskSLURMBackend
from hybrid.backends.kubernetes import DaskKubernetesBackend
from hybrid.backends.local import DaskLocalCluster
from hybrid.batch.base import write_private
from hybrid.cli import cli as hybrid_cli
from hybrid.errors import BatchError, ConfigurationError
from hybrid.resources import (
    ComputeResources,
    PodResources,
    QueueWorkerResources,
    resources_from_json,
)
from hybrid.units import unit
from tests.gateway.helpers import TEST_GATEWAY_SETTINGS
from tests.reliability._real import configured, real_jobs

pytestmark = pytest.mark.timeout(120)

#: Every cluster this module names starts with this: the real queues are searched for it.
PREFIX = f"relbad{uuid.uuid4().hex[:6]}"
#: The cluster the API rows add their pools to (a TLS cluster: staging would hold keys).
CLUSTER = PREFIX
#: The cluster of the command-line rows.
CLI_CLUSTER = f"{PREFIX}-cli"
#: A scheduler address nothing listens on (rows must fail before dialling it).
NOWHERE = "tcp://127.0.0.1:9"


# --------------------------------------------------------------------------- the rows
@dataclass(frozen=True)
class Case:
    """One bad input."""

    id: str
    #: Where it enters: API, CLI, hybrid.yaml or environment.
    where: str
    #: The value as a user writes it (shown in docs/reliability.md).
    value: str
    #: What the error must name: the argument, option or configuration key.
    field: str
    call: Callable[[Bench], Any] = field(repr=False)
    #: One of the cases issue 13 measured.
    issue: bool = False
    #: Not fixed yet: what is wrong (the row is a strict xfail).
    open: str | None = None


def pool(id: str, value: str, suffix: str, system: str = "slurm", resources: Any = None,
         *, issue: bool = False, open: str | None = None, **options: Any) -> Case:
    """``cluster.add_pool(id, system, resources, **options)``; the error names
    ``add_pool(id).<suffix>``."""
    return Case(id, "API", value, f"add_pool({id!r}).{suffix}",
                lambda b: b.add(system, resources, **options), issue, open)


def directive(id: str, text: str, system: str = "slurm", *, issue: bool = False) -> Case:
    """A pool whose one job-extra directive ``text`` is refused, naming it."""
    return pool(id, f"job_extra_directives=[{text!r}]", "job_extra_directives[0]", system,
                job_extra_directives=[text], issue=issue)


def api(id: str, value: str, field_name: str, call: Callable[[Bench], Any], *,
        issue: bool = False, open: str | None = None) -> Case:
    """Any other call of the public API."""
    return Case(id, "API", value, field_name, call, issue, open)


def cli(id: str, args: list[str], field_name: str, *, issue: bool = False,
        open: str | None = None) -> Case:
    """``hybrid ARGS`` (``render``/``submit`` get this module's ``--cluster`` first)."""
    shown = " ".join(a if a.isprintable() and " " not in a and a else repr(a) for a in args)
    return Case(id, "CLI", f"hybrid {shown}", field_name, lambda b: b.cli(*args), issue, open)


def in_yaml(id: str, key: str, text: str, field_name: str, then: Callable[[Bench], Any], *,
            issue: bool = False, open: str | None = None) -> Case:
    """A ``hybrid.yaml`` file setting the dotted ``key`` to the YAML ``text``, then ``then``."""
    return Case(id, "hybrid.yaml", f"{key}: {text}", field_name,
                lambda b: b.with_yaml(key, text, then), issue, open)


def in_env(id: str, name: str, text: str, field_name: str, then: Callable[[Bench], Any], *,
           issue: bool = False, open: str | None = None) -> Case:
    """The variable ``name=text`` in the environment, then ``then``."""
    return Case(id, "environment", f"{name}={text}", field_name,
                lambda b: b.with_env({name: text}, then), issue, open)


# what a configuration row does once the configuration is in place
def add_slurm(b: Bench) -> Any:
    return b.add("slurm")


def add_htcondor(b: Bench) -> Any:
    return b.add("htcondor")


def add_kubernetes(b: Bench) -> Any:
    return b.add("kubernetes")


def start_cluster(b: Bench) -> Any:
    return b.start_cluster()


def render_slurm(b: Bench) -> Result:
    return b.cli("render", "--system", "slurm")


def status_htcondor(b: Bench) -> Result:
    return b.cli("status", "--system", "htcondor")


def new_batch_cluster(b: Bench) -> Any:
    return b.new_cluster(pool="local")


def new_plain_cluster(b: Bench) -> Any:
    return b.new_cluster()


NAN = float("nan")

BAD_INPUTS: list[Case] = [
    # ---- sizes: NaN, infinity, division by zero, absurd (issue 13)
    pool("memory-nan", "memory='nan GiB'", "memory", memory="nan GiB", issue=True),
    pool("memory-inf", "memory='inf GiB'", "memory", memory="inf GiB", issue=True),
    pool("memory-div0", "memory='1/0 GiB'", "memory", memory="1/0 GiB", issue=True),
    pool("memory-1e30tb", "memory='1e30 TB'", "memory", memory="1e30 TB", issue=True),
    pool("memory-zero", "memory='0 GiB'", "memory", memory="0 GiB"),
    pool("memory-bare", "memory=4", "memory", memory=4),
    pool("pod-memory-zero", "memory='0 GiB' (kubernetes)", "memory", "kubernetes",
         memory="0 GiB", issue=True),
    api("podresources-memory-zero", "PodResources(memory_limit='0 GiB')",
        "PodResources.memory_limit", lambda b: PodResources(memory_limit="0 GiB"),
        issue=True),
    pool("walltime-nan", "walltime=nan * unit.hour", "walltime", walltime=NAN * unit.hour,
         issue=True),
    pool("walltime-text-nan", "walltime='nan'", "walltime", walltime="nan"),
    pool("walltime-25-99", "walltime='25:99'", "walltime", walltime="25:99"),
    api("qwr-walltime-nan", "QueueWorkerResources(wallclock_time_limit=nan * unit.hour)",
        "QueueWorkerResources.wallclock_time_limit",
        lambda b: QueueWorkerResources(wallclock_time_limit=NAN * unit.hour), issue=True),
    api("qwr-memory-inf", "QueueWorkerResources(per_thread_memory_limit='inf GiB')",
        "QueueWorkerResources.per_thread_memory_limit",
        lambda b: QueueWorkerResources(per_thread_memory_limit="inf GiB")),
    api("qwr-job-memory-over-1pib",
        "QueueWorkerResources(number_of_threads=1000, per_thread_memory_limit='1 PiB')",
        "QueueWorkerResources.per_thread_memory_limit",
        lambda b: QueueWorkerResources(number_of_threads=1000, per_thread_memory_limit="1 PiB")),
    pool("cores-1e9", "cores=10**9", "cores", cores=10**9, issue=True),
    api("threads-1e9", "ComputeResources(number_of_threads=10**9)",
        "ComputeResources.number_of_threads",
        lambda b: ComputeResources(number_of_threads=10**9), issue=True),
    api("gpus-1e6", "ComputeResources(number_of_gpus=10**6)", "ComputeResources.number_of_gpus",
        lambda b: ComputeResources(number_of_gpus=10**6)),
    api("threads-fraction", "ComputeResources(number_of_threads=1.5)",
        "ComputeResources.number_of_threads", lambda b: ComputeResources(number_of_threads=1.5)),
    api("pod-workers-1e9", "PodResources(maximum_number_of_workers=10**9)",
        "PodResources.maximum_number_of_workers",
        lambda b: PodResources(maximum_number_of_workers=10**9)),
    pool("gpus-65", "gpus=65", "gpus", gpus=65),
    pool("processes-over-cores", "cores=2, processes=4", "processes", cores=2, processes=4),
    pool("processes-without-nanny", "cores=2, processes=2, nanny=False", "processes", cores=2,
         processes=2, nanny=False),
    pool("resources-and-cores", "ComputeResources(number_of_threads=2), cores=4", "cores",
         resources=ComputeResources(number_of_threads=2), cores=4),
    pool("resources-text", "resources='4 cores'", "resources", resources="4 cores"),
    cli("cli-count-1e7", ["submit", "--system", "slurm", "--scheduler", NOWHERE, "--count",
                          "10000000"], "--count", issue=True),
    # ---- durations
    pool("death-timeout-zero", "death_timeout=0", "death_timeout", death_timeout=0),
    pool("lease-forever", "lease='forever'", "lease", lease="forever"),
    pool("lease-two-years", "lease='730 days'", "lease", lease="730 days"),
    pool("vacate-negative", "system_options={'job_max_vacate_time': -5} (htcondor)",
         "system_options.job_max_vacate_time", "htcondor",
         system_options={"job_max_vacate_time": -5}, issue=True),
    api("adapt-interval-abc", "adapt(interval='abc')", "adapt.interval",
        lambda b: b.cluster.adapt(b.add("local").name, interval="abc"), issue=True),
    api("adapt-minimum-over-maximum", "adapt(minimum=3, maximum=1)", "adapt.minimum",
        lambda b: b.cluster.adapt(b.add("local").name, minimum=3, maximum=1)),
    api("adapt-wait-count-zero", "adapt(wait_count=0)", "adapt.wait_count",
        lambda b: b.cluster.adapt(b.add("local").name, wait_count=0)),
    api("adapt-unknown", "adapt(bogus=1)", "adapt",
        lambda b: b.cluster.adapt(b.add("local").name, bogus=1)),
    api("wait-timeout-abc", "wait_for_workers(1, timeout='abc')", "wait_for_workers.timeout",
        lambda b: b.cluster.wait_for_workers(1, timeout="abc", pool=b.add("local").name)),
    api("wait-zero", "wait_for_workers(0)", "wait_for_workers.n_workers",
        lambda b: b.cluster.wait_for_workers(0)),
    api("scale-negative", "scale(-1)", "scale.n",
        lambda b: b.cluster.scale(-1, pool=b.add("local").name)),
    api("scale-text", "scale('3')", "scale.n",
        lambda b: b.cluster.scale("3", pool=b.add("local").name)),
    api("scale-unknown-pool", "scale(1, pool='missing')", "pool",
        lambda b: b.cluster.scale(1, pool="missing")),
    # ---- lists and mappings given as something else (issue 13)
    pool("env-list", "env=['X=1']", "env", env=["X=1"], issue=True),
    pool("env-string", "env='X=1'", "env", env="X=1", issue=True),
    pool("env-number", "env={'A': 1}", "env", env={"A": 1}),
    pool("env-bad-name", "env={'A B': 'x'}", "env", env={"A B": "x"}),
    pool("prologue-string", "job_script_prologue='module load gcc'", "job_script_prologue",
         job_script_prologue="module load gcc", issue=True),
    pool("directives-string", "job_extra_directives='--exclusive'", "job_extra_directives",
         job_extra_directives="--exclusive"),
    pool("extra-args-string", "worker_extra_args='--lifetime 6h'", "worker_extra_args",
         worker_extra_args="--lifetime 6h"),
    pool("binds-with-comma", "container_binds=['/a,/b']", "container_binds",
         container_image="/bin/sh", container_binds=["/a,/b"]),
    pool("system-options-list", "system_options=['x']", "system_options",
         system_options=["x"]),
    api("json-list", "resources_from_json('[1, 2]')", "resources_from_json(text)",
        lambda b: resources_from_json("[1, 2]"), issue=True),
    api("json-broken", "resources_from_json('{')", "resources_from_json(text)",
        lambda b: resources_from_json("{")),
    api("json-none", "resources_from_json(None)", "resources_from_json(text)",
        lambda b: resources_from_json(None)),
    api("json-no-type", "resources_from_json('{}')", "type", lambda b: resources_from_json("{}")),
    api("from-json-list", "ComputeResources.from_json('[1]')",
        "ComputeResources.from_json(text)", lambda b: ComputeResources.from_json("[1]")),
    # ---- directives that override hybrid's own (issue 13)
    directive("slurm-array", "--array=1-1000", issue=True),
    directive("slurm-comment", "--comment=mine", issue=True),
    directive("slurm-job-name", "-J name"),
    directive("slurm-output", "--output=/tmp/x"),
    directive("condor-queue", "queue 1000", "htcondor", issue=True),
    directive("condor-tag", 'My.HybridCluster = "x"', "htcondor"),
    directive("condor-executable", "executable = /bin/sh", "htcondor"),
    directive("lsf-array", "-J name[1-1000]", "lsf", issue=True),
    directive("lsf-description", "-Jd mine", "lsf"),
    directive("pbs-array", "-J 1-1000", "pbs", issue=True),
    directive("pbs-tag", "-v HYBRID_TAG=x", "pbs"),
    pool("condor-trailing-backslash", "job_extra_directives=['foo = bar \\\\'] (htcondor)",
         "job_extra_directives", "htcondor", job_extra_directives=["foo = bar \\"]),
    pool("directive-two-lines", "job_extra_directives=['--exclusive\\n--array=1-9']",
         "job_extra_directives", job_extra_directives=["--exclusive\n--array=1-9"]),
    pool("directive-u2028", "job_extra_directives=['--exclusive\\u2028x']",
         "job_extra_directives", job_extra_directives=["--exclusive\u2028x"]),
    directive("slurm-array-attached", "-a3"),
    directive("slurm-array-second", "--ntasks=1 --array=1-3"),
    directive("slurm-array-abbreviated", "--arr=1-3"),
    directive("slurm-comment-abbreviated", "--comm=mine"),
    directive("slurm-name-attached", "-Jname"),
    # what a pool option sets (Slurm takes the later line: a report of workers killed at a
    # walltime their lifetime did not know, and of a submitter's environment exported)
    directive("slurm-time", "--time=5"),
    directive("slurm-cores-grouped", "--ntasks=1 -c4"),
    directive("slurm-mem-per-cpu", "--mem-per-cpu=1G"),
    directive("slurm-partition-short", "-p busy"),
    directive("slurm-export-all", "--export=ALL"),
    directive("slurm-name-abbreviated", "--job=name"),
    directive("pbs-array-attached", "-J1-1000", "pbs"),
    directive("lsf-output-overwrite", "-oo /tmp/x", "lsf"),
    # ---- names, words and paths
    api("cluster-name-space", "HybridCluster(name='a b')", "HybridCluster.name",
        lambda b: HybridCluster(name="a b")),
    pool("a;b", "add_pool('a;b')", "name"),
    pool("system-torque", "system='torque'", "system", "torque"),
    api("pool-twice", "add_pool('twice') twice", "pool name",
        lambda b: [b.cluster.add_pool("twice", "local") for _ in range(2)]),
    pool("queue-space", "queue='a b'", "queue", queue="a b"),
    pool("queue-newline", "queue='a\\nb'", "queue", queue="a\nb"),
    pool("account-semicolon", "account='acct;rm'", "account", account="acct;rm"),
    pool("python-newline", "python='python\\nrm'", "python", python="python\nrm"),
    pool("python-u2029", "python='py\\u2029thon'", "python", python="py\u2029thon"),
    pool("container-missing", "container_image='/no/such.sif'", "container_image",
         container_image="/no/such.sif"),
    pool("two-environments", "container_image=..., conda_env='env'", "conda_env",
         container_image="/bin/sh", conda_env="env"),
    pool("conda-space", "conda_env='my env'", "conda_env", conda_env="my env"),
    pool("pixi-env-alone", "pixi_env='cuda'", "pixi_env", pixi_env="cuda"),
    pool("runtime-docker", "container_runtime='docker'", "container_runtime",
         container_image="/bin/sh", container_runtime="docker"),
    pool("vendor-intel", "gpu_vendor='intel'", "gpu_vendor", gpu_vendor="intel"),
    pool("serves-yes", "serves_unannotated='yes'", "serves_unannotated",
         serves_unannotated="yes"),
    pool("unknown-option", "bogus=1", "bogus", bogus=1),
    pool("system-option-unknown", "system_options={'bogus': 1}", "system_options.bogus",
         system_options={"bogus": 1}),
    pool("k8s-queue", "queue='gpu' (kubernetes)", "queue", "kubernetes", queue="gpu"),
    pool("k8s-prologue", "job_script_prologue=['module load x'] (kubernetes)",
         "job_script_prologue", "kubernetes", job_script_prologue=["module load x"]),
    pool("k8s-hybrid-env", "env={'HYBRID_JOB_ID': 'x'} (kubernetes)", "env", "kubernetes",
         env={"HYBRID_JOB_ID": "x"}),
    pool("k8s-namespace", "system_options={'namespace': 'Bad_NS'}",
         "system_options.namespace", "kubernetes", system_options={"namespace": "Bad_NS"}),
    # ---- NUL bytes (issue 13)
    pool("nul-env", "env={'A': 'a\\x00b'}", "env", env={"A": "a\0b"}, issue=True),
    pool("nul-prologue", "job_script_prologue=['echo \\x00']", "job_script_prologue",
         job_script_prologue=["echo \0"], issue=True),
    pool("nul-args", "worker_extra_args=['--x\\x00']", "worker_extra_args",
         worker_extra_args=["--x\0"], issue=True),
    pool("nul-directive", "job_extra_directives=['--x\\x00']", "job_extra_directives",
         job_extra_directives=["--x\0"]),
    # ---- ports and addresses (issue 13)
    pool("contact-port-99999", "contact_address='tcp://10.0.0.1:99999'", "contact_address",
         contact_address="tcp://10.0.0.1:99999", issue=True),
    pool("worker-port-99999", "worker_port='99999'", "worker_port", worker_port="99999",
         issue=True),
    pool("nanny-port-80", "nanny_port='80'", "nanny_port", nanny_port="80"),
    api("scheduler-port-99999", "HybridCluster('tcp://127.0.0.1:99999')",
        "HybridCluster.scheduler_address", lambda b: b.start_cluster("tcp://127.0.0.1:99999"),
        issue=True),
    api("worker-scheduler-port-99999", "HybridCluster(worker_scheduler_address="
        "'tcp://h:99999')", "HybridCluster.worker_scheduler_address",
        lambda b: b.start_cluster(worker_scheduler_address="tcp://h:99999"), issue=True),
    api("worker-proxy-port-99999", "HTCGateway(worker_proxy_address='tls://h:99999')",
        "worker_proxy_address", lambda b: b.gateway(worker_proxy_address="tls://h:99999"),
        issue=True),
    api("cluster-host-not-a-host", "HybridCluster(host='my host')", "HybridCluster.host",
        lambda b: b.start_cluster(host="my host")),
    api("cluster-port-taken", "HybridCluster(scheduler_port=<a port in use>)",
        "HybridCluster.scheduler_port", lambda b: b.start_cluster_on_a_taken_port()),
    api("cluster-gpu-fraction", "HybridCluster(gpu_fraction=2)", "HybridCluster.gpu_fraction",
        lambda b: b.start_cluster(gpu_fraction=2)),
    api("cluster-security-text", "HybridCluster(security='yes')", "HybridCluster.security",
        lambda b: b.start_cluster(security="yes")),
    api("attach-with-new-certificate", "HybridCluster('tls://127.0.0.1:9', security=True)",
        "HybridCluster.security", lambda b: b.start_cluster("tls://127.0.0.1:9", security=True)),
    api("attach-tls-without-credentials", "HybridCluster('tls://127.0.0.1:9')",
        "HybridCluster.security", lambda b: b.start_cluster("tls://127.0.0.1:9")),
    # ---- resources and the evaluator-style backends
    api("gpus-negative", "ComputeResources(number_of_gpus=-1)",
        "ComputeResources.number_of_gpus", lambda b: ComputeResources(number_of_gpus=-1)),
    api("gpu-without-toolkit", "ComputeResources(number_of_gpus=1, preferred_gpu_toolkit="
        "None)", "ComputeResources.preferred_gpu_toolkit",
        lambda b: ComputeResources(number_of_gpus=1, preferred_gpu_toolkit=None)),
    api("toolkit-unknown", "ComputeResources(preferred_gpu_toolkit='x')",
        "ComputeResources.preferred_gpu_toolkit",
        lambda b: ComputeResources(preferred_gpu_toolkit="x")),
    api("qwr-memory-bare", "QueueWorkerResources(per_thread_memory_limit=4)",
        "QueueWorkerResources.per_thread_memory_limit",
        lambda b: QueueWorkerResources(per_thread_memory_limit=4)),
    api("pod-minimum-over-maximum", "PodResources(minimum_number_of_workers=3, "
        "maximum_number_of_workers=1)", "PodResources.minimum_number_of_workers",
        lambda b: PodResources(minimum_number_of_workers=3, maximum_number_of_workers=1)),
    api("pod-tolerations-mapping", "PodResources(tolerations={'a': 1})",
        "PodResources.tolerations", lambda b: PodResources(tolerations={"a": 1})),
    api("backend-minimum-negative", "DaskSLURMBackend(minimum_number_of_workers=-1)",
        "DaskSLURMBackend.minimum_number_of_workers",
        lambda b: DaskSLURMBackend(minimum_number_of_workers=-1)),
    api("backend-queue-space", "DaskSLURMBackend(queue_name='a b')",
        "DaskSLURMBackend.queue_name", lambda b: DaskSLURMBackend(queue_name="a b")),
    api("backend-setup-string", "DaskSLURMBackend(setup_script_commands='module load gcc')",
        "DaskSLURMBackend.setup_script_commands",
        lambda b: DaskSLURMBackend(setup_script_commands="module load gcc")),
    api("backend-array", "DaskSLURMBackend(extra_script_options=['--array=1-9'])",
        "DaskSLURMBackend.extra_script_options[0]",
        lambda b: DaskSLURMBackend(extra_script_options=["--array=1-9"])),
    api("backend-condor-queue", "DaskHTCondorBackend(extra_script_options=['queue 5'])",
        "DaskHTCondorBackend.extra_script_options[0]",
        lambda b: DaskHTCondorBackend(extra_script_options=["queue 5"])),
    api("backend-resources-kind", "DaskSLURMBackend(resources_per_worker=ComputeResources())",
        "DaskSLURMBackend.resources_per_worker",
        lambda b: DaskSLURMBackend(resources_per_worker=ComputeResources())),
    api("backend-unknown-option", "DaskSLURMBackend(bogus=1)", "DaskSLURMBackend.bogus",
        lambda b: DaskSLURMBackend(bogus=1)),
    api("backend-interval-abc", "DaskSLURMBackend(adaptive_interval='abc')",
        "DaskSLURMBackend.adaptive_interval",
        lambda b: DaskSLURMBackend(adaptive_interval="abc", minimum_number_of_workers=0,
                                   maximum_number_of_workers=2)),
    api("backend-maximum-1e7", "DaskSLURMBackend(maximum_number_of_workers=10**7)",
        "DaskSLURMBackend.maximum_number_of_workers",
        lambda b: DaskSLURMBackend(maximum_number_of_workers=10**7)),
    api("backend-cluster-kwargs", "DaskSLURMBackend(cluster_kwargs={'bogus': 1})",
        "DaskSLURMBackend.cluster_kwargs",
        lambda b: DaskSLURMBackend(cluster_kwargs={"bogus": 1})),
    api("backend-fraction", "DaskSLURMBackend(gpu_fraction=3)", "DaskSLURMBackend.gpu_fraction",
        lambda b: DaskSLURMBackend(gpu_fraction=3)),
    api("local-backend-negative", "DaskLocalCluster(number_of_workers=-1)",
        "DaskLocalCluster.number_of_workers", lambda b: DaskLocalCluster(number_of_workers=-1)),
    api("k8s-backend-namespace", "DaskKubernetesBackend(namespace='Bad_NS')", "namespace",
        lambda b: DaskKubernetesBackend(namespace="Bad_NS")),
    api("k8s-backend-name", "DaskKubernetesBackend(cluster_name='Bad Name')", "cluster_name",
        lambda b: DaskKubernetesBackend(cluster_name="Bad Name")),
    # ---- the gateway client
    api("gateway-pool-torque", "new_cluster(pool='torque')", "pool",
        lambda b: b.new_cluster(pool="torque")),
    api("gateway-memory-nan", "new_cluster(pool='local', worker_memory=nan)", "worker_memory",
        lambda b: b.new_cluster(pool="local", worker_memory=NAN)),
    api("gateway-memory-inf", "new_cluster(pool='local', worker_memory='inf GiB')",
        "worker_memory", lambda b: b.new_cluster(pool="local", worker_memory="inf GiB")),
    api("gateway-cores-zero", "new_cluster(pool='local', worker_cores=0)", "worker_cores",
        lambda b: b.new_cluster(pool="local", worker_cores=0)),
    api("gateway-env-list", "new_cluster(pool='local', env=['X=1'])", "env",
        lambda b: b.new_cluster(pool="local", env=["X=1"]), issue=True),
    api("gateway-env-number", "new_cluster(pool='local', env={'A': 1})", "env['A']",
        lambda b: b.new_cluster(pool="local", env={"A": 1})),
    api("gateway-pools-empty", "new_cluster(pools={})", "pools",
        lambda b: b.new_cluster(pools={})),
    api("gateway-pools-array", "new_cluster(pools={'x': {'system': 'slurm', "
        "'job_extra_directives': ['--array=1-9']}})", "pools['x'].job_extra_directives[0]",
        lambda b: b.new_cluster(pools={"x": {"system": "slurm",
                                             "job_extra_directives": ["--array=1-9"]}})),
    api("gateway-annotate-text", "new_cluster(pool='local', annotate_resources='yes')",
        "annotate_resources", lambda b: b.new_cluster(pool="local", annotate_resources="yes")),
    api("gateway-fraction-zero", "new_cluster(pool='local', gpu_fraction=0)", "gpu_fraction",
        lambda b: b.new_cluster(pool="local", gpu_fraction=0)),
    api("gateway-pools-and-gpus", "new_cluster(pools={'a': {'system': 'local'}}, worker_gpus=1)",
        "worker_gpus", lambda b: b.new_cluster(pools={"a": {"system": "local"}}, worker_gpus=1)),
    api("gateway-pools-and-walltime",
        "new_cluster(pools={'a': {'system': 'local'}}, worker_walltime='1h')",
        "worker_walltime",
        lambda b: b.new_cluster(pools={"a": {"system": "local"}}, worker_walltime="1h")),
    api("gateway-pool-empty", "new_cluster(pool='')", "pool", lambda b: b.new_cluster(pool="")),
    api("gateway-wait-timeout-abc", "wait_for_workers(1, timeout='abc') (gateway cluster)",
        "wait_for_workers.timeout", lambda b: _waits(b.gateway().new_cluster(pool="local"))),
    api("gateway-stop-no-name", "gateway.stop_cluster('')", "cluster_name",
        lambda b: b.gateway().stop_cluster("")),
    api("scale-1e6", "scale(10**6)", "scale.n",
        lambda b: b.cluster.scale(10**6, pool=b.add("local").name)),
    api("adapt-maximum-1e6", "adapt(maximum=10**6)", "adapt.maximum",
        lambda b: b.cluster.adapt(b.add("local").name, maximum=10**6)),
    # ---- the command line
    cli("cli-memory-nan", ["render", "--system", "slurm", "--memory", "nan GiB"], "--memory",
        issue=True),
    cli("cli-cores-zero", ["render", "--system", "slurm", "--cores", "0"], "--cores"),
    cli("cli-cores-text", ["render", "--system", "slurm", "--cores", "abc"], "--cores"),
    cli("cli-env-no-equals", ["render", "--system", "slurm", "--env", "NOEQ"], "--env"),
    cli("cli-env-bad-name", ["render", "--system", "slurm", "--env", "1X=2"], "--env"),
    cli("cli-env-nul", ["render", "--system", "slurm", "--env", "A=a\0b"], "--env"),
    cli("cli-array", ["render", "--system", "slurm", "--job-extra-directive", "--array=1-5"],
        "--job-extra-directive[0]", issue=True),
    cli("cli-cluster-space", ["render", "--system", "slurm", "--cluster", "a b"], "--cluster"),
    cli("cli-pool-semicolon", ["render", "--system", "slurm", "--pool", "a;b"], "--pool"),
    cli("cli-death-negative", ["render", "--system", "slurm", "--death-timeout", "-5"],
        "--death-timeout"),
    cli("cli-walltime-nan", ["render", "--system", "slurm", "--walltime", "nan"], "--walltime",
        issue=True),
    cli("cli-queue-space", ["render", "--system", "slurm", "--queue", "a b"], "--queue"),
    cli("cli-array-size-zero", ["render", "--system", "slurm", "--system-option",
                                "max_array_size=0"], "--system-option.max_array_size"),
    cli("cli-system-option-unknown", ["render", "--system", "slurm", "--system-option",
                                      "bogus=1"], "--system-option.bogus"),
    cli("cli-worker-port", ["render", "--system", "slurm", "--worker-port", "99999"],
        "--worker-port", issue=True),
    cli("cli-system-torque", ["render", "--system", "torque"], "--system"),
    cli("cli-vacate-negative", ["render", "--system", "htcondor", "--system-option",
                                "job_max_vacate_time=-1"],
        "--system-option.job_max_vacate_time", issue=True),
    cli("cli-k8s-memory-zero", ["render", "--system", "kubernetes", "--memory", "0 GiB"],
        "--memory", issue=True),
    cli("cli-scheduler-port", ["render", "--system", "slurm", "--scheduler", "tcp://h:99999"],
        "--scheduler", issue=True),
    cli("cli-sni-without-tls", ["render", "--system", "slurm", "--scheduler", NOWHERE, "--sni",
                                "daskgateway-x"], "--sni"),
    cli("cli-tls-one-file", ["submit", "--system", "slurm", "--scheduler", NOWHERE,
                             "--tls-ca", "/etc/hostname"], "--tls"),
    cli("cli-tls-scheduler-without-files", ["submit", "--system", "slurm", "--scheduler",
                                            "tls://127.0.0.1:9"], "--scheduler"),
    cli("cli-status-torque", ["status", "--system", "torque"], "--system"),
    cli("cli-cancel-nothing", ["cancel", "--system", "slurm"], "JOB_IDS"),
    cli("cli-gc-timeout-text", ["gc", "--system", "slurm", "--timeout", "abc"], "--timeout"),
    cli("cli-gc-timeout-nan", ["gc", "--system", "slurm", "--timeout", "nan"], "--timeout"),
    cli("cli-ingress-port", ["admin", "ingress", "--port", "99999"], "--port", issue=True),
    cli("cli-ingress-cr", ["admin", "ingress", "--form", "file", "--service", "h",
                           "--dynamic-file", "/etc/traefik/a\rb.yml"], "--dynamic-file",
        issue=True),
    cli("cli-ingress-nel", ["admin", "ingress", "--form", "file", "--service", "h",
                            "--dynamic-file", "/etc/traefik/a\x85b.yml"], "--dynamic-file",
        issue=True),
    cli("cli-ingress-ls", ["admin", "ingress", "--form", "file", "--service", "h",
                           "--dynamic-file", "/etc/traefik/a\u2028---\u2028b: 1"],
        "--dynamic-file", issue=True),
    cli("cli-ingress-relative", ["admin", "ingress", "--form", "file", "--service", "h",
                                 "--dynamic-file", "dynamic.yml"], "--dynamic-file"),
    cli("cli-ingress-namespace", ["admin", "ingress", "--namespace", "BAD"], "--namespace"),
    cli("cli-ingress-web", ["admin", "ingress", "--entry-point", "web"], "--entry-point"),
    cli("cli-ports-zero-workers", ["admin", "ports", "--workers-per-node", "0"],
        "--workers-per-node"),
    cli("cli-ports-ingress-port", ["admin", "ports", "--ingress-port", "99999"],
        "--ingress-port", issue=True),
    cli("cli-ports-http-zero", ["admin", "ports", "--gateway-http-port", "0"],
        "--gateway-http-port"),
    cli("cli-gateway-config-memory", ["admin", "gateway-config", "--cluster-max-memory",
                                      "nan GiB"], "--cluster-max-memory"),
    cli("cli-doctor-workers", ["doctor", "--workers-per-node", "0"], "--workers-per-node"),
    cli("cli-doctor-warn-days", ["doctor", "--warn-days", "-1"], "--warn-days"),
    cli("cli-doctor-proxy-port", ["doctor", "--proxy-address", "x:99999"], "--proxy-address",
        issue=True),
    cli("cli-doctor-timeout-nan", ["doctor", "--timeout", "nan"], "--timeout"),
    cli("cli-gateway-dev-port", ["gateway", "dev", "--port", "99999"], "--port", issue=True),
    cli("cli-gateway-dev-unsafe-port", ["gateway", "dev", "--port", "6000"], "--port"),
    cli("cli-gateway-dev-idle", ["gateway", "dev", "--idle-timeout", "soon"], "--idle-timeout"),
    cli("cli-gateway-dev-heartbeat", ["gateway", "dev", "--heartbeat-period", "10",
                                      "--heartbeat-timeout", "5"], "--heartbeat-timeout"),
    # ---- hybrid.yaml: the site's configuration (issue 13)
    in_yaml("yaml-dask-config-key", "hybrid.worker-dask-config", '{"x>PWNED": 1}',
            "hybrid.worker-dask-config", add_slurm, issue=True),
    in_yaml("yaml-dask-config-value", "hybrid.worker-dask-config", '{"a.b": [1, 2]}',
            "hybrid.worker-dask-config['a.b']", add_slurm),
    in_yaml("yaml-death-timeout", "hybrid.worker.death-timeout", "soon",
            "hybrid.worker.death-timeout", add_slurm, issue=True),
    in_yaml("yaml-death-timeout-negative", "hybrid.worker.death-timeout", "-5",
            "hybrid.worker.death-timeout", add_slurm, issue=True),
    in_yaml("yaml-vacate-text", "hybrid.batch.htcondor.job-max-vacate-time", "10 sec or so",
            "hybrid.batch.htcondor.job-max-vacate-time", add_htcondor, issue=True),
    in_yaml("yaml-vacate-negative", "hybrid.batch.htcondor.job-max-vacate-time", "-10",
            "hybrid.batch.htcondor.job-max-vacate-time", add_htcondor, issue=True),
    in_yaml("yaml-contact-port", "hybrid.worker.contact-address", "tcp://h:99999",
            "hybrid.worker.contact-address", add_slurm, issue=True),
    in_yaml("yaml-port-range", "hybrid.worker.port-range", '"0:99999"',
            "hybrid.worker.port-range", add_slurm, issue=True),
    in_yaml("yaml-nanny-text", "hybrid.worker.nanny", "maybe", "hybrid.worker.nanny",
            add_slurm),
    in_yaml("yaml-python-newline", "hybrid.worker.python", '"python\\nrm -rf /"',
            "hybrid.worker.python", add_slurm),
    in_yaml("yaml-extra-args-string", "hybrid.worker.extra-args", '"--lifetime 6h"',
            "hybrid.worker.extra-args", add_slurm, issue=True),
    in_yaml("yaml-binds-string", "hybrid.worker.container.binds", '"/a:/b"',
            "hybrid.worker.container.binds", add_slurm, issue=True),
    in_yaml("yaml-runtime", "hybrid.worker.container.runtime", "docker",
            "hybrid.worker.container.runtime", add_slurm),
    in_yaml("yaml-check-paths", "hybrid.worker.check-paths", "sometimes",
            "hybrid.worker.check-paths", add_slurm),
    in_yaml("yaml-lease-negative", "hybrid.batch.lease", "-1h", "hybrid.batch.lease",
            add_slurm),
    in_yaml("yaml-tag-dash", "hybrid.batch.tag", "Hybrid-Cluster", "hybrid.batch.tag",
            add_htcondor, issue=True),
    in_yaml("yaml-poll-interval", "hybrid.batch.poll-interval", "abc",
            "hybrid.batch.poll-interval", start_cluster),
    in_yaml("yaml-poll-interval-max", "hybrid.batch.poll-interval-max", "later",
            "hybrid.batch.poll-interval-max", add_slurm),
    in_yaml("yaml-stuck-timeout", "hybrid.batch.stuck-timeout", "abc",
            "hybrid.batch.stuck-timeout", add_slurm),
    in_yaml("yaml-max-failures", "hybrid.batch.max-failures", "many",
            "hybrid.batch.max-failures", add_slurm),
    in_yaml("yaml-held-jobs", "hybrid.batch.held-jobs", "delete", "hybrid.batch.held-jobs",
            add_slurm),
    in_yaml("yaml-staging-space", "hybrid.batch.staging-directory", '"/tmp/a b"',
            "hybrid.batch.staging-directory", add_slurm),
    in_yaml("yaml-scheduler-tls", "hybrid.scheduler.tls", "maybe", "hybrid.scheduler.tls",
            start_cluster),
    in_yaml("yaml-dashboard-address", "hybrid.scheduler.dashboard-address", "everywhere",
            "hybrid.scheduler.dashboard-address", start_cluster),
    in_yaml("yaml-slurm-prologue-string", "hybrid.batch.slurm.job-script-prologue",
            '"module load gcc"', "hybrid.batch.slurm.job-script-prologue", add_slurm,
            issue=True),
    in_yaml("yaml-slurm-array-size", "hybrid.batch.slurm.max-array-size", "0",
            "hybrid.batch.slurm.max-array-size", add_slurm),
    in_yaml("yaml-slurm-unknown", "hybrid.batch.slurm.bogus-key", "1",
            "hybrid.batch.slurm.bogus-key", add_slurm),
    in_yaml("yaml-slurm-memory-nan", "hybrid.batch.slurm.memory", '"nan GiB"',
            "hybrid.batch.slurm.memory", add_slurm, issue=True),
    in_yaml("yaml-condor-queue", "hybrid.batch.htcondor.job-extra-directives",
            '["queue 1000"]', "hybrid.batch.htcondor.job-extra-directives[0]", add_htcondor,
            issue=True),
    in_yaml("yaml-condor-trailing-backslash", "hybrid.batch.htcondor.job-extra-directives",
            '["rank = Memory \\\\"]', "hybrid.batch.htcondor.job-extra-directives",
            add_htcondor),
    in_yaml("yaml-staging-percent", "hybrid.batch.staging-directory", '"/tmp/jobs%j"',
            "hybrid.batch.staging-directory", add_slurm),
    in_yaml("yaml-k8s-namespace", "hybrid.batch.kubernetes.namespace", "Bad_NS",
            "hybrid.batch.kubernetes.namespace", add_kubernetes),
    in_yaml("yaml-templates", "hybrid.templates.directory", "/no/such/templates",
            "hybrid.templates.directory", add_slurm),
    in_yaml("yaml-gpu-fraction", "hybrid.annotator.gpu-fraction", "5",
            "hybrid.annotator.gpu-fraction", start_cluster),
    in_yaml("yaml-annotator-enabled", "hybrid.annotator.enabled", "sometimes",
            "hybrid.annotator.enabled", lambda b: b.cluster.get_client()),
    in_yaml("yaml-scheduler-host", "hybrid.scheduler.host", '"not a host"',
            "hybrid.scheduler.host", start_cluster),
    in_yaml("yaml-verbose", "hybrid.logging.verbose", "loud", "hybrid.logging.verbose",
            start_cluster),
    in_yaml("yaml-gateway-pool", "hybrid.gateway.pool", "torque", "hybrid.gateway.pool",
            new_plain_cluster),
    in_yaml("yaml-required-env", "hybrid.gateway.required-env", "NB_UID",
            "hybrid.gateway.required-env", new_batch_cluster),
    in_yaml("yaml-worker-proxy", "hybrid.gateway.worker-proxy-address", '"not an address"',
            "hybrid.gateway.worker-proxy-address", new_batch_cluster),
    # ---- DASK_HYBRID__ variables (issue 13)
    in_env("env-dask-config-key", "DASK_HYBRID__WORKER_DASK_CONFIG",
           '{"x$(touch /tmp/pwned)": 1}', "hybrid.worker-dask-config", render_slurm,
           issue=True),
    in_env("env-tag-dash", "DASK_HYBRID__BATCH__TAG", "Hybrid-Cluster", "hybrid.batch.tag",
           status_htcondor, issue=True),
    in_env("env-death-timeout", "DASK_HYBRID__WORKER__DEATH_TIMEOUT", "soon",
           "hybrid.worker.death-timeout", add_slurm, issue=True),
    in_env("env-vacate", "DASK_HYBRID__BATCH__HTCONDOR__JOB_MAX_VACATE_TIME", "2.5x",
           "hybrid.batch.htcondor.job-max-vacate-time", add_htcondor, issue=True),
    in_env("env-poll-interval", "DASK_HYBRID__BATCH__POLL_INTERVAL", "abc",
           "hybrid.batch.poll-interval", start_cluster),
    in_env("env-check-paths", "DASK_HYBRID__WORKER__CHECK_PATHS", "no",
           "hybrid.worker.check-paths", add_slurm),
    in_env("env-max-failures", "DASK_HYBRID__BATCH__MAX_FAILURES", "many",
           "hybrid.batch.max-failures", add_slurm),
    in_env("env-contact-port", "DASK_HYBRID__WORKER__CONTACT_ADDRESS", "tcp://h:99999",
           "hybrid.worker.contact-address", add_slurm, issue=True),
    # ---- what an audit of the rendered files found past the checks (2026-11-29)
    directive("slurm-empty-directive", " "),
    directive("pbs-tag-attached", "-vHYBRID_TAG=x", "pbs"),
    directive("pbs-tag-after-flags", "-zv HYBRID_TAG=x", "pbs"),
    directive("pbs-tag-second-option", "-r y -v HYBRID_TAG=x", "pbs"),
    directive("pbs-walltime", "-l walltime=999:00:00", "pbs"),
    directive("pbs-select-attached", "-lselect=64:ncpus=128", "pbs"),
    directive("pbs-queue", "-q other", "pbs"),
    directive("lsf-walltime", "-W 999:00", "lsf"),
    directive("lsf-cores", "-n 64", "lsf"),
    directive("lsf-memory", "-M 1", "lsf"),
    directive("condor-my-periodic-remove", "MY.PeriodicRemove = false", "htcondor"),
    directive("condor-plus-leave-in-queue", "+LeaveJobInQueue = true", "htcondor"),
    directive("condor-my-cmd", 'My.Cmd = "/bin/sh"', "htcondor"),
    directive("condor-initial-dir", "initial_dir = /tmp", "htcondor"),
    directive("condor-request-memory", "request_memory = 9000", "htcondor"),
    directive("condor-include-command", "include command : touch /tmp/relbad |", "htcondor"),
    directive("condor-multiline-block", "environment @=END", "htcondor"),
    directive("condor-not-a-command", "foo bar baz", "htcondor"),
    pool("pbs-resource-spec-options", "system_options={'resource_spec': 'select=1 -J 1-1000'}",
         "system_options.resource_spec", "pbs",
         system_options={"resource_spec": "select=1 -J 1-1000"}),
    pool("env-script-variable", "env={'hybrid_suffix': 'x'}", "env",
         env={"hybrid_suffix": "x"}),
    pool("env-ifs", "env={'IFS': 'x'}", "env", env={"IFS": "x"}),
    pool("env-over-128kib", "env={'BIG': 'x' * 200_000}", "env", env={"BIG": "x" * 200_000}),
    pool("extra-args-nthreads", "worker_extra_args=['--nthreads=8']", "worker_extra_args[0]",
         worker_extra_args=["--nthreads=8"]),
    pool("extra-args-name", "worker_extra_args=['--name', 'w']", "worker_extra_args[0]",
         worker_extra_args=["--name", "w"]),
    pool("extra-args-routing-resource", "worker_extra_args=['--resources', 'GPU=2']",
         "worker_extra_args[0]", worker_extra_args=["--resources", "GPU=2"]),
    pool("k8s-quantity-negative", "system_options={'resource_limits': {'x.io/y': -1}}",
         "system_options.resource_limits", "kubernetes",
         system_options={"resource_limits": {"x.io/y": -1}}),
    pool("k8s-quantity-arabic-digits", "system_options={'resource_limits': {'x.io/y': '\\u0661'}}",
         "system_options.resource_limits", "kubernetes",
         system_options={"resource_limits": {"x.io/y": "\u0661"}}),
    cli("cli-sni-not-a-host", ["render", "--system", "sge", "--scheduler", "tls://127.0.0.1:9",
                               "--tls-ca", "/etc/hostname", "--tls-cert", "/etc/hostname",
                               "--tls-key", "/etc/hostname", "--sni", "x\n#$ -q other"],
        "--sni"),
    cli("cli-tls-not-pem", ["submit", "--system", "slurm", "--scheduler", "tls://127.0.0.1:9",
                            "--tls-ca", "/etc/hostname", "--tls-cert", "/etc/hostname",
                            "--tls-key", "/etc/hostname"], "--tls-ca"),
    cli("cli-admin-scheduler-image", ["admin", "gateway-config", "--scheduler-image", "a b"],
        "--scheduler-image[0]"),
    cli("cli-doctor-gateway-port", ["doctor", "--gateway-address", "http://127.0.0.1:99999"],
        "--gateway-address"),
    in_env("env-doctor-gateway-address", "DASK_GATEWAY__ADDRESS", "foo",
           "gateway.address (dask config)", lambda b: b.cli("doctor")),
    in_yaml("yaml-sge-no-parallel-environment", "hybrid.batch.sge.parallel-environment",
            "null", "add_pool('yaml-sge-no-parallel-environment').cores",
            lambda b: b.add("sge", cores=2)),
    in_env("env-staging-relative", "DASK_HYBRID__BATCH__STAGING_DIRECTORY", "relative/jobs",
           "hybrid.batch.staging-directory", add_slurm),
    in_env("env-worker-config-newline", "DASK_HYBRID__WORKER_DASK_CONFIG",
           '{"distributed.x": "a\\n#$ -q other"}', "hybrid.worker-dask-config['distributed.x']",
           add_slurm),
    in_env("env-worker-config-double-underscore", "DASK_HYBRID__WORKER_DASK_CONFIG",
           '{"a.b__c": 1}', "hybrid.worker-dask-config", add_slurm),
    in_env("env-pre-spawn-newline", "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON",
           '{"X": "a\\nb"}', "distributed.nanny.pre-spawn-environ['X']", add_slurm),
    # ---- what an audit of the configuration's edges found (2026-11-29, second audit)
    api("cluster-dashboard-port-99999", "HybridCluster(dashboard_address='127.0.0.1:99999')",
        "HybridCluster.dashboard_address",
        lambda b: b.start_cluster(dashboard_address="127.0.0.1:99999")),
    api("cluster-dashboard-not-an-address", "HybridCluster(dashboard_address='nope')",
        "HybridCluster.dashboard_address", lambda b: b.start_cluster(dashboard_address="nope")),
    api("cluster-annotate-text", "HybridCluster(annotate_resources='false')",
        "HybridCluster.annotate_resources",
        lambda b: b.start_cluster(annotate_resources="false")),
    api("submit-gpu-task-text", "client.submit(f, gpu_task='False')", "gpu_task",
        lambda b: _submit_with(b, gpu_task="False")),
    pool("walltime-over-lease", "walltime='48h', lease='24h'", "walltime", walltime="48h",
         lease="24h"),
    pool("memory-per-process-zero", "cores=4, processes=4, memory='3 B'", "memory", cores=4,
         processes=4, memory="3 B", nanny=True),
    in_yaml("yaml-walltime-unquoted", "hybrid.batch.htcondor.walltime", "12:00",
            "hybrid.batch.htcondor.walltime", add_htcondor),
    in_yaml("yaml-credentials-relative", "hybrid.scheduler.credentials-directory",
            "my-credentials", "hybrid.scheduler.credentials-directory", start_cluster),
]


def _submit_with(bench: Bench, **options: Any) -> Any:
    """``client.submit(abs, -1, **options)`` from a client of the bench's cluster."""
    with bench.cluster.get_client() as client:
        return client.submit(abs, -1, **options)

def _waits(cluster: Any) -> Any:
    """``cluster.wait_for_workers(1, timeout='abc')``, the cluster shut down whatever it says."""
    with cluster:
        return cluster.wait_for_workers(1, timeout="abc")


FIXED = [case for case in BAD_INPUTS if case.open is None]
OPEN = [case for case in BAD_INPUTS if case.open is not None]


# --------------------------------------------------------------------------- the bench
class Bench:
    """What the rows act on: a real TLS cluster on loopback, a private staging directory,
    the command line in this process, and a dev gateway started when a row first needs it."""

    def __init__(self, root: Path, cluster: HybridCluster, tls: tuple[Path, Path, Path]):
        self.root = root
        self.staging = root / "staging"
        self.cluster = cluster
        self.tls = tls
        self.case: Case | None = None
        self._dev: Any = None
        self._gateway: Any = None

    # ---- the API
    def add(self, system: str = "slurm", resources: Any = None, **options: Any) -> Any:
        """``add_pool`` named after the row."""
        assert self.case is not None
        name = self.case.id if self.case.id not in self.cluster.pools else (
            f"{self.case.id}-{len(self.cluster.pools)}")
        return self.cluster.add_pool(name, system, resources, **options)

    def start_cluster(self, *args: Any, **kwargs: Any) -> HybridCluster:
        """A HybridCluster of its own (closed again should it start)."""
        with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
            cluster = HybridCluster(*args, name=f"{PREFIX}-own", **kwargs)
        cluster.close()
        return cluster

    def start_cluster_on_a_taken_port(self) -> HybridCluster:
        """A HybridCluster asked to listen on a loopback port another socket holds."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            return self.start_cluster(host="127.0.0.1", scheduler_port=taken.getsockname()[1])

    # ---- the command line
    def cli(self, *args: str) -> Result:
        """``hybrid ARGS`` in this process (render and submit get this module's cluster)."""
        argv = list(args)
        if argv[0] in ("render", "submit"):
            argv[1:1] = ["--cluster", CLI_CLUSTER]
        return CliRunner().invoke(hybrid_cli, argv, catch_exceptions=True)

    # ---- configuration
    def with_yaml(self, key: str, text: str, then: Callable[[Bench], Any]) -> Any:
        """Write ``key: text`` as a real YAML file, read it as dask does, then ``then``."""
        folder = self.root / f"yaml-{uuid.uuid4().hex[:6]}"
        folder.mkdir()
        parts = key.split(".")
        lines = [f"{'  ' * depth}{part}:" for depth, part in enumerate(parts[:-1])]
        lines.append(f"{'  ' * (len(parts) - 1)}{parts[-1]}: {text}")
        (folder / "hybrid.yaml").write_text("\n".join(lines) + "\n")
        with configured(dask.config.collect(paths=[str(folder)], env={})):
            return then(self)

    def with_env(self, variables: dict[str, str], then: Callable[[Bench], Any]) -> Any:
        """Read ``variables`` as dask reads ``DASK_...`` variables at import, then ``then``."""
        with configured(dask.config.collect_env(variables)):
            return then(self)

    # ---- the gateway
    def gateway(self, **kwargs: Any) -> Any:
        """An HTCGateway client of the dev gateway (started on first use)."""
        from hybrid.gateway import HTCGateway
        from hybrid.gateway_server.dev import start_dev_gateway

        if self._dev is None:
            self._dev = start_dev_gateway(**TEST_GATEWAY_SETTINGS)
        if kwargs:
            return HTCGateway(**self._dev.gateway_kwargs(), **kwargs).close()
        if self._gateway is None:
            self._gateway = HTCGateway(**self._dev.gateway_kwargs())
        return self._gateway

    def new_cluster(self, **kwargs: Any) -> Any:
        """``gateway.new_cluster(**kwargs)`` (shut down again should it start)."""
        cluster = self.gateway().new_cluster(**kwargs)
        cluster.shutdown()
        return cluster

    # ---- what is left
    def leftovers(self) -> list[str]:
        """Files in the staging directory, jobs of ours in the real queues, clusters on the
        dev gateway: all must be none after a refused input."""
        found = [f"file {p}" for p in sorted(self.staging.rglob("*"))] if (
            self.staging.exists()) else []
        found += real_jobs(PREFIX)
        if self._gateway is not None:
            gc.collect()  # clients of refused clusters, in this thread (tests/gateway/conftest)
            found += [f"gateway cluster {c.name}" for c in self._gateway.list_clusters()]
        return found

    def close(self) -> None:
        if self._gateway is not None:
            self._gateway.close()
        if self._dev is not None:
            self._dev.stop()


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    security = Security.temporary()
    directory.mkdir(mode=0o700)
    return (write_private(directory / "ca.pem", security.tls_ca_file),
            write_private(directory / "cert.pem", security.tls_client_cert),
            write_private(directory / "key.pem", security.tls_client_key))


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory, htcondor_pool: Path,
          slurm_cluster: Path) -> Iterator[Bench]:
    """The bench of this module (the real pools up: rows are checked against them)."""
    root = tmp_path_factory.mktemp("bad-input")
    settings = {"hybrid.scheduler.host": "127.0.0.1",
                "hybrid.batch.staging-directory": str(root / "staging"),
                # no reconcile refills a refused pool while the rows run
                "hybrid.batch.poll-interval": "1 hour"}
    with dask.config.set(settings):
        cluster = HybridCluster(name=CLUSTER, security=True)
        bench = Bench(root, cluster, _tls_files(root / "tls"))
        try:
            assert bench.leftovers() == []
            yield bench
        finally:
            bench.close()
            cluster.close()
            for system in ("slurm", "htcondor"):  # should a row have submitted
                for name in (CLUSTER, CLI_CLUSTER):
                    CliRunner().invoke(hybrid_cli, ["cancel", "--system", system,
                                                    "--cluster", name])


# --------------------------------------------------------------------------- the checks
def run(case: Case, bench: Bench) -> Any:
    """The row's outcome: its ConfigurationError, or what the call returned."""
    bench.case = case
    try:
        return case.call(bench)
    except ConfigurationError as error:
        return error


def assert_one_clear_error(case: Case, outcome: Any) -> None:
    """One error naming the field: a ConfigurationError with no library traceback chained
    to it, or one ``Error:`` line of the command line (no traceback, exit status 1 or 2)."""
    if isinstance(outcome, Result):
        output = outcome.output
        assert isinstance(outcome.exception, SystemExit), (outcome.exception, output)
        assert outcome.exit_code in (1, 2), output
        assert "Traceback" not in output
        errors = [line for line in output.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1, output
        assert case.field in errors[0], errors[0]
        return
    assert isinstance(outcome, ConfigurationError), f"accepted, giving {outcome!r}"
    assert outcome.field == case.field, str(outcome)
    assert str(outcome).startswith(f"{case.field} = "), str(outcome)
    assert " is not valid: expected " in str(outcome)
    assert outcome.__cause__ is None
    assert outcome.__context__ is None or outcome.__suppress_context__, (
        f"a second traceback is chained to it: {outcome.__context__!r}")


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=f"open: {case.open}")] if case.open else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in BAD_INPUTS])
def test_bad_input_gets_one_clear_error_and_leaves_nothing(case: Case, bench: Bench) -> None:
    outcome = run(case, bench)
    try:
        assert_one_clear_error(case, outcome)
    finally:
        assert bench.leftovers() == []


def test_the_rows_are_distinct_and_each_names_a_field() -> None:
    ids = [case.id for case in BAD_INPUTS]
    assert len(set(ids)) == len(ids)
    assert all(case.field and case.value for case in BAD_INPUTS)
    assert {case.where for case in BAD_INPUTS} == {"API", "CLI", "hybrid.yaml", "environment"}


# --------------------------------------------------------------------------- accepted values
@dataclass(frozen=True)
class Accepted:
    """A value that is fine as it is: how it lands in the job."""

    id: str
    where: str
    value: str
    #: What the job gets (shown in docs/reliability.md).
    lands: str
    #: The rendered job files -> True when the value landed as :attr:`lands` says.
    check: Callable[[Bench], bool] = field(repr=False)
    issue: bool = False


def _script(bench: Bench, system: str, count: int = 1, **options: Any) -> str:
    return bench.add(system, **options).job_script(count)


def _same_directives(bench: Bench, given: Any, baseline: Any) -> bool:
    """The ``#SBATCH`` lines with ``job_extra_directives=given`` are those with ``baseline``
    (pool names aside)."""
    lines = []
    for directives in (given, baseline):
        pool = bench.add("slurm", job_extra_directives=directives)
        lines.append([line.replace(pool.name, "POOL") for line in
                      pool.job_script().splitlines() if line.startswith("#SBATCH")])
    return lines[0] == lines[1]


ACCEPTED: list[Accepted] = [
    Accepted("directives-none", "API", "job_extra_directives=None",
             "no directive of the user's (the same #SBATCH lines as with [])",
             lambda b: _same_directives(b, None, []), issue=True),
    Accepted("death-timeout-fraction", "hybrid.yaml", "hybrid.worker.death-timeout: 1.5",
             "--death-timeout 2 (whole seconds, rounded up)",
             lambda b: b.with_yaml("hybrid.worker.death-timeout", "1.5",
                                   lambda b: " --death-timeout 2 " in _script(b, "slurm")),
             issue=True),
    Accepted("vacate-fraction", "hybrid.yaml", "hybrid.batch.htcondor.job-max-vacate-time: 2.5",
             "job_max_vacate_time = 3",
             lambda b: b.with_yaml("hybrid.batch.htcondor.job-max-vacate-time", "2.5",
                                   lambda b: "\njob_max_vacate_time = 3\n"
                                   in _script(b, "htcondor")), issue=True),
    Accepted("memory-fraction", "API", "memory='1.5 GiB'", "#SBATCH --mem=1536M",
             lambda b: "#SBATCH --mem=1536M\n" in _script(b, "slurm", memory="1.5 GiB")),
    Accepted("walltime-seconds", "API", "walltime='00:00:30'",
             "#SBATCH --time=00:01:00 (whole minutes, rounded up)",
             lambda b: "#SBATCH --time=00:01:00\n" in _script(b, "slurm", walltime="00:00:30")),
    Accepted("check-paths-false", "environment", "DASK_HYBRID__WORKER__CHECK_PATHS=false",
             "False: an image only the batch nodes see is accepted",
             lambda b: b.with_env({"DASK_HYBRID__WORKER__CHECK_PATHS": "false"}, lambda b: (
                 "/only/on/nodes.sif" in _script(b, "slurm",
                                                 container_image="/only/on/nodes.sif")))),
    Accepted("account-number", "API", "account=12345",
             "#SBATCH --account=12345 (a number is its digits, as from YAML or DASK_HYBRID__)",
             lambda b: "\n#SBATCH --account=12345\n" in _script(b, "slurm", account=12345)),
    Accepted("dashboard-bare-port", "API", "HybridCluster(dashboard_address=PORT) (a number)",
             "the dashboard on PORT of hybrid.scheduler.host only, as with \":PORT\"",
             lambda b: _dashboard_on_the_host(b)),
    Accepted("dynamic-file-hash", "CLI", "--dynamic-file '/etc/traefik/dyn #1.yml'",
             "two YAML documents; the file provider's filename exactly that path",
             lambda b: _ingress_filename(b, "/etc/traefik/dyn #1.yml")),
    Accepted("dask-config-value-code", "hybrid.yaml",
             "hybrid.worker-dask-config: {a.b: \"$(touch /tmp/pwned)'\"}",
             "export DASK_A__B='$(touch /tmp/pwned)'\"'\"'' (one quoted word)",
             lambda b: b.with_yaml("hybrid.worker-dask-config",
                                   "{a.b: \"$(touch /tmp/pwned)'\"}", lambda b: (
                                       "\nexport DASK_A__B='$(touch /tmp/pwned)'\"'\"''\n"
                                       in _script(b, "slurm")))),
]


def _dashboard_on_the_host(bench: Bench) -> bool:
    """A bare dashboard port listens on the scheduler's host (loopback here), not on every
    interface."""
    from distributed.utils import open_port

    port = open_port("127.0.0.1")
    with HybridCluster(name=f"{PREFIX}-dash", dashboard_address=port) as cluster:
        return cluster.scheduler.http_server.address == "127.0.0.1" and (
            cluster.scheduler.http_server.port == port)


def _ingress_filename(bench: Bench, path: str) -> bool:
    result = bench.cli("admin", "ingress", "--form", "file", "--service", "h",
                       "--dynamic-file", path)
    documents = list(yaml.safe_load_all(result.output))
    return result.exit_code == 0 and len(documents) == 2 and (
        documents[0]["providers"]["file"]["filename"] == path)


@pytest.mark.parametrize("case", ACCEPTED, ids=[c.id for c in ACCEPTED])
def test_accepted_values_land_as_documented(case: Accepted, bench: Bench) -> None:
    bench.case = Case(case.id, case.where, case.value, "", lambda b: None)
    assert case.check(bench)
    assert bench.leftovers() == []


# --------------------------------------------------------------------------- refused by the system
@dataclass(frozen=True)
class Refused:
    """A value only the batch system can judge: refused in its own words, nothing left."""

    id: str
    where: str
    value: str
    #: Words of the batch system the error must carry.
    words: str
    call: Callable[[Bench], Any] = field(repr=False)
    issue: bool = False


def _submit(bench: Bench, system: str, *extra: str) -> Result:
    ca, cert, key = bench.tls
    return bench.cli("submit", "--system", system, "--scheduler", "tls://127.0.0.1:9",
                     "--tls-ca", str(ca), "--tls-cert", str(cert), "--tls-key", str(key),
                     *extra)


REFUSED_BY_SYSTEM: list[Refused] = [
    Refused("slurm-partition", "API", "queue='nosuchpartition' then scale(1)",
            "invalid partition", lambda b: b.cluster.scale(1, pool=b.add(
                "slurm", queue="nosuchpartition").name)),
    Refused("condor-requirements", "API",
            "job_extra_directives=['requirements = ((('] then scale(1)", "Parse error",
            lambda b: b.cluster.scale(1, pool=b.add(
                "htcondor", job_extra_directives=["requirements = ((("]).name)),
    Refused("cli-slurm-partition", "CLI", "hybrid submit --system slurm --queue "
            "nosuchpartition --tls-ca ... (TLS)", "invalid partition",
            lambda b: _submit(b, "slurm", "--queue", "nosuchpartition"), issue=True),
    Refused("cli-condor-description", "CLI", "hybrid submit --system htcondor "
            "--job-extra-directive 'universe = nosuch' --tls-ca ... (TLS)",
            "'nosuch' universe",
            lambda b: _submit(b, "htcondor", "--job-extra-directive", "universe = nosuch"),
            issue=True),
]


@pytest.mark.parametrize("case", REFUSED_BY_SYSTEM, ids=[c.id for c in REFUSED_BY_SYSTEM])
def test_what_the_batch_system_refuses_leaves_nothing(case: Refused, bench: Bench) -> None:
    bench.case = Case(case.id, case.where, case.value, "", lambda b: None)
    try:
        outcome = case.call(bench)
    except BatchError as error:
        outcome = error
    try:
        if isinstance(outcome, Result):
            assert outcome.exit_code == 1 and "Traceback" not in outcome.output
            assert case.words in outcome.output
        else:
            assert isinstance(outcome, BatchError) and case.words in str(outcome)
    finally:
        assert bench.leftovers() == []  # no TLS copy, no job file, no job


# --------------------------------------------------------------------------- fresh processes
def _fresh(argv: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    clean.update(env, DASK_CONFIG=str(tmp_path / "dask"))
    return subprocess.run(argv, capture_output=True, text=True, env=clean, timeout=120)


def test_fresh_processes_read_them_the_same(tmp_path: Path) -> None:
    """The environment and a user's YAML file reach a fresh ``hybrid`` the same way."""
    hybrid = [sys.executable, "-m", "hybrid.cli"]
    (tmp_path / "dask").mkdir()
    injected = _fresh([*hybrid, "render", "--system", "slurm"], {
        "DASK_HYBRID__WORKER_DASK_CONFIG": json.dumps({"x$(touch /tmp/pwned)": 1})}, tmp_path)
    assert injected.returncode == 1 and "Traceback" not in injected.stderr
    assert "Error: hybrid.worker-dask-config = 'x$(touch /tmp/pwned)'" in injected.stderr
    (tmp_path / "dask" / "site.yaml").write_text("hybrid:\n  batch:\n    tag: Hybrid-Cluster\n")
    tagged = _fresh([*hybrid, "status", "--system", "htcondor"], {}, tmp_path)
    assert tagged.returncode == 1 and "Traceback" not in tagged.stderr
    assert "Error: hybrid.batch.tag = 'Hybrid-Cluster'" in tagged.stderr
