"""Numbers cached by what they depend on, shared by every Trace of the same inputs.

A change of block sizes, loop order, dtype or pass keeps the inputs, so everything that
depends on the inputs and the mask alone (the dense lane's S, P summaries, reference
output, row statistics and, with dO, its backward and gradients: compute.full_pass's
DensePass) is found here instead of computed again; the tiled lane's forward depends on
B_c, the order and the dtype too (not B_r), and its backward on the same plus dO; in
float64 on neither (the dense pass forms it from its own products: full_pass.TiledPass).

Keys start with the inputs' key: whoever makes the inputs names them by their source
(desktop.state.config: seed, scale, N, N_k, d, d_v, or a file's path and stat), so
inputs drawn again from the same seed find the same numbers. A Trace built without a
key gets a private one: its numbers are still computed once, never shared. Entries are
read-only arrays; the newest few are kept, and never more than MAX_BYTES of them (the
newest value always stays), so the memory estimate can count the cache.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np

T = TypeVar("T")

ENTRIES = 4  # values kept per kind (a drag between two sizes finds both)
MAX_BYTES = 128 * 2**20  # arrays held over all kinds (desktop.state.config counts them)


def value_bytes(value: object) -> int:
    """Bytes of the arrays a cached value holds (dataclasses, tuples and arrays)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(value_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple | list):
        return sum(value_bytes(v) for v in value)
    return 0


class NumberCache:
    """A small thread-safe LRU of computed values per kind, keyed by their dependencies.

    The lock guards the dictionaries only: a value is computed outside it, so the GUI
    thread asking for a first-tier number never waits on a worker's long pass."""

    def __init__(self, entries: int = ENTRIES, max_bytes: int | None = MAX_BYTES) -> None:
        self.entries, self.max_bytes = entries, max_bytes
        self._kinds: dict[str, OrderedDict] = {}
        self._bytes: dict[tuple[str, Hashable], int] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, kind: str, key: Hashable, count: bool = False) -> object | None:
        """The value held, or None; `count`: a use, not a probe (hits and misses)."""
        with self._lock:
            cache = self._kinds.get(kind)
            if cache is None or key not in cache:
                if count:
                    self.misses += 1
                return None
            cache.move_to_end(key)
            if count:
                self.hits += 1
            return cache[key]

    def put(self, kind: str, key: Hashable, value: T) -> T:
        size = value_bytes(value) if self.max_bytes is not None else 0
        with self._lock:
            cache = self._kinds.setdefault(kind, OrderedDict())
            cache[key] = value
            cache.move_to_end(key)
            self._bytes[(kind, key)] = size
            while len(cache) > self.entries:
                old, _ = cache.popitem(last=False)
                self._bytes.pop((kind, old), None)
            if self.max_bytes is not None:
                self._evict_bytes(kind, key)
        return value

    def _evict_bytes(self, kind: str, newest: Hashable) -> None:
        """Drop the oldest values, kind by kind, until under max_bytes (never the newest)."""
        while sum(self._bytes.values()) > self.max_bytes:
            for k, cache in self._kinds.items():
                victims = [key for key in cache if (k, key) != (kind, newest)]
                if victims:
                    cache.pop(victims[0])
                    self._bytes.pop((k, victims[0]), None)
                    break
            else:
                return  # only the newest value is left: it stays

    @property
    def bytes_held(self) -> int:
        with self._lock:
            return sum(self._bytes.values())

    def value(self, kind: str, key: Hashable, compute: Callable[[], T]) -> T:
        """The cached value of `kind` under `key`, computed (and kept) when absent."""
        found = self.get(kind, key)
        if found is not None:
            self.hits += 1
            return found  # type: ignore[return-value]
        self.misses += 1
        return self.put(kind, key, compute())

    def kinds(self) -> list[str]:
        """The kinds values were kept under, sorted."""
        with self._lock:
            return sorted(self._kinds)

    def held(self, kind: str) -> int:
        with self._lock:
            return len(self._kinds.get(kind, ()))

    def clear(self) -> None:
        with self._lock:
            self._kinds.clear()
            self._bytes.clear()
            self.hits = self.misses = 0


SHARED = NumberCache()


class Cancelled(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by a pass's `check` when its result is no longer wanted (a newer change)."""
