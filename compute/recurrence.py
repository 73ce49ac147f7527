"""The tiled lane's numbers on demand: one query block's history, every row's state at a tile.

The Trace no longer records every row's state after every key tile (at N = 4096 with
2×2 blocks that is N · T_c · d_v numbers, gigabytes). Instead:

- `block_history` runs the recurrence for the rows of one query block only, over the
  key tiles that block loads: O(N_k · d) per row, asked for when a view shows the block
  or one of its rows. It calls `tiled_attention_history` itself (the one recurrence),
  on the block's rows with the keys cut where the block's causal mask ends, so the
  causal alignment of the full problem is kept.
- `TileCursor` holds every row's (m, ℓ, O or a) after the first j key tiles (KV-outer's
  HBM state is this, block by block). It moves forward one tile at a time with
  `_run`'s loop body (playback); a move back or far ahead (a scrub) is one closed-form
  pass over the keys of those tiles (compute.full_pass), the same numbers up to the
  order of the additions. Tests hold both to `tiled_attention_history`.
"""

from __future__ import annotations

import threading

import numpy as np

from .attention import (
    RowHistory,
    _divide_rows,
    _prepare,
    _safe_max,
    _tile_scores,
    _tile_update,
    default_scale,
    round_to,
    stats_dtype,
    tiled_attention_history,
)
from .full_pass import tiled_state_after
from .mask import SKIPPED, Mask
from .running_sums import ordered_cumsum
from .schedule import Schedule


def block_history(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    schedule: Schedule,
    block: int,
    *,
    scale: float,
    dtype: str,
) -> RowHistory:
    """The rows of query block `block`: m, ℓ, α (R, T_c + 1), a (R, T_c + 1, d_v) and
    P̃ (R, N_k), exactly as the full recurrence forms them for those rows."""
    return BlockHistory(q, k, v, schedule, block, scale=scale, dtype=dtype).complete()


