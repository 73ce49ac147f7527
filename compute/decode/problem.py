"""The decode problem: N_q new queries against a KV cache, grouped-query heads, S splits.

Shape only, no values. N_k counts every key in the cache, the new tokens' own keys
included; the mask is causal with bottom-right alignment (compute.attention's
`causal_offset`), so new query r sees keys c <= r + N_k − N_q and every new token sees
the whole cache before it. H_q query heads share H_kv K/V heads: query head h reads K/V
head h // G with G = H_q / H_kv (PyTorch's `enable_gqa` and FlashAttention's mapping).

One thread block serves one K/V head with its whole group resident: G · N_q query rows,
so each K/V byte read serves the group. The cache is cut into T_c = ⌈N_k / B_c⌉ tiles;
split-KV cuts the tiles into S' = min(S, T_c) splits of ⌊T_c/S'⌋ or ⌈T_c/S'⌉ tiles
(split s covers tiles [⌊s T_c / S'⌋, ⌊(s+1) T_c / S'⌋)): splits beyond T_c would
hold no tile, so they are not launched and write nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..dtypes import DType

MAX_NEW_QUERIES = 16  # decode steps with more new tokens are prefill; use the forward pass
SCHEDULES: tuple[str, ...] = ("dense", "one-pass", "split-kv")


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}.")
    return int(value)


@dataclass(frozen=True)
class DecodeProblem:
    """Sizes, heads, tile width, splits and dtype of one decode step (plain, hashable)."""

    n_q: int
    n_k: int
    d: int
    d_v: int
    h_q: int = 1
    h_kv: int = 1
    block_k: int = 64
    splits: int = 1
    dtype: str = "float64"

    def __post_init__(self) -> None:
        for name in ("n_q", "n_k", "d", "d_v", "h_q", "h_kv", "block_k", "splits"):
            object.__setattr__(self, name, _whole(name, getattr(self, name)))
        object.__setattr__(self, "dtype", DType.of(self.dtype).name)
        if self.n_q > MAX_NEW_QUERIES:
            raise ValueError(
                f"A decode step takes 1 to {MAX_NEW_QUERIES} new queries, not {self.n_q}; "
                "use the forward pass for a longer prompt."
            )
        if self.n_k < self.n_q:
            raise ValueError(
                f"The cache holds {self.n_k} keys but {self.n_q} new tokens need their own "
                "keys in it: make the cache length at least the number of new queries."
            )
        if self.h_q % self.h_kv:
            raise ValueError(
                f"{self.h_q} query heads cannot share {self.h_kv} K/V heads evenly: "
                "choose H_q a multiple of H_kv."
            )

    @property
    def group(self) -> int:
        """G = H_q / H_kv: query heads per K/V head."""
        return self.h_q // self.h_kv

    @property
    def block_rows(self) -> int:
        """Query rows resident in one block: the group's G · N_q."""
        return self.group * self.n_q

    @property
    def t_c(self) -> int:
        """T_c: key/value tiles of the cache."""
        return math.ceil(self.n_k / self.block_k)

    @property
    def splits_used(self) -> int:
        """S' = min(S, T_c): the splits that hold at least one tile."""
        return min(self.splits, self.t_c)

    def split_tiles(self, split: int) -> tuple[int, int]:
        """Tiles [t0, t1) of split `split` (of S'), balanced to within one tile."""
        s = self.splits_used
        return split * self.t_c // s, (split + 1) * self.t_c // s

    def tile_cols(self, tile: int) -> tuple[int, int]:
        """Keys [c0, c1) of tile `tile`."""
        return tile * self.block_k, min(self.n_k, (tile + 1) * self.block_k)

    def split_keys(self, split: int) -> tuple[int, int]:
        """Keys [c0, c1) of split `split`."""
        t0, t1 = self.split_tiles(split)
        return self.tile_cols(t0)[0], self.tile_cols(t1 - 1)[1]

    def kv_head(self, head: int) -> int:
        """The K/V head query head `head` reads."""
        return head // self.group

    @property
    def positions(self) -> np.ndarray:
        """(G · N_q,) the causal position (0..N_q−1) of each resident row of a block,
        rows ordered head-major: row h_local · N_q + r."""
        return np.tile(np.arange(self.n_q), self.group)

    @property
    def visible_pairs(self) -> int:
        """(query, key) pairs one query head scores under the bottom-right causal mask."""
        n_q, n_k = self.n_q, self.n_k
        return n_q * (n_k - n_q) + n_q * (n_q + 1) // 2

    @property
    def flops(self) -> int:
        """Matmul FLOPs of the step: 2 · H_q · pairs · (d + d_v) (QKᵀ and PV, visible pairs)."""
        return 2 * self.h_q * self.visible_pairs * (self.d + self.d_v)

    def input_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Shapes of q (H_q, N_q, d), k (H_kv, N_k, d) and v (H_kv, N_k, d_v)."""
        return (
            (self.h_q, self.n_q, self.d),
            (self.h_kv, self.n_k, self.d),
            (self.h_kv, self.n_k, self.d_v),
        )


def decode_inputs(
    problem: DecodeProblem, *, seed: int = 0, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standard-normal q, k (times `scale`) and v of the problem's shapes, float64, seeded."""
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"The input scale must be a positive number, not {scale}.")
    rng = np.random.default_rng(seed)
    q_shape, k_shape, v_shape = problem.input_shapes()
    q = rng.standard_normal(q_shape) * scale
    k = rng.standard_normal(k_shape) * scale
    v = rng.standard_normal(v_shape)
    return q, k, v
