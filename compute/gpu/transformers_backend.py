"""`torch_attention` as a Hugging Face transformers attention backend.

``register(name="fa_explorer")`` registers ``attention_forward`` with
``transformers.AttentionInterface`` and transformers' SDPA mask builder with
``AttentionMaskInterface`` under one name, so that a Llama-family model loaded or built with
``attn_implementation="fa_explorer"`` runs its attention through this project's kernels:

    from compute.gpu.transformers_backend import register
    model = AutoModelForCausalLM.from_config(config, attn_implementation=register(),
                                             torch_dtype=torch.bfloat16)

The mask builder (`build_mask`) returns no mask where the kernels apply the mask themselves:
causal, or causal within a sliding window (Mistral-family configs with ``sliding_window``
set, Gemma's and Qwen's sliding layers), with no padding and the keys ending at the last
query (then bottom-right alignment is the model's mask); anything else goes to SDPA's mask
builder, whose explicit mask the attention refuses. The attention takes the window from the
``sliding_window`` keyword transformers passes (a token sees itself and the
sliding_window - 1 before it: ``window=(sliding_window - 1, 0)``). GQA goes to the op
(``enable_gqa``) without repeating K and V. What the kernels cannot do is refused with one
sentence: an explicit mask (padding, packed sequences), dropout in training, soft-capping,
attention sinks, a position bias, head sizes other than 64 and 128, float32 models, and a
sliding window on inputs that need a gradient (training) where the backward kernel takes no
window (``compute.gpu.torch_op``). The query, key and
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
    AttentionMaskInterface.register(name, build_mask)
    _SDPA_MASK[:] = [sdpa_mask]
    return name


_SDPA_MASK: list = []  # transformers' sdpa_mask, once register() imported it


def build_mask(
    batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: Any = 0,
    mask_function: Any = None, attention_mask: Any = None, allow_is_causal_skip: bool = True,
    **kwargs: Any,
) -> Any:  # fmt: skip
    """transformers' mask-interface signature: None where the kernels apply the mask
    themselves (module docstring: a plain causal or sliding-window causal mask function, no
    overlay, no padding, the keys ending at the last query), else SDPA's mask."""
    if (
        allow_is_causal_skip
        and _plain_causal(mask_function)
        and isinstance(q_offset, int) and isinstance(kv_offset, int)
        and kv_offset + kv_length == q_offset + q_length
        and (attention_mask is None or _unpadded(attention_mask, kv_length))
    ):  # fmt: skip
        return None
    if not _SDPA_MASK:
        from transformers.masking_utils import sdpa_mask

        _SDPA_MASK.append(sdpa_mask)
    # Anything else gets an explicit mask, which the attention refuses: SDPA's builder must
    # not skip it either, since its skip means top-left is_causal (a static cache's prefill)
    # where this backend's kernels align bottom-right.
    extra = {} if mask_function is None else {"mask_function": mask_function}
    return _SDPA_MASK[0](
        batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
        kv_offset=kv_offset, attention_mask=attention_mask, allow_is_causal_skip=False,
        **extra, **kwargs,
    )  # fmt: skip


def _plain_causal(fn: Any) -> bool:
    """Whether a transformers mask function is causal_mask_function itself or the sliding
    window's and_masks(sliding_window_overlay(w), causal_mask_function), nothing more (a
    chunked, bidirectional or packed mask is not)."""
    if fn is None:
        return True
    name = getattr(fn, "__qualname__", "")
    if name == "causal_mask_function":
        return True
    parts = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())]
    funcs = next((p for p in parts if isinstance(p, tuple | list)), None)
    if not name.startswith("and_masks.") or funcs is None or len(funcs) != 2:
        return False
    names = sorted(getattr(f, "__qualname__", "") for f in funcs)
    return names == ["causal_mask_function", "sliding_window_overlay.<locals>.inner_mask"]


def _unpadded(attention_mask: Any, kv_length: int) -> bool:
    """Whether a 2-D padding mask (True = a real token) hides none of the last kv_length
    keys (one host read of the mask, as SDPA's own mask builder does)."""
    if attention_mask.dim() != 2 or attention_mask.shape[1] < kv_length:
        return False
    return bool(attention_mask[:, -kv_length:].all())


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
    window = _window(
        kwargs.get("sliding_window"), key.shape[2], bool(causal) or query.shape[2] == 1
    )
    out = torch_attention(
        query,
        key,
        value,
        is_causal=causal,
        scale=scaling,
        enable_gqa=key.shape[1] != query.shape[1],
        causal_align="bottom-right",
        window=window,
    )  # fmt: skip  (bottom-right: queries are the latest tokens when N_q < N_k)
    return out.transpose(1, 2).contiguous(), None  # a view when O has the query's strides


def _window(sliding_window: Any, n_k: int, causal: bool) -> tuple[int, int] | None:
    """The op's window for transformers' sliding_window (a token sees itself and the
    sliding_window - 1 keys before it), None where it hides nothing (every row's window
    reaches back past the first of n_k keys) or is not set."""
    if sliding_window is None:
        return None
    if (
        isinstance(sliding_window, bool)
        or not isinstance(sliding_window, int)
        or sliding_window < 1
    ):
        raise ValueError(
            f"sliding_window must be a whole number of at least 1, not {sliding_window!r}"
        )
    if not causal:
        raise ValueError(
            "the fa_explorer attention takes a sliding window on causal layers only (the "
            "window's right side is the diagonal); use attn_implementation='sdpa' here"
        )
    return None if n_k <= sliding_window else (sliding_window - 1, 0)
