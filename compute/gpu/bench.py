"""The one GPU measurement harness: every path on the same inputs, timer and reference.

`run_bench(config)` returns a JSON-ready report (report.py: BENCH_FORMAT, version
VERSION): for each path the median CUDA-event time (timing.time_cuda: warm-up,
L2 flushed, rotated inputs; in the forward all paths of a case in interleaved rounds,
timing.time_interleaved), TFLOP/s, the ledger's bytes and the implied bandwidth, peak
device memory, the error against the float64 reference (reference.py) on sampled heads
and rows, and for the tiled kernel the transfers its instrumented build counted beside
the modelled ledger. With `sweep_blocks`, also a block_q x block_k grid of tiled-kernel
times. With `pass_name="backward"` every path times its backward pass instead, and with
"training" forward and backward together (bench_backward.py), against that pass's ledger;
the sweep then times the teaching kernel's backward (or training step) at each tile size.
Paths: KERNELS (this project's), PEERS (torch SDPA) and FA4 (imported only when asked for). The
CLI, the desktop panel, lab/figures.py and lab/flash_vs_sdpa.py all call this; the GPU
tests share its reference, dtypes and dense path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import ORDERS, PASSES, closed_form_ledger
from ..cli_fields import mask_of
from ..mask import Mask
from . import bench_backward as bb
from . import flash, peers
from .bench_rows import PendingRow, finish_row, path_refusal
from .dense import dense_attention_gpu
from .device import status
from .dtypes import BENCH_DTYPES, device_array, float64_values
from .peers import FA4, PEERS
from .reference import error_stats, reference_rows, sample_indices
from .report import report_head, tiled_order
from .tiled import TileTooLarge, compile_kernels, tiled_attention_gpu
from .timing import ROUNDS, peak_pool_bytes, rotation_count, time_cuda, time_interleaved

KERNELS = ("tiled", "dense", "flash")
# FLOPs of a pass in forwards: the backward's five matmuls to the forward's two; training both.
PASS_FLOPS = {"forward": 1.0, "backward": 2.5, "training": 3.5}
PATHS = (*KERNELS, *PEERS, FA4)
SWEEP_SIZES = (16, 32, 64, 128)


class GpuUnavailable(RuntimeError):
    """No usable CUDA device; the message is status()'s one-sentence reason."""


