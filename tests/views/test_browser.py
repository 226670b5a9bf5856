"""What a person sees, in a REAL headless Chromium: the widget's HTML, a notebook executed by a
REAL kernel (nbclient) and rendered by nbconvert, and the dashboard's Pools page of a live
cluster on the REAL HTCondor pool (and on the REAL Slurm, where its query fails).

Screenshots are written as test artefacts (tests/views/browser.py); docs/ shows copies.
"""

from __future__ import annotations

import re
import textwrap
import time

import pytest

from hybrid import HybridCluster
from tests.batch.test_real_pools import condor_jobs, slurm_jobs, wait_for
from tests.views.browser import assert_served_with, chromium, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_the_html_repr_shows_a_row_per_pool_in_chromium(staging, tmp_path) -> None:
    with HybridCluster(name="repr-in-chromium", dashboard_address="127.0.0.1:0") as cluster:
        cluster.add_pool("cpu", "local", nanny=False, cores=1, memory="1 GiB")
        cluster.add_pool("gpu", "local", nanny=False, gpus=1)
        cluster.scale(2, pool="cpu")
        cluster.wait_for_workers(2, pool="cpu", timeout=60, progress=False)
        wait_for(lambda: cluster.pool_status()["cpu"].connected == 2, 30, "2 jobs connected")
        page_file = tmp_path / "repr.html"
        page_file.write_text(f"<html><body>{cluster._repr_html_()}</body></html>")
        with chromium(tmp_path / "profile", height=400) as browser:
            page = browser.new_page()
            page.goto(page_file.as_uri())
            rows = page.locator("tr.hybrid-pool")
            assert rows.count() == 2
            cpu = [c.strip() for c in rows.nth(0).locator("td").all_inner_texts()]
            assert cpu[:10] == ["cpu", "local", "notGPU: 1 core, 1GiB", "2", "2", "0", "2", "0",
                                "0", "off"]
            gpu = [c.strip() for c in rows.nth(1).locator("td").all_inner_texts()]
            assert gpu[:4] == ["gpu", "local", "GPU: 1 core, 1 GPU", "0"]
            assert page.get_by_role("heading").inner_text() == "HybridCluster repr-in-chromium"
            link = page.locator("a", has_text="/pools")
            assert link.get_attribute("href") == cluster.dashboard_link.replace(
                "/status", "/pools")
            assert page.locator("table.hybrid-pools").is_visible()
            screenshot(page, "widget-html-repr")


NOTEBOOK_CELLS = [
    """\
    import dask
    dask.config.set({"hybrid.scheduler.host": "127.0.0.1",
                     "hybrid.batch.staging-directory": STAGING})
    from hybrid import HybridCluster
    cluster = HybridCluster(name="notebook-demo", dashboard_address="127.0.0.1:0")
    cluster.add_pool("cpu", "local", nanny=False)
    gpu = cluster.add_pool("gpu", "local", nanny=False, gpus=1)""",
    """\
    cluster.scale(2, pool="cpu")
    cluster.wait_for_workers(2, pool="cpu", timeout=120)""",
    "cluster",
    "cluster.close()",
]


def _outputs(cell: dict) -> list[dict]:
    return [o for o in cell["outputs"] if o["output_type"] in ("display_data",
                                                               "execute_result")]


