"""Results of pure functions of arrays, kept while those arrays live.

A change of block sizes, loop order or pass keeps the inputs and the passes over S (the
compute core caches them by what they depend on), so most heatmaps of the new trace are
the last one's: downsampling, colour-mapping and sampling them again for their scales was
half of a blocks change's image preparation at N = 1024. Entries are keyed by the
identity of their source arrays, which are never written once made, and are dropped when
any of those arrays is gone (an id is reused once its array dies).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np

T = TypeVar("T")


class ArrayMemo:
    """A small LRU of f(arrays, extra), valid while every one of `arrays` lives."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[tuple, tuple[tuple, object]] = OrderedDict()
        self._lock = threading.Lock()  # the build worker and the GUI (exports) both ask
        self._dead: list[tuple] = []  # keys whose arrays died (appended by weakref callbacks)

    def get(self, arrays: tuple[np.ndarray, ...], extra: Hashable, make: Callable[[], T]) -> T:
        key = (tuple(id(a) for a in arrays), extra)
        with self._lock:
            self._purge()
            hit = self._entries.get(key)
            if hit is not None and all(r() is a for r, a in zip(hit[0], arrays, strict=True)):
                self._entries.move_to_end(key)
                return hit[1]  # type: ignore[return-value]
        value = make()
        # A callback may run in any thread, inside any allocation: it only appends.
        refs = tuple(weakref.ref(a, lambda _r, key=key: self._dead.append(key)) for a in arrays)
        with self._lock:
            self._entries[key] = (refs, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return value

    def _purge(self) -> None:
        while self._dead:
            key = self._dead.pop()
            entry = self._entries.get(key)
            if entry is not None and any(r() is None for r in entry[0]):
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._dead.clear()
