"""Per-trace image preparation for the lanes: colour scale, heatmaps, write history.

NumPy only (it runs on the build worker thread). Everything expensive about drawing a
lane happens here once per Trace: every HBM tensor becomes an RGBA array at display
resolution (block-averaged when larger than `DISPLAY_CAP` cells a side, so N = 1024
draws as fast as N = 6), and every written tensor gets the first and last step that
wrote each display cell. Per-step drawing then only compares those arrays with the
current step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from compute import Trace
from compute.forward_numbers import DISPLAY_CELLS
from compute.timeline import PHASE_CODE

from .array_memo import ArrayMemo
from .backward import GRAD_SLOTS, grad_slots, grad_sources

DISPLAY_CAP = DISPLAY_CELLS  # display cells per side before block-averaging (the core's)
MASKED_RGBA = (128, 128, 128, 90)  # causally masked score (−∞): a faint grey
# Diverging blue–white–red (ColorBrewer RdBu) anchors, negative to positive.
_ANCHORS = np.array(
    [
        [33, 102, 172],
        [103, 169, 207],
        [209, 229, 240],
        [247, 247, 247],
        [253, 219, 199],
        [239, 138, 98],
        [178, 24, 43],
    ],
    dtype=np.float64,
)
_POS = np.linspace(0.0, 1.0, len(_ANCHORS))
LUT = np.empty((256, 4), dtype=np.uint8)
for _c in range(3):
    LUT[:, _c] = np.round(np.interp(np.linspace(0, 1, 256), _POS, _ANCHORS[:, _c]))
LUT[:, 3] = 255
LUT32 = LUT.view(np.uint32).ravel()  # one RGBA pixel per entry


@dataclass(frozen=True)
class ColorScale:
    """Symmetric shared scale: −vmax maps to blue, 0 to white, +vmax to red."""

    vmax: float

    def rgba(self, values: np.ndarray) -> np.ndarray:
        """(h, w) floats to (h, w, 4) uint8; −∞ becomes MASKED_RGBA, NaN transparent."""
        values = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(values)
        all_finite = bool(finite.all())
        # idx = round((x / vmax + 1) · 127.5), clipped to the LUT; one 32-bit gather per
        # cell (this runs on every trace for every tensor, so it is kept lean).
        t = values if all_finite else np.where(finite, values, 0.0)
        factor = 127.5 / self.vmax
        # A subnormal vmax (tiny inputs) makes the factor inf: divide instead.
        t = t * factor if np.isfinite(factor) else (t / self.vmax) * 127.5
        t += 128.0
        np.clip(t, 0.0, 255.0, out=t)
        out = LUT32[t.astype(np.uint8)].view(np.uint8).reshape(*values.shape, 4)
        if not all_finite:
            out[np.isneginf(values)] = MASKED_RGBA
            out[np.isnan(values)] = (0, 0, 0, 0)
        return out


def downsample(values: np.ndarray, cap: int = DISPLAY_CAP) -> tuple[np.ndarray, int, int]:
    """Block means to at most `cap` cells a side; a block that is mostly −∞ stays −∞.

    Returns (array, row factor, column factor).
    """
    values = np.asarray(values, dtype=np.float64)
    rows, cols = values.shape
    fr, fc = math.ceil(rows / cap), math.ceil(cols / cap)
    if fr == 1 and fc == 1:
        return values, 1, 1
    hr, hc = math.ceil(rows / fr), math.ceil(cols / fc)
    if rows == hr * fr and cols == hc * fc and np.isfinite(values).all():
        # Cells that divide the matrix, nothing masked: a view's mean, no padded copy.
        return values.reshape(hr, fr, hc, fc).mean(axis=(1, 3)), fr, fc
    pad = np.full((hr * fr, hc * fc), np.nan)
    pad[:rows, :cols] = values
    blocks = pad.reshape(hr, fr, hc, fc)
    finite = np.isfinite(blocks)
    count = finite.sum(axis=(1, 3))
    total = np.where(finite, blocks, 0.0).sum(axis=(1, 3))
    masked = np.isneginf(blocks).sum(axis=(1, 3))
    mean = np.divide(total, count, out=np.zeros_like(total), where=count > 0)
    mean[masked > count] = -np.inf
    return mean, fr, fc


@dataclass
class TensorImage:
    """One HBM tensor as drawn: RGBA at display resolution plus its write history."""

    name: str
    shape: tuple[int, int]  # element rows, columns
    rgba: np.ndarray  # (h, w, 4) uint8
    factor: tuple[int, int]  # elements per display cell (rows, cols)
    values: np.ndarray | None = None  # element values, kept when small enough for numbers
    first_write: np.ndarray | None = None  # (h, w) step of first write; big = never
    last_write: np.ndarray | None = None
    pending: bool = False  # a placeholder: its numbers are still being computed

    @property
    def display_shape(self) -> tuple[int, int]:
        return self.rgba.shape[0], self.rgba.shape[1]

    def veils(self, step: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(never written yet, written but not final) masks at `step`; None if never written."""
        if self.first_write is None:
            return None
        return self.first_write > step, (self.first_write <= step) & (self.last_write > step)