class BlockHistory:
    """block_history's numbers, made as far as they are read.

    Construction makes m, ℓ, α and P̃ after every key tile (one product with the block's
    keys: O(N_k) per row); a = Σ P̃V, the (R, T_c + 1, d_v) part and most of the cost,
    is made by `state(tiles)` only up to that tile, in chunks of tiles from fixed
    boundaries (_ProductScan), so each entry has the digits of the whole history
    however it is reached. A playback frame at a new query block then pays for the
    tiles it shows, not for the block's whole row of tiles. Thread-safe: the build's
    worker and the GUI thread may read one block."""

    def __init__(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, schedule: Schedule, block: int,
        *, scale: float, dtype: str,
    ) -> None:  # fmt: skip
        s = schedule
        r0, r1 = s.rows(block)
        n_rows = r1 - r0
        n_keys, rows_of = s.n_k, None
        if s.mask and s.mask != Mask.causal_mask():
            rows_of = (r0, s.n_q)  # other masks: all keys, masked as the block's own rows
        elif s.causal:
            # Row r sees key c iff c <= r + (N_k − N_q): the block's last row sees the first
            # r1 + N_k − N_q keys. Keeping exactly those keys gives the cut problem the same
            # alignment (its offset N_k' − R equals r0 + N_k − N_q for local row 0).
            n_keys = max(0, min(s.n_k, r1 + s.n_k - s.n_q))
        acc = stats_dtype(dtype)
        self._lock = threading.Lock()
        self._scan: _ProductScan | None = None
        self._seen = 1  # columns of the history the block's own tiles fill
        self._complete: RowHistory | None = None
        hist = RowHistory.empty(n_rows, s.t_c, s.n_k, s.d_v, acc)
        hist.alpha[:, 1:] = 1  # a tile the block never loads rescales nothing
        self._hist = hist
        if n_keys == 0:
            return
        kw = dict(order=s.order, scale=scale, dtype=dtype, rows_of=rows_of)
        if s.block_k < SCAN_TILE_LIMIT:  # many small tiles: no loop over them
            with np.errstate(over="ignore", invalid="ignore"):
                h, self._scan = _rows_scan(
                    q[r0:r1], k[:n_keys], v[:n_keys], block_k=s.block_k, mask=s.mask,
                    out=hist, **kw,
                )  # fmt: skip
        else:  # few tiles: the loop is the cheaper (its products are the tiles' own)
            _, _, h = tiled_attention_history(
                q[r0:r1], k[:n_keys], v[:n_keys], block_q=n_rows, block_k=s.block_k,
                causal=s.mask, **kw,
            )  # fmt: skip
            seen = h.m.shape[1]
            hist.m[:, :seen], hist.l[:, :seen], hist.a[:, :seen] = h.m, h.l, h.a
            hist.alpha[:, :seen] = h.alpha
            hist.p_tilde[:, :n_keys] = h.p_tilde
        seen = self._seen = h.m.shape[1]  # 1 + the tiles this block loads
        # Tiles the block never loads leave its state as it was; α = 1 (nothing rescaled).
        hist.m[:, seen:] = hist.m[:, seen - 1 : seen]
        hist.l[:, seen:] = hist.l[:, seen - 1 : seen]

    @property
    def p_tilde(self) -> np.ndarray:
        """P̃ (R, N_k), made on construction."""
        return _read_only(self._hist.p_tilde)[0]

    def state(self, tiles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(m, ℓ, a) of the block's rows after `tiles` key tiles, a made as far as that."""
        h, made = self._hist, min(tiles, self._seen - 1)  # (a's tail is the last made)
        self._made(made)
        return _read_only(h.m[:, tiles], h.l[:, tiles], h.a[:, made])

    def complete(self) -> RowHistory:
        """The whole history (read-only arrays), made once."""
        with self._lock:
            if self._complete is None:
                h, seen = self._hist, self._seen
                if self._scan is not None:
                    self._scan.upto(seen - 1)
                    self._scan = None  # its rounded P̃ and V are no longer needed
                h.a[:, seen:] = h.a[:, seen - 1 : seen]
                for x in (h.m, h.l, h.a, h.alpha, h.p_tilde):
                    x.setflags(write=False)
                self._complete = h
            return self._complete

    def _made(self, tiles: int) -> None:
        with self._lock:
            if self._scan is not None:
                self._scan.upto(tiles)


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Read-only views (the history's arrays stay writable while it is being made)."""
    views = tuple(x.view() for x in arrays)
    for x in views:
        x.setflags(write=False)
    return views


class _ProductScan:
    """a after each key tile of one block, a[:, j + 1] = α_j a[:, j] + P̃_j V_j (each
    product times β_j under KV-outer), made up to a tile when asked. Chunks of tiles
    start at multiples of `chunk`, so every product and sum is formed by the same call
    whichever tile is asked for first: the entries have one set of digits."""

    def __init__(self, a, alpha, p, vd, weight, block_k: int) -> None:
        self._a, self._alpha, self._p, self._vd, self._weight = a, alpha, p, vd, weight
        self._block_k = block_k
        rows, n_tiles = alpha.shape
        self._n_tiles = n_tiles
        self.chunk = max(MIN_CHUNK_TILES, SCAN_CHUNK_ELEMENTS // max(1, rows * a.shape[2]))
        self.done = 0  # tiles whose a is made

    def upto(self, tiles: int) -> None:
        """Make a after the first `tiles` tiles (at least; a chunk at a time)."""
        bk, vd, d_v = self._block_k, self._vd, self._a.shape[2]
        while self.done < min(tiles, self._n_tiles):
            lo = self.done
            hi = min(self._n_tiles, (lo // self.chunk + 1) * self.chunk)
            c0, c1 = lo * bk, min(len(vd), hi * bk)
            width = (hi - lo) * bk
            if width == c1 - c0 and vd.flags.c_contiguous:  # whole tiles: V's rows as they are
                vt = vd[c0:c1]
            else:
                vt = np.zeros((width, d_v), dtype=self._a.dtype)  # the last tile's gap: V = 0
                vt[: c1 - c0] = vd[c0:c1]
            # P̃_ij V_j of every tile of the chunk, written where a is kept
            out = self._a[:, lo + 1 : hi + 1]
            np.matmul(
                self._p[:, lo:hi].transpose(1, 0, 2),
                vt.reshape(hi - lo, bk, d_v),
                out=out.transpose(1, 0, 2),
            )
            if self._weight is not None:
                out *= self._weight[:, lo:hi, None]
            alpha = self._alpha[:, lo:hi]
            _linear_scan(alpha, out, self._a[:, lo], _unit_runs(alpha))
            self.done = hi


# Below this B_c, block_history forms a block's tiles at once (rows_history): at N = 4096
# the loop over tiles costs more than one product for all of them and a scan by runs.
SCAN_TILE_LIMIT = 16
# Scores formed at once per group of key tiles: about this many entries (bounded memory).
HISTORY_GROUP_ELEMENTS = 1 << 20
# a made per chunk of tiles: about this many entries, and at least MIN_CHUNK_TILES tiles
# (each chunk is a few NumPy calls: fewer, larger chunks when a's rows are narrow).
SCAN_CHUNK_ELEMENTS = 1 << 16
MIN_CHUNK_TILES = 32


def _unit_runs(alpha: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) runs of axis 1 of α (rows, n), each starting at 0 or where some row's
    α is not 1: inside a run every α is 1, so the recurrence is a running sum."""
    cuts = np.flatnonzero((alpha != 1).any(axis=0)).tolist()
    starts = [0, *(c for c in cuts if c > 0)]
    return list(zip(starts, [*starts[1:], alpha.shape[1]], strict=True))


def _linear_scan(alpha, add, start, runs) -> None:
    """x_j = α_j x_(j−1) + b_j along axis 1 (α: (rows, n), b: (rows, n, k), overwritten
    with x; x_(−1) = start (rows, k)), in j order with the tile loop's operations: each
    run's first element by that formula, the rest (α = 1, and 1 · x = x exactly) by one
    running sum in order (ordered_cumsum: np.cumsum's digits). While the running max
    settles, α ≠ 1 at a few tiles a row (about ln T_c for random scores), so a block of
    2 rows and 2,048 tiles takes a few dozen calls rather than a loop over its tiles."""
    prev = start
    for lo, hi in runs:
        add[:, lo] = alpha[:, lo, None] * prev + add[:, lo]
        if hi - lo > 1:
            ordered_cumsum(add[:, lo:hi], axis=1, out=add[:, lo:hi])
        prev = add[:, hi - 1]


def rows_history(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, block_k: int, order: str, mask,
    rows_of: tuple[int, int] | None, scale: float, dtype: str,
) -> RowHistory:  # fmt: skip
    """tiled_attention_history for one query block (all of q's rows), without a loop
    over key tiles: a group of tiles at a time, their scores in one product, their
    maxima, P̃ and P̃ V_j at once, the running max by a cumulative maximum, and ℓ and a
    (ℓ = α ℓ + rowsum(P̃), a = α a + P̃ V_j; Algorithm 1's with its β) by _linear_scan.
    The same formulas as `_tile_update`, added in tile order; the products of a group
    come from one matmul rather than one per tile (and Algorithm 1 keeps a, not O), so
    the digits agree with the tile loop up to the last places (tests hold both)."""
    h, scan = _rows_scan(
        q, k, v, block_k=block_k, order=order, mask=mask, rows_of=rows_of, scale=scale,
        dtype=dtype, out=None,
    )  # fmt: skip
    scan.upto(h.m.shape[1] - 1)
    return h


def _rows_scan(
    q, k, v, *, block_k: int, order: str, mask, rows_of, scale, dtype: str,
    out: RowHistory | None,
) -> tuple[RowHistory, _ProductScan]:  # fmt: skip
    """rows_history's numbers but a, with the scan that makes a as far as asked. With
    `out` (a history of at least these tiles and keys, α = 1 after column 0), written
    into its first columns; the returned history is views of them."""
    acc, qd, kd, vd, sc = _prepare_once(q, k, v, dtype, scale)
    n_rows, n_k, d_v = len(qd), len(kd), vd.shape[1]
    row0, n_all = rows_of if rows_of is not None else (0, n_rows)
    t_c = -(-n_k // block_k)
    mask = Mask.of(mask)
    loads = mask.row_tile_classes(row0, row0 + n_rows, n_all, n_k, n_rows, block_k)[0]
    if out is None:
        h = RowHistory.empty(n_rows, t_c, n_k, d_v, acc, alpha=1.0)
        h.alpha[:, 0] = 0  # before any key
    else:
        cols = slice(0, t_c + 1)
        h = RowHistory(
            out.m[:, cols], out.l[:, cols], out.a[:, cols], out.alpha[:, cols],
            out.p_tilde[:, :n_k],
        )  # fmt: skip
    # The products' P̃ (rounded to the dtype; under KV-outer against each tile's own max)
    # and β, kept for the scan
    p_round = np.empty((n_rows, t_c, block_k), dtype=acc)
    weights = np.empty((n_rows, t_c), dtype=acc) if order != "q-outer" else None
    group = max(1, HISTORY_GROUP_ELEMENTS // max(1, n_rows * block_k))
    for g0 in range(0, t_c, group):
        g1 = min(t_c, g0 + group)
        c0, c1 = g0 * block_k, min(n_k, g1 * block_k)
        width = (g1 - g0) * block_k
        st = np.full((n_rows, width), -np.inf, dtype=acc)  # the last tile's gap: −∞
        st[:, : c1 - c0] = _tile_scores(
            qd, kd, slice(None), slice(c0, c1), n_all, n_k, sc, mask, row0
        )
        skipped = loads[g0:g1] == SKIPPED  # tiles the block never loads change nothing
        st = st.reshape(n_rows, g1 - g0, block_k)
        st[:, skipped] = -np.inf
        tile_max = st.max(axis=2)  # rowmax(S_ij), each tile's
        m_old = h.m[:, g0 : g1 + 1]  # column 0: the state before the group
        m_new = np.maximum.accumulate(np.concatenate([m_old[:, :1], tile_max], 1), 1)
        m_ref = _safe_max(m_new[:, 1:])
        alpha = np.exp(m_new[:, :-1] - m_ref)  # α = exp(m − m_new); 0 before any key
        if order == "q-outer":
            p = np.exp(st - m_ref[:, :, None])  # P̃_ij = exp(S_ij − m_new)
        else:  # Algorithm 1: P̃ against the tile's own max, then β = exp(m̃_ij − m_new)
            p = np.exp(st - _safe_max(tile_max)[:, :, None])
        p_round[:, g0:g1] = round_to(p, dtype)
        sums = p.sum(axis=2)  # rowsum(P̃_ij)
        if weights is not None:
            weight = weights[:, g0:g1] = np.exp(tile_max - m_ref)
            sums = sums * weight
            p = p * weight[:, :, None]  # P̃ against the running max, as q-outer keeps it
        alpha[:, skipped] = 1  # (their state is carried: α = 1, nothing added)
        # ℓ runs through the recurrence where it is kept, from the group's first state,
        # in tile order; a (the same α) when the scan is asked for it
        l_new = h.l[:, g0 + 1 : g1 + 1]
        l_new[...] = sums
        _linear_scan(alpha, l_new[:, :, None], h.l[:, g0, None], _unit_runs(alpha))
        h.m[:, g0 + 1 : g1 + 1] = m_new[:, 1:]
        h.alpha[:, g0 + 1 : g1 + 1] = alpha
        h.p_tilde[:, c0:c1] = p.reshape(n_rows, width)[:, : c1 - c0]
    return h, _ProductScan(h.a, h.alpha[:, 1:], p_round, vd, weights, block_k)


def _prepare_once(q, k, v, dtype: str, scale):
    """attention._prepare without a second copy: inputs already in the accumulator
    dtype (float64 ones, or what round_to returned) are used as they are."""
    acc = stats_dtype(dtype)
    qd, kd, vd = (
        round_to(np.asarray(x, dtype=np.float64), dtype).astype(acc, copy=False) for x in (q, k, v)
    )
    return acc, qd, kd, vd, acc(default_scale(qd.shape[1]) if scale is None else float(scale))


class TileCursor:
    """Every row's state after the first `tiles` key tiles, advanced one tile at a time.

    state(j) returns (m, ℓ, O) with O = a/ℓ as Algorithm 1 keeps it in HBM (zeros where
    ℓ = 0). Forward moves of up to STEP_LIMIT tiles cost one tile update each; any other
    move is one pass over the keys of the first j tiles.
    """

    STEP_LIMIT = 8  # forward moves up to this many tiles replay the loop; others jump

    def __init__(self, q, k, v, schedule: Schedule, *, scale: float, dtype: str) -> None:
        self.s, self.dtype = schedule, dtype
        self.acc, self.qd, self.kd, self.vd, self.scale = _prepare(q, k, v, dtype, scale)
        self._recent: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._tiles, self._m, self._l, self._a = 0, *self._initial()

    def _initial(self):
        n_q, d_v = self.s.n_q, self.s.d_v
        return (
            np.full(n_q, -np.inf, dtype=self.acc),
            np.zeros(n_q, dtype=self.acc),
            np.zeros((n_q, d_v), dtype=self.acc),
        )

    def _snapshot(self):
        return self._m.copy(), self._l.copy(), self._a.copy()

    def _advance(self) -> None:
        """One key tile j = self._tiles for every query block that loads it (`_run`'s body)."""
        s, j, dtype, acc = self.s, self._tiles, self.dtype, self.acc
        cols = slice(j * s.block_k, min(s.n_k, (j + 1) * s.block_k))
        lo, hi = (int(x[j]) for x in s.col_span)  # the blocks that load tile j: one run
        self._tiles += 1
        if hi <= lo:
            return
        rows = slice(lo * s.block_q, min(s.n_q, hi * s.block_q))
        sc = _tile_scores(self.qd, self.kd, rows, cols, s.n_q, s.n_k, self.scale, s.mask)
        # The cursor carries a (q-outer) or O itself (kv-outer, as Algorithm 1 keeps it in HBM).
        m_new, l_new, _, _, carried, _ = _tile_update(
            s.order, sc, self._m[rows], self._l[rows], self._a[rows], self.vd[cols], dtype, acc
        )
        self._m[rows], self._l[rows], self._a[rows] = m_new, l_new, carried

    def state(self, tiles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(m, ℓ, O) of every row after key tiles 0..tiles−1 (read-only copies)."""
        tiles = max(0, min(int(tiles), self.s.t_c))
        if tiles in self._recent:  # views ask for tiles j and j + 1 in turn
            return self._recent[tiles]
        if not 0 <= tiles - self._tiles <= self.STEP_LIMIT:
            # Far away or behind: one closed-form pass over the keys of the first `tiles`
            # tiles (compute.full_pass) instead of replaying tile by tile.
            m, l, o = tiled_state_after(
                self.qd, self.kd, self.vd, self.s, tiles,
                scale=self.scale, dtype=self.dtype, acc=self.acc,
            )  # fmt: skip
            a = o if self.s.order == "kv-outer" else o * l[:, None]
            self._tiles, self._m, self._l, self._a = tiles, m, l, a
        while self._tiles < tiles:
            self._advance()
        m, l, a = self._snapshot()
        if self.s.order == "q-outer":  # the cursor carried a; HBM-style O = a/ℓ
            a = _divide_rows(a, l)
        for x in (m, l, a):
            x.setflags(write=False)
        if len(self._recent) >= 4:
            self._recent.pop(next(iter(self._recent)))
        self._recent[tiles] = (m, l, a)
        return m, l, a
