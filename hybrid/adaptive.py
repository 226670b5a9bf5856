"""Per-pool adaptive scaling from the demand the scheduler sees for the pool's resource.

A GPU backlog grows the GPU pool only; CPU tasks grow the CPU pool only. Scaling up is
immediate (queued jobs count, so nothing is submitted twice); scaling down waits for
``wait_count`` low readings in a row and retires only idle workers, gracefully, so a
worker holding the only copy of a result keeps it until it has been moved. Jobs queued for
longer than ``pending_timeout`` are reported once and never resubmitted in a loop.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dask.utils import parse_timedelta

from hybrid.batch import JobState
from hybrid.errors import ConfigurationError

if TYPE_CHECKING:
    from hybrid.cluster import HybridCluster, Pool

logger = logging.getLogger(__name__)


@dataclass
class AdaptiveLog:
    """What the adaptive loop did: decisions, and jobs reported as stuck in the queue."""

    decisions: list[tuple[float, int, int]] = field(default_factory=list)
    stuck: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


class PoolAdaptive:
    """Scale one pool between ``minimum`` and ``maximum`` from its resource's demand."""

    def __init__(self, cluster: HybridCluster, pool: Pool, minimum: int = 0, maximum: int = 10,
                 interval: Any = "2s", wait_count: int = 3, pending_timeout: Any = "5 minutes"):
        for label, value in (("minimum", minimum), ("maximum", maximum)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"adapt.{label}", value, "an integer >= 0")
        if minimum > maximum:
            raise ConfigurationError("adapt.minimum", minimum, f"at most maximum ({maximum})")
        if isinstance(wait_count, bool) or not isinstance(wait_count, int) or wait_count < 1:
            raise ConfigurationError("adapt.wait_count", wait_count, "an integer >= 1")
        self.cluster = cluster
        self.pool = pool
        self.minimum = minimum
        self.maximum = maximum
        self.interval = parse_timedelta(interval)
        self.wait_count = wait_count
        self.pending_timeout = parse_timedelta(pending_timeout)
        self.log = AdaptiveLog()
        self._low_readings = 0
        self._first_seen_pending: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def desired(self, probe: dict[str, Any]) -> int:
        """Workers the pool should have for the demand in ``probe``, within the bounds."""
        demand = probe["demand"].get(self.pool.resource, 0)
        if self.pool.serves_unannotated:
            demand += probe.get("unrestricted", 0)
        wanted = math.ceil(demand / self.pool.tasks_per_job)
        return max(self.minimum, min(self.maximum, wanted))

    def step(self) -> int:
        """One decision: read demand, scale up at once or down after ``wait_count`` lows."""
        probe = self.cluster._probe()
        want = self.desired(probe)
        batch = self.pool.batch
        batch.refresh()
        current = len(batch.active())
        self._report_stuck()
        if want > current:
            self._low_readings = 0
            self.cluster._scale_pool(self.pool, want)
        elif want < current:
            self._low_readings += 1
            if self._low_readings >= self.wait_count:
                self._low_readings = 0
                surplus = current - want
                self.pool.target = want
                self.cluster._retire(self.pool, surplus, idle_only=True, busy=probe["busy"])
        else:
            self._low_readings = 0
            self.pool.target = want
        self.log.decisions.append((time.time(), current, want))
        return want

    def _report_stuck(self) -> None:
        now = time.monotonic()
        for status in self.pool.batch.jobs.values():
            if status.state is JobState.pending:
                first = self._first_seen_pending.setdefault(status.job_id, now)
                if now - first > self.pending_timeout and status.job_id not in self.log.stuck:
                    reason = status.reason or "no reason given by the batch system"
                    self.log.stuck[status.job_id] = reason
                    logger.warning(
                        "pool %s: job %s has been queued for more than %.0f s (%s); it is "
                        "counted toward the target and not resubmitted",
                        self.pool.name, status.job_id, self.pending_timeout, reason)
            else:
                self._first_seen_pending.pop(status.job_id, None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except Exception as error:  # keep adapting; the error is reported
                self.log.errors.append(str(error))
                logger.warning("pool %s: adaptive step failed: %s", self.pool.name, error)

    def start(self) -> None:
        """Start the background loop (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"hybrid-adaptive-{self.pool.name}")
            self._thread.start()

    def stop(self) -> None:
        """Stop the loop and wait for the current step to finish."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=120)
        self._thread = None
