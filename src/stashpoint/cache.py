"""The one bounded cache: a thread-safe map that forgets its least recently used entries.

Every cache of stashpoint (the ETags of heads seen, the latest version of logs, the heads of
runs and threads a process wrote, the owner epochs it holds) is an `Lru`: bounded memory
however many ids a long-lived process touches, and safe to share between the threads of a
blocking stash (every read and write holds one lock, including the read-modify-write of
`update`, so no caller ever sees a half-made change).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A bounded map, safe to share between threads; the least recently used goes first."""

    __slots__ = ("_entries", "_lock", "_weight", "capacity", "max_weight", "weigh")

    def __init__(
        self,
        capacity: int,
        *,
        max_weight: int | None = None,
        weigh: Callable[[V], int] | None = None,
    ) -> None:
        if type(capacity) is not int or capacity < 1:
            raise ValueError(f"an Lru holds at least one entry, not {capacity!r}")
        if (max_weight is None) != (weigh is None):
            raise ValueError("an Lru bounded by weight needs both max_weight and weigh")
        self.capacity = capacity
        """Most entries kept."""
        self.max_weight = max_weight
        """Most total weight kept (bytes, for a cache of bodies); None: unbounded."""
        self.weigh = weigh
        """The weight of one value (None: not weighed)."""
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """Return the value of `key` (making it the most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Set `key` to `value`, forgetting the least recently used entries past capacity."""
        with self._lock:
            self._set(key, value)

    def update(self, key: K, change: Callable[[V | None], V | None]) -> V | None:
        """Replace the value of `key` by `change(current)` atomically; None removes it.

        `change` runs under the cache's lock: it must be quick and must not use the cache.
        Returns the new value.
        """
        with self._lock:
            value = change(self._entries.get(key))
            if value is None:
                self._drop(key)
            else:
                self._set(key, value)
            return value

    def pop(self, key: K) -> V | None:
        """Forget `key`; return what it held, or None."""
        with self._lock:
            return self._drop(key)

    def take_all(self) -> list[tuple[K, V]]:
        """Forget every key; return what they held, the least recently used first."""
        with self._lock:
            taken = list(self._entries.items())
            self._entries.clear()
            self._weight = 0
            return taken

    def forget_where(self, doomed: Callable[[K], bool]) -> int:
        """Forget every key `doomed(key)` is true of; return how many (a scan: rare use)."""
        with self._lock:
            keys = [key for key in self._entries if doomed(key)]
            for key in keys:
                self._drop(key)
            return len(keys)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _drop(self, key: K) -> V | None:
        value = self._entries.pop(key, None)
        if value is not None and self.weigh is not None:
            self._weight -= self.weigh(value)
        return value

    def _set(self, key: K, value: V) -> None:
        if self.weigh is not None and self.max_weight is not None:
            self._drop(key)
            weight = self.weigh(value)
            if weight > self.max_weight:
                return  # heavier than the whole cache: not kept
            self._weight += weight
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity or (
            self.max_weight is not None and self._weight > self.max_weight
        ):
            self._drop(next(iter(self._entries)))
