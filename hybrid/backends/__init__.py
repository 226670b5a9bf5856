"""Backends in the style of openff-evaluator's: context managers with ``submit_task``."""

from hybrid.backends.base import BaseDaskBackend
from hybrid.backends.local import DaskLocalCluster, NoGPUWarning

__all__ = ["BaseDaskBackend", "DaskLocalCluster", "NoGPUWarning"]
