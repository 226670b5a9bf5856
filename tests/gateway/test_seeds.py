"""The seeds' gateway snippets, verbatim with imports mapped, against a REAL dev gateway.

Seed 003 (htcdaskgateway) and seed 001 (a facility's dask-gateway guide) are what our users
paste. Where a snippet names a facility's address, password, image or path, the test gives it
the dev gateway's and the test's own (as constants with the seed's names); the calls and
their arguments are the seeds'. The site's batch system comes from configuration
(``hybrid.gateway.pool``), as a facility sets it once. Apptainer and pixi are not installed
here: ``apptainer_double`` and ``pixi_double`` are TEST DOUBLES that run the command they
wrap, so the workers still run for real.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dask
import dask_gateway  # noqa: F401  (its configuration defaults, before any dask.config.set)
import pytest

from hybrid.batch import get_system
from hybrid.errors import ConfigurationError
from tests.batch.test_real_pools import condor_jobs, slurm_jobs
from tests.gateway._client_tasks import square
from tests.gateway.helpers import wait_for

pytestmark = [pytest.mark.gateway, pytest.mark.timeout(240)]

#: A TEST DOUBLE of apptainer: `apptainer exec [options] IMAGE COMMAND...` runs COMMAND.
APPTAINER_DOUBLE = """#!/bin/sh
[ "$1" = exec ] || { echo "apptainer_double: only exec" >&2; exit 2; }
shift
while [ "$#" -gt 0 ]; do
    case "$1" in --nv|--rocm|--cleanenv) shift ;; --bind) shift 2 ;; *) break ;; esac
done
[ -e "$1" ] || { echo "apptainer_double: no image $1" >&2; exit 1; }
shift
exec "$@"
"""
#: A TEST DOUBLE of pixi: `pixi run --manifest-path P [--environment E] --executable CMD...`.
PIXI_DOUBLE = """#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != "--executable" ]; do shift; done
shift
exec "$@"
"""


@pytest.fixture
def doubles(tmp_path, monkeypatch) -> Path:
    """apptainer and pixi doubles, and this test's python, first on PATH."""
    directory = tmp_path / "doubles"
    directory.mkdir()
    for name, text in (("apptainer", APPTAINER_DOUBLE), ("pixi", PIXI_DOUBLE)):
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    # `python` inside the "container" / pixi environment: this test's python
    monkeypatch.setenv("PATH", os.pathsep.join([str(directory), str(Path(sys.executable).parent),
                                                os.environ["PATH"]]))
    return directory


@pytest.fixture
def site(dev_gateway, staging):
    """What a facility sets once: where its gateway is, how to log in (dask-gateway's own
    configuration keys) and which batch system its workers come from (hybrid's)."""

    def configure(pool: str):
        return dask.config.set({
            "gateway.address": dev_gateway.address,
            "gateway.proxy-address": dev_gateway.proxy_address,
            "gateway.auth.type": "basic",
            "gateway.auth.kwargs": {"username": dev_gateway.username,
                                    "password": dev_gateway.password},
            "hybrid.gateway.pool": pool,
        })

    return configure


def seed_003_readme(address: str, proxy_port: int, password: str, container_image: str):
    """Seed 003's README snippet, imports mapped (``htcdaskgateway`` -> ``hybrid``)."""
    from dask_gateway.auth import BasicAuth

    from hybrid import HTCGateway
    gateway = HTCGateway(
        address=address,
        proxy_address=proxy_port,
        auth=BasicAuth(username=None, password=password),
    )
    cluster = gateway.new_cluster(
        image="ncsa/dask-public-health:latest",
        container_image=container_image,
    )
    cluster.scale(4)
    client = cluster.get_client()
    return gateway, cluster, client


def test_seed_003_readme_with_local_workers_in_a_container(start_gateway, doubles, staging,
                                                           tmp_path) -> None:
    # seed 003's gateway lets users choose any scheduler image (its image-customization)
    dev_gateway = start_gateway(allow_custom_image=True)
    image = tmp_path / "PublicHealth.sif"
    image.write_text("an Apptainer image (the double only checks it is there)")
    with dask.config.set({"hybrid.gateway.pool": "local"}):
        gateway, cluster, client = seed_003_readme(dev_gateway.address, dev_gateway.proxy_port,
                                                   dev_gateway.password, str(image))
    try:
        assert "apptainer exec" in cluster.job_script() and str(image) in cluster.job_script()
        client.wait_for_workers(4, 120)
        assert client.gather(client.map(square, range(8))) == [x * x for x in range(8)]
        assert len(cluster.jobs()) == 4
    finally:
        cluster.shutdown()
        gateway.close()
    assert cluster.status == "closed"


@pytest.mark.htcondor
def test_seed_003_fermilab_usage_with_real_htcondor_workers(htcondor_pool, site) -> None:
    with site("htcondor"):
        from hybrid import HTCGateway  # was: from htcdaskgateway import HTCGateway
        gateway = HTCGateway()
        cluster = gateway.new_cluster()
        made = cluster  # (the test's: the seed's first view, closed after the seed's lines)
        cluster  # noqa: B018  (the seed displays it)
        # Scale my cluster to 5 HTCondor workers
        cluster.scale(5)
        # Obtain a client for connecting to your cluster scheduler
        # Your cluster should be ready to take requests
        client = cluster.get_client()
        client  # noqa: B018
        name = cluster.name
        try:
            assert len(condor_jobs(name)) == 5  # asked of HTCondor itself
            client.wait_for_workers(5, 150)
            assert client.gather(client.map(square, range(10))) == [x * x for x in range(10)]
            # To list your clusters:
            clusters = gateway.list_clusters()
            clusters  # noqa: B018
            cluster_name = clusters[0].name
            assert cluster_name == name
            # To connect to a specific cluster from the list:
            cluster = gateway.connect(cluster_name)
            cluster  # noqa: B018
            # To gracefully close the cluster and remove HTCondor worker jobs associated to it:
            cluster.shutdown()
            # the first view learned that the cluster closes: it replaced no removed job
            assert made.pools["htcondor"].submit_calls == 1
        finally:
            client.close()
            made.close()
            get_system("htcondor").remove_cluster(name)
    try:
        assert condor_jobs(name) == []
        assert name not in {report.name for report in gateway.list_clusters()}
    finally:
        gateway.close()