def test_a_notebook_run_by_a_real_kernel_shows_progress_and_the_cluster(
        staging, tmp_path) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    cells = [textwrap.dedent(c).replace("STAGING", repr(str(staging)))
             for c in NOTEBOOK_CELLS]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    NotebookClient(notebook, timeout=240, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    # the kernel's progress display, updated in place to its last state
    [progress] = _outputs(notebook.cells[1])
    assert "hybrid-wait" in progress["data"]["text/html"]
    assert "workers (cpu): 2/2 connected" in progress["data"]["text/html"]
    assert "all connected" in progress["data"]["text/html"]
    # the cluster: the widget and, beside it, the HTML a static rendering shows
    [shown] = _outputs(notebook.cells[2])
    assert "application/vnd.jupyter.widget-view+json" in shown["data"]
    assert "data-pool='cpu'" in shown["data"]["text/html"]
    assert notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    (tmp_path / "demo.ipynb").write_text(nbformat.writes(notebook))

    # rendered as a static viewer shows it where the widget's JavaScript cannot run (no
    # network here for nbconvert's widget manager): the HTML beside the widget
    static = Config({"NbConvertBase": {"display_data_priority": [
        "text/html", "text/markdown", "image/svg+xml", "image/png", "text/plain"]}})
    body, _ = HTMLExporter(config=static, template_name="lab").from_notebook_node(notebook)
    rendered = tmp_path / "demo.html"
    rendered.write_text(body)
    with chromium(tmp_path / "profile", height=700) as browser:
        page = browser.new_page()
        page.goto(rendered.as_uri(), wait_until="domcontentloaded")
        bar = page.locator(".hybrid-wait progress")
        assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("2", "2")
        assert page.locator(".hybrid-wait").inner_text().strip().startswith(
            "workers (cpu): 2/2 connected")
        rows = page.locator("tr.hybrid-pool")
        assert rows.count() == 2 and rows.nth(0).is_visible()
        cpu = [c.strip() for c in rows.nth(0).locator("td").all_inner_texts()]
        assert cpu[:2] == ["cpu", "local"] and cpu[3] == "2" and cpu[6] == "2"
        screenshot(page, "notebook-rendered")


def _pools_page(cluster: HybridCluster) -> str:
    return cluster.dashboard_link.replace("/status", "/pools")


def _cluster_ca(cluster: HybridCluster) -> str:
    """The cluster's CA (PEM): its dashboard is HTTPS with the cluster's certificate."""
    ca = cluster.security.tls_ca_file
    assert ca and cluster.dashboard_link.startswith("https://"), cluster.dashboard_link
    return ca if "-----BEGIN" in ca else open(ca).read()


def _published(cluster: HybridCluster) -> dict:
    from hybrid.dashboard import POOLS_METADATA_KEY

    client = cluster.get_client()
    try:
        return client.get_metadata([POOLS_METADATA_KEY], default=None) or {}
    finally:
        client.close()


@pytest.mark.htcondor
def test_the_pools_page_of_a_live_cluster_on_htcondor(htcondor_pool, staging, tmp_path) -> None:
    later = int(time.time()) + 3600  # the CI pool's START expression holds it until then
    with HybridCluster(name="pools-page", dashboard_address="127.0.0.1:0") as cluster:
        cluster.add_pool("cpu", "htcondor", nanny=False, cores=1, memory="1 GiB")
        cluster.add_pool("queued", "htcondor", nanny=False, cores=1, memory="1 GiB",
                         job_extra_directives=[f"+HybridCIStartAfter = {later}"])
        cluster.scale(2, pool="cpu")
        cluster.scale(1, pool="queued")
        cluster.wait_for_workers(2, pool="cpu", timeout=180, progress=False)
        cpu_jobs = sorted(cluster.pools["cpu"].jobs)
        [queued_job] = cluster.pools["queued"].jobs
        wait_for(lambda: (p := _published(cluster).get("pools")) and p["cpu"]["workers"] == 2
                 and p["queued"]["jobs"]["pending"] == 1, 120, "the pools published")
        from playwright.sync_api import Error as PlaywrightError

        ca = _cluster_ca(cluster)
        assert_served_with(_pools_page(cluster), ca)
        with chromium(tmp_path / "other", height=400) as browser:  # without the cluster's CA
            with pytest.raises(PlaywrightError, match="ERR_CERT_AUTHORITY_INVALID"):
                browser.new_page().goto(_pools_page(cluster))
        with chromium(tmp_path / "profile", height=1100, trust=ca) as browser:
            page = browser.new_page()
            page.goto(_pools_page(cluster))
            message = page.locator(".hybrid-pools-message")
            message.get_by_text("cluster pools-page: 2 pool(s)").wait_for(timeout=90_000)
            assert page.get_by_text("pool cpu (htcondor, notGPU; target 2)").is_visible()
            assert page.get_by_text("pool queued (htcondor, notGPU; target 1)").is_visible()
            # (with HTCondor's reason for the wait once the negotiator has given one)
            assert page.get_by_text(re.compile(
                r"pool queued \(htcondor\): 1 pending( \(.*\))?; target 1; "
                r"0 worker\(s\) connected")).is_visible()
            for job_id in [*cpu_jobs, queued_job]:  # the batch ids, in the tables
                page.get_by_text(job_id, exact=True).wait_for(timeout=60_000)
            cpu_table = page.locator(".bk-DataTable").nth(0)
            assert cpu_table.get_by_text("running").count() == 2
            assert cpu_table.get_by_text("127.0.0.1").count() == 2  # the workers' host
            queued_table = page.locator(".bk-DataTable").nth(1)
            assert queued_table.get_by_text("pending").count() == 1
            assert page.locator("canvas").count() >= 2  # a chart per pool, drawn
            assert page.locator(".navbar a", has_text="Pools").get_attribute(
                "href") == "pools"
            screenshot(page, "dashboard-pools-htcondor")
            # every other page of the dashboard links to it
            page.goto(cluster.dashboard_link)
            assert page.locator(".navbar a", has_text="Pools").is_visible()
    wait_for(lambda: not condor_jobs("pools-page"), 60, "no job left")


@pytest.mark.slurm
def test_a_failing_batch_query_shows_on_the_pools_page(slurm_cluster, staging, tmp_path,
                                                        monkeypatch) -> None:
    broken = tmp_path / "slurm.conf"
    broken.write_text("")  # squeue: "fatal: Unable to process configuration file"
    with HybridCluster(name="pools-broken", dashboard_address="127.0.0.1:0") as cluster:
        cluster.add_pool("cpu", "slurm", nanny=False, cores=1, memory="1 GiB")
        cluster.scale(1)
        cluster.wait_for_workers(1, timeout=120, progress=False)
        with monkeypatch.context() as patch:
            patch.setenv("SLURM_CONF", str(broken))
            wait_for(lambda: (_published(cluster).get("pools") or {}).get("cpu", {}).get(
                "error"), 120, "the failed query published")
            ca = _cluster_ca(cluster)
            assert_served_with(_pools_page(cluster), ca)
            with chromium(tmp_path / "profile", height=700, trust=ca) as browser:
                page = browser.new_page()
                page.goto(_pools_page(cluster))
                failure = page.locator(".hybrid-pools-message").get_by_text(
                    "pool cpu: the last query of slurm failed")
                failure.wait_for(timeout=90_000)
                assert "Unable to process configuration file" in failure.inner_text()
                # what was known before stays on the page
                assert page.get_by_text("pool cpu (slurm, notGPU; target 1)").is_visible()
                screenshot(page, "dashboard-pools-query-failed")
        wait_for(lambda: not (_published(cluster).get("pools") or {}).get("cpu", {}).get(
            "error"), 60, "the next query answered, and the message went")
    assert not slurm_jobs("pools-broken")
