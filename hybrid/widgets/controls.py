"""The cluster widget (ipywidgets): the pools' table, and per pool controls to scale or adapt.

Each control calls the cluster's own API (``scale(n, pool=...)``, ``adapt(pool=...,
minimum=..., maximum=...)``), so it validates exactly as the API does: a bad value gets the
API's error, shown in the pool's row, and nothing is submitted. The table is redrawn every
second on the cluster's event loop while the cluster runs.
"""

from __future__ import annotations

import html
import logging
import threading
from typing import Any

logger = logging.getLogger("hybrid")

__all__ = ["ClusterWidget", "PoolControls"]

#: Milliseconds between redraws of the widget's table.
REDRAW_EVERY_MS = 1000


class PoolControls:
    """One pool's row of controls: jobs + Scale, minimum + maximum + Adapt, a message.

    The fields follow the pool (its target; its bounds while it adapts), however it was
    scaled, until the user types in one: what they typed stays until the pool has it.
    """

    def __init__(self, owner: ClusterWidget, name: str, target: int,
                 adaptive: tuple[int, int] | None) -> None:
        from ipywidgets import HTML, Button, HBox, IntText, Layout

        self.owner = owner
        self.name = name
        narrow = Layout(width="150px")
        self.label = HTML(f"<b>pool {html.escape(name)}</b>", layout=Layout(width="110px"))
        self.jobs = IntText(target, description="jobs", layout=narrow)
        self.scale_button = Button(description="Scale", layout=Layout(width="70px"),
                                   tooltip=f"scale(n, pool={name!r}): a target of n jobs")
        low, high = adaptive or (0, max(target, 1))
        self.minimum = IntText(low, description="minimum", layout=narrow)
        self.maximum = IntText(high, description="maximum", layout=narrow)
        self.adapt_button = Button(description="Adapt", layout=Layout(width="70px"),
                                   tooltip=f"adapt(pool={name!r}, minimum, maximum)")
        self.message = HTML("", layout=Layout(min_width="200px"))
        self.scale_button.on_click(lambda _: self.scale())
        self.adapt_button.on_click(lambda _: self.adapt())
        self.box = HBox([self.label, self.jobs, self.scale_button, self.minimum,
                         self.maximum, self.adapt_button, self.message])
        #: What each field last showed of the pool (a field holding another value was
        #: typed in).
        self._shown = {"jobs": target, "minimum": low, "maximum": high}

    def follow(self, target: int, adaptive: tuple[int, int] | None) -> None:
        """Show the pool's ``target`` (and ``adaptive`` bounds, while it adapts) in each
        field the user has not typed in since it last showed the pool."""
        values = {"jobs": target}
        if adaptive:
            values.update(minimum=adaptive[0], maximum=adaptive[1])
        for name, value in values.items():
            field = getattr(self, name)
            if field.value in (self._shown[name], value):  # (not typed in, or caught up)
                field.value = value
                self._shown[name] = value

    def scale(self) -> None:
        """``cluster.scale(jobs, pool=name)``; its error, if any, shown in the row."""
        n = self.jobs.value
        self._run(lambda: self.owner.cluster.scale(n, pool=self.name),
                  f"target {n} job(s)")

    def adapt(self) -> None:
        """``cluster.adapt(pool=name, minimum=..., maximum=...)``; its error shown."""
        low, high = self.minimum.value, self.maximum.value
        self._run(lambda: self.owner.cluster.adapt(pool=self.name, minimum=low,
                                                   maximum=high),
                  f"adapting between {low} and {high} job(s)")

    def _run(self, action: Any, done: str) -> None:
        self.message.value = "<span style='color:#777'>working...</span>"
        try:
            action()
        except Exception as error:  # the widget shows it; the kernel has nothing to do
            self.message.value = (f"<span class='hybrid-error' style='color:#a94442'>"
                                  f"{html.escape(str(error))}</span>")
        else:
            self.message.value = f"<span style='color:#3c763d'>{html.escape(done)}</span>"
        self.owner.redraw()


class ClusterWidget:
    """The widget of one cluster (``HybridCluster`` or ``HTCGatewayCluster``)."""

    def __init__(self, cluster: Any) -> None:
        from ipywidgets import HTML, VBox

        self.cluster = cluster
        self.table = HTML("")
        self.rows = VBox([])
        self.controls: dict[str, PoolControls] = {}
        self._drawing = threading.Lock()
        self.root = VBox([self.table, self.rows])
        self._callback: Any = None
        self.redraw()

    def redraw(self, wait: bool = True) -> bool:
        """Draw the table from the pools' last refresh; add controls for new pools, and
        show each pool's target and bounds in its controls (:meth:`PoolControls.follow`).

        One redraw at a time (the loop's tick, a button's call), so that a status read
        before a change is never shown after it; ``wait=False`` (the tick, on the event
        loop, which must never wait) skips the redraw while another one runs (``False``)."""
        if not self._drawing.acquire(blocking=wait):
            return False
        try:
            self._redraw()
        finally:
            self._drawing.release()
        return True

    def _redraw(self) -> None:
        from hybrid.widgets.html import cluster_repr_html

        try:
            self.table.value = cluster_repr_html(self.cluster)
            pools = dict(self.cluster.pools)
        except Exception as error:  # a closing cluster: say so, keep the last rows
            self.table.value = (f"<p>{html.escape(type(error).__name__)}: "
                                f"{html.escape(str(error))}</p>")
            return
        shown = list(self.controls)
        for name, pool in pools.items():
            status = pool.status()
            if name in self.controls:
                self.controls[name].follow(status.target, status.adaptive)
            else:
                self.controls[name] = PoolControls(self, name, status.target, status.adaptive)
        if list(pools) != shown:  # (a pool added or gone: the rows again)
            self.controls = {n: self.controls[n] for n in pools}
            self.rows.children = [c.box for c in self.controls.values()]

    def start(self) -> None:
        """Redraw every ``REDRAW_EVERY_MS`` milliseconds on the cluster's loop until it closes."""
        from tornado.ioloop import PeriodicCallback

        def tick() -> None:
            if str(getattr(self.cluster.status, "name", self.cluster.status)) == "closed":
                if self.redraw(wait=False) and self._callback is not None:
                    self._callback.stop()  # (the last picture drawn: the closed cluster)
                return
            self.redraw(wait=False)

        def install() -> None:
            self._callback = PeriodicCallback(tick, REDRAW_EVERY_MS)
            self._callback.start()

        try:
            self.cluster.loop.add_callback(install)
        except Exception as error:  # no running loop (closed): a still picture
            logger.debug("cluster widget not refreshed: %s", error)
