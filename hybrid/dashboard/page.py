"""The "Pools" page of the Dask dashboard: runs IN the scheduler, reads what the client published.

The pools live in the process that manages them (a :class:`~hybrid.HybridCluster`, a
gateway cluster's client); every ``hybrid.batch.poll-interval`` that process writes a
snapshot into the scheduler's metadata under :data:`POOLS_METADATA_KEY`
(:mod:`hybrid.dashboard.publish`). This page, served by the scheduler's own dashboard server
(no new port; through a gateway's dashboard proxy as every other page), only reads it:
per pool a chart of its jobs by state over time and the table of its jobs with their batch
ids, hosts and the batch system's reasons.

:func:`install` adds the page to a running scheduler; the client sends it with the
scheduler's ``run_function`` (this module is pickled by value, so a scheduler without
hybrid installed serves it too: it imports only the standard library, ``distributed`` and
``bokeh``). Nothing here raises into the scheduler: a page that cannot be drawn says why on
the page, and a failing batch query is shown as a message.
"""

from __future__ import annotations

import html
import logging
import time
from typing import Any

from distributed.comm.addressing import get_address_host, unparse_host_port

logger = logging.getLogger("distributed.scheduler.hybrid_pools")

#: Where the client publishes the pools: ``scheduler.get_metadata([POOLS_METADATA_KEY])``.
POOLS_METADATA_KEY = "hybrid-pool-status"
#: The snapshot's layout (``format``), raised when it changes incompatibly.
POOLS_FORMAT = 1
#: The page's path below the dashboard's prefix.
PAGE = "/pools"
#: The states charted, and their colours (the dashboard's own palette family).
STATES = ("pending", "running", "suspended", "held", "removing", "workers")
COLORS = {"pending": "#f0ad4e", "running": "#5cb85c", "suspended": "#9467bd", "held": "#d9534f",
          "removing": "#999999", "workers": "#1f77b4"}


def _host(address: str) -> str:
    """``tcp://10.0.0.5:40123`` -> ``10.0.0.5`` (``[::1]`` for IPv6)."""
    return unparse_host_port(get_address_host(address))


def _escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


class PoolSection:
    """One pool on the page: its summary, its chart of jobs by state, its table of jobs."""

    def __init__(self, name: str) -> None:
        from bokeh.models import ColumnDataSource, DataTable, Div, TableColumn
        from bokeh.plotting import figure

        self.name = name
        self.title = Div(text="", sizing_mode="stretch_width",
                         css_classes=["hybrid-pool-title"])
        self.history = ColumnDataSource({"time": [], **{s: [] for s in STATES}})
        self.figure = figure(title=f"jobs of pool {name} by state", x_axis_type="datetime",
                             height=240, sizing_mode="stretch_width", tools="",
                             toolbar_location=None, name=f"hybrid-pool-chart-{name}")
        for state in STATES:
            self.figure.step("time", state, source=self.history, mode="after",
                             line_width=2, color=COLORS[state], legend_label=state)
        self.figure.legend.location = "top_left"
        self.figure.legend.orientation = "horizontal"
        self.figure.yaxis.axis_label = "jobs (workers: connected)"
        self.figure.y_range.start = 0
        self.jobs = ColumnDataSource({"job_id": [], "state": [], "reason": [], "host": [],
                                      "workers": []})
        self.table = DataTable(
            source=self.jobs, height=200, sizing_mode="stretch_width", index_position=None,
            name=f"hybrid-pool-table-{name}",
            columns=[TableColumn(field="job_id", title="batch job"),
                     TableColumn(field="state", title="state"),
                     TableColumn(field="reason", title="reason (from the batch system)"),
                     TableColumn(field="host", title="host"),
                     TableColumn(field="workers", title="workers")])
        self.more = Div(text="", sizing_mode="stretch_width")

    @property
    def models(self) -> list[Any]:
        """What the page shows of this pool, top to bottom."""
        return [self.title, self.figure, self.table, self.more]

    def update(self, data: dict[str, Any], now: float) -> None:
        """Show ``data`` (one pool of a snapshot), as of ``now`` (seconds since the epoch)."""
        adaptive = data.get("adaptive")
        mode = (f"adaptive {adaptive[0]}-{adaptive[1]}" if adaptive else
                f"target {data.get('target', 0)}")
        failed = (f"<p style='color:#d9534f'>gave up: {_escape(data['failed'])}</p>"
                  if data.get("failed") else "")
        self.title.text = (
            f"<h3 style='margin-bottom:2px'>pool {_escape(self.name)} "
            f"({_escape(data.get('system', '?'))}, {_escape(data.get('resource', '?'))}; "
            f"{_escape(mode)})</h3><p style='margin-top:2px'>{_escape(data.get('summary', ''))}"
            f"; {int(data.get('workers', 0))} worker(s) connected</p>{failed}")
        points = [list(p) for p in data.get("history", ())]
        counts = data.get("jobs", {})
        points.append([now, *(counts.get(s, 0) for s in STATES[:-1]),
                       int(data.get("workers", 0))])
        self.history.data = {"time": [p[0] * 1000 for p in points],
                             **{s: [p[i + 1] for p in points] for i, s in enumerate(STATES)}}
        rows = data.get("table", ())
        self.jobs.data = {
            "job_id": [str(r.get("job_id", "")) for r in rows],
            "state": [str(r.get("state", "")) for r in rows],
            "reason": [str(r.get("reason") or "") for r in rows],
            "host": [", ".join(sorted({_host(a) for a in r.get("workers", ())})) or "-"
                     for r in rows],
            "workers": [str(len(r.get("workers", ()))) for r in rows],
        }
        self.table.height = 30 + 25 * max(1, min(len(rows), 12))
        more = int(data.get("more_jobs", 0))
        self.more.text = f"<p>... and {more} more job(s) not listed</p>" if more else ""


