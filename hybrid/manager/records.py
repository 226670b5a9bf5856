"""Dicts that remember how they changed: what is derived from them is updated for what
changed, not recomputed for every entry at each question (a large pool's adaptive step and
reconcile ask many times)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class NotingDict(dict):
    """A dict that tells :meth:`_note` the keys each change touches (a ``setdefault`` of a
    key already there changes nothing, and is not noted)."""

    def _note(self, keys: Iterable[Any]) -> None:
        raise NotImplementedError

    def __setitem__(self, key: Any, value: Any) -> None:
        self._note((key,))
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._note((key,))
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._note((key,))
        return super().pop(key, *default)

    def popitem(self) -> Any:
        key, value = super().popitem()
        self._note((key,))
        return key, value

    def setdefault(self, key: Any, value: Any = None) -> Any:
        if key not in self:
            self._note((key,))
        return super().setdefault(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        new = dict(*args, **kwargs)
        self._note(new)
        super().update(new)

    def clear(self) -> None:
        self._note(list(self))
        super().clear()

    def __ior__(self, other: Any) -> NotingDict:
        self.update(other)
        return self


class CountingDict(NotingDict):
    """A dict that counts its changes (:attr:`version`): what is derived from it is
    computed once per change, not once per question (an adaptive step asks many times)."""

    version = 0

    def _note(self, keys: Iterable[Any]) -> None:
        self.version += 1


class ChangeLog(NotingDict):
    """A dict that remembers the keys set, changed or removed since the last
    :meth:`take_changes` (:class:`~hybrid.manager.lifetime.Lifetimes` looks again only at
    the jobs whose start changed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changed: set[Any] = set(self)

    def _note(self, keys: Iterable[Any]) -> None:
        self.changed.update(keys)

    def take_changes(self) -> set[Any]:
        """The keys changed since the last call (and forget them)."""
        changed, self.changed = self.changed, set()
        return changed
