"""Installing the dashboard's Pools page costs a scheduler without a dashboard nothing.

Found by measuring issue 27's HTCondor n = 4 gap: the pool manager's first publication sent
:func:`hybrid.dashboard.page.install` to a scheduler started with ``dashboard_address=None``,
which imported Bokeh's server (about a second of CPU, on the scheduler's event loop) before it
found there was no dashboard to add the page to, while the first workers were connecting.
Each check runs in a fresh interpreter: this test process may have imported Bokeh already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str) -> dict:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                            capture_output=True, text=True, timeout=100)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_cluster_without_a_dashboard_never_imports_bokehs_server(tmp_path) -> None:
    seen = _run(f"""
        import json, sys, time
        import dask
        from hybrid import HybridCluster
        from hybrid.dashboard.publish import PoolsPublisher
        dask.config.set({{"hybrid.scheduler.host": "127.0.0.1",
                          "hybrid.batch.staging-directory": {str(tmp_path)!r}}})
        with HybridCluster(dashboard_address=None) as cluster:
            cluster.add_pool("cpu", "local", nanny=False)
            cluster.scale(1, wait=True, timeout=60)
            publisher = next(o for o in cluster.manager.observers
                             if isinstance(o, PoolsPublisher))
            deadline = time.monotonic() + 60
            while publisher.published == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            print(json.dumps({{"page": publisher.page, "published": publisher.published,
                               "bokeh_server": "bokeh.server.server" in sys.modules}}))
        """)
    assert seen["published"] >= 1, seen
    assert seen["page"].startswith("no dashboard"), seen
    assert not seen["bokeh_server"], seen


def test_a_scheduler_with_a_dashboard_still_gets_the_page() -> None:
    seen = _run("""
        import asyncio, json
        from distributed import Scheduler
        from hybrid.dashboard import page

        async def main():
            async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as s:
                return [page.install(s), page.install(s)]

        print(json.dumps({"answers": asyncio.run(main())}))
        """)
    assert seen["answers"] == ["installed", "present"]
