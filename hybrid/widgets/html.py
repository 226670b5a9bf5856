"""The cluster as HTML: one row per pool, without ipywidgets.

What a static notebook, nbviewer or JupyterLab without the widget manager shows of a
:class:`~hybrid.HybridCluster` or an :class:`~hybrid.gateway.HTCGatewayCluster`; the
ipywidgets cluster widget (:mod:`hybrid.widgets.controls`) shows the same table above its
controls. Every string from a user, a site or a batch system is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hybrid.manager import ManagedPool, PoolStatus
from hybrid.units import format_bytes

__all__ = ["PoolRow", "cluster_html", "cluster_repr_html", "pool_rows", "pools_table"]

_STYLE = ("<style>.hybrid-pools{border-collapse:collapse;font-size:90%}"
          ".hybrid-pools th,.hybrid-pools td{padding:2px 8px;text-align:left;"
          "border-bottom:1px solid #ddd}.hybrid-pools .hybrid-why{color:#8a6d3b}"
          ".hybrid-pools .hybrid-failed{color:#a94442}</style>")


@dataclass(frozen=True)
class PoolRow:
    """One pool as a row of the cluster's table."""

    status: PoolStatus
    resources: str

    @property
    def name(self) -> str:
        """The pool's name."""
        return self.status.name

    @property
    def adaptive(self) -> str:
        """``"0-10"`` while the pool adapts, else ``"off"``."""
        bounds = self.status.adaptive
        return f"{bounds[0]}-{bounds[1]}" if bounds else "off"

    @property
    def why(self) -> str:
        """The batch system's reasons, ``"pending: Resources (3); held: ..."``."""
        parts = []
        for state, reasons in self.status.reasons.items():
            parts.append(f"{state}: " + ", ".join(f"{reason} ({count})"
                                                  for reason, count in reasons.items()))
        if self.status.fallback:  # (as the summary says it)
            parts.append(self.status.fallback_words())
        return "; ".join(parts)


def describe_resources(pool: ManagedPool) -> str:
    """``GPU: 4 cores, 1 GPU, 8 GiB, 1 worker per job``."""
    spec = pool.spec
    parts = [f"{spec.cores} core{'s' if spec.cores != 1 else ''}"]
    if spec.gpus:
        parts.append(f"{spec.gpus} GPU{'s' if spec.gpus != 1 else ''}")
    if spec.memory:
        parts.append(format_bytes(int(spec.memory)))
    if spec.processes > 1:
        parts.append(f"{spec.processes} workers per job")
    return f"{pool.resource}: " + ", ".join(parts)


def pool_rows(pools: Mapping[str, ManagedPool], manager: Any = None) -> list[PoolRow]:
    """A row per pool, as of the pools' last refresh (no batch system is asked), with the
    pool its demand falls back to where ``manager`` has an order of preference."""
    return [PoolRow(manager.status_of(pool) if manager is not None else pool.status(),
                    describe_resources(pool)) for pool in pools.values()]


def _cell(value: Any, css: str = "") -> str:
    klass = f" class='{css}'" if css else ""
    return f"<td{klass}>{html.escape(str(value))}</td>"


def pools_table(rows: list[PoolRow]) -> str:
    """The table of pools: system, resources, target, workers, jobs by state, adaptivity,
    the batch system's reasons."""
    if not rows:
        return ("<p class='hybrid-no-pools'>No pool yet: add one with "
                "<code>cluster.add_pool(name, system, ...)</code>.</p>")
    head = "".join(f"<th>{title}</th>" for title in (
        "pool", "system", "resources", "target", "workers", "pending", "running",
        "suspended", "held", "adaptive", "why (batch system)"))
    body = []
    for row in rows:
        status = row.status
        why = row.why + (f"; gave up: {status.failed}" if status.failed else "")
        body.append(
            f"<tr class='hybrid-pool' data-pool='{html.escape(row.name, quote=True)}'>"
            + _cell(row.name) + _cell(status.system) + _cell(row.resources)
            + _cell(status.target) + _cell(status.connected)
            + _cell(status.jobs.get("pending", 0)) + _cell(status.jobs.get("running", 0))
            + _cell(status.jobs.get("suspended", 0)) + _cell(status.jobs.get("held", 0))
            + _cell(row.adaptive)
            + _cell(why, "hybrid-failed" if status.failed else "hybrid-why") + "</tr>")
    return (f"{_STYLE}<table class='hybrid-pools'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def cluster_html(kind: str, name: str, status: str, dashboard_link: str | None,
                 scheduler_address: str | None, rows: list[PoolRow],
                 workers: int | None = None) -> str:
    """The whole repr: the cluster's name, state and links, and its pools' table."""
    link = ""
    if dashboard_link:
        base = dashboard_link.rsplit("/status", 1)[0] if dashboard_link.endswith(
            "/status") else dashboard_link.rstrip("/")
        link = (f"<a href='{html.escape(dashboard_link, quote=True)}' target='_blank'>"
                f"{html.escape(dashboard_link)}</a> (pools: <a href='"
                f"{html.escape(base + '/pools', quote=True)}' target='_blank'>"
                f"{html.escape(base + '/pools')}</a>)")
    # "Not Available": dask-gateway's GatewayCluster wording, which its own tests look for
    facts = [f"<li><b>Status:</b> {html.escape(status)}</li>",
             f"<li><b>Dashboard:</b> {link or 'Not Available'}</li>"]
    if scheduler_address:
        facts.append(f"<li><b>Scheduler:</b> {html.escape(scheduler_address)}</li>")
    if workers is not None:
        facts.append(f"<li><b>Workers connected:</b> {workers}</li>")
    return (
        "<div class='hybrid-cluster' style='display:inline-block;padding:8px 12px;"
        "border:1px solid #999;background:#f7f7f7'>"
        f"<h3 style='margin-top:0'>{html.escape(kind)} {html.escape(name)}</h3>"
        f"<ul style='margin:0 0 6px 0'>{''.join(facts)}</ul>"
        f"{pools_table(rows)}</div>")


def _status_name(cluster: Any) -> str:
    status = getattr(cluster, "status", "unknown")
    return str(getattr(status, "name", status))


def cluster_repr_html(cluster: Any) -> str:
    """The HTML of a cluster: its name, state, links and pools (see :func:`cluster_html`)."""
    try:
        workers: int | None = len(cluster.scheduler_info.get("workers", {}))
    except Exception:
        workers = None
    try:
        pools = dict(cluster.pools)
    except Exception:
        pools = {}
    address = getattr(cluster, "scheduler_address", None)
    return cluster_html(type(cluster).__name__, str(cluster.name), _status_name(cluster),
                        getattr(cluster, "dashboard_link", None) or None,
                        str(address) if address else None,
                        pool_rows(pools, getattr(cluster, "manager", None)
                                  or getattr(cluster, "_pools", None)), workers)
