"""The attention mask: which keys each query row may see, shared by every layer.

One frozen `Mask` describes every mask the explorer serves:

- none: every row sees every key;
- causal, aligned bottom-right (FlashAttention ≥ 2.1: row r sees key c iff
  c ≤ r + N_k − N_q) or top-left (PyTorch SDPA's `is_causal`: c ≤ r);
- a sliding window (left, right), FlashAttention's `window_size` (−1 = unbounded):
  row r sees key c iff r + off − left ≤ c ≤ r + off + right, with off = N_k − N_q
  (bottom-right) or 0 (top-left); causal is the window (−1, 0);
- packed sequences given by their lengths (`cu_seqlens`): block-diagonal, a row sees
  only keys of its own sequence, each sequence square (so off = 0 in it) and optionally
  causal or windowed as above.

Every mask leaves each row a contiguous run of visible keys [lo(r), hi(r)), with lo and
hi non-decreasing in r; the per-cell visibility, the per-tile class (skipped, masked,
full) and the per-block tile spans are all read from those two arrays. A row with
hi ≤ lo sees no key: its output is zero and L = −∞, as FlashAttention gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Tile classes: no row of the block sees any key of the tile (not loaded); some cells are
# hidden (loaded, scores masked); every row sees every key of the tile (no mask needed).
SKIPPED, MASKED, FULL = 0, 1, 2
TILE_CLASSES: tuple[str, ...] = ("skipped", "masked", "full")
MASK_KINDS: tuple[str, ...] = ("none", "causal", "causal-top-left")


@dataclass(frozen=True)
class Mask:
    """left/right: the window (−1 = unbounded; right = 0 is causal); top_left: the
    alignment of the diagonal when N_q ≠ N_k; lengths: packed sequence lengths (empty =
    one sequence)."""

    left: int = -1
    right: int = -1
    top_left: bool = False
    lengths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("left", "right"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < -1:
                raise ValueError(
                    f"The window's {name} size must be a whole number of at least -1 "
                    f"(-1 = unbounded), not {value!r}."
                )
            object.__setattr__(self, name, int(value))
        lengths = tuple(self.lengths)
        for value in lengths:
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(
                    f"Packed sequence lengths must be whole numbers of at least 1, not {value!r}."
                )
        object.__setattr__(self, "lengths", tuple(int(x) for x in lengths))
        # Alignment matters only for a window (causal included) outside packed sequences
        # (each of which is square): one spelling of every mask otherwise.
        banded = self.left >= 0 or self.right >= 0
        object.__setattr__(self, "top_left", bool(self.top_left) and banded and not lengths)

    # ---- constructors ------------------------------------------------------------------
    @classmethod
    def causal_mask(cls, top_left: bool = False) -> Mask:
        return cls(-1, 0, top_left)

    @classmethod
    def of(cls, value: Mask | bool | None) -> Mask:
        """A Mask as given, or the one a `causal: bool` means (bottom-right causal or none)."""
        if isinstance(value, Mask):
            return value
        return cls.causal_mask() if value else NO_MASK

    @classmethod
    def from_options(
        cls,
        kind: str = "none",
        window: tuple[int, int] | None = None,
        packed: Sequence[int] | None = None,
    ) -> Mask:
        """The mask of the CLI's --mask, --window LEFT,RIGHT and --packed lengths: a causal
        kind sets right = 0 (as FlashAttention does when causal is given with a window),
        top-left aligns the window too."""
        if kind not in MASK_KINDS:
            raise ValueError(f"mask must be one of {', '.join(MASK_KINDS)}, not {kind!r}.")
        left, right = window if window is not None else (-1, -1)
        if kind != "none":
            right = 0
        return cls(left, right, kind == "causal-top-left", tuple(packed or ()))

    # ---- names -------------------------------------------------------------------------
    def __bool__(self) -> bool:
        """True when the mask hides anything: `if causal:` keeps meaning "masked"."""
        return not self.is_none

    @property
    def is_none(self) -> bool:
        return self.left < 0 and self.right < 0 and not self.lengths

    @property
    def causal(self) -> bool:
        """Causal in FlashAttention's sense: no key after the (aligned) diagonal."""
        return self.right == 0

    @property
    def windowed(self) -> bool:
        return self.left >= 0 or self.right > 0

    @property
    def kind(self) -> str:
        """The --mask value: "none", "causal" or "causal-top-left"."""
        if not self.causal:
            return "none"
        return "causal-top-left" if self.top_left else "causal"

    @property
    def window(self) -> tuple[int, int] | None:
        """(left, right) when the mask is a window other than plain causal, else None."""
        return (self.left, self.right) if self.windowed else None

    @property
    def label(self) -> str:
        """The mask in a few words, for panels and reports."""
        parts = []
        if self.causal:
            parts.append("causal " + ("top-left" if self.top_left else "bottom-right"))
        if self.windowed:
            side = ", top-left" if self.top_left and not self.causal else ""
            parts.append(f"window ({self.left}, {self.right}){side}")
        if self.lengths:
            parts.append("packed " + "+".join(map(str, self.lengths)))
        return ", ".join(parts) if parts else "none"

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "window": list(self.window) if self.window else None,
            "packed": list(self.lengths) if self.lengths else None,
            "label": self.label,
        }

    # ---- geometry ----------------------------------------------------------------------
    def check(self, n_q: int, n_k: int) -> None:
        """One sentence if this mask cannot apply to N_q queries and N_k keys."""
        if not self.lengths:
            return
        total = sum(self.lengths)
        if n_q != n_k:
            raise ValueError(
                f"Packed sequences need as many keys as queries (N_k = N), not N = {n_q} and "
                f"N_k = {n_k}; drop --n-keys or the packed lengths."
            )
        if total != n_q:
            raise ValueError(
                f"The packed lengths sum to {total} but N is {n_q}; give lengths summing to N."
            )

    def offset(self, n_q: int, n_k: int) -> int:
        """The diagonal's shift: row r's diagonal key is r + offset."""
        return 0 if self.top_left or self.lengths else n_k - n_q

    def row_bounds(self, rows: np.ndarray, n_q: int, n_k: int) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per query row: the row sees keys lo ≤ c < hi (none when hi ≤ lo)."""
        self.check(n_q, n_k)
        r = np.asarray(rows, dtype=np.int64)
        if self.lengths:
            ends = np.cumsum(self.lengths, dtype=np.int64)
            seg = np.searchsorted(ends, r, side="right")
            hi = ends[np.minimum(seg, len(ends) - 1)]
            lo = hi - np.asarray(self.lengths, dtype=np.int64)[np.minimum(seg, len(ends) - 1)]
        else:
            lo, hi = np.zeros_like(r), np.full_like(r, n_k)
        off = self.offset(n_q, n_k)
        if self.left >= 0:
            lo = np.maximum(lo, r + off - self.left)
        if self.right >= 0:
            hi = np.minimum(hi, r + off + self.right + 1)
        return lo, hi

    def visible(self, rows: np.ndarray, cols: np.ndarray, n_q: int, n_k: int) -> np.ndarray:
        """(len(rows), len(cols)) booleans: True where key col is visible to query row."""
        lo, hi = self.row_bounds(rows, n_q, n_k)
        c = np.asarray(cols, dtype=np.int64)[None, :]
        return (c >= lo[:, None]) & (c < hi[:, None])

    def empty_rows(self, n_q: int, n_k: int) -> np.ndarray:
        """The query rows that see no key (their output is zero and L = −∞)."""
        lo, hi = self.row_bounds(np.arange(n_q), n_q, n_k)
        return np.flatnonzero(hi <= lo)

    def why_empty(self, row: int, n_q: int, n_k: int) -> str | None:
        """One sentence saying why query `row` sees no key, or None when it sees some."""
        lo, hi = (int(x[0]) for x in self.row_bounds(np.array([row]), n_q, n_k))
        if hi > lo:
            return None
        off = self.offset(n_q, n_k)
        if hi <= 0:
            return (
                f"Row {row} sees no key: with N_q = {n_q} > N_k = {n_k} the {self.label} mask "
                f"puts its diagonal at key {row + off} (before key 0), so its output is 0 "
                "and L = −∞, as FlashAttention gives."
            )
        return (
            f"Row {row} sees no key: the {self.label} mask's window starts at key "
            f"{row + off - self.left}, past the last key {n_k - 1}, so its output is 0 and "
            "L = −∞, as FlashAttention gives."
        )

    def tile_classes(self, n_q: int, n_k: int, block_q: int, block_k: int) -> np.ndarray:
        """(T_r, T_c) int8: SKIPPED, MASKED or FULL for query block i and key tile j.

        From the monotone row bounds: the rows with hi(r) > c0 are a suffix of the block
        and those with lo(r) < c1 a prefix, so the tile is seen iff the first row of the
        suffix has lo < c1; it is full iff the last row's lo ≤ c0 and the first's hi ≥ c1.
        """
        if self.is_none:
            t_r, t_c = math.ceil(n_q / block_q), math.ceil(n_k / block_k)
            return np.full((t_r, t_c), FULL, dtype=np.int8)
        return self.row_tile_classes(0, n_q, n_q, n_k, block_q, block_k)

    def row_tile_classes(
        self, r0: int, r1: int, n_q: int, n_k: int, block_q: int, block_k: int
    ) -> np.ndarray:
        """`tile_classes` of rows r0 ≤ r < r1 of the (N_q × N_k) problem, blocked from r0."""
        lo, hi = self.row_bounds(np.arange(r0, r1), n_q, n_k)
        n, t_c = r1 - r0, math.ceil(n_k / block_k)
        b0 = np.arange(math.ceil(n / block_q)) * block_q  # local first rows of the blocks
        b1 = np.minimum(b0 + block_q, n)
        c0 = np.arange(t_c) * block_k
        c1 = np.minimum(c0 + block_k, n_k)
        first = np.searchsorted(hi, c0, side="right")  # first row with hi > c0, per tile
        start = np.maximum(first[None, :], b0[:, None])
        seen = start < b1[:, None]
        seen &= lo[np.minimum(start, n - 1)] < c1[None, :]
        full = (lo[b1 - 1][:, None] <= c0[None, :]) & (hi[b0][:, None] >= c1[None, :])
        out = np.where(seen, MASKED, SKIPPED).astype(np.int8)
        out[seen & full] = FULL
        return out

    def block_spans(
        self, n_q: int, n_k: int, block_q: int, block_k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per query block: it sees key tiles lo ≤ j < hi (lo = hi when none).

        From the row bounds alone (the union of the block's visible keys is one run from
        the lo of its first non-empty row to the hi of its last), independent of
        `tile_classes`, so each checks the other. Both arrays are non-decreasing: a block
        that sees nothing gets lo = hi where its first row's window would start (0 above
        the keys, T_c past them), so the blocks that see a tile are found by bisection.
        """
        t_r = math.ceil(n_q / block_q)
        lo, hi = self.row_bounds(np.arange(n_q), n_q, n_k)
        nonempty = hi > lo
        before = np.concatenate([[0], np.cumsum(nonempty)])  # non-empty rows before r
        r0 = np.arange(t_r) * block_q
        r1 = np.minimum(r0 + block_q, n_q)
        # The k-th non-empty row overall is at index order[k].
        order = np.flatnonzero(nonempty)
        any_rows = before[r1] > before[r0]
        first_row = order[np.minimum(before[r0], max(len(order) - 1, 0))] if len(order) else r0
        last_row = order[np.maximum(before[r1] - 1, 0)] if len(order) else r0
        t_c = math.ceil(n_k / block_k)
        idle = np.where(lo[r0] >= n_k, t_c, np.clip(lo[r0] // block_k, 0, t_c))
        j_lo = np.where(any_rows, lo[first_row] // block_k, idle)
        j_hi = np.where(any_rows, (hi[last_row] - 1) // block_k + 1, idle)
        return j_lo.astype(np.int64), j_hi.astype(np.int64)

    def full_spans(
        self, n_q: int, n_k: int, block_q: int, block_k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) per query block: its FULL tiles are lo ≤ j < hi (lo ≥ hi: none). A tile
        is full iff the block's last row starts at or before the tile's first key and its
        first row ends at or after the tile's last (the bounds are monotone)."""
        t_r, t_c = math.ceil(n_q / block_q), math.ceil(n_k / block_k)
        r0 = np.arange(t_r) * block_q
        r1 = np.minimum(r0 + block_q, n_q)
        lo_last = self.row_bounds(r1 - 1, n_q, n_k)[0]
        hi_first = self.row_bounds(r0, n_q, n_k)[1]
        f_lo = np.clip(-(-lo_last // block_k), 0, t_c)  # first tile with c0 ≥ lo(last row)
        # tiles whose c1 = min((j + 1) B_c, N_k) ≤ hi(first row)
        f_hi = np.where(hi_first >= n_k, t_c, np.clip(hi_first // block_k, 0, t_c))
        return f_lo.astype(np.int64), np.maximum(f_hi, f_lo).astype(np.int64)


NO_MASK = Mask()
