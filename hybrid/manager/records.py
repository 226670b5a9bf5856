"""Dicts that remember how they changed: what is derived from them is updated for what
changed, not recomputed for every entry at each question (a large pool's adaptive step and
reconcile ask many times)."""

from __future__ import annotations

from typing import Any


class CountingDict(dict):
    """A dict that counts its changes (:attr:`version`): what is derived from it is
    computed once per change, not once per question (an adaptive step asks many times)."""

    version = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self.version += 1
        return super().pop(*args)

    def popitem(self) -> Any:
        self.version += 1
        return super().popitem()

    def setdefault(self, key: Any, value: Any = None) -> Any:
        self.version += 1
        return super().setdefault(key, value)  # (counted even when the key was there)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self.version += 1
        super().clear()

    def __ior__(self, other: Any) -> CountingDict:
        self.update(other)
        return self


class ChangeLog(dict):
    """A dict that remembers the keys set, changed or removed since the last
    :meth:`take_changes` (:class:`~hybrid.manager.lifetime.Lifetimes` looks again only at
    the jobs whose start changed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changed: set[Any] = set(self)

    def take_changes(self) -> set[Any]:
        """The keys changed since the last call (and forget them)."""
        changed, self.changed = self.changed, set()
        return changed

    def __setitem__(self, key: Any, value: Any) -> None:
        self.changed.add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.changed.add(key)
        super().__delitem__(key)

    def pop(self, key: Any, *default: Any) -> Any:
        self.changed.add(key)
        return super().pop(key, *default)

    def popitem(self) -> Any:
        key, value = super().popitem()
        self.changed.add(key)
        return key, value

    def setdefault(self, key: Any, value: Any = None) -> Any:
        if key not in self:
            self.changed.add(key)
        return super().setdefault(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:
        new = dict(*args, **kwargs)
        self.changed.update(new)
        super().update(new)

    def clear(self) -> None:
        self.changed.update(self)
        super().clear()

    def __ior__(self, other: Any) -> ChangeLog:
        self.update(other)
        return self