@dataclass
class LaneImages:
    """All tensors of both lanes for one trace, with the colour scale of each quantity.

    V and the outputs (O, a) share one symmetric scale; Q and K have theirs (the input
    scale multiplies them, not V) and the scores (S, m) theirs, which grow as the square
    of it: at scale 10, on one shared scale, Q and K washed out and V turned white. Probabilities P get theirs: they are about 1/N_k,
    so on the values' scale they fade to white as N grows; P̃ = exp(S − m) in SRAM runs
    up to 1 and has P_TILDE. Gradients (backward) have their own magnitude.
    """

    scale: ColorScale
    prob_scale: ColorScale = field(default_factory=lambda: ColorScale(1.0))
    lanes: dict[str, dict[str, TensorImage]] = field(default_factory=dict)
    grad_scale: ColorScale | None = None  # dO and the gradients (backward only)
    score_scale: ColorScale | None = None  # S and m (None: the values' scale)
    qk_scale: ColorScale | None = None  # Q and K (None: the values' scale)

    def scale_for(self, tensor: str) -> ColorScale:
        if tensor == "P":
            return self.prob_scale
        if tensor in GRAD_SLOTS and self.grad_scale is not None:
            return self.grad_scale  # gradients have their own magnitude
        if tensor in SCORE_TENSORS and self.score_scale is not None:
            return self.score_scale
        if tensor in ("Q", "K") and self.qk_scale is not None:
            return self.qk_scale
        return self.scale


SCORE_TENSORS = frozenset({"S", "m"})
P_TILDE = ColorScale(1.0)  # P̃ = exp(S − m_new) lies in [0, 1], its row maximum is 1


NEVER = np.iinfo(np.int32).max
NUMBERS_CAP = 64  # keep element values (for numbers in cells) up to this many per side


ROBUST_ABOVE = 4096  # values; above this the scale is a percentile, not the maximum
ROBUST_PERCENTILE = 99.5


# Heatmaps, downsampled sources and scales of the arrays a trace shares with the last
# ones (inputs and passes over S a blocks change keeps): made once (scene.array_memo).
_MEMO = ArrayMemo(64)  # two traces' worth: a drag back and forth finds the last one


def _downsampled(values: np.ndarray) -> tuple[np.ndarray, int, int]:
    return _MEMO.get((values,), "downsample", lambda: downsample(values))


def _rgba(scale: ColorScale, small: np.ndarray) -> np.ndarray:
    return _MEMO.get((small,), ("rgba", scale.vmax), lambda: scale.rgba(small))


def _placeholder(shape: tuple[int, int, int], fill: tuple[int, ...]) -> np.ndarray:
    """A flat image (a pending tensor, the neutral l/L column), one per shape and fill."""

    def make() -> np.ndarray:
        rgba = np.empty(shape, np.uint8)
        rgba[:] = fill
        return rgba

    return _MEMO.get((), ("flat", shape, fill), make)


def _shared_vmax(trace: Trace, parts: list[np.ndarray]) -> float:
    return _MEMO.get(tuple(parts), "vmax", lambda: _vmax(parts))


