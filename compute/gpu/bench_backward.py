"""The harness's backward and training rows: the teaching kernel, dense, the tensor-core kernel
and torch SDPA, each timed on the same rotated (q, k, v, dO) sets.

`run_bench` calls `backward_results` when `BenchConfig.pass_name` is "backward" or
"training". "backward" times each path's backward from what its own forward saved (outside
the timed region): the tiled backward from O and L (the tiled forward at the same blocks,
`save_lse=True`), the dense one from the stored P, the tensor-core backward
(`flash_backward.flash_attention_backward`) from the tensor-core forward's O and L, and
SDPA through `peers.sdpa_backward`. "training" times forward and backward together, as one
training step runs them. The rows have the forward rows' keys (report.py prints all alike):
TFLOP/s counts 2.5 × the forward's FLOPs for the backward, 3.5 × for training
(BenchConfig.flops); the ledger is `pass_ledger(pass, ...)` at the path's tiles (the
tensor-core backward's own 64 x 128; none for its training step, whose forward tiles
differently, nor for SDPA); in the backward the tiled row carries its instrumented build's
per-tensor transfers beside that ledger.
Errors are over dQ, dK and dV of the sampled heads against the float64 dense backward
(`compute.attention_backward`), which needs whole heads: above MAX_REFERENCE_SCORES
scores per head the rows carry no error (None) rather than a long float64 run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import attention_backward, pass_ledger
from . import flash, flash_backward, peers
from .backward import tiled_attention_backward_gpu
from .bench_rows import PendingRow, finish_row, path_refusal
from .dense_backward import dense_attention_backward_gpu, dense_probabilities_gpu
from .device import status
from .dtypes import device_array, float64_values
from .flash_backward import flash_attention_backward
from .reference import error_stats
from .report import tiled_order
from .tiled import tiled_attention_gpu
from .timing import peak_pool_bytes, rotation_count, time_cuda

MAX_REFERENCE_SCORES = 4096 * 4096  # N_q·N_k per head for the float64 reference


def _refuse(cfg, kernel: str) -> None:
    """ValueError with path_refusal's sentence if `kernel` cannot run cfg's problem."""
    reason = path_refusal(kernel, cfg.dtype, cfg.d, cfg.dv) or cfg.mask_refusal(kernel)
    if reason is not None:
        raise ValueError(reason)


def _ledger(cfg, block_q: int, block_k: int):
    return pass_ledger(
        cfg.pass_name, cfg.n, cfg.n_k, cfg.d, cfg.dv, block_q=block_q, block_k=block_k,
        order=cfg.order, causal=cfg.mask, dtype=cfg.dtype,
    )  # fmt: skip


def _draw(cfg, rng, count: int) -> list[tuple]:
    """`count` rotated (q, k, v, dO) sets in the config's dtype (bfloat16 as uint16 bits)."""
    import cupy

    shapes = [(cfg.n, cfg.d), (cfg.n_k, cfg.d), (cfg.n_k, cfg.dv), (cfg.n, cfg.dv)]
    return [
        tuple(
            device_array(rng.standard_normal((cfg.batch_heads, *s), dtype=cupy.float32), cfg.dtype)
            for s in shapes
        )
        for _ in range(count)
    ]


def _reference(cfg, n_heads: int, qkvdo: tuple) -> list | None:
    """float64 (dQ, dK, dV) of the first n_heads heads, or None when a head is too large."""
    if cfg.n * cfg.n_k > MAX_REFERENCE_SCORES:
        return None
    host = [float64_values(x[:n_heads].get(), cfg.dtype) for x in qkvdo]
    return [
        attention_backward(*(x[h] for x in host), causal=cfg.mask, method="dense")
        for h in range(n_heads)
    ]


def _errors(cfg, grads: tuple, n_heads: int, ref: list | None) -> dict:
    """max |error| and relative Frobenius error over dQ, dK, dV of the sampled heads."""
    if ref is None:
        return {"max_abs": None, "rel": None}
    # The same order on both sides: per head, then dQ, dK, dV.
    host = [float64_values(g[:n_heads].get(), cfg.dtype) for g in grads]
    got = np.concatenate([host[i][h].ravel() for h in range(n_heads) for i in range(3)])
    want = np.concatenate([r[i].ravel() for r in ref for i in range(3)])
    return error_stats(got, want)


