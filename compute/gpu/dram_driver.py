"""The program ncu profiles for `flash-explorer bench --dram`: each path once, marked.

`python -m compute.gpu.dram_driver SPEC OUT` reads SPEC (JSON: the BenchConfig fields and
the paths to run), draws one seeded (Q, K, V, dO) set, and for each path builds its call
and runs it twice untimed (compiles, autotuning and allocator pools happen there, outside
the profiled range). Then, between cudaProfilerStart and cudaProfilerStop (ncu runs with
`--profile-from-start off`, so only this range is profiled), it launches the empty kernel
MARKER before each path and the path once: compute.gpu.dram splits ncu's kernels at the
markers. OUT (JSON) lists the paths in that order, each with its tiles, the teaching
kernels' COUNT_TRANSFERS counts per head, or the one-sentence error that kept it out.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .bench import BenchConfig

MARKER = "fe_dram_mark"


def _inputs(cfg: BenchConfig) -> tuple:
    import cupy

    from .dtypes import device_array

    rng = cupy.random.default_rng(cfg.seed)
    shapes = [(cfg.batch_heads, cfg.n, cfg.d), (cfg.batch_heads, cfg.n_k, cfg.d),
              (cfg.batch_heads, cfg.n_k, cfg.dv), (cfg.batch_heads, cfg.n, cfg.dv)]  # fmt: skip
    return tuple(
        device_array(rng.standard_normal(s, dtype=cupy.float32), cfg.dtype) for s in shapes
    )


def _per_head(cfg: BenchConfig, *counts: dict) -> dict:
    """Counts summed over the given builds' results, per head."""
    total: dict[str, dict[str, int]] = {}
    for c in counts:
        for tensor, rw in c.items():
            row = total.setdefault(tensor, {"read": 0, "write": 0})
            for d, n in rw.items():
                row[d] += int(n)
    return {t: {d: n // cfg.batch_heads for d, n in rw.items()} for t, rw in total.items()}


def _tiled(cfg: BenchConfig, order: str, base: tuple) -> tuple[Callable, dict]:
    from .backward import tiled_attention_backward_gpu
    from .tiled import tiled_attention_gpu

    q, k, v, do = base
    bq, bk, causal = cfg.block_q, cfg.block_k, cfg.causal
    # The order each pass of the path runs: a training step's forward, then the backward's.
    label = {"forward": order, "backward": "kv-outer"}.get(cfg.pass_name, f"{order}+kv-outer")
    tiles = {"order": label, "block_q": bq, "block_k": bk}

    def forward(count: bool = False):
        return tiled_attention_gpu(q, k, v, block_q=bq, block_k=bk, order=order, causal=causal,
                                   save_lse=cfg.pass_name != "forward", count_transfers=count)  # fmt: skip

    def backward(o, lse, count: bool = False):
        return tiled_attention_backward_gpu(q, k, v, o, do, lse, block_q=bq, block_k=bk,
                                            causal=causal, count_transfers=count)  # fmt: skip

    if cfg.pass_name == "forward":
        fn: Callable = forward
        counts = _per_head(cfg, forward(True).counts)
    elif cfg.pass_name == "training":
        fn = lambda: backward(*_out_lse(forward()))  # noqa: E731
        fwd = forward(True)
        counts = _per_head(cfg, fwd.counts, backward(fwd.out, fwd.lse, True).counts)
    else:
        o, lse = _out_lse(forward())
        fn = lambda: backward(o, lse)  # noqa: E731
        counts = _per_head(cfg, backward(o, lse, True).counts)
    return fn, {**tiles, "counts_kernel": counts}


def _out_lse(result: Any) -> tuple:
    return result.out, result.lse


def _dense(cfg: BenchConfig, base: tuple) -> tuple[Callable, dict]:
    import cupy

    from .dense import dense_attention_gpu
    from .dense_backward import dense_attention_backward_gpu, dense_probabilities_gpu

    q, k, v, do = base
    causal = cfg.causal
    if cfg.pass_name == "forward":
        return (lambda: dense_attention_gpu(q, k, v, causal=causal)), {}

    def training():
        p = dense_probabilities_gpu(q, k, causal=causal)
        cupy.matmul(p, v)  # O, as bench_backward's training step computes it
        return dense_attention_backward_gpu(q, k, v, do, p=p, causal=causal)

    if cfg.pass_name == "training":
        return training, {}
    p = dense_probabilities_gpu(q, k, causal=causal)
    return (lambda: dense_attention_backward_gpu(q, k, v, do, p=p, causal=causal)), {}


def _flash(cfg: BenchConfig, base: tuple) -> tuple[Callable, dict]:
    from . import flash, flash_backward

    q, k, v, do = (x[None] for x in base)  # (batch, heads, N, d): one batch of BH heads
    fcfg = flash.default_config(cfg.d, cfg.n, cfg.causal)
    tiles = {"variant": fcfg.spec(), "forward_tiles": [fcfg.block_m, fcfg.block_n],
             "backward_tiles": [flash_backward.query_rows(cfg.d, cfg.causal),
                                flash_backward.BLOCK_KEYS]}  # fmt: skip

    def forward():
        return flash.flash_attention(q, k, v, causal=cfg.causal, config=fcfg, return_lse=True)

    def backward(o, lse):
        return flash_backward.flash_attention_backward(q, k, v, o, do, lse, causal=cfg.causal)

    if cfg.pass_name == "forward":
        return (lambda: flash.flash_attention(q, k, v, causal=cfg.causal, config=fcfg)), tiles
    if cfg.pass_name == "training":
        return (lambda: backward(*forward())), tiles
    o, lse = forward()
    return (lambda: backward(o, lse)), tiles


def _peer(cfg: BenchConfig, name: str, base: tuple) -> tuple[Callable, dict]:
    from . import peers

    q, k, v, do = base
    if cfg.pass_name == "forward":
        fn = peers.sdpa(name)
        return (lambda: fn(q, k, v, causal=cfg.causal)), {}
    step = peers.sdpa_backward(name)
    if cfg.pass_name == "training":
        return (lambda: step(q, k, v, do, cfg.causal)), {}
    run = step.prepare(q, k, v, do, cfg.causal)
    return run, {}


def _fa4(cfg: BenchConfig, base: tuple) -> tuple[Callable, dict]:
    """FlashAttention-4 (flash_attn.cute) where it is importable; (B, N, H, d) inputs."""
    try:
        import torch
        from flash_attn.cute import flash_attn_func
    except ImportError as exc:
        raise ImportError(f"FA4 (flash_attn.cute) is not importable here ({exc})") from None
    from .peers import torch_view

    q, k, v, do = (torch_view(torch, x).transpose(0, 1)[None].contiguous() for x in base)
    if cfg.pass_name == "forward":
        return (lambda: flash_attn_func(q, k, v, causal=cfg.causal)), {}
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    def training():
        out, _ = flash_attn_func(q, k, v, causal=cfg.causal)
        return torch.autograd.grad(out, (q, k, v), do)

    if cfg.pass_name == "training":
        return training, {}
    out, _ = flash_attn_func(q, k, v, causal=cfg.causal)
    return (lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)), {}


def prepare(cfg: BenchConfig, path: dict, base: tuple) -> tuple[Callable, dict]:
    """The zero-argument call of one path and what the report records about it."""
    name = path["path"]
    if name == "tiled":
        return _tiled(cfg, path["order"], base)
    if name == "dense":
        return _dense(cfg, base)
    if name == "flash":
        return _flash(cfg, base)
    if name == "fa4":
        return _fa4(cfg, base)
    return _peer(cfg, name, base)


def _sync() -> None:
    import cupy

    cupy.cuda.Device().synchronize()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.synchronize()


def _profiler(start: bool) -> None:
    import cupy

    (cupy.cuda.runtime.profilerStart if start else cupy.cuda.runtime.profilerStop)()


def run(spec: dict) -> list[dict]:
    """Prepare and warm every path, then run each once in the profiled range after MARKER."""
    import cupy

    cfg = BenchConfig(**spec["config"])
    base = _inputs(cfg)
    mark = cupy.RawKernel(f'extern "C" __global__ void {MARKER}() {{}}', MARKER)
    ready: list[tuple[dict, Callable | None]] = []
    for path in spec["paths"]:
        entry = {**path, "pass": cfg.pass_name}
        try:
            fn, info = prepare(cfg, path, base)
            for _ in range(2):
                fn()
                _sync()
            ready.append(({**entry, **info}, fn))
        except Exception as exc:  # noqa: BLE001 (any failure is that path's error row)
            text = str(exc).strip() or type(exc).__name__
            ready.append(({**entry, "error": text.splitlines()[0]}, None))
    mark((1,), (1,), ())
    _sync()
    _profiler(True)
    for _entry, fn in ready:
        if fn is not None:
            mark((1,), (1,), ())
            fn()
            _sync()
    _profiler(False)
    return [entry for entry, _ in ready]


def main(argv: list[str] | None = None) -> int:
    spec_path, out_path = argv if argv is not None else sys.argv[1:]
    entries = run(json.loads(Path(spec_path).read_text(encoding="utf-8")))
    Path(out_path).write_text(json.dumps(entries), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
