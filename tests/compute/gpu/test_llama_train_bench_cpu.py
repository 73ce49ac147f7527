"""`compute.gpu.lab.llama_train_bench`'s pieces that run without a GPU: the FA4 attention,
its probe and registration (with a stand-in for FA4's `flash_attn_func` that has its
contract: (batch, N, heads, d) contiguous, fewer K/V heads for GQA, returns (out, lse)),
and the ratio and loss-gap tables. Needs torch (CPU build); the Llama test needs
transformers too.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from compute.gpu.lab import llama_train_bench as bench  # noqa: E402


def _stand_in(calls: list | None = None, wrong: str = ""):
    """FA4's flash_attn_func on the CPU: asserts its input contract, computes in float64 by
    SDPA's math; `wrong` ("not_causal", "nan", "raise") breaks it on purpose."""

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        if wrong == "raise":
            raise RuntimeError("no kernel for this shape\nsecond line")
        for t in (q, k, v):
            assert t.dim() == 4 and t.is_contiguous(), "FA4 takes (batch, N, heads, d) contiguous"
        assert k.shape == v.shape and q.shape[2] % k.shape[2] == 0 and q.shape[:2] == k.shape[:2]
        if calls is not None:
            calls.append((softmax_scale, causal, q.shape[2] // k.shape[2]))
        t = [x.double().transpose(1, 2) for x in (q, k, v)]
        out = F.scaled_dot_product_attention(
            *t, is_causal=causal and wrong != "not_causal", scale=softmax_scale, enable_gqa=True
        )
        out = out.transpose(1, 2).to(q.dtype).contiguous()
        return (out * float("nan") if wrong == "nan" else out), None

    return flash_attn_func


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_probe_passes_a_right_attention_and_reports_its_errors(head_dim):
    calls = []
    got = bench._probe_fa4(torch, _stand_in(calls), head_dim, 64, "cpu")
    assert "skipped" not in got
    assert set(got["rel_err_vs_sdpa"]) == {"o", "dq", "dk", "dv"}
    assert all(e < 1e-2 for e in got["rel_err_vs_sdpa"].values())
    assert calls == [(None, True, 4)]  # the model's GQA 4:1, causal, FA4's default scale


@pytest.mark.parametrize(
    "wrong, why", [("not_causal", "disagrees"), ("nan", "disagrees"), ("raise", "RuntimeError")]
)
def test_the_probe_skips_an_attention_that_is_wrong_or_raises(wrong, why):
    got = bench._probe_fa4(torch, _stand_in(wrong=wrong), 64, 64, "cpu")
    assert why in got["skipped"]
    if wrong == "raise":
        assert got["skipped"] == "RuntimeError: no kernel for this shape"
    assert not bench.fa4_runs({"version": "x", "head_dims": {64: got}}, 64)


def test_without_flash_attn_nothing_is_registered(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)  # import raises ImportError
    # transformers must not be touched where FA4 does not import: an object() has no attributes
    got = bench._register_fa4(torch, object(), [64, 128], seq=64, device="cpu")
    assert "flash_attn.cute does not import" in got["skipped"]
    assert not bench.fa4_runs(got, 64) and not bench.fa4_runs(got, 128)


def test_fa4_runs_only_at_the_head_sizes_whose_probe_passed():
    record = {"version": "4.0", "head_dims": {128: {"rel_err_vs_sdpa": {}}, 64: {"skipped": "x"}}}
    assert bench.fa4_runs(record, 128)
    assert not bench.fa4_runs(record, 64)
    assert not bench.fa4_runs(record, 96)


def test_ratios_name_each_model_over_each_base_present():
    med = {
        "sync": {"sdpa": 100.0, "sdpa_cudnn": 80.0, "fa_explorer": 110.0, "fa4": 120.0},
        "async": {"sdpa": 200.0, "fa_explorer": 190.0, "zero_attention": 250.0},
    }
    got = bench.ratios(med, ("fa_explorer", bench.FA4, bench.ZERO), ("sdpa", bench.CUDNN))
    assert got["sync"] == {
        "fa_explorer_over_sdpa": 1.1,
        "fa_explorer_over_sdpa_cudnn": 110.0 / 80.0,
        "fa4_over_sdpa": 1.2,
        "fa4_over_sdpa_cudnn": 1.5,
    }
    assert got["async"] == {"fa_explorer_over_sdpa": 0.95, "zero_attention_over_sdpa": 1.25}


def test_loss_gaps_are_the_largest_relative_gap_to_sdpa_and_skip_the_zero_model():
    losses = {
        "sync": {
            "sdpa": [2.0, 4.0, -1.0],
            "fa4": [2.0, 4.2, -1.01],
            "fa_explorer": [1.9, 4.0, -1.0],
            bench.ZERO: [9.0, 9.0, 9.0],
        }
    }
    got = bench.loss_gaps(losses)
    assert set(got["sync"]) == {"fa4", "fa_explorer"}
    assert got["sync"]["fa4"] == pytest.approx(0.05)
    assert got["sync"]["fa_explorer"] == pytest.approx(0.05)
    with pytest.raises(ValueError):  # a curve of another length is an error, not a shorter max
        bench.loss_gaps({"sync": {"sdpa": [1.0, 2.0], "fa4": [1.0]}})


class _Module:
    is_causal = True


def test_the_attention_refuses_a_mask_and_dropout():
    attention = bench.fa4_attention(_stand_in())
    q = torch.randn(1, 4, 8, 16)
    kv = torch.randn(1, 1, 8, 16)
    with pytest.raises(ValueError, match="without a mask"):
        attention(_Module(), q, kv, kv, torch.zeros(1, 1, 8, 8))
    with pytest.raises(ValueError, match="dropout"):
        attention(_Module(), q, kv, kv, None, dropout=0.1)


def test_the_attention_takes_transformers_layout_and_gives_it_back():
    """transformers passes (batch, heads, N, d), here as views of (batch, N, heads, d)
    memory as Llama's projections make them; the output is (batch, N, heads, d)."""
    calls = []
    attention = bench.fa4_attention(_stand_in(calls))
    q = torch.randn(2, 8, 4, 16, dtype=torch.float64).transpose(1, 2)
    k, v = (torch.randn(2, 8, 1, 16, dtype=torch.float64).transpose(1, 2) for _ in range(2))
    out, weights = attention(_Module(), q, k, v, None, scaling=0.3)
    assert weights is None and out.shape == (2, 8, 4, 16)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    torch.testing.assert_close(out, want.transpose(1, 2))
    assert calls == [(0.3, True, 4)]
    # (batch, heads, N, d) memory (another model's projections): copied to FA4's layout
    out, _ = attention(_Module(), *(t.contiguous() for t in (q, k, v)), None, scaling=0.3)
    torch.testing.assert_close(out, want.transpose(1, 2))


def _fake_flash_attn(monkeypatch, flash_attn_func) -> None:
    """flash_attn and flash_attn.cute as importable modules holding `flash_attn_func`."""
    pkg = types.ModuleType("flash_attn")
    pkg.__path__ = []
    pkg.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None, is_package=True)
    cute = types.ModuleType("flash_attn.cute")
    cute.__spec__ = importlib.machinery.ModuleSpec("flash_attn.cute", None)
    cute.flash_attn_func = flash_attn_func
    pkg.cute = cute
    monkeypatch.setitem(sys.modules, "flash_attn", pkg)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)


