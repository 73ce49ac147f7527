"""The declared schedules as arrays: one lane's timeline, looked up by step index.

A lane is a short list of loops ("parts"): the dense lane's three passes over query
blocks, Q-outer's one pass over query blocks, KV-outer's initialisation then one pass
over key tiles. Each pass is a run of *segments* (one per outer index), and a segment
is a head, an inner body repeated once per inner index, and a tail. So the whole
timeline is described by O(T_r + T_c) numbers, however many steps it has:

- segment start steps (a cumulative sum of segment lengths);
- per-segment element counts per tensor and direction, from vectorised formulas, and
  their cumulative sum (the running ledger at every segment boundary).

The actions of one segment are generated as struct-of-arrays (phase code, block_i,
block_j) with NumPy when asked for; running counts inside a segment are a cumulative
sum over those. Nothing here walks the timeline in Python, and nothing is held per
step: at N = 4096 with 2×2 blocks a lane has millions of steps.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .backward_actions import backward_action
from .backward_schedule import PASS_TENSORS
from .numbers import NumberCache
from .schedule import DIRECTIONS, TENSORS, Action, Schedule, lane_kind, make_action

PHASES: tuple[str, ...] = (
    "init",
    "load_q",
    "load_kv",
    "update",
    "write_o",
    "write_s",
    "softmax",
    "accumulate",
    "load_state",
    "write_state",
    # The backward pass (compute.backward_schedule's phases, prefixed: "update" and
    # "load_q" mean other things there). Dense: the five steps of the standard backward.
    "bwd_dv",
    "bwd_dp",
    "bwd_ds",
    "bwd_dq",
    "bwd_dk",
    # Tiled (FlashAttention-2's Algorithm 2, K/V outer).
    "bwd_preprocess",
    "bwd_init",
    "bwd_load_kv",
    "bwd_load_q",
    "bwd_update",
    "bwd_write_dq",
    "bwd_write_dkdv",
)
PHASE_CODE = {p: k for k, p in enumerate(PHASES)}
BACKWARD_PHASES = frozenset(p for p in PHASES if p.startswith("bwd_"))
NONE = -1  # block_i / block_j of an action that involves no block or tile
_D = {d: k for k, d in enumerate(DIRECTIONS)}


SEGMENTS_KEPT = 8  # segments whose per-step arrays a lane keeps (a playback touches one or two)


@dataclass(frozen=True)
class Part:
    """One loop of a lane: segments over query blocks ("rows"), key tiles ("cols") or one
    segment ("once"); each is head + inner × (inner indices) + tail. inner_set says which
    inner indices: "all" tiles, the "visible" ones, or "none"."""

    outer: str
    head: tuple[str, ...]
    inner: tuple[str, ...]
    tail: tuple[str, ...]
    inner_set: str
    kind: str = ""  # whose TRANSFERS: "" = the lane's forward kind, "bwd" = the backward


PARTS: dict[str, tuple[Part, ...]] = {
    "dense": (
        Part("rows", ("load_q",), ("write_s",), (), "all"),  # S_ij = Q_i K_jᵀ to HBM
        Part("rows", ("softmax",), (), (), "none"),  # P = softmax(S), whole rows
        Part("rows", (), ("accumulate",), ("write_o",), "all"),  # O_i = Σ_j P_ij V_j
    ),
    "q-outer": (Part("rows", ("load_q",), ("load_kv", "update"), ("write_o",), "visible"),),
    "kv-outer": (
        Part("once", ("init",), (), (), "none"),
        Part("cols", ("load_kv",), ("load_state", "update", "write_state"), (), "visible"),
    ),
}

# The backward pass of each lane (compute.backward_schedule declares the same steps as a
# loop: the oracle). A training step is the forward's parts, then these, end to end.
BACKWARD_PARTS: dict[str, tuple[Part, ...]] = {
    "dense": (  # five one-step loops: P, dP and dS go through HBM
        Part("cols", ("bwd_dv",), (), (), "none", "bwd"),  # dV_j = P_:jᵀ dO
        Part("rows", ("bwd_dp",), (), (), "none", "bwd"),  # dP_i = dO_i Vᵀ
        Part("rows", ("bwd_ds",), (), (), "none", "bwd"),  # dS_i = P_i ∘ (dP_i − D_i)
        Part("rows", ("bwd_dq",), (), (), "none", "bwd"),  # dQ_i = dS_i K · scale
        Part("cols", ("bwd_dk",), (), (), "none", "bwd"),  # dK_j = dS_:jᵀ Q · scale
    ),
    "tiled": (
        Part("rows", ("bwd_preprocess",), (), (), "none", "bwd"),  # D_i = rowsum(dO_i ∘ O_i)
        Part("once", ("bwd_init",), (), (), "none", "bwd"),  # dQ = 0 in HBM
        Part(
            "cols",
            ("bwd_load_kv",),
            ("bwd_load_q", "bwd_update", "bwd_write_dq"),
            ("bwd_write_dkdv",),
            "visible",
            "bwd",
        ),
    ),
}

# What each phase moves: (tensor, direction, row extent, column extent, condition).
# Extents: "i" rows of query block i, "j" keys of tile j, "nq"/"nk" all, "d"/"dv" head
# sizes, "one" a single column, "never" the rows of blocks that see no tile.
# Conditions: "lse" only when L is saved, "last" only on block i's last visit, "seen" only
# for a key tile j some query block sees (K/V-outer loops skip the others, not loaded).
TRANSFERS: dict[tuple[str, str], tuple[tuple[str, str, str, str, str], ...]] = {
    ("dense", "load_q"): (("Q", "read", "i", "d", ""),),
    ("dense", "write_s"): (("K", "read", "j", "d", ""), ("S", "write", "i", "j", "")),
    ("dense", "softmax"): (("S", "read", "i", "nk", ""), ("P", "write", "i", "nk", "")),
    ("dense", "accumulate"): (("P", "read", "i", "j", ""), ("V", "read", "j", "dv", "")),
    ("dense", "write_o"): (("O", "write", "i", "dv", ""),),
    ("q-outer", "load_q"): (("Q", "read", "i", "d", ""),),
    ("q-outer", "load_kv"): (("K", "read", "j", "d", ""), ("V", "read", "j", "dv", "")),
    ("q-outer", "update"): (),
    ("q-outer", "write_o"): (("O", "write", "i", "dv", ""), ("L", "write", "i", "one", "lse")),
    ("kv-outer", "init"): (
        ("O", "write", "nq", "dv", ""),
        ("l", "write", "nq", "one", ""),
        ("m", "write", "nq", "one", ""),
        ("L", "write", "never", "one", "lse"),
    ),
    ("kv-outer", "load_kv"): (("K", "read", "j", "d", "seen"), ("V", "read", "j", "dv", "seen")),
    ("kv-outer", "load_state"): tuple(
        (t, "read", "i", c, "") for t, c in (("Q", "d"), ("O", "dv"), ("l", "one"), ("m", "one"))
    ),
    ("kv-outer", "update"): (),
    ("kv-outer", "write_state"): (
        ("O", "write", "i", "dv", ""),
        ("l", "write", "i", "one", ""),
        ("m", "write", "i", "one", ""),
        ("L", "write", "i", "one", "last"),
    ),
    ("bwd", "bwd_dv"): (("P", "read", "nq", "j", ""), ("dO", "read", "nq", "dv", ""),
                        ("dV", "write", "j", "dv", "")),
    ("bwd", "bwd_dp"): (("dO", "read", "i", "dv", ""), ("V", "read", "nk", "dv", ""),
                        ("dP", "write", "i", "nk", "")),
    ("bwd", "bwd_ds"): (("P", "read", "i", "nk", ""), ("dP", "read", "i", "nk", ""),
                        ("dS", "write", "i", "nk", "")),
    ("bwd", "bwd_dq"): (("dS", "read", "i", "nk", ""), ("K", "read", "nk", "d", ""),
                        ("dQ", "write", "i", "d", "")),
    ("bwd", "bwd_dk"): (("dS", "read", "nq", "j", ""), ("Q", "read", "nq", "d", ""),
                        ("dK", "write", "j", "d", "")),
    ("bwd", "bwd_preprocess"): (("O", "read", "i", "dv", ""), ("dO", "read", "i", "dv", ""),
                                ("D", "write", "i", "one", "")),
    ("bwd", "bwd_init"): (("dQ", "write", "nq", "d", ""),),
    ("bwd", "bwd_load_kv"): (("K", "read", "j", "d", "seen"), ("V", "read", "j", "dv", "seen")),
    ("bwd", "bwd_load_q"): tuple(
        (t, "read", "i", c, "")
        for t, c in (("Q", "d"), ("dO", "dv"), ("L", "one"), ("D", "one"), ("dQ", "d"))
    ),
    ("bwd", "bwd_update"): (),
    ("bwd", "bwd_write_dq"): (("dQ", "write", "i", "d", ""),),
    ("bwd", "bwd_write_dkdv"): (("dK", "write", "j", "d", ""), ("dV", "write", "j", "dv", "")),
}  # fmt: skip


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class LaneTimeline:
    """One lane's declared schedule as arrays; immutable after construction.

    pass_name "forward" (the default), "backward" or "training" (the forward's parts then
    the backward's, end to end, so the running counts carry over). Counts are over
    `tensors`: the forward's TENSORS, or PASS_TENSORS once a backward is in the pass.
    """

    def __init__(self, schedule: Schedule, lane: str, pass_name: str = "forward") -> None:
        s = self.schedule = schedule
        self.lane = lane
        self.pass_name = pass_name
        self.kind = lane_kind(s, lane)
        forward = PARTS[self.kind] if pass_name in ("forward", "training") else ()
        backward = BACKWARD_PARTS[lane] if pass_name in ("backward", "training") else ()
        if pass_name not in ("forward", "backward", "training"):
            raise ValueError(f"pass must be forward, backward or training, not {pass_name!r}.")
        self.parts = forward + backward
        self.tensors = TENSORS if pass_name == "forward" else PASS_TENSORS
        self._t = {t: k for k, t in enumerate(self.tensors)}
        # Each phase's transfers (phase names are unique across a lane's parts).
        self._transfers = {
            phase: TRANSFERS[(part.kind or self.kind, phase)]
            for part in self.parts
            for phase in part.head + part.inner + part.tail
        }
        self.row_sizes = _readonly(np.diff(np.minimum(np.arange(s.t_r + 1) * s.block_q, s.n_q)))
        self.col_sizes = _readonly(np.diff(np.minimum(np.arange(s.t_c + 1) * s.block_k, s.n_k)))
        # Segments of every part, in order: (part index, outer index, inner count).
        part_of, outer_of, inner_n = [], [], []
        for p, part in enumerate(self.parts):
            n_outer = {"rows": s.t_r, "cols": s.t_c, "once": 1}[part.outer]
            part_of.append(np.full(n_outer, p))
            outer_of.append(np.arange(n_outer))
            inner_n.append(self._inner_counts(part))
        self.seg_part = _readonly(np.concatenate(part_of))
        self.seg_outer = _readonly(np.concatenate(outer_of))
        self.seg_inner = _readonly(np.concatenate(inner_n))
        head_tail = np.array([len(p.head) + len(p.tail) for p in self.parts])
        inner_len = np.array([len(p.inner) for p in self.parts])
        lengths = head_tail[self.seg_part] + inner_len[self.seg_part] * self.seg_inner
        self.seg_start = _readonly(np.concatenate([[0], np.cumsum(lengths)]))
        self.length = int(self.seg_start[-1])
        totals = np.concatenate([self._segment_totals(p) for p in range(len(self.parts))])
        # cum[k]: counts (tensor, direction) of every action before segment k.
        # Summed with the segment axis innermost: along axis 0 of a (segments, 32) array
        # np.cumsum pays a call per segment over 32 elements (2x the time at 16 k segments);
        # integer sums have the same value in any layout.
        cum = np.zeros((len(self.tensors), len(DIRECTIONS), len(lengths) + 1), dtype=np.int64)
        np.cumsum(np.moveaxis(totals, 0, -1), axis=-1, out=cum[..., 1:])
        self.seg_cumulative = _readonly(np.moveaxis(cum, -1, 0))
        # A plain LRU, not functools.lru_cache on a bound method: that would make a cycle
        # (self -> cache -> method -> self), so every replaced trace's timelines would wait
        # for the cyclic collector, and the window's memory grew by a trace per change.
        self._segments: OrderedDict[int, tuple] = OrderedDict()
        self._segments_lock = threading.Lock()

    # ---- structure -------------------------------------------------------------------
    def _span_of(self, part: Part) -> tuple[np.ndarray, np.ndarray]:
        """Each segment's inner indices as a range [lo, hi): the visible key tiles of a query
        block, or query blocks of a key tile, are one run for every mask, so O(T) numbers
        describe it."""
        s = self.schedule
        n_outer = {"rows": s.t_r, "cols": s.t_c, "once": 1}[part.outer]
        n_inner = s.t_c if part.outer == "rows" else s.t_r
        zeros = np.zeros(n_outer, dtype=np.int64)
        if part.inner_set == "none" or not part.inner:
            return zeros, zeros
        if part.inner_set == "all":
            return zeros, zeros + n_inner
        # Every mask's visible tiles of a block, and blocks of a tile, are one run
        # (compute.mask), so the schedule's spans describe them.
        lo, hi = s.row_span if part.outer == "rows" else s.col_span
        return lo.astype(np.int64), hi.astype(np.int64)

    def _inner_counts(self, part: Part) -> np.ndarray:
        lo, hi = self._span_of(part)
        return hi - lo

    def _extent(self, kind: str):
        """An element count that depends on no block index (i and j are handled by callers)."""
        s = self.schedule
        if kind == "never":
            return int(self.row_sizes[s.last_visit < 0].sum())
        return {"nq": s.n_q, "nk": s.n_k, "d": s.d, "dv": s.d_v, "one": 1}[kind]

    def _segment_totals(self, p: int) -> np.ndarray:
        """(segments of part p, tensors, directions): every segment's counts, by formula.

        Head and tail actions depend on the outer index only; an inner action's count is
        (outer factor) × (inner factor), so summing it over a segment's inner indices is
        the outer factor times a membership-weighted sum of the inner factor.
        """
        s, part = self.schedule, self.parts[p]
        n_outer = {"rows": s.t_r, "cols": s.t_c, "once": 1}[part.outer]
        outer = np.arange(n_outer)
        out = np.zeros((n_outer, len(self.tensors), len(DIRECTIONS)), dtype=np.int64)
        outer_axis = {"rows": "i", "cols": "j", "once": ""}[part.outer]
        lo, hi = self._span_of(part)
        for phase in part.head + part.tail + part.inner:
            inner = phase in part.inner and phase not in part.head + part.tail
            for tensor, direction, rk, ck, cond in self._transfers[phase]:
                if cond == "lse" and not s.save_lse:
                    continue
                if cond == "last" and not s.save_lse:
                    continue
                value = np.ones(n_outer, dtype=np.int64)
                n_inner = s.t_c if part.outer == "rows" else s.t_r
                inner_weight = np.ones(n_inner, dtype=np.int64)
                for k in (rk, ck):
                    if k in ("i", "j") and k == outer_axis:
                        value = value * (self.row_sizes if k == "i" else self.col_sizes)[outer]
                    elif k in ("i", "j"):  # depends on the inner index
                        inner_weight = inner_weight * (
                            self.row_sizes if k == "i" else self.col_sizes
                        )
                    else:
                        value = value * self._extent(k)
                if cond == "seen":  # a head of a key-tile loop: only tiles some block sees
                    value = value * s.seen_tiles[outer]
                if inner and cond == "last":  # only on the block's last visit: tile j
                    seen = s.last_visit >= 0
                    value = value * np.bincount(
                        s.last_visit[seen], weights=inner_weight[seen], minlength=n_outer
                    ).astype(np.int64)
                elif inner:  # Σ of the inner factor over the segment's range [lo, hi)
                    cum = np.concatenate([[0], np.cumsum(inner_weight)])
                    value = value * (cum[hi] - cum[lo])
                out[:, self._t[tensor], _D[direction]] += value
        return out

    # ---- segments as struct-of-arrays -----------------------------------------------
    def segment_of(self, step: int) -> int:
        return int(np.searchsorted(self.seg_start, step, side="right")) - 1

    def segment(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Segment k's actions as arrays (phase code, block_i, block_j) and running counts
        within it ((len, tensors, directions), cumulative from the segment's start)."""
        with self._segments_lock:  # the worker and the GUI thread both step through
            found = self._segments.get(k)
            if found is not None:
                self._segments.move_to_end(k)
                return found
        found = self._segment_uncached(k)
        with self._segments_lock:
            self._segments[k] = found
            while len(self._segments) > SEGMENTS_KEPT:
                self._segments.popitem(last=False)
        return found

    def _segment_uncached(self, k: int):
        part = self.parts[int(self.seg_part[k])]
        o = int(self.seg_outer[k])
        lo, hi = self._span_of(part)
        inner = np.arange(lo[o], hi[o]) if part.inner else np.zeros(0, dtype=np.int64)
        head = np.array([PHASE_CODE[p] for p in part.head], dtype=np.int8)
        body = np.array([PHASE_CODE[p] for p in part.inner], dtype=np.int8)
        tail = np.array([PHASE_CODE[p] for p in part.tail], dtype=np.int8)
        phases = np.concatenate([head, np.tile(body, len(inner)), tail])
        inner_rep = np.repeat(inner, len(part.inner))
        n_ht = len(head), len(tail)
        outer_arr = np.full(len(phases), o)
        fill = np.full(len(phases), NONE)
        inner_full = np.concatenate([np.full(n_ht[0], NONE), inner_rep, np.full(n_ht[1], NONE)])
        if part.outer == "rows":
            bi, bj = outer_arr, inner_full
        elif part.outer == "cols":
            bi, bj = inner_full, outer_arr
        else:
            bi, bj = fill, fill
        counts = self.action_counts(phases, bi, bj)
        np.cumsum(counts, axis=0, out=counts)
        return tuple(
            _readonly(x) for x in (phases, bi.astype(np.int64), bj.astype(np.int64), counts)
        )

    def action_counts(self, phases: np.ndarray, bi: np.ndarray, bj: np.ndarray) -> np.ndarray:
        """(n, tensors, directions): the elements each action moves, vectorised."""
        s = self.schedule
        out = np.zeros((len(phases), len(self.tensors), len(DIRECTIONS)), dtype=np.int64)
        safe_i, safe_j = np.maximum(bi, 0), np.maximum(bj, 0)
        for phase, entries in self._transfers.items():
            mask = phases == PHASE_CODE[phase]
            if not mask.any():
                continue
            for tensor, direction, rk, ck, cond in entries:
                if cond in ("lse", "last") and not s.save_lse:
                    continue
                value = np.ones(len(phases), dtype=np.int64)
                for k in (rk, ck):
                    if k == "i":
                        value = value * self.row_sizes[safe_i]
                    elif k == "j":
                        value = value * self.col_sizes[safe_j]
                    else:
                        value = value * self._extent(k)
                m = mask
                if cond == "last":
                    m = mask & (s.last_visit[safe_i] == bj)
                elif cond == "seen":
                    m = mask & s.seen_tiles[safe_j]
                out[m, self._t[tensor], _D[direction]] += value[m]
        return out

    # ---- look-ups by step ------------------------------------------------------------
    def locate(self, step: int) -> tuple[int, int, int]:
        """(phase code, block_i, block_j) of the action at `step` (NONE for no block)."""
        k = self.segment_of(step)
        phases, bi, bj, _ = self.segment(k)
        at = step - int(self.seg_start[k])
        return int(phases[at]), int(bi[at]), int(bj[at])

    def action(self, step: int) -> Action | None:
        """The action at `step` as an object (built on demand; None past the lane's end)."""
        if not 0 <= step < self.length:
            return None
        phase, i, j = self.locate(step)
        build = backward_action if PHASES[phase] in BACKWARD_PHASES else make_action
        return build(
            self.schedule,
            self.lane,
            PHASES[phase],
            None if i == NONE else i,
            None if j == NONE else j,
        )

    def counts_at(self, step: int) -> np.ndarray:
        """(tensors, directions) elements moved by actions 0..step (step -1 = none)."""
        step = min(step, self.length - 1)
        if step < 0:
            return np.zeros((len(self.tensors), len(DIRECTIONS)), dtype=np.int64)
        k = self.segment_of(step)
        within = self.segment(k)[3][step - int(self.seg_start[k])]
        return self.seg_cumulative[k] + within

    @cached_property
    def totals(self) -> np.ndarray:
        """(tensors, directions): the whole lane's counts."""
        return _readonly(self.seg_cumulative[-1].copy())

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The whole lane as struct-of-arrays (phase code, block_i, block_j), vectorised.

        One entry per step (9 bytes each): for whole-lane questions such as when each
        HBM cell is written; views asking about one step use `locate` instead.
        """
        phases = np.empty(self.length, dtype=np.int8)
        bi = np.full(self.length, NONE, dtype=np.int32)
        bj = np.full(self.length, NONE, dtype=np.int32)
        first = 0
        for part in self.parts:
            n_outer = {"rows": self.schedule.t_r, "cols": self.schedule.t_c, "once": 1}[part.outer]
            starts = self.seg_start[first : first + n_outer]
            outer = np.arange(n_outer)
            inner_n = self.seg_inner[first : first + n_outer]
            for k, phase in enumerate(part.head):  # head actions: (outer, −)
                self._put(part, phases, bi, bj, starts + k, phase, outer, None)
            if part.inner and part.inner_set != "none":
                lo, _ = self._span_of(part)
                seg = np.repeat(np.arange(n_outer), inner_n)  # each segment's items, in order
                rank = np.arange(len(seg)) - np.repeat(np.cumsum(inner_n) - inner_n, inner_n)
                item = lo[seg] + rank
                base = starts[seg] + len(part.head) + rank * len(part.inner)
                for k, phase in enumerate(part.inner):
                    self._put(part, phases, bi, bj, base + k, phase, seg, item)
            tail0 = starts + len(part.head) + inner_n * len(part.inner)
            for k, phase in enumerate(part.tail):
                self._put(part, phases, bi, bj, tail0 + k, phase, outer, None)
            first += n_outer
        return phases, bi, bj

    @staticmethod
    def _put(part, phases, bi, bj, at, phase, outer, item) -> None:
        phases[at] = PHASE_CODE[phase]
        if part.outer == "rows":
            bi[at] = outer
            if item is not None:
                bj[at] = item
        elif part.outer == "cols":
            bj[at] = outer
            if item is not None:
                bi[at] = item

    def steps_of(self, phase: str, block_i: int) -> tuple[np.ndarray, np.ndarray]:
        """(steps, key tiles) at which this lane does `phase` on query block `block_i`.

        Found from the structure, not by a walk: in a rows-part the block owns one
        segment; in a cols-part (KV-outer) the block appears once in each tile that it
        sees, at a position given by its rank among that tile's visible blocks.
        """
        steps, tiles = [], []
        for p, part in enumerate(self.parts):
            if phase not in part.inner:
                continue
            pos = part.inner.index(phase)
            first = int(np.searchsorted(self.seg_part, p))  # first segment of part p
            lo, hi = self._span_of(part)
            if part.outer == "rows":
                js = np.arange(lo[block_i], hi[block_i])
                start = self.seg_start[first + block_i] + len(part.head)
                steps.append(start + np.arange(len(js)) * len(part.inner) + pos)
                tiles.append(js)
            elif part.outer == "cols":
                js = np.flatnonzero((lo <= block_i) & (block_i < hi))
                rank = block_i - lo[js]
                start = self.seg_start[first + js] + len(part.head)
                steps.append(start + rank * len(part.inner) + pos)
                tiles.append(js)
        if not steps:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        return np.concatenate(steps).astype(np.int64), np.concatenate(tiles).astype(np.int64)

    def write_regions(self, tensor: str, *, skip_grid: bool = False) -> tuple[np.ndarray, ...]:
        """(steps, r0, r1, c0, c1) of every HBM write of `tensor` by this lane.

        From the structure, never a walk: a head or tail write happens once per segment
        at a known offset; an inner write once per (segment, inner index). With
        skip_grid, the writes `write_steps_per_cell` handles by formula are left out: a
        full T_r × T_c loop (the dense lane's S tiles) and a write of whole rows of blocks
        at every visit of a loop over key tiles (the backward's dQ_i, KV-outer's O_i, m_i,
        ℓ_i), which would otherwise be one entry per visit.
        """
        s = self.schedule
        out: list[tuple[np.ndarray, ...]] = []
        for part, phase, entry in self._writes(tensor):
            _t, _direction, rk, ck, cond = entry
            if skip_grid and (
                self._is_grid(part, phase, rk, ck) or self._is_visit_rows(part, phase, entry)
            ):
                continue
            p_index = self.parts.index(part)
            seg0 = int(np.searchsorted(self.seg_part, p_index))
            n_outer = {"rows": s.t_r, "cols": s.t_c, "once": 1}[part.outer]
            starts = self.seg_start[seg0 : seg0 + n_outer]
            inner_n = self.seg_inner[seg0 : seg0 + n_outer]
            lo, _hi = self._span_of(part)
            outer = np.arange(n_outer)
            if phase in part.head:
                steps, o, item = starts + part.head.index(phase), outer, None
            elif phase in part.tail:
                at = len(part.head) + inner_n * len(part.inner) + part.tail.index(phase)
                steps, o, item = starts + at, outer, None
            elif cond == "last":  # once per block, in the tile of its last visit
                item = np.flatnonzero(s.last_visit >= 0)  # query blocks
                o = s.last_visit[item].astype(np.int64)  # their last tiles (outer, KV-outer)
                steps = starts[o] + len(part.head) + (item - lo[o]) * len(part.inner)
                steps = steps + part.inner.index(phase)
            else:
                o = np.repeat(outer, inner_n)
                item = lo[o] + np.arange(len(o)) - np.repeat(np.cumsum(inner_n) - inner_n, inner_n)
                steps = starts[o] + len(part.head) + (item - lo[o]) * len(part.inner)
                steps = steps + part.inner.index(phase)
            if part.outer == "rows":
                i, j = o, (item if item is not None else np.full(len(o), NONE))
            elif part.outer == "cols":
                i, j = (item if item is not None else np.full(len(o), NONE)), o
            else:
                i = j = np.full(len(o), NONE)
            if rk == "never":  # KV-outer's init writes L for each block that sees nothing
                blocks = np.flatnonzero(s.last_visit < 0)
                steps, i = np.repeat(steps, len(blocks)), np.tile(blocks, len(steps))
                j = np.full(len(i), NONE)
                rk = "i"
            r0, r1 = self._span(rk, i, j)
            c0, c1 = self._span(ck, i, j)
            out.append(tuple(np.asarray(x, dtype=np.int64) for x in (steps, r0, r1, c0, c1)))
        if not out:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(5))
        return tuple(np.concatenate([o[x] for o in out]) for x in range(5))

    def _writes(self, tensor: str):
        for part in self.parts:
            for phase in part.head + part.inner + part.tail:
                for entry in self._transfers[phase]:
                    t, direction, _rk, _ck, cond = entry
                    if (
                        t == tensor
                        and direction == "write"
                        and (self.schedule.save_lse or not cond)
                    ):
                        yield part, phase, entry

    @staticmethod
    def _is_grid(part: Part, phase: str, rk: str, ck: str) -> bool:
        return (
            part.outer == "rows"
            and part.inner_set == "all"
            and phase in part.inner
            and (rk, ck) == ("i", "j")
        )

    def _is_visit_rows(self, part: Part, phase: str, entry: tuple) -> bool:
        """An inner write of block i's whole rows at each visit (j, i) of a key-tile loop."""
        _t, _direction, rk, ck, cond = entry
        full_cols = ck in ("d", "dv", "one")
        return part.outer == "cols" and phase in part.inner and rk == "i" and full_cols and not cond

    def _visit_rows_steps(
        self, part: Part, phase: str, h: int, fr: int, n_rows: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(first, last) step of a per-visit write of block rows (see _is_visit_rows) for
        each of h cell rows of fr element rows, by formula: tile j visits blocks lo[j] ..
        T_r − 1 in order (lo non-decreasing in j), so block i's first visit is in tile 0
        and its last in the last tile j with lo[j] ≤ i; steps grow with j, then with i, so
        a cell's first write is its first visited block's in tile 0, its last is its last
        block's final visit. −1 / int64 max where the cell's blocks are never visited."""
        s = self.schedule
        p_index = self.parts.index(part)
        seg0 = int(np.searchsorted(self.seg_part, p_index))
        starts = self.seg_start[seg0 : seg0 + s.t_c]
        lo, _hi = self._span_of(part)
        offset = len(part.head) + part.inner.index(phase)
        width = len(part.inner)
        rows_a = np.arange(h) * fr
        i_lo = rows_a // s.block_q
        i_hi = (np.minimum(rows_a + fr, n_rows) - 1) // s.block_q
        big = np.iinfo(np.int64).max
        i_first = np.maximum(i_lo, lo[0])
        first = np.where(
            i_first <= i_hi, starts[0] + offset + (i_first - lo[0]) * width, big
        ).astype(np.int64)
        j_last = np.searchsorted(lo, i_hi, side="right") - 1
        jl = np.maximum(j_last, 0)
        last = np.where(j_last >= 0, starts[jl] + offset + (i_hi - lo[jl]) * width, -1).astype(
            np.int64
        )
        return first, last

    def write_steps_per_cell(
        self, tensor: str, shape: tuple[int, int], factor: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(first, last) step that wrote each cell of a grid of factor[0] × factor[1]
        elements over a tensor of `shape`; −1 where never written.

        A full T_r × T_c loop of writes (S_ij) steps in order of (i, j), so a cell's first
        write is its top-left block's and its last the bottom-right's: a formula per cell.
        Other writes (one per query block or per visit) are spread over the cells their
        regions cover and reduced with np.minimum.at / np.maximum.at.
        """
        s = self.schedule
        fr, fc = factor
        h, w = -(-shape[0] // fr), -(-shape[1] // fc)
        first = np.full((h, w), np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full((h, w), -1, dtype=np.int64)
        for p_index, part in enumerate(self.parts):
            for phase in part.inner:
                for t, direction, rk, ck, _cond in self._transfers[phase]:
                    if (
                        t != tensor
                        or direction != "write"
                        or not self._is_grid(part, phase, rk, ck)
                    ):
                        continue
                    seg0 = int(np.searchsorted(self.seg_part, p_index))
                    rows_a = np.arange(h) * fr
                    cols_b = np.arange(w) * fc
                    i_lo = rows_a // s.block_q
                    i_hi = (np.minimum(rows_a + fr, shape[0]) - 1) // s.block_q
                    j_lo = cols_b // s.block_k
                    j_hi = (np.minimum(cols_b + fc, shape[1]) - 1) // s.block_k
                    base = len(part.head) + part.inner.index(phase)
                    step = len(part.inner)
                    f = self.seg_start[seg0 + i_lo][:, None] + base + j_lo[None, :] * step
                    g = self.seg_start[seg0 + i_hi][:, None] + base + j_hi[None, :] * step
                    first = np.minimum(first, f)
                    last = np.maximum(last, g)
        for part, phase, entry in self._writes(tensor):
            if self._is_visit_rows(part, phase, entry):
                f_rows, l_rows = self._visit_rows_steps(part, phase, h, fr, shape[0])
                first = np.minimum(first, f_rows[:, None])
                last = np.maximum(last, l_rows[:, None])
        steps, r0, r1, c0, c1 = self.write_regions(tensor, skip_grid=True)
        full = (c0 == 0) & (c1 == shape[1])
        cr0, cr1 = r0 // fr, -(-r1 // fr)
        # Whole-row writes (O, P, m, ℓ, L): reduced per cell row, then across the columns.
        sel = np.flatnonzero(full)
        cells, at = _spread(cr0[sel], cr1[sel] - cr0[sel], np.ones(len(sel), dtype=np.int64), 1)
        f_rows = np.full(h, np.iinfo(np.int64).max, dtype=np.int64)
        l_rows = np.full(h, -1, dtype=np.int64)
        np.minimum.at(f_rows, cells, steps[sel][at])
        np.maximum.at(l_rows, cells, steps[sel][at])
        first = np.minimum(first, f_rows[:, None])
        last = np.maximum(last, l_rows[:, None])
        sel = np.flatnonzero(~full)  # any other region: its rectangle of cells
        if sel.size:
            cc0, cc1 = c0[sel] // fc, -(-c1[sel] // fc)
            cells, at = _spread(cr0[sel] * w + cc0, cr1[sel] - cr0[sel], cc1 - cc0, w)
            flat_first, flat_last = first.reshape(-1), last.reshape(-1)
            np.minimum.at(flat_first, cells, steps[sel][at])
            np.maximum.at(flat_last, cells, steps[sel][at])
        first[first == np.iinfo(np.int64).max] = -1
        return first, last

    def _span(self, kind: str, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Element range [start, end) of an extent kind for each (i, j)."""
        s = self.schedule
        if kind == "i":
            return i * s.block_q, np.minimum(s.n_q, (i + 1) * s.block_q)
        if kind == "j":
            return j * s.block_k, np.minimum(s.n_k, (j + 1) * s.block_k)
        end = {"nq": s.n_q, "nk": s.n_k, "d": s.d, "dv": s.d_v, "one": 1}[kind]
        zeros = np.zeros(len(i), dtype=np.int64)
        return zeros, zeros + end


def _spread(origin, n_rows, n_cols, width):
    """Flat cell indices of rectangles (origin, n_rows × n_cols, row pitch `width`) and,
    for each, the index of the rectangle it came from."""
    per = n_rows * n_cols
    at = np.repeat(np.arange(len(per)), per)
    k = np.arange(len(at)) - np.repeat(np.cumsum(per) - per, per)  # cell within rectangle
    return origin[at] + (k // n_cols[at]) * width + k % n_cols[at], at


# The lanes' timelines of the last trace, by what they depend on (the schedule and the
# pass): an inputs change (a new seed, a scale) keeps them (their cost: assets/benchmarks/
# interactive/NOTES.md, round 48). One entry only: it is the shown trace's own, so the
# cache holds nothing the window does not (a schedule's tile classes are T_r × T_c bytes,
# outside the memory estimate if kept for a trace gone).
_KEPT = NumberCache(entries=1, max_bytes=None)


def lane_timelines(
    schedule: Schedule, lanes: tuple[str, ...], pass_name: str = "forward"
) -> dict[str, LaneTimeline]:
    """{lane: LaneTimeline(schedule, lane, pass_name)}, the last ones made if they were
    for an equal schedule and pass (timelines are immutable). Every timeline of one call
    holds the same schedule object: the caller's, or the equal one they were made with
    (whose cached tile classes come with it)."""
    return _KEPT.value(
        "lanes",
        (schedule, tuple(lanes), pass_name),
        lambda: {lane: LaneTimeline(schedule, lane, pass_name) for lane in lanes},
    )
