"""What the pool manager runs on the scheduler and on the workers: the functions of
:mod:`hybrid.scheduler_probe`, pickled by value (neither needs hybrid installed), once."""

from __future__ import annotations

import pickle
from collections.abc import Callable

#: The functions run on the scheduler or its workers, pickled (by value) once.
_PICKLED: dict[Callable, bytes] = {}
#: No arguments, pickled.
NO_ARGS = pickle.dumps(())


def pickled_probe(function: Callable) -> bytes:
    """A function of :mod:`hybrid.scheduler_probe` pickled by value (the scheduler and the
    workers need no hybrid), once: the probe runs every adaptive step, the drain for every
    job at its lifetime."""
    pickled = _PICKLED.get(function)
    if pickled is None:
        import cloudpickle
        from distributed.protocol.pickle import dumps

        from hybrid import scheduler_probe

        cloudpickle.register_pickle_by_value(scheduler_probe)
        pickled = _PICKLED[function] = dumps(function)
    return pickled
