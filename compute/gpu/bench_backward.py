"""The harness's backward rows: the teaching backward kernel and the dense GPU backward.

`run_bench` calls `backward_results` when `BenchConfig.pass_name == "backward"`. Each path
is timed from what its own forward saved: the tiled backward from O and L (the tiled
forward at the same blocks, `save_lse=True`), the dense one from the stored P. The rows
have the forward rows' keys (report.py prints both alike): TFLOP/s counts 2.5 × the
forward's FLOPs (BenchConfig.flops), the ledger is `pass_ledger("backward", ...)`, and
the tiled row carries its instrumented build's per-tensor transfers beside that ledger.
Errors are over dQ, dK and dV of the sampled heads against the float64 dense backward
(`compute.attention_backward`), which needs whole heads: above MAX_REFERENCE_SCORES
scores per head the rows carry no error (None) rather than a long float64 run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import attention_backward, pass_ledger
from .backward import tiled_attention_backward_gpu
from .dense_backward import dense_attention_backward_gpu, dense_probabilities_gpu
from .device import status
from .dtypes import KERNEL_DTYPES
from .reference import error_stats
from .tiled import tiled_attention_gpu
from .timing import peak_pool_bytes, rotation_count, time_cuda

MAX_REFERENCE_SCORES = 4096 * 4096  # N_q·N_k per head for the float64 reference
NO_BACKWARD = "this path has no backward yet (the tiled and dense paths do)"


def _ledger(cfg, block_q: int, block_k: int):
    return pass_ledger(
        "backward", cfg.n, cfg.n_k, cfg.d, cfg.dv, block_q=block_q, block_k=block_k,
        causal=cfg.causal, dtype=cfg.dtype,
    )  # fmt: skip


def _draw(cfg, rng, count: int) -> list[tuple]:
    """`count` rotated (q, k, v, dO) sets in the config's dtype."""
    import cupy

    shapes = [(cfg.n, cfg.d), (cfg.n_k, cfg.d), (cfg.n_k, cfg.dv), (cfg.n, cfg.dv)]
    return [
        tuple(
            rng.standard_normal((cfg.batch_heads, *s), dtype=cupy.float32).astype(cfg.dtype)
            for s in shapes
        )
        for _ in range(count)
    ]


def _reference(cfg, n_heads: int, qkvdo: tuple) -> list | None:
    """float64 (dQ, dK, dV) of the first n_heads heads, or None when a head is too large."""
    if cfg.n * cfg.n_k > MAX_REFERENCE_SCORES:
        return None
    host = [x[:n_heads].get().astype(np.float64) for x in qkvdo]
    return [
        attention_backward(*(x[h] for x in host), causal=cfg.causal, method="dense")
        for h in range(n_heads)
    ]


def _errors(grads: tuple, n_heads: int, ref: list | None) -> dict:
    """max |error| and relative Frobenius error over dQ, dK, dV of the sampled heads."""
    if ref is None:
        return {"max_abs": None, "rel": None}
    # The same order on both sides: per head, then dQ, dK, dV.
    host = [g[:n_heads].get().astype(np.float64) for g in grads]
    got = np.concatenate([host[i][h].ravel() for h in range(n_heads) for i in range(3)])
    want = np.concatenate([r[i].ravel() for r in ref for i in range(3)])
    return error_stats(got, want)


def _row(cfg, kernel: str, fn: Callable, sets: list, lane, extra: dict, errs: dict) -> dict:
    """Peak memory and timing of fn(*set) -> (dQ, dK, dV), in the forward rows' keys."""
    import cupy

    peak, out_bytes = peak_pool_bytes(lambda: fn(*sets[0]))
    timing = time_cuda(fn, sets, warmup=cfg.warmup, repeats=cfg.repeats, l2_bytes=status().l2_bytes)
    cupy.get_default_memory_pool().free_all_blocks()
    ms = timing.median_ms
    ledger_bytes = lane.total_bytes * cfg.batch_heads
    return {
        "kernel": kernel, **extra, "pass": "backward", "ms": ms, "ms_min": timing.min_ms,
        "ms_max": timing.max_ms, "runs": len(timing.times_ms),
        "tflops": cfg.flops() / (ms * 1e-3) / 1e12,
        "ledger_elements": lane.total_elements * cfg.batch_heads, "ledger_bytes": ledger_bytes,
        "ledger_gbs": ledger_bytes / (ms * 1e-3) / 1e9, "peak_bytes": peak,
        "output_bytes": out_bytes, "extra_bytes": max(peak - out_bytes, 0),
        "max_abs_err": errs["max_abs"], "rel_err": errs["rel"],
    }  # fmt: skip


