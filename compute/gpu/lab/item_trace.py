"""Where a ws kernel's time goes, item by item: the ':trace' variant's clock records.

Run on the GPU machine:

    python -m compute.gpu.lab.item_trace [--n 4096] [--d 64] [--dtype float16]
        [--causal 0|1] [--spec SPEC ...] [--json FILE] [--npz FILE]

One case (B·N = 16k, H·d = 2048, timing_probe.case_inputs) per spec (the default variant when none is given), each
launched with ':trace' added: thread 0 of every consumer warpgroup records the SM and the
SM's clock before and after its wait for Q, after its first S GEMM, after its last P·V and
after the epilogue (flash_fwd_ws.cu, MODE bit 19). `summarise` turns the records into the
mean cycles per item of each phase and each phase's share of the SMs' time: the turnover
between items on one SM (for the plain grid: a CTA's exit to the next CTA's start), the
wait for Q, the pipeline fill up to the first S GEMM, the body, and the epilogue. Each
spec is also timed with and without the trace, so the probe's own cost is on record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from .timing_probe import add_case_arguments, case_inputs

PHASES = ("turnover", "q_wait", "fill", "body", "epilogue")


def summarise(records: np.ndarray) -> dict:
    """Per-phase cycles of a trace, shaped (items, warpgroups, TRACE_WORDS) of 64-bit words:
    SM, clock before Q's wait, after it, after the first S GEMM (0 if the warpgroup computed
    no tile), after the last P·V, after the epilogue, key tiles computed.

    An item's phases take the earliest warpgroup's clock where it starts and the latest's
    where it ends; the turnover is the gap from an item's end to the next item's start on
    the same SM. Returns the item count, the mean cycles per item of each phase, their
    shares of the summed SM time (first start to last end, per SM), the body's cycles
    per key tile of the warpgroup that computed the most, and the tail: how far the SMs'
    spans fall short of the longest, on average, as a share of it (the SMs start together,
    so that is the time they sit idle at the end)."""
    rec = records.astype(np.int64)
    sm = rec[:, 0, 0]
    wait0 = rec[:, :, 1].min(axis=1)
    q_in = rec[:, :, 2].max(axis=1)
    s0 = np.where(rec[:, :, 3] > 0, rec[:, :, 3], np.iinfo(np.int64).max).min(axis=1)
    computed = s0 != np.iinfo(np.int64).max
    s0 = np.where(computed, s0, rec[:, :, 4].max(axis=1))
    end = rec[:, :, 4].max(axis=1)
    epi = rec[:, :, 5].max(axis=1)
    tiles = rec[:, :, 6].max(axis=1)
    turnover = np.zeros(len(rec), dtype=np.int64)
    spans = []
    for s in np.unique(sm):
        idx = np.flatnonzero(sm == s)
        idx = idx[np.argsort(wait0[idx], kind="stable")]
        turnover[idx[1:]] = wait0[idx[1:]] - epi[idx[:-1]]
        spans.append(int(epi[idx].max() - wait0[idx].min()))
    span = sum(spans)
    phases = {
        "turnover": turnover,
        "q_wait": q_in - wait0,
        "fill": s0 - q_in,
        "body": end - s0,
        "epilogue": epi - end,
    }
    busy = tiles > 0
    return {
        "items": int(len(rec)),
        "sms": int(len(np.unique(sm))),
        "mean_cycles": {k: float(v.mean()) for k, v in phases.items()},
        "share": {k: float(v.sum() / span) if span else 0.0 for k, v in phases.items()},
        "body_cycles_per_tile": float((phases["body"][busy] / tiles[busy]).mean())
        if busy.any()
        else 0.0,
        "mean_tiles": float(tiles.mean()),
        "tail": 1.0 - float(np.mean(spans)) / max(spans) if spans and max(spans) else 0.0,
    }


def _table(rows: dict[str, dict]) -> str:
    head = f"{'variant':52s} {'items':>6s} {'tiles':>6s} " + " ".join(f"{p:>15s}" for p in PHASES)
    lines = [head + f" {'cyc/tile':>9s} {'tail':>6s}"]
    for name, s in rows.items():
        cells = " ".join(f"{s['mean_cycles'][p]:8.0f} {100 * s['share'][p]:5.1f}%" for p in PHASES)
        lines.append(
            f"{name:52s} {s['items']:6d} {s['mean_tiles']:6.1f} {cells} "
            f"{s['body_cycles_per_tile']:9.0f} {100 * s['tail']:5.1f}%"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_case_arguments(ap)
    ap.add_argument("--npz", type=Path, help="where the raw records go (one array per spec)")
    args = ap.parse_args(argv)

    import cupy

    from .. import flash
    from ..timing import time_cuda

    causal = bool(args.causal)
    n, d = args.n, args.d
    bh, l2, sets = case_inputs(n, d, args.dtype)
    specs = args.spec or [flash.default_config(d, n, causal).spec()]
    rows, raw, timings = {}, {}, {}
    for spec in specs:
        cfg = flash.Config.parse(spec)
        traced = replace(cfg, trace=True)
        buf = cupy.zeros(flash.trace_words(traced, bh, n), dtype=cupy.uint64)

        def plain(q, k, v, cfg=cfg):
            return flash.flash_attention(q[None], k[None], v[None], causal=causal, config=cfg)

        def with_trace(q, k, v, cfg=traced, buf=buf):
            return flash.flash_attention(
                q[None], k[None], v[None], causal=causal, config=cfg, trace=buf
            )

        ms = {}
        for label, fn in (("plain", plain), ("traced", with_trace), ("plain again", plain)):
            ms[label] = statistics.median(
                time_cuda(fn, sets, warmup=5, repeats=30, l2_bytes=l2).times_ms
            )
        buf.fill(0)
        with_trace(*sets[0])
        records = cupy.asnumpy(buf).reshape(-1, cfg.warps, flash.TRACE_WORDS)
        rows[spec] = summarise(records)
        raw[spec] = records
        timings[spec] = ms
        print(
            f"{spec}: {ms['plain']:.4f} ms plain, {ms['traced']:.4f} traced, "
            f"{ms['plain again']:.4f} plain again",
            flush=True,
        )
    print(_table(rows))
    if args.json:
        case = {"n": n, "d": d, "dtype": args.dtype, "causal": causal, "bh": bh}
        args.json.write_text(
            json.dumps({"case": case, "summary": rows, "median_ms": timings}, indent=1)
        )
    if args.npz:
        np.savez_compressed(args.npz, **{f"r{i}": raw[s] for i, s in enumerate(specs)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
