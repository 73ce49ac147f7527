"""Running sums of per-block matrix products, made as far as they are asked for.

A query block's dQ after each key tile (compute.backward_rows.backward_block) is
T_c + 1 matrices of B_r × d: at N = 4096 with 2 × 2 blocks, 2,049 of them, 4 MB. A
playback frame shows one of them (dQ_i as the current step left it) for each new query
block it reaches, on the GUI thread, so making all of them there cost more than the
frame. RunningSums makes the entry asked for from the nearest checkpoint before it (a
copy of the running sum kept every `chunk` blocks), and the whole history only when
something indexes more than one entry (the selected row's plot).

The digits are np.cumsum's along the block axis (ordered_cumsum), whichever way an
entry is reached: entry 1 is the first product, then one addition per block, in order.
"""

from __future__ import annotations

import numpy as np

CHUNK_ELEMENTS = 1 << 15  # products formed at once: a chunk stays in cache while summed
# From this many elements a step, ordered_cumsum adds whole steps in a loop: np.cumsum
# walks the summed axis innermost, a strided pass per element of a step, which on wide
# steps costs many times the loop's one call per step (assets/benchmarks/interactive).
WIDE_STEP = 128


def ordered_cumsum(x: np.ndarray, axis: int = 0, out: np.ndarray | None = None) -> np.ndarray:
    """np.cumsum(x, axis, out=out) with its digits (entry i = entry i − 1 + x[i], in
    order), adding a whole step at a time where a step is wide. `out` may be x."""
    out = np.empty_like(x) if out is None else out
    n = x.shape[axis]
    if n == 0 or x.size // n < WIDE_STEP:
        return np.cumsum(x, axis=axis, out=out)
    src, dst = np.moveaxis(x, axis, 0), np.moveaxis(out, axis, 0)
    if out is not x:  # (a view of x's memory is copied onto itself: harmless)
        dst[0] = src[0]
    for i in range(1, n):
        np.add(dst[i - 1], src[i], out=dst[i])
    return out


class RunningSums:
    """Entry k (0..T) = (a[0] @ b[0]) * scale + ... + (a[k-1] @ b[k-1]) * scale, summed in
    block order; entry 0 is zeros. `a` is (T, R, K); `b` is (T, K, W), or (T − 1, K, W)
    with `b_last` (1, K, W) the last block's (so a caller never copies all of b to pad
    one block). Indexing with an int gives that entry (read-only); any other index, and
    np.asarray, the whole (T + 1, R, W) history, made once."""

    def __init__(self, a: np.ndarray, b: np.ndarray, scale=None, b_last=None) -> None:
        self._a, self._b, self._b_last, self._scale = a, b, b_last, scale
        blocks, rows, _ = a.shape
        width = b.shape[2] if b_last is None else b_last.shape[2]
        self.dtype = np.result_type(a, b)
        self.shape = (blocks + 1, rows, width)
        self._chunk = max(1, CHUNK_ELEMENTS // max(1, rows * width))
        zero = np.zeros(self.shape[1:], dtype=self.dtype)
        zero.setflags(write=False)
        self._marks = [zero]  # the running sum after 0, chunk, 2·chunk, … blocks
        self._full: np.ndarray | None = None
        self._last: tuple[int, np.ndarray] | None = None

    @property
    def ndim(self) -> int:
        return 3

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        full = self.full()
        return full if dtype is None else full.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            k = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= k < self.shape[0]:
                raise IndexError(f"entry {int(key)} of {self.shape[0]} running sums")
            return self._at(k)
        return self.full()[key]

    def full(self) -> np.ndarray:
        """Every entry, (T + 1, R, W), read-only."""
        if self._full is None:
            out = np.empty(self.shape, dtype=self.dtype)
            out[0] = 0
            blocks = self.shape[0] - 1
            for c0 in range(0, blocks, self._chunk):
                c1 = min(blocks, c0 + self._chunk)
                self._run(c0, c1, out[c0], out[c0 + 1 : c1 + 1])
            out.setflags(write=False)
            self._full = out
        return self._full

    def _at(self, k: int) -> np.ndarray:
        if self._full is not None:
            return self._full[k]
        if self._last is not None and self._last[0] == k:
            return self._last[1]
        m = k // self._chunk
        while len(self._marks) <= m:  # checkpoints in order up to the one before k
            c0 = (len(self._marks) - 1) * self._chunk
            run = self._run(c0, c0 + self._chunk, self._marks[-1])
            mark = run[-1].copy()
            mark.setflags(write=False)
            self._marks.append(mark)
        c0 = m * self._chunk
        if k == c0:
            return self._marks[m]
        value = self._run(c0, k, self._marks[m])[-1]
        value.setflags(write=False)
        self._last = (k, value)
        return value

    def _run(self, c0: int, c1: int, start: np.ndarray, out: np.ndarray | None = None):
        """Entries c0 + 1 .. c1 from entry c0 (`start`), into `out` if given."""
        products = self._products(c0, c1, out)
        # Overflowed products (inf beside -inf) are the overflow notice's to report, once.
        with np.errstate(invalid="ignore", over="ignore"):
            if self._scale is not None:
                products *= self._scale
            if c0:  # entry 1 is the first product itself (as cumsum's), not 0 + it
                np.add(start, products[0], out=products[0])
            ordered_cumsum(products, out=products)
        return products

    def _products(self, c0: int, c1: int, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            out = np.empty((c1 - c0, *self.shape[1:]), dtype=self.dtype)
        main = self._b.shape[0]  # blocks whose b is in self._b
        if c1 <= main:
            np.matmul(self._a[c0:c1], self._b[c0:c1], out=out)
        else:  # the last block's b is b_last
            if c0 < main:
                np.matmul(self._a[c0:main], self._b[c0:main], out=out[: main - c0])
            np.matmul(self._a[main:c1], self._b_last, out=out[main - c0 :])
        return out
