"""`torch_attention` as a Hugging Face transformers attention backend.

``register(name="fa_explorer")`` registers ``attention_forward`` with
``transformers.AttentionInterface`` and transformers' SDPA mask builder with
``AttentionMaskInterface`` under one name, so that a Llama-family model loaded or built with
``attn_implementation="fa_explorer"`` runs its attention through this project's kernels:

    from compute.gpu.transformers_backend import register
    model = AutoModelForCausalLM.from_config(config, attn_implementation=register(),
                                             torch_dtype=torch.bfloat16)

SDPA's mask builder returns no mask when the mask is purely causal (no padding, N_q = N_k, or
one query row), which is what the kernels take; GQA goes to the op (``enable_gqa``) without
repeating K and V. What the kernels cannot do is refused with one sentence: an explicit mask
(padding, packed sequences, sliding windows), dropout in training, soft-capping, attention
sinks, a position bias, head sizes other than 64 and 128, float32 models. The query, key and
value transformers passes ((batch, heads, N, d) views of (batch, N, heads, d) memory) are
read in place, and the output leaves as transformers expects, (batch, N, heads, d)
contiguous, with no copy: the op writes O with the query's strides, so the transpose back
is a view.

transformers and torch stay optional: this module imports neither until ``register`` or
``attention_forward`` runs.
"""

from __future__ import annotations

from typing import Any

NAME = "fa_explorer"
NO_TRANSFORMERS = "the transformers backend needs transformers: pip install transformers."


def register(name: str = NAME) -> str:
    """Register the backend (attention and mask) under `name`; return the name."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as exc:
        raise ImportError(NO_TRANSFORMERS) from exc
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def attention_forward(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
    dropout: float = 0.0, scaling: float | None = None, is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:  # fmt: skip
    """transformers' attention-function signature: query (batch, heads, N_q, d), key and
    value (batch, kv_heads, N_k, d); returns ((batch, N_q, heads, d), None)."""
    from .torch_op import torch_attention

    if attention_mask is not None:
        raise ValueError(
            "the fa_explorer attention takes no explicit mask (padding, packed sequences or "
            "sliding windows): pass unpadded batches, or use attn_implementation='sdpa'"
        )
    if dropout and module.training:
        raise ValueError(
            f"the fa_explorer attention has no dropout (the model asks for {dropout}): set the "
            "config's attention_dropout to 0"
        )
    for unsupported in ("softcap", "s_aux", "sinks", "position_bias"):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"the fa_explorer attention does not support {unsupported}")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal) and query.shape[2] > 1  # one query row (decoding) sees the cache
    out = torch_attention(
        query,
        key,
        value,
        is_causal=causal,
        scale=scaling,
        enable_gqa=key.shape[1] != query.shape[1],
        causal_align="bottom-right",
    )  # fmt: skip  (bottom-right: queries are the latest tokens when N_q < N_k)
    return out.transpose(1, 2).contiguous(), None  # a view when O has the query's strides
