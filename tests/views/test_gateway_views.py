"""A gateway cluster's widget and Pools page, on the REAL dev gateway (local-pool workers).

The Pools page is served by the cluster's scheduler inside the gateway and reached through
the gateway's own dashboard proxy (``/clusters/<name>/pools``): no new port.
"""

from __future__ import annotations

import pytest

from hybrid.dashboard import POOLS_METADATA_KEY
from hybrid.gateway.client import HTCGateway
from tests.batch.test_real_pools import wait_for
from tests.views.browser import chromium, screenshot

pytestmark = [pytest.mark.gateway, pytest.mark.browser, pytest.mark.timeout(300)]


def test_the_widget_and_the_pools_page_of_a_gateway_cluster(dev_gateway, staging,
                                                             tmp_path) -> None:
    gateway = dev_gateway.gateway(HTCGateway)
    cluster = gateway.new_cluster(pool="local")
    try:
        assert cluster._widget() is not None
        row = cluster.__dict__["_hybrid_widget"].controls["local"]
        row.jobs.value = -2
        row.scale_button.click()
        assert "scale.n = -2 is not valid" in row.message.value
        assert cluster.pools["local"].submit_calls == 0 and not cluster.pools["local"].jobs
        row.jobs.value = 1
        row.scale_button.click()
        assert "target 1 job(s)" in row.message.value
        cluster.wait_for_workers(1, timeout=120, progress=False)
        [job_id] = cluster.pools["local"].jobs
        client = cluster.get_client(set_as_default=False)
        wait_for(lambda: ((client.get_metadata([POOLS_METADATA_KEY], default=None) or {})
                          .get("pools", {}).get("local", {}).get("workers") == 1),
                 60, "the pool published with its worker")
        client.close()
        pools_page = cluster.dashboard_link.replace("/status", "/pools")
        assert pools_page.startswith(gateway.address) and f"/clusters/{cluster.name}/" in (
            pools_page), "served through the gateway's proxy"
        with chromium(tmp_path / "profile", height=700) as browser:
            page = browser.new_page()
            page.goto(pools_page)
            page.locator(".hybrid-pools-message").get_by_text(
                f"cluster {cluster.name}: 1 pool(s)").wait_for(timeout=90_000)
            assert page.get_by_text("pool local (local, notGPU; target 1)").is_visible()
            page.get_by_text(job_id, exact=True).wait_for(timeout=60_000)
            assert page.locator("canvas").count() >= 1
            screenshot(page, "dashboard-pools-gateway")
            repr_file = tmp_path / "repr.html"
            repr_file.write_text(f"<html><body>{cluster._repr_html_()}</body></html>")
            page.goto(repr_file.as_uri())
            cells = page.locator("tr.hybrid-pool td").all_inner_texts()
            assert cells[:5] == ["local", "local", "notGPU: 1 core", "1", "1"]
            assert page.get_by_role("heading").inner_text() == (
                f"HTCGatewayCluster {cluster.name}")
    finally:
        cluster.shutdown()
        gateway.close()
