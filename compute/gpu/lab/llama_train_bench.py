"""Training tokens/s of a transformers Llama with SDPA and with this project's attention backend.

Run on the GPU machine (needs torch, CuPy and transformers) for issue 31's bar:

    python -m compute.gpu.lab.llama_train_bench [--json FILE] [--steps 5] [--rounds 3]

A 4-layer Llama (random init, hidden 2048, MLP 5632, vocabulary 32000, GQA 4:1) in bfloat16,
head size 128 and 64, batch 1 x sequence 4096, AdamW: one model with
attn_implementation="sdpa" (torch's default backend choice) and a copy of its weights with
the backend of ``compute.gpu.transformers_backend``. Both see the same seeded token batches
in the same order; after two untimed steps each, `rounds` rounds alternate `steps` timed
steps of each (synchronised wall clock per block). Prints tokens/s per block and the loss
of every step (the two curves must agree within bf16 noise); writes JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

from .torch_op_bench import import_for_gpu

SEQ = 4096
VOCAB = 32000


def _models(torch, transformers, head_dim: int, backend: str) -> dict:
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
        num_attention_heads=2048 // head_dim, num_key_value_heads=2048 // head_dim // 4,
        head_dim=head_dim, max_position_embeddings=SEQ,
    )  # fmt: skip
    torch.manual_seed(0)
    build = transformers.LlamaForCausalLM._from_config  # each model its own config
    models = {
        impl: build(copy.deepcopy(cfg), attn_implementation=impl).to(torch.bfloat16).cuda()
        for impl in ("sdpa", backend)
    }
    models[backend].load_state_dict(models["sdpa"].state_dict())
    return models


def _compare(torch, transformers, head_dim: int, steps: int, rounds: int) -> dict:
    from compute.gpu.transformers_backend import register

    models = _models(torch, transformers, head_dim, register())
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    gen = torch.Generator(device="cuda").manual_seed(1)
    data = [torch.randint(0, VOCAB, (1, SEQ), device="cuda", generator=gen) for _ in range(8)]
    losses = {name: [] for name in models}
    tokens_s = {name: [] for name in models}

    def train(name: str, n: int, first: int) -> float:
        model, opt = models[name], opts[name]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            ids = data[(first + i) % len(data)]
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[name].append(float(loss.detach()))
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for name in models:  # untimed: kernels compiled, plans built, allocator warm
        train(name, 2, 0)
        losses[name].clear()
    for r in range(rounds):
        for name in models:
            tokens_s[name].append(steps * SEQ / train(name, steps, steps * r))
    gap = max(abs(a - b) / abs(b) for a, b in zip(*losses.values(), strict=True))
    return {
        "head_dim": head_dim,
        "tokens_per_s": tokens_s,
        "median_tokens_per_s": {k: statistics.median(v) for k, v in tokens_s.items()},
        "losses": losses,
        "largest_relative_loss_gap": gap,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path("llama_train_h200.json"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--head-dims", type=int, nargs="+", default=[128, 64])
    args = ap.parse_args(argv)
    mods = import_for_gpu("llama_train_bench", "torch", "transformers")
    if mods is None:
        return 2
    torch, transformers = mods
    rows = []
    for head_dim in args.head_dims:
        row = _compare(torch, transformers, head_dim, args.steps, args.rounds)
        rows.append(row)
        med = row["median_tokens_per_s"]
        ours = next(k for k in med if k != "sdpa")
        print(
            f"d={head_dim}: sdpa {med['sdpa']:.0f} tokens/s, {ours} {med[ours]:.0f} "
            f"({med[ours] / med['sdpa']:.3f}x), largest loss gap "
            f"{row['largest_relative_loss_gap']:.1e}"
        )
        torch.cuda.empty_cache()
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "rows": rows}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
