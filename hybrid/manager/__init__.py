"""The pool manager: everything between a cluster's scheduler and its batch systems.

:class:`PoolManager` (:mod:`hybrid.manager.core`) scales, retires, reconciles, reports and
closes a cluster's pools (:class:`ManagedPool`, :mod:`hybrid.manager.pool`); waiting for
workers is :mod:`hybrid.manager.waiting`'s, closing :mod:`hybrid.manager.closing`'s.
"""

from hybrid.manager.core import SCHEDULER_ANSWERS_WITHIN, PoolManager
from hybrid.manager.pool import EXIT_HINTS, ManagedPool, PoolStatus

__all__ = ["EXIT_HINTS", "SCHEDULER_ANSWERS_WITHIN", "ManagedPool", "PoolManager",
           "PoolStatus"]
