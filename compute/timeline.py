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

from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

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
)
PHASE_CODE = {p: k for k, p in enumerate(PHASES)}
NONE = -1  # block_i / block_j of an action that involves no block or tile
_T = {t: k for k, t in enumerate(TENSORS)}
_D = {d: k for k, d in enumerate(DIRECTIONS)}


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

# What each phase moves: (tensor, direction, row extent, column extent, condition).
# Extents: "i" rows of query block i, "j" keys of tile j, "nq"/"nk" all, "d"/"dv" head
# sizes, "one" a single column, "never" the rows of blocks that see no tile.
# Conditions: "lse" only when L is saved, "last" only on block i's last visit.
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
    ("kv-outer", "load_kv"): (("K", "read", "j", "d", ""), ("V", "read", "j", "dv", "")),
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
}


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


class LaneTimeline:
    """One lane's declared schedule as arrays; immutable after construction."""

    def __init__(self, schedule: Schedule, lane: str) -> None:
        s = self.schedule = schedule
        self.lane = lane
        self.kind = lane_kind(s, lane)
        self.parts = PARTS[self.kind]
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
        cum = np.zeros((len(lengths) + 1, len(TENSORS), len(DIRECTIONS)), dtype=np.int64)
        np.cumsum(totals, axis=0, out=cum[1:])
        self.seg_cumulative = _readonly(cum)
        self._segment_cache = lru_cache(maxsize=8)(self._segment_uncached)

    # ---- structure -------------------------------------------------------------------
    def _members(self, part: Part) -> np.ndarray:
        """(outer, inner) booleans: which inner indices each segment of the part visits."""
        s = self.schedule
        vis = s.visible if part.outer == "rows" else s.visible.T
        if part.inner_set == "visible":
            return vis
        n_outer = {"rows": s.t_r, "cols": s.t_c, "once": 1}[part.outer]
        n_inner = s.t_c if part.outer == "rows" else s.t_r
        return np.full((n_outer, n_inner), part.inner_set == "all")

    def _inner_counts(self, part: Part) -> np.ndarray:
        if part.inner_set == "none" or not part.inner:
            return np.zeros(
                {"rows": self.schedule.t_r, "cols": self.schedule.t_c, "once": 1}[part.outer],
                dtype=np.int64,
            )
        return self._members(part).sum(axis=1)

    def _extent(self, kind: str, i, j):
        s = self.schedule
        if kind == "i":
            return self.row_sizes[i]
        if kind == "j":
            return self.col_sizes[j]
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
        out = np.zeros((n_outer, len(TENSORS), len(DIRECTIONS)), dtype=np.int64)
        outer_axis = {"rows": "i", "cols": "j", "once": ""}[part.outer]
        members = self._members(part).astype(np.int64) if part.inner else None
        for phase in part.head + part.tail + part.inner:
            inner = phase in part.inner and phase not in part.head + part.tail
            for tensor, direction, rk, ck, cond in TRANSFERS[(self.kind, phase)]:
                if cond == "lse" and not s.save_lse:
                    continue
                if cond == "last" and not s.save_lse:
                    continue
                value = np.ones(n_outer, dtype=np.int64)
                inner_weight = np.ones(members.shape[1] if inner else 1, dtype=np.int64)
                for k in (rk, ck):
                    if k in ("i", "j") and k == outer_axis:
                        value = value * (self.row_sizes if k == "i" else self.col_sizes)[outer]
                    elif k in ("i", "j"):  # depends on the inner index
                        inner_weight = inner_weight * (
                            self.row_sizes if k == "i" else self.col_sizes
                        )
                    else:
                        value = value * self._extent(k, None, None)
                if inner:
                    w = members * inner_weight[None, :]
                    if cond == "last":  # only where this tile is the block's last visit
                        w = w * (s.last_visit[None, :] == outer[:, None])
                    value = value * w.sum(axis=1)
                out[:, _T[tensor], _D[direction]] += value
        return out

    # ---- segments as struct-of-arrays -----------------------------------------------
    def segment_of(self, step: int) -> int:
        return int(np.searchsorted(self.seg_start, step, side="right")) - 1

    def segment(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Segment k's actions as arrays (phase code, block_i, block_j) and running counts
        within it ((len, tensors, directions), cumulative from the segment's start)."""
        return self._segment_cache(k)

    def _segment_uncached(self, k: int):
        part = self.parts[int(self.seg_part[k])]
        o = int(self.seg_outer[k])
        s = self.schedule
        if part.inner:
            members = self._members(part)[o]
            inner = np.flatnonzero(members) if part.inner_set != "none" else np.zeros(0, int)
        else:
            inner = np.zeros(0, dtype=np.int64)
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
        del s
        return tuple(
            _readonly(x) for x in (phases, bi.astype(np.int64), bj.astype(np.int64), counts)
        )

    def action_counts(self, phases: np.ndarray, bi: np.ndarray, bj: np.ndarray) -> np.ndarray:
        """(n, tensors, directions): the elements each action moves, vectorised."""
        s = self.schedule
        out = np.zeros((len(phases), len(TENSORS), len(DIRECTIONS)), dtype=np.int64)
        safe_i, safe_j = np.maximum(bi, 0), np.maximum(bj, 0)
        for (kind, phase), entries in TRANSFERS.items():
            if kind != self.kind:
                continue
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
                        value = value * self._extent(k, None, None)
                m = mask
                if cond == "last":
                    m = mask & (s.last_visit[safe_i] == bj)
                out[m, _T[tensor], _D[direction]] += value[m]
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
        return make_action(
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
            return np.zeros((len(TENSORS), len(DIRECTIONS)), dtype=np.int64)
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
        bi = np.full(self.length, NONE, dtype=np.int64)
        bj = np.full(self.length, NONE, dtype=np.int64)
        first = 0
        for part in self.parts:
            n_outer = {"rows": self.schedule.t_r, "cols": self.schedule.t_c, "once": 1}[part.outer]
            starts = self.seg_start[first : first + n_outer]
            outer = np.arange(n_outer)
            inner_n = self.seg_inner[first : first + n_outer]
            for k, phase in enumerate(part.head):  # head actions: (outer, −)
                self._put(part, phases, bi, bj, starts + k, phase, outer, None)
            if part.inner and part.inner_set != "none":
                seg, item = np.nonzero(self._members(part))  # row-major: each segment's items
                rank = np.arange(len(seg)) - np.repeat(np.cumsum(inner_n) - inner_n, inner_n)
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
        code = PHASE_CODE[phase]
        steps, tiles = [], []
        for p, part in enumerate(self.parts):
            if phase not in part.inner:
                continue
            pos = part.inner.index(phase)
            first = int(np.searchsorted(self.seg_part, p))  # first segment of part p
            members = self._members(part)
            if part.outer == "rows":
                js = np.flatnonzero(members[block_i])
                start = self.seg_start[first + block_i] + len(part.head)
                steps.append(start + np.arange(len(js)) * len(part.inner) + pos)
                tiles.append(js)
            elif part.outer == "cols":
                js = np.flatnonzero(members[:, block_i])
                rank = np.cumsum(members, axis=1)[js, block_i] - 1
                start = self.seg_start[first + js] + len(part.head)
                steps.append(start + rank * len(part.inner) + pos)
                tiles.append(js)
        if not steps:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        del code
        return np.concatenate(steps).astype(np.int64), np.concatenate(tiles).astype(np.int64)

    def write_regions(self, tensor: str) -> tuple[np.ndarray, ...]:
        """(steps, r0, r1, c0, c1) of every HBM write of `tensor` by this lane, in order.

        Vectorised over the whole lane (one entry per write, no Action objects): what a
        view needs to know when each cell of a written tensor was first and last written.
        """
        s = self.schedule
        phases, bi, bj = self.arrays()
        steps_all = np.arange(len(phases))
        out: list[tuple[np.ndarray, ...]] = []
        for (kind, phase), entries in TRANSFERS.items():
            if kind != self.kind:
                continue
            for t, direction, rk, ck, cond in entries:
                if t != tensor or direction != "write" or (cond and not s.save_lse):
                    continue
                mask = phases == PHASE_CODE[phase]
                if cond == "last":
                    mask &= s.last_visit[np.maximum(bi, 0)] == bj
                steps, i, j = steps_all[mask], bi[mask], bj[mask]
                if rk == "never":  # KV-outer's init writes L for each block that sees nothing
                    blocks = np.flatnonzero(s.last_visit < 0)
                    steps, i = np.repeat(steps, len(blocks)), np.tile(blocks, len(steps))
                    rk = "i"
                r0, r1 = self._span(rk, i, j)
                c0, c1 = self._span(ck, i, j)
                out.append((steps, r0, r1, c0, c1))
        if not out:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(5))
        cat = [np.concatenate([o[x] for o in out]) for x in range(5)]
        order = np.argsort(cat[0], kind="stable")
        return tuple(np.broadcast_to(c, cat[0].shape)[order] for c in cat)

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
