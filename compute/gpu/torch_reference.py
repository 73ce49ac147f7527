"""Dense attention in torch with the op's semantics: the reference its tests compare against.

``attention_reference(q, k, v, causal, scale, align)`` computes softmax(Q Kᵀ · scale) V in
q's dtype (pass float64 tensors for a float64 reference), K and V repeated to q's heads
(GQA: query head h reads K/V head h // group), the causal mask top-left (SDPA's: row r sees
keys c <= r) or bottom-right (FlashAttention's: c <= r + N_k - N_q), or a sliding window
``window=(left, right)`` as compute/mask.py's Mask has it (is_causal setting right = 0, the
same alignment), rows that see no key giving zeros. Differentiable through autograd. torch
is imported on first call.
"""

from __future__ import annotations

from typing import Any


def attention_reference(
    q: Any, k: Any, v: Any, causal: bool, scale: float, align: str,
    window: tuple[int, int] | None = None,
) -> Any:  # fmt: skip
    """The op's output on (batch, heads, N_q, d) q and (batch, kv_heads, N_k, d) k, v."""
    import numpy as np
    import torch

    from ..mask import Mask

    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * scale
    if window is not None:
        n_q, n_k = q.shape[2], k.shape[2]
        mask = Mask(window[0], 0 if causal else window[1], align == "top-left")
        seen = mask.visible(np.arange(n_q), np.arange(n_k), n_q, n_k)
        s = s.masked_fill(~torch.from_numpy(seen).to(s.device), float("-inf"))
    elif causal:
        n_q, n_k = q.shape[2], k.shape[2]
        shift = n_k - n_q if align == "bottom-right" else 0
        rows = torch.arange(n_q, device=q.device)[:, None]
        mask = torch.arange(n_k, device=q.device)[None, :] > rows + shift
        s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, dim=-1).nan_to_num(0.0) @ v