def seed_001_new_cluster(address: str, proxy_address: str, project: str):
    """Seed 001's cluster creation, imports mapped (``dask_gateway`` -> ``hybrid``)."""
    import os

    from hybrid import HTCGateway as Gateway

    gateway = Gateway(address, proxy_address=proxy_address)
    os.environ["X509_USER_PROXY"] = "/path-to-voms-proxy/"
    cluster = gateway.new_cluster(
        pixi_project=project,  # path to pixi project (directory containing pixi.toml file)
        worker_cores=1,    # cores per worker
        worker_memory=4,   # memory per worker in GB
        env=dict(os.environ),  # pass environment as a dictionary
    )
    cluster  # noqa: B018
    return gateway, cluster


@pytest.mark.parametrize("pool", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_seed_001_new_cluster_and_discovery(request, dev_gateway, site, doubles, tmp_path,
                                            monkeypatch, pool) -> None:
    if pool == "slurm":
        request.getfixturevalue("slurm_cluster")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pixi.toml").write_text('[project]\nname = "analysis"\n')
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "a-hub-token-of-this-notebook")
    monkeypatch.setenv("NB_UID", "1000")
    with site(pool), dask.config.set({"hybrid.gateway.required-env": ["NB_UID"]}), \
            pytest.warns(UserWarning, match="JUPYTERHUB_API_TOKEN"):
        gateway, cluster = seed_001_new_cluster(dev_gateway.address, dev_gateway.proxy_address,
                                                str(project))
    try:
        # the options the gateway offers went to the gateway (its cluster options) ...
        report = gateway.get_cluster(cluster.name)
        assert report.options["worker_cores"] == 1 and report.options["worker_memory"] == 4
        # ... and sized the batch pool; the hub token went nowhere near a job
        script = cluster.job_script()
        assert "export X509_USER_PROXY=/path-to-voms-proxy/" in script
        assert "export NB_UID=1000" in script
        assert "a-hub-token-of-this-notebook" not in script
        assert cluster.pools[pool].spec.memory == 4 * 2**30
        cluster.scale(2)
        # seed 001, "Cluster discovery and connecting a client"
        clusters = gateway.list_clusters()
        cluster_name = next(c.name for c in clusters if c.name == cluster.name)
        client = gateway.connect(cluster_name).get_client()
        client.wait_for_workers(2, 120)
        assert client.gather(client.map(square, range(6))) == [x * x for x in range(6)]
        client.close()
    finally:
        cluster.shutdown()
        gateway.close()
    if pool == "slurm":
        wait_for(lambda: slurm_jobs(cluster.name) == [], timeout=60, message="no job left")


def test_a_scale_beyond_the_admins_limit_is_refused_before_anything_is_submitted(
        start_gateway, staging) -> None:
    """The gateway admin's cluster_max_workers holds for batch workers: the client refuses,
    naming the gateway's own number, and nothing reaches the batch system."""
    from hybrid import HTCGateway

    dev = start_gateway(cluster_max_workers=2)
    gateway = dev.gateway(HTCGateway)
    cluster = gateway.new_cluster(pool="local")
    try:
        with pytest.raises(ConfigurationError, match="cluster_max_workers") as caught:
            cluster.scale(3)
        assert "at most 2 job(s)" in str(caught.value)
        assert cluster.jobs() == [] and cluster.pools["local"].submit_calls == 0
        assert not staging.exists() or not any(staging.iterdir())  # nothing was staged
        with pytest.raises(ConfigurationError, match="cluster_max_workers"):
            cluster.adapt(minimum=0, maximum=5)
        cluster.scale(2)  # within the limit: fine
        cluster.wait_for_workers(2, 60)
    finally:
        cluster.shutdown()
        gateway.close()


def test_a_failed_submission_leaves_no_tls_key_on_disk(dev_gateway, staging, tmp_path,
                                                       monkeypatch) -> None:
    """A scale that the batch system refuses, then a reconnect that fails: no copy of the
    cluster's key anywhere under the staging directory."""
    from hybrid import HTCGateway
    from hybrid.errors import BatchError

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: the submission fails
    gateway = dev_gateway.gateway(HTCGateway)
    cluster = gateway.new_cluster(pool="slurm")
    try:
        with pytest.raises(BatchError, match="'sbatch' was not found"):
            cluster.scale(1)
        keys = [p for p in staging.rglob("*.pem")] if staging.exists() else []
        assert keys == []
        cluster.close(shutdown=False)
        again = gateway.connect(cluster.name)
        assert again.jobs() == []
        again.shutdown()
    finally:
        if cluster.status != "closed":
            cluster.shutdown()
        gateway.close()
    assert not staging.exists() or not any(staging.rglob("*"))