def _vmax(parts: list[np.ndarray]) -> float:
    """The scale's half-width: the largest |value| for small examples (every cell carries
    its number), the 99.5th percentile for large ones, so a few extremes do not wash
    every heatmap out (cells beyond it saturate). The values' scale is set by V alone:
    the outputs' rows are convex combinations of V's, so it covers them, and it is known
    before the pass over S (Q, K and S have scales of their own)."""
    total = sum(np.size(p) for p in parts)
    # A fixed stride sample (one stride across the parts, taken before any copy) is
    # plenty for a percentile and far cheaper than all: Q and K at N = 4096 are 1M values.
    stride = max(1, total // 32768) if total > ROBUST_ABOVE else 1
    picked, offset = [], 0
    for p in parts:
        flat = np.ravel(p)
        picked.append(flat[(-offset) % stride :: stride])
        offset += flat.size
    flat = np.abs(np.concatenate(picked))
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return 1.0
    if total > ROBUST_ABOVE:
        vmax = float(np.percentile(flat, ROBUST_PERCENTILE))
        # A sharply peaked softmax leaves almost every P near 0 (even denormal), so the
        # percentile says nothing: fall back on the largest value.
        vmax = max(vmax, float(flat.max()) * 1e-3)
    else:
        vmax = float(flat.max())
    return vmax if vmax > 0 else 1.0


class RegionSource:
    """S or P too large to hold (N_q × N_k): its shape, and single values computed when
    asked (a tooltip); its heatmap comes from the trace's display-resolution summary."""

    def __init__(self, trace: Trace, name: str) -> None:
        self.trace, self.name = trace, name
        self.shape = (trace.schedule.n_q, trace.schedule.n_k)

    def __getitem__(self, index: tuple[int, int]) -> float:
        i, j = index
        if self.name in ("dP", "dS"):
            return float(self.trace.grad_region(self.name, i, i + 1, j, j + 1)[0, 0])
        region = self.trace.scores_region if self.name == "S" else self.trace.probs_region
        return float(region(i, i + 1, j, j + 1)[0, 0])


def lane_sources(trace: Trace, lane: str) -> dict[str, np.ndarray | RegionSource]:
    """The HBM tensors a lane shows, in drawing order, with the values the trace holds."""
    if lane == "dense":
        s = trace.schedule
        small = max(s.n_q, s.n_k) <= NUMBERS_CAP  # numbers in cells: hold all of S and P
        return {
            "Q": trace.q,
            "K": trace.k,
            "V": trace.v,
            "S": trace.scores if small else RegionSource(trace, "S"),
            "P": trace.probs if small else RegionSource(trace, "P"),
            "O": trace.reference,
        } | _grad_sources(trace, "dense")
    s = trace.schedule
    out = {"Q": trace.q, "K": trace.k, "V": trace.v, "O": trace.tiled_output}
    if s.order == "kv-outer":
        m, l, _ = trace.state_after_tiles(s.t_c)  # noqa: E741
        out["m"] = m[:, None]
        out["l"] = l[:, None]
    if s.save_lse:
        out["L"] = trace.lse[:, None]
    return out | _grad_sources(trace, "tiled")


def _grad_sources(trace: Trace, lane: str) -> dict[str, np.ndarray | RegionSource]:
    """The backward's tensors (none in the forward); dP, dS as regions when large."""
    s = trace.schedule
    small = max(s.n_q, s.n_k) <= NUMBERS_CAP
    out = grad_sources(trace, lane, small)
    return {k: (RegionSource(trace, k) if v is None else v) for k, v in out.items()}


def _write_history(trace: Trace, lane: str, tensor: str, img: TensorImage) -> None:
    """First and last step that wrote each display cell (the lane's arrays; see
    LaneTimeline.write_steps_per_cell); NEVER where a cell is never written."""
    first, last = trace.lanes[lane].write_steps_per_cell(tensor, img.shape, img.factor)
    first[first < 0], last[last < 0] = NEVER, NEVER
    img.first_write, img.last_write = first.astype(np.int32), last.astype(np.int32)


FIRST_TIER = frozenset({"Q", "K", "V", "S"})  # heatmaps exact without all of S
PENDING_RGBA = (150, 150, 150, 60)  # a tensor still computing: a faint grey


# Below this much work in the pass over S (N · N_k · (d + d_v) multiply-adds) a forward
# comes in one tier: below it the second paint that streaming adds
# costs more than the first tier saves. From N = 1024, d = 64 up (134M) the first paint
# comes at about half the time for about a quarter more until the last part
# (assets/benchmarks/interactive/NOTES.md, round 39).
STREAM_WORK = 1 << 27
# A backward's or a training step's first tier is its rows' alone, a small part of its
# complete work (the forward's pass, then the gradients', then their images), so it
# streams from an eighth of that size: at N = 256, d = 128 with 2×2 blocks a one-part
# build made all of them before its first paint (assets/benchmarks/interactive/NOTES.md,
# round 47).
BACKWARD_STREAM_WORK = 1 << 24


def streams(trace: Trace) -> bool:
    """Whether a trace's numbers come in two tiers (see prepare_first): they do when its
    pass over S is large and not cached already (else both tiers cost two paints for
    nothing). A backward's first tier also has its forward's O, L and D (every row's,
    without the backward's products: what the selected rows' gradients read)."""
    s = trace.schedule
    work = s.n_q * s.n_k * (s.d + s.d_v)
    if work < (STREAM_WORK if trace.backward is None else BACKWARD_STREAM_WORK):
        return False
    if trace.backward is not None:
        return not trace.backward.summary_cached(DISPLAY_CAP)
    return not trace.forward.summary_cached(DISPLAY_CAP)


def prepare_first(trace: Trace) -> LaneImages:
    """The first tier: Q, K, V and S (by block means, compute.first_tier), every scale
    (P's from whole sampled rows) and S's write history, exact without all of S. Every other tensor is
    a grey placeholder of its display size marked `pending`, so the layout does not move
    when complete_images fills it."""
    s_sample, p_sample = trace.forward.row_sample()  # (inputs and mask only: cached)
    images = LaneImages(
        ColorScale(_shared_vmax(trace, [trace.v])), ColorScale(_shared_vmax(trace, [p_sample]))
    )
    images.score_scale = ColorScale(_shared_vmax(trace, [s_sample]))
    images.qk_scale = ColorScale(_shared_vmax(trace, [trace.q, trace.k]))
    means = trace.forward.score_means(DISPLAY_CAP)
    for lane in ("dense", "tiled"):
        images.lanes[lane] = {}
        for name, shape in lane_shapes(trace, lane).items():
            if name not in FIRST_TIER:
                fr, fc = math.ceil(shape[0] / DISPLAY_CAP), math.ceil(shape[1] / DISPLAY_CAP)
                rgba = _placeholder(
                    (math.ceil(shape[0] / fr), math.ceil(shape[1] / fc), 4), PENDING_RGBA
                )
                images.lanes[lane][name] = TensorImage(name, shape, rgba, (fr, fc), pending=True)
                continue
            if name == "S":
                small, fr, fc = means.values, *means.factor
                keep = trace.scores if max(shape) <= NUMBERS_CAP else None
            else:
                values = {"Q": trace.q, "K": trace.k, "V": trace.v}[name]
                small, fr, fc = _downsampled(values)  # (Q, K, V: once for both lanes)
                keep = values if max(shape) <= NUMBERS_CAP else None
            img = TensorImage(name, shape, _rgba(images.scale_for(name), small), (fr, fc), keep)
            if name in _written(trace, lane) and name not in live_tensors(trace, lane):
                _write_history(trace, lane, name, img)
            images.lanes[lane][name] = img
    return images


def _written(trace: Trace, lane: str) -> set[str]:
    """What this pass writes (in a backward, O, P, L are there from the start)."""
    tl = trace.lanes[lane]
    return {t for k, t in enumerate(tl.tensors) if tl.totals[k, 1] > 0}


def lane_shapes(trace: Trace, lane: str) -> dict[str, tuple[int, int]]:
    """The HBM tensors a lane shows, in drawing order, with their shapes (lane_sources's
    keys, without computing a value)."""
    s = trace.schedule
    nq, nk, d, dv = s.n_q, s.n_k, s.d, s.d_v
    out = {"Q": (nq, d), "K": (nk, d), "V": (nk, dv)}
    if lane == "dense":
        out |= {"S": (nq, nk), "P": (nq, nk), "O": (nq, dv)}
    else:
        out["O"] = (nq, dv)
        if s.order == "kv-outer":
            out |= {"m": (nq, 1), "l": (nq, 1)}
        if s.save_lse:
            out["L"] = (nq, 1)
    if trace.pass_name != "forward":  # grad_sources's keys, in its order, uncomputed
        shapes = {name: (rows, cols) for name, rows, cols in grad_slots(trace)}
        names = ("dO", "dP", "dS") if lane == "dense" else ("dO", "D")
        out |= {name: shapes[name] for name in (*names, "dQ", "dK", "dV")}
    return out


def complete_images(trace: Trace, first: LaneImages, check=None) -> LaneImages:
    """The second tier: everything that needs all of S (compute.full_pass, in chunks;
    `check` is called between them and raises compute.numbers.Cancelled to abandon),
    on a new LaneImages that keeps the first tier's images as they are."""
    summary = trace.forward.summary(DISPLAY_CAP, check)
    images = LaneImages(
        first.scale, first.prob_scale, score_scale=first.score_scale, qk_scale=first.qk_scale
    )
    if trace.pass_name != "forward":
        bwd = trace.backward.backward_summary(DISPLAY_CAP, check)
        grads = [trace.do, *trace.gradients("dense"), bwd.sample]
        images.grad_scale = ColorScale(_shared_vmax(trace, grads))
    for lane in ("dense", "tiled"):
        images.lanes[lane] = {}
        written = _written(trace, lane)
        for name, values in lane_sources(trace, lane).items():
            done = first.lanes[lane].get(name)
            if done is not None and not done.pending:
                images.lanes[lane][name] = done
                continue
            if isinstance(values, RegionSource):  # block means from a chunked pass
                if name in ("dP", "dS"):
                    bwd = trace.backward_summary(DISPLAY_CAP)
                    means = bwd.dp_small if name == "dP" else bwd.ds_small
                else:
                    means = summary.scores_small if name == "S" else summary.probs_small
                small, (fr, fc) = means.values, means.factor
            else:
                small, fr, fc = _downsampled(values)  # (shared sources: once, scene.array_memo)
            if name in ("l", "L"):
                rgba = _placeholder((*small.shape, 4), (225, 225, 215, 255))
            else:
                rgba = _rgba(images.scale_for(name), small)
            keep = values if max(values.shape) <= NUMBERS_CAP else None  # (never a RegionSource)
            img = TensorImage(name, values.shape, rgba, (fr, fc), keep)
            if name in written and name not in live_tensors(trace, lane):  # live: no veils
                _write_history(trace, lane, name, img)
            images.lanes[lane][name] = img
    return images


def prepare_images(trace: Trace) -> LaneImages:
    """Heatmaps and write histories of both lanes' HBM tensors: both tiers at once."""
    return complete_images(trace, prepare_first(trace))


def live_tensors(trace: Trace, lane: str) -> tuple[str, ...]:
    """HBM tensors whose contents change over the run (drawn per step, not once).

    Only Algorithm 1 (KV-outer) keeps running state in HBM: O, ℓ and m are written at
    the start and rewritten after every visit of a query block.
    """
    kv_outer = lane == "tiled" and trace.schedule.order == "kv-outer"
    # In a training step the backward follows; O, m, ℓ then get write veils instead.
    return ("O", "m", "l") if kv_outer and trace.pass_name == "forward" else ()


def kv_outer_hbm(trace: Trace, step: int) -> dict[str, np.ndarray]:
    """What HBM holds for O, m and ℓ after `step` under KV-outer: each block's state as of
    its last write (the initial O = 0, ℓ = 0, m = −∞ before its first visit).

    During key tile j's pass, the blocks already written back hold their state after
    tile j; the others still hold it after tile j − 1.
    """
    tl = trace.lanes["tiled"]
    step = max(0, min(step, tl.length - 1))
    k = tl.segment_of(step)
    if tl.parts[int(tl.seg_part[k])].outer == "once":  # the initialisation
        m, l, o = trace.state_after_tiles(0)  # noqa: E741
        return {"O": o, "m": m[:, None], "l": l[:, None]}
    j = int(tl.seg_outer[k])
    phases, blocks, _, _ = tl.segment(k)
    upto = step - int(tl.seg_start[k]) + 1
    written = blocks[:upto][phases[:upto] == PHASE_CODE["write_state"]]
    if len(written) == tl.seg_inner[k]:  # every visit of tile j written back
        m, l, o = trace.state_after_tiles(j + 1)  # noqa: E741
        return {"O": o, "m": m[:, None], "l": l[:, None]}
    before = trace.state_after_tiles(j)
    if len(written) == 0:
        m, l, o = before  # noqa: E741
        return {"O": o, "m": m[:, None], "l": l[:, None]}
    after = trace.state_after_tiles(j + 1)
    s = trace.schedule
    done = np.zeros(s.n_q, dtype=bool)
    for b in written.tolist():
        r0, r1 = s.rows(b)
        done[r0:r1] = True
    m, l, o = (
        np.where(done.reshape((-1,) + (1,) * (x.ndim - 1)), y, x)
        for x, y in zip(before, after, strict=True)
    )  # noqa: E741
    return {"O": o, "m": m[:, None], "l": l[:, None]}