class BenchCancelled(RuntimeError):
    """The caller's should_stop() returned True between steps."""


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. n_keys and d_v default to n and d."""

    n: int = 4096
    n_keys: int | None = None
    d: int = 64
    d_v: int | None = None
    block_q: int = 64
    block_k: int = 64
    order: str = "q-outer"
    causal: bool = False
    dtype: str = "float32"
    # The rest of the mask (compute.cli_fields.mask_fields: --mask causal-top-left,
    # --window LEFT,RIGHT, --packed lengths); only the teaching kernel takes more than
    # none or bottom-right causal, so the other paths are left out of such a run.
    top_left: bool = False
    window: str = ""
    packed: str = ""
    batch_heads: int = 32
    kernels: tuple[str, ...] = ("tiled", "dense")
    sweep_blocks: bool = False
    sweep_q: tuple[int, ...] = SWEEP_SIZES
    sweep_k: tuple[int, ...] = SWEEP_SIZES
    warmup: int = 3
    repeats: int = 20
    count_transfers: bool = True
    seed: int = 0
    flash_specs: tuple[str, ...] = ()  # extra tensor-core variants, flash.Config.spec() strings
    pass_name: str = "forward"  # or "backward", or "training" (forward + backward)
    # Seconds the forward's paths run untimed before their timing (timing.preheat): the
    # clock they are then timed at is the one the GPU holds under sustained load.
    preheat_s: float = 0.0
    # ... and before each of a path's interleaved slices, that path alone (timing.py), so
    # no slice inherits the clock of a lighter or heavier path that ran just before it.
    settle_s: float = 0.0

    @property
    def n_k(self) -> int:
        return self.n if self.n_keys is None else self.n_keys

    @property
    def dv(self) -> int:
        return self.d if self.d_v is None else self.d_v

    @property
    def mask(self) -> Mask:
        """The attention mask these fields describe (compute.mask)."""
        return mask_of(self.causal, self.top_left, self.window, self.packed)

    @property
    def plain_mask(self) -> bool:
        """Whether the mask is none or bottom-right causal (`causal` says which): all every
        path takes. Top-left causal is that too when N_q = N_k."""
        m = self.mask
        square_causal = m.causal and not m.windowed and not m.lengths
        return m.is_none or (square_causal and (not m.top_left or self.n == self.n_k))

    def mask_refusal(self, kernel: str) -> str | None:
        """Why path `kernel` cannot take this mask, as one sentence; None if it can."""
        if kernel == "tiled" or self.plain_mask:
            return None
        return (
            f"the {kernel} path takes no mask or bottom-right causal, not {self.mask.label} "
            "(the teaching kernel, --kernel tiled, takes every mask)"
        )

    def flops(self) -> float:
        """2·BH·N_q·N_k·(d + d_v) (= 4·BH·N_q·N_k·d when d_v = d), halved for causal
        (other masks: times the share of visible query-key pairs); the backward counts 2.5
        times that, training 3.5 times (PASS_FLOPS)."""
        f = 2.0 * self.batch_heads * self.n * self.n_k * (self.d + self.dv)
        f *= PASS_FLOPS[self.pass_name]
        if self.plain_mask:
            return f / 2 if self.causal else f
        lo, hi = self.mask.row_bounds(np.arange(self.n), self.n, self.n_k)
        return f * float(np.maximum(hi - lo, 0).sum()) / (self.n * self.n_k)

    def __post_init__(self) -> None:
        if self.dtype not in BENCH_DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(BENCH_DTYPES)}, not {self.dtype!r}.")
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, not {self.order!r}.")
        if self.pass_name not in PASSES:
            raise ValueError(f"pass must be one of {', '.join(PASSES)}, not {self.pass_name!r}.")
        self.mask.check(self.n, self.n_k)  # ValueError: one sentence (packed lengths vs N)
        # `causal` says whether the mask is causal (--window -1,0 is), as the paths that take
        # only the bool read it.
        object.__setattr__(self, "causal", self.mask.causal)
        if self.flash_specs and not self.plain_mask:
            raise ValueError(f"{self.mask_refusal('flash')}; leave out the flash variants.")
        if self.pass_name != "forward" and self.flash_specs:
            raise ValueError(
                "The flash variants (flash_specs) are forward kernels; "
                f"leave them off for the {self.pass_name}."
            )


@dataclass
class _Inputs:
    sets: list  # rotated (q, k, v) device triples
    heads: np.ndarray
    rows: np.ndarray
    ref: np.ndarray  # float64 reference for (heads, rows)


@dataclass
class _Context:
    cfg: BenchConfig
    progress: Callable[[int, int, str], None] | None
    should_stop: Callable[[], bool] | None
    total: int
    done: int = 0
    notes: list[str] = field(default_factory=list)

    def step(self, message: str) -> None:
        if self.should_stop is not None and self.should_stop():
            raise BenchCancelled("benchmark cancelled")
        if self.progress is not None:
            self.progress(self.done, self.total, message)
        self.done += 1


def _make_inputs(cfg: BenchConfig, l2_bytes: int) -> _Inputs:
    import cupy

    rng = cupy.random.default_rng(cfg.seed)
    itemsize = 4 if cfg.dtype == "float32" else 2
    shapes = [
        (cfg.batch_heads, cfg.n, cfg.d),
        (cfg.batch_heads, cfg.n_k, cfg.d),
        (cfg.batch_heads, cfg.n_k, cfg.dv),
    ]
    set_bytes = sum(math.prod(s) for s in shapes) * itemsize
    sets = []
    for _ in range(rotation_count(set_bytes, l2_bytes)):
        draws = (rng.standard_normal(s, dtype=cupy.float32) for s in shapes)
        sets.append(tuple(device_array(x, cfg.dtype) for x in draws))
    heads, rows = sample_indices(cfg.batch_heads, cfg.n, seed=cfg.seed)
    # The reference sees the rounded inputs the kernels see.
    q, k, v = (float64_values(x[cupy.asarray(heads)].get(), cfg.dtype) for x in sets[0])
    ref = np.stack(
        [reference_rows(q[h], k[h], v[h], rows, causal=cfg.mask) for h in range(len(heads))]
    )
    return _Inputs(sets, heads, rows, ref)


def _release() -> None:
    """Hand cached blocks back so the next path starts from the same free memory."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


def _errors(cfg: BenchConfig, out, inputs: _Inputs) -> dict[str, float]:
    import cupy

    sample = out[cupy.asarray(inputs.heads)][:, cupy.asarray(inputs.rows)].get()
    return error_stats(float64_values(sample, cfg.dtype), inputs.ref)


def _ledger(cfg: BenchConfig, block_q: int, block_k: int, order: str):
    return closed_form_ledger(
        cfg.n, cfg.n_k, cfg.d, cfg.dv, block_q=block_q, block_k=block_k, order=order,
        causal=cfg.mask, dtype=cfg.dtype,
    )  # fmt: skip