def test_a_llama_with_fa4_registered_trains_as_with_sdpa(monkeypatch):
    """_register_fa4 registers the attention and a mask builder under "fa4"; a GQA Llama
    built with it gives SDPA's logits and gradients (the stand-in computes SDPA's math)."""
    transformers = pytest.importorskip("transformers")
    calls = []
    _fake_flash_attn(monkeypatch, _stand_in(calls))
    record = bench._register_fa4(torch, transformers, [64], seq=32, device="cpu")
    monkeypatch.delitem(sys.modules, "flash_attn.cute")  # transformers sees no flash_attn
    monkeypatch.delitem(sys.modules, "flash_attn")
    assert bench.fa4_runs(record, 64) and set(record) == {"version", "head_dims"}
    cfg = transformers.LlamaConfig(
        vocab_size=100, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    build = transformers.LlamaForCausalLM._from_config
    ref = build(cfg, attn_implementation="sdpa")
    model = build(cfg.__class__(**cfg.to_dict()), attn_implementation=bench.FA4)
    model.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(3))
    calls.clear()
    got, want = (m(input_ids=ids, labels=ids) for m in (model, ref))
    assert len(calls) == 2 and all(c[1:] == (True, 4) for c in calls)  # both layers, causal
    assert calls[0][0] == pytest.approx(64**-0.5)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-5, rtol=1e-5)
    got.loss.backward()
    want.loss.backward()
    for (name, a), b in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4, msg=name)