def _row(
    cfg, kernel: str, fn: Callable, sets: list, lane, extra: dict, errs: dict,
    measure_peak: Callable = peak_pool_bytes,
) -> dict:  # fmt: skip
    """Peak memory and timing of fn(*set) -> (dQ, dK, dV), in the forward rows' keys with the
    pass after `extra` (bench_rows.finish_row; lane None: no ledger)."""
    import cupy

    peak, out_bytes = measure_peak(lambda: fn(*sets[0]))
    timing = time_cuda(fn, sets, warmup=cfg.warmup, repeats=cfg.repeats, l2_bytes=status().l2_bytes)
    cupy.get_default_memory_pool().free_all_blocks()
    extra = {**extra, "pass": cfg.pass_name}
    return finish_row(cfg, PendingRow(kernel, fn, lane, extra, errs, peak, out_bytes), timing)


def _tiled_fn(cfg, base: list, bq: int, bk: int) -> tuple[Callable, list]:
    """The teaching kernel's fn and argument sets at bq x bk for the config's pass."""
    _refuse(cfg, "tiled")

    def forward(q, k, v):
        fwd = tiled_attention_gpu(
            q, k, v, block_q=bq, block_k=bk, order=cfg.order, causal=cfg.mask, save_lse=True
        )  # fmt: skip
        return fwd.out, fwd.lse

    def backward(q, k, v, do, o, lse):
        r = tiled_attention_backward_gpu(
            q, k, v, o, do, lse, block_q=bq, block_k=bk, causal=cfg.mask
        )  # fmt: skip
        return r.dq, r.dk, r.dv

    if cfg.pass_name == "training":
        return (lambda q, k, v, do: backward(q, k, v, do, *forward(q, k, v))), base
    # The forward saves O and L for the backward, outside the timed region.
    return backward, [(q, k, v, do, *forward(q, k, v)) for q, k, v, do in base]