def _row(
    cfg: BenchConfig,
    kernel: str,
    fn,
    inputs: _Inputs,
    lane,
    extra: dict,
    measure_peak=peak_pool_bytes,
) -> PendingRow:
    """Error and peak memory of fn(q, k, v) -> output array (lane None: no ledger)."""
    out = fn(*inputs.sets[0])
    errs = _errors(cfg, out, inputs)
    del out
    peak, out_bytes = measure_peak(lambda: fn(*inputs.sets[0]))
    _release()
    return PendingRow(kernel, fn, lane, extra, errs, peak, out_bytes)


def _time_rows(cfg: BenchConfig, inputs: _Inputs, rows: list) -> list[dict]:
    """Rows in order: every pending path timed in interleaved rounds on the same inputs; if
    that fails, each path alone, so only the failing one becomes an error row."""
    pending = {str(i): r for i, r in enumerate(rows) if isinstance(r, PendingRow)}
    l2 = status().l2_bytes

    def together() -> dict:
        paths = {key: (p.fn, inputs.sets) for key, p in pending.items()}
        timings = time_interleaved(
            paths, warmup=cfg.warmup, repeats=cfg.repeats, l2_bytes=l2,
            preheat_s=cfg.preheat_s, settle_s=cfg.settle_s,
        )  # fmt: skip
        return {"rows": {key: finish_row(cfg, pending[key], t) for key, t in timings.items()}}

    done = _guarded("", {}, together).get("rows")
    if done is None:
        done = {}
        for key, p in pending.items():

            def alone(p=p) -> dict:
                t = time_cuda(p.fn, inputs.sets, warmup=cfg.warmup, repeats=cfg.repeats,
                              l2_bytes=l2)  # fmt: skip
                return finish_row(cfg, p, t)

            done[key] = _guarded(p.kernel, p.extra, alone)
    _release()
    return [done.get(str(i), r) for i, r in enumerate(rows)]


def _error_row(kernel: str, extra: dict, exc: BaseException) -> dict:
    text = str(exc).strip() or type(exc).__name__
    return {"kernel": kernel, **extra, "error": text.splitlines()[0], "error_detail": text}


def _guarded(kernel: str, extra: dict, body: Callable[[], Any]) -> Any:
    """Run one path; a user-causable failure becomes a row with an `error` sentence."""
    import cupy

    try:
        return body()
    except (BenchCancelled, GpuUnavailable):
        raise
    except TileTooLarge as exc:
        return _error_row(kernel, extra, exc)
    except cupy.cuda.memory.OutOfMemoryError as exc:
        return _error_row(kernel, extra, RuntimeError(f"out of device memory: {exc}"))
    except cupy.cuda.compiler.CompileException as exc:
        return _error_row(kernel, extra, RuntimeError(f"kernel compile error: {exc}"))
    except (ValueError, TypeError, RuntimeError, NotImplementedError, ImportError) as exc:
        return _error_row(kernel, extra, exc)


def _refuse(cfg: BenchConfig, kernel: str) -> None:
    """ValueError with path_refusal's sentence if `kernel` cannot run cfg's problem."""
    reason = path_refusal(kernel, cfg.dtype, cfg.d, cfg.dv) or cfg.mask_refusal(kernel)
    if reason is not None:
        raise ValueError(reason)


def _tiled_row(
    cfg: BenchConfig, inputs: _Inputs, order: str, bq: int, bk: int
) -> PendingRow | dict:
    extra = {"order": order, "block_q": bq, "block_k": bk}

    def body() -> PendingRow:
        comp = compile_kernels(bq, bk, cfg.d, cfg.dv, cfg.dtype)

        def fn(q, k, v):
            return tiled_attention_gpu(
                q, k, v, block_q=bq, block_k=bk, order=order, causal=cfg.mask
            ).out

        lane = _ledger(cfg, bq, bk, order).lanes["tiled"]
        row = _row(cfg, "tiled", fn, inputs, lane, extra)
        row.after["compile_s"] = comp.compile_s
        if cfg.count_transfers:
            row.after.update(_counted(cfg, inputs, order, bq, bk, lane))
        return row

    return _guarded("tiled", extra, body)


