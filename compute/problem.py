"""The one problem type: what an attention computation is, before any number exists.

`Problem` holds the sizes (N, N_k, d, d_v), the element type, the mask, the loop order
and the block sizes; `build_trace`, the ledgers and the desktop's Config take it, so
every layer names a problem the same way; its dtype is a compute.dtypes.DType.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .dtypes import DType
from .mask import Mask
from .schedule import ORDERS, Schedule


@dataclass(frozen=True)
class Problem:
    """N, N_k, d, d_v, dtype, mask, order and blocks of one attention computation.

    n_k None means "as many keys as queries"; d_v None means "d". The dtype is stored as
    its name (so a Problem is plain, hashable data) and read as a DType through `dt`.
    """

    n: int
    d: int
    block_q: int
    block_k: int
    n_keys: int | None = None
    dv: int | None = None
    dtype: str = "float64"
    causal: bool = False
    order: str = "q-outer"
    save_lse: bool = False
    masking: Mask | None = None  # compute.mask.Mask; None: the one `causal` means

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", DType.of(self.dtype).name)
        if self.masking is not None:
            object.__setattr__(self, "causal", self.masking.causal)
            if self.masking == Mask.of(self.causal):  # what `causal` says alone: one spelling
                object.__setattr__(self, "masking", None)
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}.")
        for name in ("n", "d", "block_q", "block_k", "n_keys", "dv"):
            value = getattr(self, name)
            if value is None and name in ("n_keys", "dv"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}.")

    @property
    def n_k(self) -> int:
        return self.n if self.n_keys is None else self.n_keys

    @property
    def d_v(self) -> int:
        return self.d if self.dv is None else self.dv

    @property
    def dt(self) -> DType:
        return DType.of(self.dtype)

    @property
    def mask(self) -> str:
        """The mask in words: "none", "causal" (bottom-right) or the Mask's label."""
        m = self.attention_mask
        if m.is_none or m == Mask.causal_mask():
            return "causal" if m.causal else "none"
        return m.label

    @property
    def attention_mask(self) -> Mask:
        """The compute.mask.Mask every layer applies."""
        return Mask.of(self.causal) if self.masking is None else self.masking

    @property
    def t_r(self) -> int:
        return math.ceil(self.n / self.block_q)

    @property
    def t_c(self) -> int:
        return math.ceil(self.n_k / self.block_k)

    def schedule(self) -> Schedule:
        """The shape-only schedule both lanes' timelines and ledgers are built from."""
        return Schedule(
            self.n, self.n_k, self.d, self.d_v, self.block_q, self.block_k,
            self.order, self.causal, self.save_lse, self.attention_mask,
        )  # fmt: skip

    def replace(self, **changes: object) -> Problem:
        return dataclasses.replace(self, **changes)

    def options(self) -> dict[str, object]:
        """The keywords the core's older entry points take (ledger, closed_form_ledger)."""
        return {
            "block_q": self.block_q,
            "block_k": self.block_k,
            "order": self.order,
            "causal": self.attention_mask,
            "save_lse": self.save_lse,
            "dtype": self.dtype,
        }

    @classmethod
    def of_shapes(cls, q_shape: tuple[int, int], v_shape: tuple[int, int], **kw: object) -> Problem:
        """The problem of inputs Q (N × d) and V (N_k × d_v), with the other fields given."""
        (n, d), (n_k, d_v) = q_shape, v_shape
        return cls(n=n, d=d, n_keys=None if n_k == n else n_k, dv=None if d_v == d else d_v, **kw)
