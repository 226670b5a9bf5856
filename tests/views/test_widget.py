"""The cluster widget and HTML repr on a REAL cluster (local-pool workers are real processes).

The controls call the cluster's API: bad values get the API's own errors in the pool's row
and nothing is submitted. The same views on a gateway cluster run on the REAL dev gateway.
"""

from __future__ import annotations

import re

import dask
import pytest

from hybrid import HybridCluster
from tests.batch.test_real_pools import wait_for

pytestmark = pytest.mark.timeout(180)


def _view(cluster):
    assert cluster._widget() is not None
    return cluster.__dict__["_hybrid_widget"]


def test_the_widget_refuses_bad_values_with_the_apis_errors_and_submits_nothing(
        staging) -> None:
    with HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        view = _view(cluster)
        row = view.controls["cpu"]
        row.jobs.value = -1
        row.scale_button.click()
        assert "scale.n = -1 is not valid" in row.message.value
        row.minimum.value, row.maximum.value = 5, 2
        row.adapt_button.click()
        assert "adapt.minimum = 5 is not valid: expected at most maximum (2)" in (
            row.message.value)
        pool = cluster.pools["cpu"]
        assert (pool.submit_calls, pool.jobs, pool.target, pool.adaptive) == (0, {}, 0, None)
        assert not any(staging.glob("*")), "nothing staged for a refused value"
        # a good value goes through the same API call
        row.jobs.value = 1
        row.scale_button.click()
        assert "target 1 job(s)" in row.message.value
        cluster.wait_for_workers(1, timeout=60, progress=False)
        wait_for(lambda: (view.redraw() and "<td>running</td>" not in view.table.value)
                 and re.search(r"<td>cpu</td><td>local</td><td>notGPU: 1 core</td><td>1</td>"
                               r"<td>1</td><td>0</td><td>1</td><td>0</td><td>0</td><td>off</td>",
                               view.table.value), 30, "the row shows 1 running, 1 worker")
        row.minimum.value, row.maximum.value = 0, 3
        row.adapt_button.click()
        assert "adapting between 0 and 3" in row.message.value
        assert cluster.pool_status()["cpu"].adaptive == (0, 3)
        view.redraw()
        assert "<td>0-3</td>" in view.table.value


def test_a_job_whose_worker_connected_shows_running_without_waiting_for_a_poll(
        staging) -> None:
    """What a notebook shows right after ``wait_for_workers``: the connected worker's job
    runs (no batch query has run: the poll interval is an hour)."""
    with dask.config.set({"hybrid.batch.poll-interval": "1 hour"}), HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        cluster.scale(1, pool="cpu")
        assert cluster.pool_status()["cpu"].jobs["pending"] == 1  # as submitted
        cluster.wait_for_workers(1, pool="cpu", timeout=60, progress=False)
        status = cluster.pool_status()["cpu"]
        assert (status.connected, status.jobs["pending"], status.jobs["running"]) == (1, 0, 1)
        assert re.search(r"<td>cpu</td><td>local</td><td>notGPU: 1 core</td><td>1</td>"
                         r"<td>1</td><td>0</td><td>1</td>", cluster._repr_html_())


def test_a_pool_added_later_gets_its_row_and_controls(staging) -> None:
    with HybridCluster() as cluster:
        view = _view(cluster)
        assert "No pool yet" in view.table.value and view.controls == {}
        cluster.add_pool("gpu", "local", nanny=False, gpus=1, cores=2, memory="1 GiB")
        view.redraw()
        assert list(view.controls) == ["gpu"]
        assert "<td>GPU: 2 cores, 1 GPU, 1GiB</td>" in view.table.value


def test_the_html_repr_escapes_and_needs_no_ipywidgets(staging) -> None:
    with HybridCluster(name="repr-test") as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        page = cluster._repr_html_()
    assert "<h3 style='margin-top:0'>HybridCluster repr-test</h3>" in page
    assert "data-pool='cpu'" in page and "/pools" in page
    assert "ipywidgets" not in page and "<script" not in page


def test_every_view_shows_the_workers_and_the_fallback_as_pool_status_does(staging) -> None:
    """The notebook table and the Pools page show what ``pool_status()`` says: the workers
    connected (a job of two worker processes counts two; the table counted jobs), and the
    pool the demand falls back to (left out of both)."""
    from hybrid.dashboard import POOLS_METADATA_KEY

    with HybridCluster() as cluster:
        cluster.add_pool("batch", "local", nanny=True, processes=2, cores=2)
        cluster.add_pool("fast", "local", nanny=False)
        cluster.prefer(["batch", "fast"], fallback_after="5 minutes")
        cluster.scale(1, pool="batch")
        cluster.wait_for_workers(2, pool="batch", timeout=120, progress=False)
        wait_for(lambda: cluster.pool_status()["batch"].connected == 2, 30,
                 "pool_status to count both workers of the job")
        status = cluster.pool_status()["batch"]
        assert status.fallback is not None and "falls back to fast" in status.summary()
        table = cluster._repr_html_()
        assert "falls back to fast after 5 min pending" in table
        assert re.search(r"<td[^>]*>2</td>", table), table  # the workers column: 2

        def page() -> dict:
            with cluster.get_client(set_as_default=False) as client:
                return (client.get_metadata([POOLS_METADATA_KEY], default=None) or {}).get(
                    "pools", {}).get("batch", {})

        wait_for(lambda: page().get("fallback") is not None, 30,
                 "the Pools page's snapshot to carry the fallback")
        assert "falls back to fast" in page()["summary"]


def test_the_controls_follow_the_api_and_keep_what_the_user_is_typing(staging) -> None:
    """After an API ``scale``/``adapt``, the pool's controls showed the values they started
    with: Adapt pressed unedited re-adapted between the old bounds. A control follows the
    pool until the user types in it (what they typed stays until they press its button)."""
    with dask.config.set({"hybrid.batch.poll-interval": "1 hour"}), HybridCluster() as cluster:
        cluster.add_pool("cpu", "local", nanny=False)
        view = _view(cluster)
        row = view.controls["cpu"]
        assert (row.jobs.value, row.minimum.value, row.maximum.value) == (0, 0, 1)
        cluster.adapt(pool="cpu", minimum=0, maximum=3)  # the API, not the widget
        view.redraw()
        assert (row.minimum.value, row.maximum.value) == (0, 3)
        row.adapt_button.click()  # unedited: the bounds the pool has
        assert cluster.pool_status()["cpu"].adaptive == (0, 3), row.message.value
        row.jobs.value = 5  # typed, not pressed yet
        cluster.adapt(pool="cpu", minimum=1, maximum=4)
        view.redraw()
        assert (row.jobs.value, row.minimum.value, row.maximum.value) == (5, 1, 4)
        cluster.scale(1, pool="cpu")  # a fixed target again: the bounds stay as they were
        view.redraw()
        assert (row.jobs.value, row.minimum.value, row.maximum.value) == (5, 1, 4)
        row.jobs.value = 1  # the user's value now matches the pool's: it follows again
        view.redraw()
        cluster.scale(0, pool="cpu")
        view.redraw()
        assert row.jobs.value == 0, (row._shown, cluster.pool_status()["cpu"])
