"""Pool preference with fallback: which pool takes a pool's demand when its jobs wait.

A facility's pools for the same work differ: a large batch queue that is slow to start, a
small Kubernetes allowance that starts at once. ``cluster.prefer(["slurm", "k8s"],
fallback_after="10 minutes")`` puts them in an order: the demand goes to ``slurm`` first;
the demand its jobs do not meet goes on to ``k8s``, where a job of ``slurm`` stops counting
as meeting demand once it has waited in the queue longer than ``fallback_after`` (held jobs
at once), and where ``slurm``'s ``maximum`` is reached. When ``slurm``'s workers arrive,
the demand left for ``k8s`` shrinks and so does ``k8s`` (its pending jobs first, then its
idle workers, as adaptivity always scales down). The preferred pool keeps its waiting jobs:
they keep their place in the queue.

:class:`Preferences` holds the orders of one cluster (as edges "this pool falls back to that
one", checked: known pools that serve the same tasks, no pool twice, no cycle);
:func:`shares` is the arithmetic, a pure function the adaptivity of every pool in an order
calls with the same facts, so all pools of an order agree on the split.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybrid.batch import JobState
from hybrid.errors import ConfigurationError
from hybrid.manager.pool import ManagedPool

#: The longest fallback time accepted (a week): beyond, a job is better removed.
MAX_FALLBACK_AFTER = 7 * 86400.0


@dataclass(frozen=True)
class Fallback:
    """The pool that takes a pool's demand, and after how long a pending job stops
    counting (seconds)."""

    pool: str
    after: float


@dataclass(frozen=True)
class Capacity:
    """What :func:`shares` needs of one pool of an order."""

    name: str
    #: Tasks one job's workers run at once.
    tasks_per_job: int
    #: Jobs the pool may have (its adaptive maximum; a fixed pool: its target).
    maximum: int
    #: Jobs that count toward its target now (queued and running, not retiring).
    plan: int
    #: Of those, pending jobs that waited longer than the pool's ``fallback_after``, and
    #: held jobs: they do not count as meeting demand.
    stale: int
    #: Whether the pool adapts (a fixed pool keeps its target whatever the demand).
    adaptive: bool = True


def shares(demand: int, order: Sequence[Capacity]) -> dict[str, int]:
    """The jobs each pool of ``order`` (preferred first) should have for ``demand`` tasks.

    Each pool in turn takes what is left, up to its maximum; what its jobs will not meet
    (its stale jobs, the part beyond its maximum) is left for the next.
    """
    left = max(0, demand)
    out: dict[str, int] = {}
    for pool in order:
        per_job = max(1, pool.tasks_per_job)
        want = (min(pool.maximum, math.ceil(left / per_job)) if pool.adaptive
                else pool.plan)
        out[pool.name] = want
        # the jobs it will have (it submits up to want at once), less those not coming
        coming = max(pool.plan, want) - pool.stale
        left = max(0, left - max(0, min(want, coming)) * per_job)
    return out


def capacity(pool: ManagedPool, fraction: float, now: float,
             fallback: tuple[str, float] | None) -> Capacity:
    """The :class:`Capacity` of a pool as of its last refresh (``now``: manager clock)."""
    adaptive = pool.adaptive
    plan = len(pool.counted())
    stale = 0
    if fallback is not None:
        stale = pool.state_counts.get(JobState.held, 0)  # as of the last refresh
        stale += pool.stale_pending(now, fallback[1])
    return Capacity(pool.name, pool.spec.tasks_per_job(fraction),
                    adaptive.maximum if adaptive is not None else pool.target,
                    plan, stale, adaptive is not None)


class Preferences:
    """The orders of preference between a cluster's pools."""

    def __init__(self) -> None:
        #: Pool name -> the pool that takes its demand when its jobs wait.
        self.fallbacks: dict[str, Fallback] = {}

    def fallback_of(self, name: str) -> tuple[str, float] | None:
        """``(pool, seconds)`` that takes ``name``'s demand, or ``None``."""
        found = self.fallbacks.get(name)
        return (found.pool, found.after) if found else None

    def order_of(self, name: str) -> list[str]:
        """The whole order ``name`` belongs to, preferred first (``[name]`` alone when it
        is in none)."""
        ahead = {f.pool: p for p, f in self.fallbacks.items()}
        head = name
        while head in ahead:
            head = ahead[head]
        order = [head]
        while order[-1] in self.fallbacks:
            order.append(self.fallbacks[order[-1]].pool)
        return order

    def clear(self) -> None:
        """Forget every order."""
        self.fallbacks.clear()

    def add(self, order: Any, pools: Mapping[str, ManagedPool], after: Any,
            label: str = "prefer") -> None:
        """Check and record an order (preferred first): each pool falls back to the next.

        Refused, with nothing changed: fewer than two pools, an unknown pool, a pool named
        twice, pools that serve different tasks, a fallback time that is not a duration of
        0 to 7 days, or a result where a pool would take over from two pools or the orders
        would form a cycle. A pool's earlier fallback is replaced.
        """
        from pydantic_core import PydanticCustomError

        from hybrid.fields import seconds

        if isinstance(order, str) or not isinstance(order, (list, tuple)) or len(order) < 2:
            raise ConfigurationError(f"{label}.order", order,
                                     "a list of two or more pool names, the preferred first")
        for name in order:
            if not isinstance(name, str) or name not in pools:
                raise ConfigurationError(
                    f"{label}.order", name, f"the name of a pool of this cluster, one of "
                    f"{sorted(pools)}" if pools else "a pool added with add_pool first")
        repeated = [n for i, n in enumerate(order) if n in order[:i]]
        if repeated:
            raise ConfigurationError(
                f"{label}.order", list(order), f"each pool once: {repeated[0]} comes back, "
                "and an order that returns to a pool is a cycle")
        served = {name: pools[name].served for name in order}
        first = order[0]
        for name in order[1:]:
            if served[name] != served[first]:
                raise ConfigurationError(
                    f"{label}.order", list(order),
                    f"pools that serve the same tasks: {first} runs "
                    f"{_tasks(served[first])}, {name} runs {_tasks(served[name])}",
                    "Put GPU pools and CPU pools in separate orders.")
        try:
            wait = seconds(after, allow_zero=True)
        except PydanticCustomError as error:
            raise ConfigurationError(f"{label}.fallback_after", after,
                                     str((error.context or {}).get("accepted", error))
                                     .replace("(0: none)", "(0: fall back as soon as a job "
                                              "pends)")) from None
        if wait > MAX_FALLBACK_AFTER:
            raise ConfigurationError(f"{label}.fallback_after", after,
                                     "a duration of at most 7 days: a job that waits longer "
                                     "is better removed")
        proposed = dict(self.fallbacks)
        for preferred, then in itertools.pairwise(order):
            proposed[preferred] = Fallback(then, wait)
        takers: dict[str, list[str]] = {}
        for preferred, fallback in proposed.items():
            takers.setdefault(fallback.pool, []).append(preferred)
        for then, froms in takers.items():
            if len(froms) > 1:
                raise ConfigurationError(
                    f"{label}.order", list(order),
                    f"an order where each pool takes over from one pool: {then} would take "
                    f"the demand of {' and '.join(sorted(froms))}",
                    f"Chain them instead, e.g. [{', '.join(sorted(froms))}, {then}].")
        for start in proposed:
            seen = [start]
            while seen[-1] in proposed:
                nxt = proposed[seen[-1]].pool
                if nxt in seen:
                    raise ConfigurationError(
                        f"{label}.order", list(order),
                        "an order without a cycle: with the earlier orders this gives "
                        + " -> ".join([*seen[seen.index(nxt):], nxt]),
                        "cluster.prefer(None) forgets the earlier orders.")
                seen.append(nxt)
        self.fallbacks = proposed


def _tasks(served: set[str | None]) -> str:
    kinds = sorted("unannotated" if s is None else s for s in served)
    return " and ".join(kinds) + " tasks" if kinds else "no tasks"