def tiled_backward_row(cfg, base: list, n_heads: int, ref) -> dict:
    """The teaching kernel at the config's blocks (backward: with its counted transfers)."""
    bq, bk = cfg.block_q, cfg.block_k
    fn, sets = _tiled_fn(cfg, base, bq, bk)
    lane = _ledger(cfg, bq, bk).lanes["tiled"]
    extra = {"order": tiled_order(cfg), "block_q": bq, "block_k": bk}
    row = _row(cfg, "tiled", fn, sets, lane, extra, _errors(cfg, fn(*sets[0]), n_heads, ref))
    if cfg.count_transfers and cfg.pass_name == "backward":
        q, k, v, do, o, lse = sets[0]
        res = tiled_attention_backward_gpu(
            q, k, v, o, do, lse, block_q=bq, block_k=bk, causal=cfg.mask, count_transfers=True
        )  # fmt: skip
        per_head = {t: {d: n // cfg.batch_heads for d, n in rw.items()} for t, rw in res.counts.items()}  # fmt: skip
        modelled = {t: dict(lane.counts[t]) for t in per_head}
        row.update(
            counts_kernel=per_head, counts_ledger=modelled, counts_match=per_head == modelled
        )
    return row


def tiled_timer(cfg, base: list) -> Callable[[int, int], dict]:
    """time_at(block_q, block_k) -> {"ms": ...}: the block sweep of the config's pass."""

    def time_at(bq: int, bk: int) -> dict:
        fn, sets = _tiled_fn(cfg, base, bq, bk)
        timing = time_cuda(fn, sets, warmup=2, repeats=cfg.repeats, l2_bytes=status().l2_bytes)
        return {"ms": timing.median_ms}

    return time_at


def dense_backward_row(cfg, base: list, n_heads: int, ref) -> dict:
    """The dense backward from a stored P (one set when P alone overflows the L2 many
    times); in training, P and O = P V first."""
    import cupy

    _refuse(cfg, "dense")
    p_bytes = cfg.batch_heads * cfg.n * cfg.n_k * np.dtype(cfg.dtype).itemsize
    count = min(len(base), rotation_count(p_bytes, status().l2_bytes))

    def backward(q, k, v, do, p):
        return dense_attention_backward_gpu(q, k, v, do, p=p, causal=cfg.causal)

    if cfg.pass_name == "training":
        sets = base[:count]

        def fn(q, k, v, do):
            p = dense_probabilities_gpu(q, k, causal=cfg.causal)
            cupy.matmul(p, v)  # O, which the training step's next layer would read
            return backward(q, k, v, do, p)
    else:
        sets = [(*s, dense_probabilities_gpu(s[0], s[1], causal=cfg.causal)) for s in base[:count]]
        fn = backward

    lane = _ledger(cfg, cfg.block_q, cfg.block_k).lanes["dense"]
    return _row(cfg, "dense", fn, sets, lane, {}, _errors(cfg, fn(*sets[0]), n_heads, ref))


def flash_backward_row(cfg, base: list, n_heads: int, ref) -> dict:
    """The tensor-core backward (training: with the tensor-core forward before it)."""
    _refuse(cfg, "flash")

    # flash takes (batch, heads, N, d): batch*heads as one batch of heads.
    def forward(q, k, v):
        return flash.flash_attention(q[None], k[None], v[None], causal=cfg.causal, return_lse=True)

    def backward(q, k, v, do, o, lse):
        grads = flash_attention_backward(
            q[None], k[None], v[None], o, do[None], lse, causal=cfg.causal
        )  # fmt: skip
        return tuple(g[0] for g in grads)

    fcfg = flash.default_config(cfg.d, cfg.n, cfg.causal)
    if cfg.pass_name == "training":
        fn, sets = (lambda q, k, v, do: backward(q, k, v, do, *forward(q, k, v))), base
        # Its forward and backward tile differently; one ledger takes one tiling: none.
        lane, extra = None, {"variant": fcfg.spec()}
    else:
        fn, sets = backward, [(q, k, v, do, *forward(q, k, v)) for q, k, v, do in base]
        # its own tiles: 80 query rows at d = 128 without a band, else 64
        bq, bk = flash_backward.query_rows(cfg.d, cfg.causal), flash_backward.BLOCK_KEYS
        lane = _ledger(cfg, bq, bk).lanes["tiled"]
        extra = {"order": "kv-outer", "block_q": bq, "block_k": bk}
    return _row(cfg, "flash", fn, sets, lane, extra, _errors(cfg, fn(*sets[0]), n_heads, ref))


class _Grads(tuple):
    """(dQ, dK, dV) with the total nbytes peers.peak_torch_bytes reads off a result."""

    @property
    def nbytes(self) -> int:
        return sum(int(g.nbytes) for g in self)


def peer_backward_row(cfg, base: list, n_heads: int, ref, name: str) -> dict:
    """torch SDPA pinned to one backend, or FA4 (`peers.peer_backward`): in training its
    forward and autograd backward together; in the backward the backward alone, through the
    graph its `prepare` builds once per input set (outside the timed region)."""
    _refuse(cfg, name)
    step = peers.peer_backward(name)
    errs = _errors(cfg, step(*base[0], cfg.causal), n_heads, ref)
    if cfg.pass_name == "training":
        fn, sets = (lambda q, k, v, do: _Grads(step(q, k, v, do, cfg.causal))), base
    else:
        fn, sets = (lambda run: _Grads(run())), [(step.prepare(*s, cfg.causal),) for s in base]
    return _row(cfg, name, fn, sets, None, {}, errs, measure_peak=peers.peak_torch_bytes)


def backward_inputs(cfg, l2_bytes: int) -> tuple[list, int, list | None]:
    """Rotated (q, k, v, dO) sets, how many heads are checked, and their float64 gradients
    (cfg is a BenchConfig, whose dtype its own check has already limited to BENCH_DTYPES)."""
    import cupy

    itemsize = 4 if cfg.dtype == "float32" else 2
    set_bytes = cfg.batch_heads * (2 * cfg.n * cfg.d + cfg.n_k * (cfg.d + 2 * cfg.dv)) * itemsize
    rng = cupy.random.default_rng(cfg.seed)
    base = _draw(cfg, rng, rotation_count(set_bytes, l2_bytes))
    n_heads = min(cfg.batch_heads, 2)
    return base, n_heads, _reference(cfg, n_heads, base[0])