def _counted(cfg: BenchConfig, inputs: _Inputs, order: str, bq: int, bk: int, lane) -> dict:
    """The instrumented build's per-head counts beside the ledger's."""
    q, k, v = inputs.sets[0]
    res = tiled_attention_gpu(
        q, k, v, block_q=bq, block_k=bk, order=order, causal=cfg.mask, count_transfers=True
    )
    per_head = {t: {d: n // cfg.batch_heads for d, n in rw.items()} for t, rw in res.counts.items()}
    modelled = {t: dict(lane.counts[t]) for t in per_head}
    return {
        "counted_compile_s": res.compile_s,
        "counts_kernel": per_head,
        "counts_ledger": modelled,
        "counts_match": per_head == modelled,
    }


def _dense_row(cfg: BenchConfig, inputs: _Inputs) -> PendingRow | dict:
    def body() -> PendingRow:
        _refuse(cfg, "dense")
        lane = _ledger(cfg, cfg.block_q, cfg.block_k, cfg.order).lanes["dense"]
        fn = lambda q, k, v: dense_attention_gpu(q, k, v, causal=cfg.causal)  # noqa: E731
        return _row(cfg, "dense", fn, inputs, lane, {})

    return _guarded("dense", {}, body)


def _flash_row(cfg: BenchConfig, inputs: _Inputs, spec: str | None = None) -> PendingRow | dict:
    """The tensor-core kernel: its default variant for d, or the variant `spec` names."""
    label = "flash" if spec is None else f"flash[{spec}]"

    def body() -> PendingRow:
        _refuse(cfg, label)
        fcfg = (
            flash.default_config(cfg.d, cfg.n, cfg.causal)
            if spec is None
            else flash.Config.parse(spec)
        )
        bq, bk = fcfg.block_m, fcfg.block_n  # its own tiles, for its modelled ledger
        lane = _ledger(cfg, bq, bk, "q-outer").lanes["tiled"]

        def fn(q, k, v):  # flash takes (batch, heads, N, d): batch*heads as one batch of heads
            out = flash.flash_attention(q[None], k[None], v[None], causal=cfg.causal, config=fcfg)
            return out[0]

        extra = {"order": "q-outer", "block_q": bq, "block_k": bk, "variant": fcfg.spec()}
        return _row(cfg, label, fn, inputs, lane, extra)

    return _guarded(label, {}, body)


def _peer_row(cfg: BenchConfig, inputs: _Inputs, name: str) -> PendingRow | dict:
    """A torch SDPA backend or FA4 on the same inputs (no ledger: their transfers are not
    modelled)."""

    def body() -> PendingRow:
        _refuse(cfg, name)
        attend = peers.peer(name)
        fn = lambda q, k, v: attend(q, k, v, causal=cfg.causal)  # noqa: E731
        return _row(cfg, name, fn, inputs, None, {}, measure_peak=peers.peak_torch_bytes)

    return _guarded(name, {}, body)


def _forward_timer(cfg: BenchConfig, inputs: _Inputs) -> Callable[[int, int], dict]:
    """time_at(block_q, block_k) -> {"ms": ...} for the tiled forward."""

    def time_at(bq: int, bk: int) -> dict:
        def fn(q, k, v):
            return tiled_attention_gpu(
                q, k, v, block_q=bq, block_k=bk, order=cfg.order, causal=cfg.mask
            ).out

        compile_kernels(bq, bk, cfg.d, cfg.dv, cfg.dtype)
        l2 = status().l2_bytes
        timing = time_cuda(fn, inputs.sets, warmup=2, repeats=cfg.repeats, l2_bytes=l2)
        return {"ms": timing.median_ms}

    return time_at


def _sweep(cfg: BenchConfig, time_at: Callable[[int, int], dict], ctx: _Context) -> dict:
    """Median time of the tiled kernel (time_at) at every (block_q, block_k) of the grid."""
    grid: list[list[float | None]] = []
    errors: dict[str, str] = {}
    for bq in cfg.sweep_q:
        line: list[float | None] = []
        for bk in cfg.sweep_k:
            ctx.step(f"sweep {bq}x{bk}")
            row = _guarded("tiled", {}, lambda bq=bq, bk=bk: time_at(bq, bk))
            line.append(row.get("ms"))
            if "error" in row:
                errors[f"{bq}x{bk}"] = row["error"]
        grid.append(line)
    timed = [
        (ms, bq, bk)
        for bq, line in zip(cfg.sweep_q, grid, strict=True)
        for bk, ms in zip(cfg.sweep_k, line, strict=True)
        if ms is not None
    ]
    best = min(timed) if timed else None
    return {
        "pass": cfg.pass_name,
        "order": tiled_order(cfg),
        "block_q": list(cfg.sweep_q),
        "block_k": list(cfg.sweep_k),
        "ms": grid,
        "best": None if best is None else {"block_q": best[1], "block_k": best[2], "ms": best[0]},
        "errors": errors,
    }


def run_bench(
    cfg: BenchConfig,
    *,
    progress: Callable[[int, int, str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Measure cfg on device 0 and return the report dict (raises GpuUnavailable)."""
    st = status()
    if not st.usable:
        raise GpuUnavailable(st.reason)
    kernels = [k for k in cfg.kernels if k in PATHS]
    n_sweep = len(cfg.sweep_q) * len(cfg.sweep_k) if cfg.sweep_blocks else 0
    total = 1 + len(kernels) + len(cfg.flash_specs) + n_sweep
    ctx = _Context(cfg, progress, should_stop, total=total)
    ctx.step("preparing inputs and float64 reference")
    if cfg.pass_name != "forward":
        results, sweep, n_sets, n_heads = _backward_results(cfg, st, kernels, ctx)
        report = _report(cfg, st, results, sweep, progress, ctx)
        report["sample"] = {"heads": list(range(n_heads)), "rows": cfg.n}
        report["rotated_input_sets"] = n_sets
        return report
    inputs = _make_inputs(cfg, st.l2_bytes)
    results: list[dict] = []
    sweep = None
    if cfg.sweep_blocks:
        sweep = _sweep(cfg, _forward_timer(cfg, inputs), ctx)
    for kernel in kernels:
        ctx.step(f"timing {kernel}")
        if kernel == "tiled":
            results.append(_tiled_row(cfg, inputs, cfg.order, cfg.block_q, cfg.block_k))
        elif kernel == "dense":
            results.append(_dense_row(cfg, inputs))
        elif kernel == "flash":
            results.append(_flash_row(cfg, inputs))
        else:
            results.append(_peer_row(cfg, inputs, kernel))
    for spec in cfg.flash_specs:
        ctx.step(f"timing flash[{spec}]")
        results.append(_flash_row(cfg, inputs, spec))
    results = _time_rows(cfg, inputs, results)
    report = _report(cfg, st, results, sweep, progress, ctx)
    report["sample"] = {"heads": inputs.heads.tolist(), "rows": len(inputs.rows)}
    report["rotated_input_sets"] = len(inputs.sets)
    return report


def _backward_results(cfg: BenchConfig, st, kernels: list[str], ctx: _Context) -> tuple:
    """The backward or training rows, the teaching kernel's block sweep (or None), how many
    input sets rotated and how many whole heads the errors cover."""
    base, n_heads, ref = bb.backward_inputs(cfg, st.l2_bytes)
    sweep = _sweep(cfg, bb.tiled_timer(cfg, base), ctx) if cfg.sweep_blocks else None
    results = []
    for kernel in kernels:
        ctx.step(f"timing {kernel} {cfg.pass_name}")
        extra: dict = {}
        if kernel == "tiled":
            extra = {"order": tiled_order(cfg), "block_q": cfg.block_q, "block_k": cfg.block_k}
            body = lambda: bb.tiled_backward_row(cfg, base, n_heads, ref)  # noqa: E731
        elif kernel == "dense":
            body = lambda: bb.dense_backward_row(cfg, base, n_heads, ref)  # noqa: E731
        elif kernel == "flash":
            body = lambda: bb.flash_backward_row(cfg, base, n_heads, ref)  # noqa: E731
        else:
            body = lambda k=kernel: bb.peer_backward_row(cfg, base, n_heads, ref, k)  # noqa: E731
        results.append(_guarded(kernel, {**extra, "pass": cfg.pass_name}, body))
    return results, sweep, len(base), n_heads


def _report(cfg: BenchConfig, st, results: list[dict], sweep, progress, ctx: _Context) -> dict:
    """The report dict around the results (speed-ups against the dense row filled in)."""
    dense_ms = next((r["ms"] for r in results if r["kernel"] == "dense" and "ms" in r), None)
    for r in results:
        r.setdefault("pass", cfg.pass_name)
        if dense_ms is not None and "ms" in r:
            r["speedup_vs_dense"] = dense_ms / r["ms"]
    if progress is not None:
        progress(ctx.total, ctx.total, "done")
    timing = (
        f"CUDA events, {cfg.warmup} warm-up, median of {cfg.repeats}, L2 flushed"
        + (f", paths interleaved in {ROUNDS} rounds" if cfg.pass_name == "forward" else "")
        + (
            f" after {cfg.preheat_s:g} s untimed"
            if cfg.pass_name == "forward" and cfg.preheat_s
            else ""
        )
        + (
            f", each slice after {cfg.settle_s:g} s of its own path untimed"
            if cfg.pass_name == "forward" and cfg.settle_s
            else ""
        )
    )
    return {
        **report_head(cfg, st.to_dict(), timing),
        "sample": None,
        "rotated_input_sets": None,
        "results": results,
        "sweep": sweep,
    }