class PoolsView:
    """The whole page: a message line and one :class:`PoolSection` per pool."""

    def __init__(self, scheduler: Any) -> None:
        from bokeh.layouts import column
        from bokeh.models import Div

        self.scheduler = scheduler
        self.message = Div(text="", sizing_mode="stretch_width",
                           css_classes=["hybrid-pools-message"], name="hybrid-pools-message")
        self.pools = column(sizing_mode="stretch_width")
        self.root = column(self.message, self.pools, sizing_mode="stretch_width")
        self.sections: dict[str, PoolSection] = {}
        self.update()

    def update(self) -> None:
        """Redraw from the latest snapshot; a problem is shown on the page, never raised."""
        try:
            self._update()
        except Exception as error:  # the scheduler's loop must never see it
            logger.debug("hybrid's Pools page could not be drawn", exc_info=True)
            self.message.text = (f"<p style='color:#d9534f'>The Pools page could not be "
                                 f"drawn: {_escape(type(error).__name__)}: {_escape(error)}</p>")

    def _update(self) -> None:
        snapshot = self.scheduler.get_metadata(keys=[POOLS_METADATA_KEY], default=None)
        if not isinstance(snapshot, dict) or not snapshot.get("pools"):
            self.message.text = (
                "<p>No pool has reported to this scheduler yet. Pools appear here once the "
                "cluster that manages them (a HybridCluster or a gateway cluster with batch "
                "pools) adds one.</p>")
            self._sections([])
            return
        if snapshot.get("format") != POOLS_FORMAT:
            self.message.text = (f"<p style='color:#d9534f'>These pools were published by "
                                 f"another version of hybrid (format "
                                 f"{_escape(snapshot.get('format'))}; this page reads "
                                 f"{POOLS_FORMAT}).</p>")
            return
        now = time.time()
        published = float(snapshot.get("time", now))
        interval = float(snapshot.get("interval", 2))
        notes = [f"cluster {_escape(snapshot.get('cluster', '?'))}: "
                 f"{len(snapshot['pools'])} pool(s), as of "
                 f"{_escape(time.strftime('%H:%M:%S', time.localtime(published)))}"]
        age = now - published
        if age > max(10.0, 3 * interval):
            notes.append(f"<span style='color:#d9534f'>the client that manages these pools "
                         f"last reported {age:.0f} s ago (closed, detached or busy): what "
                         f"follows is as of then</span>")
        for name, data in snapshot["pools"].items():
            if data.get("error"):
                notes.append(f"<span style='color:#d9534f'>pool {_escape(name)}: the last "
                             f"query of {_escape(data.get('system', 'its batch system'))} "
                             f"failed: {_escape(data['error'])}</span>")
        self.message.text = "<p>" + "<br>".join(notes) + "</p>"
        self._sections(list(snapshot["pools"]))
        for name, data in snapshot["pools"].items():
            self.sections[name].update(data, published)

    def _sections(self, names: list[str]) -> None:
        if names == list(self.sections):
            return
        self.sections = {n: self.sections.get(n) or PoolSection(n) for n in names}
        self.pools.children = [m for s in self.sections.values() for m in s.models]


def pools_doc(scheduler: Any, extra: dict[str, Any], doc: Any) -> None:
    """The bokeh document of the page, in the dashboard's own template."""
    from distributed.dashboard.components import add_periodic_callback
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    view = PoolsView(scheduler)
    doc.title = "Dask: Pools"
    add_periodic_callback(doc, view, 1000)
    doc.add_root(view.root)
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)
    doc.theme = BOKEH_THEME


def install(dask_scheduler: Any = None) -> str:
    """Add the Pools page to the scheduler's dashboard (run on the scheduler, idempotent).

    Returns what happened: ``"installed"``, ``"present"`` or ``"no dashboard: ..."``.
    """
    import sys

    scheduler = dask_scheduler
    if getattr(scheduler, "_hybrid_pools_page", None) is not None:
        return "present"
    # a scheduler that serves a dashboard has imported Bokeh's server to serve it: looked up,
    # not imported (about a second, on the scheduler's loop, to find no dashboard)
    server = sys.modules.get("bokeh.server.server")
    http = getattr(scheduler, "http_application", None)
    dashboards = [a for a in getattr(http, "applications", ())
                  if server is not None and isinstance(a, server.BokehTornado)]
    if not dashboards:
        return "no dashboard: this scheduler serves none"
    try:
        from distributed.dashboard.core import BokehApplication
        from distributed.dashboard.scheduler import template_variables
        from tornado.ioloop import IOLoop
    except ImportError as error:
        return f"no dashboard: {error}"
    prefix = getattr(dashboards[0], "_prefix", "") or ""
    variables = template_variables(scheduler)
    app = BokehApplication({PAGE: pools_doc}, scheduler, prefix=prefix,
                           template_variables=variables)
    http.add_application(app)
    app.initialize(IOLoop.current())
    app.start()
    scheduler._hybrid_pools_page = app
    pages = variables.get("pages")
    if isinstance(pages, list) and "pools" not in pages:  # in every page's menu bar
        pages.insert(pages.index("info") if "info" in pages else len(pages), "pools")
    logger.info("hybrid: the dashboard shows the pools at %s", prefix.rstrip("/") + PAGE)
    return "installed"