def tiled_backward_row(cfg, base: list, n_heads: int, ref) -> dict:
    """The teaching backward at the config's blocks, with its counted transfers."""
    bq, bk = cfg.block_q, cfg.block_k
    sets = []
    for q, k, v, do in base:  # the forward saves O and L for the backward
        fwd = tiled_attention_gpu(q, k, v, block_q=bq, block_k=bk, causal=cfg.causal, save_lse=True)
        sets.append((q, k, v, do, fwd.out, fwd.lse))

    def fn(q, k, v, do, o, lse):
        r = tiled_attention_backward_gpu(
            q, k, v, o, do, lse, block_q=bq, block_k=bk, causal=cfg.causal
        )  # fmt: skip
        return r.dq, r.dk, r.dv

    lane = _ledger(cfg, bq, bk).lanes["tiled"]
    extra = {"order": "kv-outer", "block_q": bq, "block_k": bk}
    row = _row(cfg, "tiled", fn, sets, lane, extra, _errors(fn(*sets[0]), n_heads, ref))
    if cfg.count_transfers:
        q, k, v, do, o, lse = sets[0]
        res = tiled_attention_backward_gpu(
            q, k, v, o, do, lse, block_q=bq, block_k=bk, causal=cfg.causal, count_transfers=True
        )  # fmt: skip
        per_head = {t: {d: n // cfg.batch_heads for d, n in rw.items()} for t, rw in res.counts.items()}  # fmt: skip
        modelled = {t: dict(lane.counts[t]) for t in per_head}
        row.update(
            counts_kernel=per_head, counts_ledger=modelled, counts_match=per_head == modelled
        )
    return row


def dense_backward_row(cfg, base: list, n_heads: int, ref) -> dict:
    """The dense backward from a stored P (one set when P alone overflows the L2 many times)."""
    p_bytes = cfg.batch_heads * cfg.n * cfg.n_k * np.dtype(cfg.dtype).itemsize
    count = min(len(base), rotation_count(p_bytes, status().l2_bytes))
    sets = [(*s, dense_probabilities_gpu(s[0], s[1], causal=cfg.causal)) for s in base[:count]]

    def fn(q, k, v, do, p):
        return dense_attention_backward_gpu(q, k, v, do, p=p, causal=cfg.causal)

    lane = _ledger(cfg, cfg.block_q, cfg.block_k).lanes["dense"]
    return _row(cfg, "dense", fn, sets, lane, {}, _errors(fn(*sets[0]), n_heads, ref))


def backward_inputs(cfg, l2_bytes: int) -> tuple[list, int, list | None]:
    """Rotated (q, k, v, dO) sets, how many heads are checked, and their float64 gradients."""
    import cupy

    if cfg.dtype not in KERNEL_DTYPES:
        raise ValueError(f"the backward takes {' or '.join(KERNEL_DTYPES)}, not {cfg.dtype}.")
    itemsize = np.dtype(cfg.dtype).itemsize
    set_bytes = cfg.batch_heads * (2 * cfg.n * cfg.d + cfg.n_k * (cfg.d + 2 * cfg.dv)) * itemsize
    rng = cupy.random.default_rng(cfg.seed)
    base = _draw(cfg, rng, rotation_count(set_bytes, l2_bytes))
    n_heads = min(cfg.batch_heads, 2)
    return base, n_heads, _reference(cfg, n_heads, base[0])
