"""What a notebook shows of a cluster: an HTML repr, and an ipywidgets widget with controls.

:class:`ClusterViews` gives :class:`~hybrid.HybridCluster` and
:class:`~hybrid.gateway.HTCGatewayCluster` their ``_repr_html_`` (one row per pool:
system, resources, target, connected workers, pending/running/suspended/held jobs with the
batch system's reasons, adaptivity and its bounds, the dashboard and its Pools page), and their
``_widget`` (the same table with per-pool controls to scale or adapt, when ipywidgets is
installed and the cluster is synchronous). The display carries both, so a static notebook
or nbviewer shows the HTML where the widget cannot run.
"""

from __future__ import annotations

from typing import Any

from hybrid.widgets.html import (
    PoolRow,
    cluster_html,
    cluster_repr_html,
    pool_rows,
    pools_table,
)

__all__ = ["ClusterViews", "PoolRow", "cluster_html", "cluster_repr_html", "pool_rows",
           "pools_table"]


class ClusterViews:
    """The notebook views of a cluster (mixed into both cluster classes)."""

    def _repr_html_(self, *args: Any, **kwargs: Any) -> str:
        return cluster_repr_html(self)

    def _widget(self) -> Any:
        """The ipywidgets widget (``None`` without ipywidgets, or for an asynchronous
        cluster, whose controls could not wait for the API's answer)."""
        cached = self.__dict__.get("_cached_widget", False)
        if cached is not False:
            return cached
        widget = None
        if not getattr(self, "asynchronous", False):
            try:
                from hybrid.widgets.controls import ClusterWidget

                view = ClusterWidget(self)
            except ImportError:
                view = None
            if view is not None:
                view.start()
                widget = view.root
                self.__dict__["_hybrid_widget"] = view
        self.__dict__["_cached_widget"] = widget
        return widget

    def _ipython_display_(self, **kwargs: Any) -> None:
        """The widget with the HTML repr beside it (what a static rendering shows)."""
        from IPython.display import display

        bundle: dict[str, Any] = {}
        widget = self._widget()
        if widget is not None:
            bundle = widget._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = repr(self)
        bundle["text/html"] = self._repr_html_()
        display(bundle, raw=True)
