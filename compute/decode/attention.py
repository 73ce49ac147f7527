"""The decode step's numbers: dense, one-pass FlashAttention and split-KV with its combine.

Every schedule runs compute.attention's pieces, not a second softmax: the one-pass and
each split stream their key tiles through `_tile_update` (the forward's q-outer
recurrence: m, ℓ, a and α), with the group's G · N_q rows resident and the bottom-right
causal mask of compute.attention. The combine is that recurrence's α-rescale applied
across splits: a split's HBM partial (O_s = a_s/ℓ_s, L_s = m_s + log ℓ_s) is the state
(m, ℓ, a) = (L_s, 1, O_s) referred to another max, so merging S' of them is
  m* = max_s L_s,  α_s = exp(L_s − m*),  ℓ = Σ_s α_s,  O = Σ_s α_s O_s / ℓ,  L = m* + log ℓ.
Partials stay in the accumulator type (float32, float64 for float64), as FlashAttention's
split kernel keeps its O accumulator; the output is rounded to the dtype once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..attention import (
    _divide_rows,
    _prepare,
    _safe_max,
    _tile_update,
    causal_mask,
    default_scale,
    dense_lane,
    output_dtype,
    round_to,
)
from .problem import DecodeProblem


@dataclass(frozen=True)
class SplitPartials:
    """What each split leaves: keys (S', 2) it covered; on chip at its end m, ℓ (S', H_q,
    N_q) and a (S', H_q, N_q, d_v); in HBM O_s = a/ℓ and L_s = m + log ℓ (−∞: no key)."""

    keys: np.ndarray
    m: np.ndarray
    l: np.ndarray
    a: np.ndarray
    o: np.ndarray
    lse: np.ndarray


@dataclass(frozen=True)
class Merge:
    """The combine: m* = max_s L_s, α_s = exp(L_s − m*) (S', H_q, N_q), ℓ = Σ α_s, the
    weights α_s/ℓ = exp(L_s − L) each split's O_s enters with, O (H_q, N_q, d_v), L."""

    m: np.ndarray
    alpha: np.ndarray
    l: np.ndarray
    weights: np.ndarray
    o: np.ndarray
    lse: np.ndarray


def check_decode_inputs(
    problem: DecodeProblem, q: np.ndarray, k: np.ndarray, v: np.ndarray
) -> None:
    """One sentence if q, k, v do not have the problem's shapes."""
    for name, x, shape in zip("qkv", (q, k, v), problem.input_shapes(), strict=True):
        if np.shape(x) != shape:
            raise ValueError(
                f"{name} has shape {np.shape(x)} but the decode problem needs {shape} "
                "(heads, tokens, features)."
            )


def _lse(m: np.ndarray, l: np.ndarray) -> np.ndarray:
    # L = m + log ℓ; −∞ for a row that saw no key (ℓ = 0).
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(l == 0, -np.inf, m + np.log(np.where(l == 0, 1, l))).astype(l.dtype)


def _frozen(*arrays: np.ndarray) -> None:
    for x in arrays:
        x.setflags(write=False)


class _Streamer:
    """The inputs rounded to the dtype once, and one block's pass over a run of tiles."""

    def __init__(
        self,
        problem: DecodeProblem,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        scale: float | None,
    ) -> None:
        check_decode_inputs(problem, q, k, v)
        scale = default_scale(problem.d) if scale is None else scale
        self.p = problem
        self.acc, self.qd, self.kd, self.vd, self.scale = _prepare(q, k, v, problem.dtype, scale)

    def stream(self, g: int, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """K/V head g's block: the group's G · N_q rows resident, tiles t0..t1−1 streamed.
        Returns m, ℓ (G · N_q,) and a (G · N_q, d_v), rows head-major."""
        p, acc = self.p, self.acc
        rows = p.block_rows
        q_block = self.qd[g * p.group : (g + 1) * p.group].reshape(rows, p.d)
        m = np.full(rows, -np.inf, dtype=acc)
        l = np.zeros(rows, dtype=acc)
        a = np.zeros((rows, p.d_v), dtype=acc)
        for j in range(t0, t1):
            c0, c1 = p.tile_cols(j)
            s = (q_block @ self.kd[g, c0:c1].T) * self.scale  # S_j = Q_g K_jᵀ · scale
            visible = causal_mask(p.positions, np.arange(c0, c1), p.n_q, p.n_k)
            s = np.where(visible, s, acc(-np.inf))
            # The forward's q-outer step: m, ℓ, a rescaled by α and P̃_j V_j accumulated.
            m, l, _, _, a, _ = _tile_update("q-outer", s, m, l, a, self.vd[g, c0:c1], p.dtype, acc)
        return m, l, a

    def every_head(self, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every K/V head's block over tiles t0..t1−1: m, ℓ (H_q, N_q), a (H_q, N_q, d_v)."""
        p = self.p
        states = [self.stream(g, t0, t1) for g in range(p.h_kv)]
        # Block rows (H_kv, G · N_q, ...) are query head g · G + h_local, row r: (H_q, N_q, ...).
        return tuple(
            np.stack(x).reshape(p.h_q, p.n_q, *np.shape(x[0])[1:])
            for x in zip(*states, strict=True)
        )

    def output(self, o: np.ndarray) -> np.ndarray:
        return round_to(o, self.p.dtype).astype(output_dtype(self.p.dtype))


def dense_decode(
    problem: DecodeProblem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The dense schedule: S (−∞ where masked), P (H_q, N_q, N_k) and O, all float64,
    each query head against its K/V head (compute.attention.dense_lane)."""
    check_decode_inputs(problem, q, k, v)
    lanes = [
        dense_lane(q[h], k[problem.kv_head(h)], v[problem.kv_head(h)], causal=True, scale=scale)
        for h in range(problem.h_q)
    ]
    s, p, o = (np.stack(x) for x in zip(*lanes, strict=True))
    _frozen(s, p, o)
    return s, p, o


def one_pass_decode(
    problem: DecodeProblem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One-pass FlashAttention: one block per K/V head streams the whole cache.
    Returns O (H_q, N_q, d_v) in the dtype's output type and L (H_q, N_q)."""
    st = _Streamer(problem, q, k, v, scale)
    m, l, a = st.every_head(0, problem.t_c)
    o = _divide_rows(a.reshape(-1, problem.d_v), l.reshape(-1))  # O = a / ℓ, once
    out, lse = st.output(o.reshape(a.shape)), _lse(m, l)
    _frozen(out, lse)
    return out, lse


def split_partials(
    problem: DecodeProblem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
) -> SplitPartials:
    """Each of the S' splits of every K/V head streams its tiles; its partial state."""
    st = _Streamer(problem, q, k, v, scale)
    states = [st.every_head(*problem.split_tiles(s)) for s in range(problem.splits_used)]
    m, l, a = (np.stack(x) for x in zip(*states, strict=True))
    o = _divide_rows(a.reshape(-1, problem.d_v), l.reshape(-1)).reshape(a.shape)
    keys = np.array([problem.split_keys(s) for s in range(problem.splits_used)], dtype=np.int64)
    parts = SplitPartials(keys, m, l, a, o, _lse(m, l))
    _frozen(*vars(parts).values())
    return parts


def merge_states(
    m: np.ndarray, l: np.ndarray, a: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The recurrence's α-rescale across axis 0: states (m_s, ℓ_s, a_s) to one (m, ℓ, a)
    and the α_s each was rescaled by."""
    m_new = np.max(m, axis=0, initial=-np.inf)  # m = max_s m_s
    alpha = np.exp(m - _safe_max(m_new))  # α_s = exp(m_s − m); 0 for a split that saw no key
    l_new = (alpha * l).sum(axis=0)  # ℓ = Σ_s α_s ℓ_s
    a_new = (alpha[..., None] * a).sum(axis=0)  # a = Σ_s α_s a_s
    return m_new, l_new, a_new, alpha


def combine(o_s: np.ndarray, lse_s: np.ndarray) -> Merge:
    """The combine step over the splits' HBM partials O_s (S', ..., d_v) and L_s (S', ...):
    each is the state (L_s, 1, O_s), merged by the α-rescale."""
    one = np.where(np.isneginf(lse_s), 0, 1).astype(lse_s.dtype)  # ℓ = 0 where a split saw no key
    m, l, a, alpha = merge_states(lse_s, one, o_s)
    d_v = o_s.shape[-1]
    o = _divide_rows(a.reshape(-1, d_v), l.reshape(-1)).reshape(a.shape)  # O = a / ℓ
    with np.errstate(divide="ignore", invalid="ignore"):
        weights = np.where(l == 0, 0, alpha / np.where(l == 0, 1, l))  # exp(L_s − L)
    merged = Merge(m, alpha, l, weights, o, _lse(m, l))
    _frozen(*vars(merged).values())
    return merged


def split_kv_decode(
    problem: DecodeProblem,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split-KV (Flash-Decoding): the splits' partials, then the combine.
    Returns O (H_q, N_q, d_v) in the dtype's output type and L (H_q, N_q)."""
    parts = split_partials(problem, q, k, v, scale=scale)
    merged = combine(parts.o, parts.lse)
    out = round_to(merged.o, problem.dtype).astype(output_dtype(problem.dtype))
    out.setflags(write=False)
    return out, merged.lse


def decode_attention(
    problem: DecodeProblem,
    schedule: str,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    scale: float | None = None,
) -> np.ndarray:
    """O (H_q, N_q, d_v) by `schedule` ("dense", "one-pass" or "split-kv")."""
    if schedule == "dense":
        return dense_decode(problem, q, k, v, scale=scale)[2]
    if schedule == "one-pass":
        return one_pass_decode(problem, q, k, v, scale=scale)[0]
    if schedule == "split-kv":
        return split_kv_decode(problem, q, k, v, scale=scale)[0]
    raise ValueError(f"The decode schedule must be dense, one-pass or split-kv, not {schedule!r}.")
