"""How often a pool asks its batch system about its jobs.

A facility's queue is shared: each ``squeue`` is a call to slurmctld and each query one to
the schedd, and Slurm's manual asks programs to "limit calls to squeue to the minimum
necessary" (sites have asked tools that poll every few seconds to stop). A pool asks every
``hybrid.batch.poll-interval`` while its jobs change; once nothing has happened for a while
it asks less often, after a quarter of the time nothing happened (:data:`QUIET_SHARE`), up to
``hybrid.batch.poll-interval-max``. So a change that only the batch system sees (a waiting
job held or removed, a job that fails before its worker connects) is seen within a quarter
of the quiet time before it, and a pool of jobs that wait for hours asks about once a
minute. Whatever hybrid or the scheduler sees happen brings the base interval back at once:
a query that found a change, a submission, a removal, a worker that joined or left, a new
wait for the pool's workers; a worker that left has its job looked up at the next look. A
query that fails changes nothing: a batch system that does not answer is asked less often,
not more.
"""

from __future__ import annotations

from dask.utils import parse_timedelta

from hybrid import config

#: The interval between two queries grows to this share of the time the pool was quiet.
QUIET_SHARE = 0.25


def poll_interval() -> float:
    """Seconds between two reconciles, and between two queries while a pool's jobs change
    (``hybrid.batch.poll-interval``): the one place it is read."""
    return parse_timedelta(config.get("batch.poll-interval", "2s"))


def intervals() -> tuple[float, float]:
    """The shortest and the longest interval between two queries, in seconds
    (``hybrid.batch.poll-interval``, ``hybrid.batch.poll-interval-max``; the longest is
    never shorter than the shortest)."""
    shortest = poll_interval()
    longest = parse_timedelta(config.get("batch.poll-interval-max", "60s"))
    return shortest, max(shortest, longest)


class QueryPacing:
    """When one pool's batch system is asked next (times on the manager's clock)."""

    def __init__(self) -> None:
        #: When the pool last changed (``None``: nothing yet) and when its batch system was
        #: last asked (whether or not it answered).
        self.changed_at: float | None = None
        self.asked_at = float("-inf")

    def interval(self, now: float) -> float:
        """Seconds between two queries now: the base while the pool changes, then a quarter
        of the time it has been quiet, at most the longest."""
        shortest, longest = intervals()
        if self.changed_at is None:
            return shortest
        return min(longest, max(shortest, (now - self.changed_at) * QUIET_SHARE))

    def due(self, now: float) -> bool:
        """Whether the batch system is to be asked now."""
        return now - self.asked_at >= self.interval(now)

    def changed(self, now: float, left: bool = False) -> None:
        """Something of the pool changed now; ``left``: a worker left, so its job has likely
        ended or been evicted: the batch system is asked at the next look, not an interval
        after the last query (an adaptive step must not remove a job whose end it has not
        read: an eviction would pass for a removal)."""
        self.changed_at = now
        if left:
            self.asked_at = float("-inf")
