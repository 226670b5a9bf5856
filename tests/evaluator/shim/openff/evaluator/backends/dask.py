"""``openff.evaluator.backends.dask`` -> :mod:`hybrid.backends`.

``_Multiprocessor`` is openff-evaluator's private helper, which hybrid does not have: the
name is here only because test_dask.py imports it; the tests that use it are not
applicable (tests/evaluator/conftest.py says why) and calling it raises.
"""

from hybrid.backends import (
    BaseDaskBackend,
    BaseDaskJobQueueBackend,
    DaskLocalCluster,
    DaskLSFBackend,
    DaskPBSBackend,
    DaskSLURMBackend,
)

__all__ = ["BaseDaskBackend", "BaseDaskJobQueueBackend", "DaskLSFBackend", "DaskLocalCluster",
           "DaskPBSBackend", "DaskSLURMBackend"]


class _Multiprocessor:
    """Not part of hybrid (see the module's docstring)."""

    @staticmethod
    def run(function, *args, **kwargs):
        raise NotImplementedError("openff-evaluator's private _Multiprocessor is not part of "
                                  "hybrid: hybrid's workers run tasks as Dask runs them")
