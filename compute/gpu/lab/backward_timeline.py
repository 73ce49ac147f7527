"""A per-block timeline of a few CTAs of the ws backward: where each warp role spends a block.

Run on the GPU machine:

    python -m compute.gpu.lab.backward_timeline [--case 25 64 8192 bfloat16 0 ...] [--json F]

Each case (mode, d, N, dtype, causal; B*N = 16384 tokens, H*d = 2048 as backward_vs_fa4)
builds the mode's kernels with -DFBW_TIMELINE (kernels/flash_bwd_timeline.cuh: lane 0 of each
warp of four picked CTAs writes %clock at the numbered points of every query block), runs the
backward once through ``backward_mode`` with them, and reduces the stamps (``reduce``): per
role (the producer's thread 0, each consumer warpgroup's four warps; at d = 64 the consumer's
blocks with and without its dQ tile apart) the mean cycles of each phase between consecutive
stamps over the CTA's blocks but the first and last two, the block period, the wait at the
hand-off barrier, and the tensor cores' share of the period by the GEMMs' FLOP count (4,096
FLOP a clock an SM). The shipped and the instrumented kernel are also timed (median of 10
launches) to price the stamps. Without -DFBW_TIMELINE the kernels' PTX is the shipped one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np

CTAS, WARPS, BLOCKS, EV = 4, 12, 256, 20  # flash_bwd_timeline.cuh's FBW_TL_*
MISSING = 0xFFFFFFFF  # the buffer's fill: an event not stamped in that block
FLOP_PER_CLOCK = 4096  # dense fp16 / bf16 wgmma per SM

# (event, the phase that ends there), in program order; the first is the block's top.
_HEAD = [(0, "top"), (1, "wait Q"), (2, "issue S"), (3, "wait dO"), (4, "issue dP"),
         (5, "wait S"), (6, "exp"), (7, "issue dV"), (8, "wait dP"), (9, "dS + store")]  # fmt: skip
_TAIL = [(15, "wait dQ buffer"), (14, "dQ store + reduce")]
ORDERS = {
    "ws": [
        *_HEAD,
        (10, "issue dK"),
        (11, "hand-off"),
        (12, "issue dQ"),
        (13, "wait GEMMs"),
        *_TAIL,
    ],  # fmt: skip
    "ws80": [
        *_HEAD,
        (10, "issue dK"),
        (11, "hand-off"),
        (12, "issue dQ"),
        (13, "wait GEMMs"),
        *_TAIL,
    ],  # fmt: skip
    "ws80-dqfirst": [
        *_HEAD,
        (11, "hand-off"),
        (12, "issue dQ"),
        (10, "issue dK"),
        (13, "wait dV dQ"),
        *_TAIL,
        (16, "wait dK"),
    ],  # fmt: skip
}
PRODUCER = [(0, "top"), (1, "wait free stage"), (2, "issue loads")]
HANDOFF_EVENT = 11


def kind(mode: int) -> str:
    """The ORDERS key of a ws mode's kernel."""
    from ..flash_backward import DQ_FIRST_MODES, Q80_MODES

    if mode in Q80_MODES:
        return "ws80-dqfirst" if mode in DQ_FIRST_MODES else "ws80"
    return "ws"


def tensor_clocks(mode: int, d: int) -> float:
    """Tensor-core clocks of one query block of a CTA (both consumers) by FLOP count: Sᵀ,
    dPᵀ, dV, dK and dQ are 2 rows keys d FLOP each (dQ: one consumer's 64 x 64 tile at d =
    64, both consumers' 64-column halves at d = 128)."""
    from ..flash_backward import Q80_MODES

    rows = 80 if mode in Q80_MODES else 64
    return 5 * 2 * rows * 128 * d / FLOP_PER_CLOCK


def relative(raw: np.ndarray) -> np.ndarray:
    """(ctas, warps, blocks + 1, EV) uint32 stamps -> int64 clocks after each CTA's earliest
    start stamp (the 32-bit clock's wrap undone), -1 where not stamped."""
    raw = raw.astype(np.int64)
    out = np.full(raw.shape, -1, dtype=np.int64)
    for c in range(raw.shape[0]):
        starts = raw[c, :, BLOCKS, 0]
        starts = starts[starts != MISSING]
        if not starts.size:
            continue
        t0 = int(starts[0]) + int(min((starts - starts[0] + (1 << 31)) % (1 << 32)) - (1 << 31))
        have = raw[c] != MISSING
        out[c][have] = (raw[c][have] - t0) % (1 << 32)
    return out


def block_phases(t: np.ndarray, order) -> list[dict[str, float]]:
    """Per block of one warp's (blocks, EV) stamps: {phase: cycles}, each phase from the
    previous stamped event of `order`; "to next block" from the last stamp to the next
    block's top and "period" top to top, where the next block was stamped."""
    top = order[0][0]
    out = []
    for b in range(t.shape[0]):
        ph: dict[str, float] = {}
        prev = None
        for ev, name in order:
            if t[b, ev] < 0:
                continue
            if prev is not None:
                ph[name] = float(t[b, ev] - prev)
            prev = t[b, ev]
        if b + 1 < t.shape[0] and prev is not None and t[b + 1, top] >= 0 and t[b, top] >= 0:
            ph["to next block"] = float(t[b + 1, top] - prev)
            ph["period"] = float(t[b + 1, top] - t[b, top])
        out.append(ph)
    return out


ROLES = (("producer", (0,)), ("consumer 0", (4, 5, 6, 7)), ("consumer 1", (8, 9, 10, 11)))


def released(rel: np.ndarray) -> np.ndarray:
    """rel with each block's hand-off stamp (event 11) of every consumer warp set to the
    block's release, the latest of them. bar.sync compiles to BAR.SYNC.DEFER_BLOCKING: the
    clock read after it issues before the barrier resolves (the warp blocks at the next
    wgmma or memory access), so each warp's own stamp is its arrival, and only the last
    warp to arrive, which does not wait, stamps the release (the first timeline: consumer
    0 "passed" the barrier 600 cycles before consumer 1 reached it)."""
    out = rel.copy()
    cons = [w for _, ws in ROLES[1:] for w in ws]
    hand = out[..., HANDOFF_EVENT]  # a view: (ctas, warps, blocks + 1); -1: not stamped
    t = hand[:, cons]
    both = (t[:, :4] >= 0).any(axis=1) & (t[:, 4:] >= 0).any(axis=1)
    late = np.where(both, t.max(axis=1), -1)[:, None, :]
    hand[:, cons] = np.where((t >= 0) & (late >= 0), late, t)
    return out


def reduce(rel: np.ndarray, items: list[int], order, skip: int = 2) -> dict:
    """The table of one case: per CTA and role, the mean cycles of each phase over the
    blocks but the first and last `skip` (module docstring); rel as relative()'s, items the
    CTAs' block counts. A consumer whose blocks differ in whether they issue dQ (event 12,
    d = 64) has its two kinds of block apart. The hand-off phase ends at the barrier's
    release (released())."""
    rel = released(rel)
    ctas = []
    for c, n in enumerate(items):
        n = min(n, BLOCKS)
        if n <= 2 * skip + 1:
            continue
        steady = slice(skip, n - skip)
        roles: dict[str, dict[str, list[float]]] = {}
        for role, warps in ROLES:
            use = PRODUCER if role == "producer" else order
            for w in warps:
                t = rel[c, w, steady]
                split = role != "producer" and (t[:, 12] >= 0).any() and (t[:, 12] < 0).any()
                for b, ph in enumerate(block_phases(t, use)):
                    tag = (" (dQ blocks)" if t[b, 12] >= 0 else " (no dQ)") if split else ""
                    dst = roles.setdefault(role + tag, {})
                    for k, v in ph.items():
                        dst.setdefault(k, []).append(v)
        table = {r: {k: round(float(np.mean(v)), 1) for k, v in ph.items()}
                 for r, ph in roles.items()}  # fmt: skip
        ctas.append({"cta": c, "blocks": n, "roles": table,
                     "handoff": _handoff(rel[c, :, steady], order)})  # fmt: skip
    return {"ctas": ctas}


def _handoff(t: np.ndarray, order) -> dict:
    """Per consumer, the mean wait at the hand-off barrier (its last warp's arrival to the
    release, released()'s) and how often it arrived last; and consumer 1's lag behind
    consumer 0 at the block's top."""
    names = [ev for ev, _ in order]
    before = names[names.index(HANDOFF_EVENT) - 1]
    waits = {0: [], 1: []}
    last = {0: 0, 1: 0}
    lag = []
    for b in range(t.shape[1]):  # t: (warps, blocks, EV)
        arr, rel_t = {}, []
        for cw, warps in ((0, [4, 5, 6, 7]), (1, [8, 9, 10, 11])):
            a = t[warps, b, before]
            r = t[warps, b, HANDOFF_EVENT]
            if (a < 0).any() or (r < 0).any():
                break
            arr[cw] = a.max()
            rel_t.append(r.max())
        else:
            release = max(rel_t)
            for cw in (0, 1):
                waits[cw].append(float(release - arr[cw]))
            last[0 if arr[0] >= arr[1] else 1] += 1
            tops = [t[w, b, 0] for w in (4, 8)]
            if min(tops) >= 0:
                lag.append(float(tops[1] - tops[0]))
    return {
        "wait": {
            f"consumer {c}": round(float(np.mean(v)), 1) if v else None for c, v in waits.items()
        },  # fmt: skip
        "arrived last": {f"consumer {c}": n for c, n in last.items()},
        "consumer 1 top - consumer 0 top": round(float(np.mean(lag)), 1) if lag else None,
    }


def summary(case: dict) -> dict:
    """Each role's phases averaged over the case's CTAs, the period's tensor share."""
    roles: dict[str, dict[str, list[float]]] = {}
    for cta in case["ctas"]:
        for role, ph in cta["roles"].items():
            for k, v in ph.items():
                roles.setdefault(role, {}).setdefault(k, []).append(v)
    out = {r: {k: round(float(np.mean(v)), 1) for k, v in ph.items()} for r, ph in roles.items()}
    periods = [ph["period"] for r, ph in out.items() if r.startswith("consumer") and "period" in ph]
    share = None
    if periods and case.get("tensor_clocks"):
        share = round(case["tensor_clocks"] / float(np.mean(periods)), 3)
    return {"roles": out, "tensor_share": share}


def run_case(mode: int, d: int, n: int, dtype: str, causal: bool, seed: int = 7) -> dict:
    """One case on the GPU: the stamps of four CTAs, reduced; the shipped and instrumented
    kernels' median times."""
    import cupy as cp

    from .. import flash_backward as fb
    from .flash_bwd_vs_sdpa import _inputs
    from .flash_vs_sdpa import MODEL_DIM, TOKENS

    bh = (TOKENS // n) * (MODEL_DIM // d)
    q, k, v, o, do, lse = _inputs(cp, bh, n, d, dtype, causal, 1, seed)[0]
    endq = causal and mode in fb.Q80_MODES
    names, source = fb.kernel_names(fb._dtype_code(q), d, mode, endq)
    pre, main, post, mod = fb._compile(names, source, d, mode, ("FBW_TIMELINE",))
    grid = -(-n // fb.BLOCK_KEYS) * bh
    picks = np.array([0, 1, grid // 2, grid // 2 + 1], dtype=np.int32)

    def var(name: str):  # a plain global: no name expression to look up
        try:
            return mod.get_global(name)
        except (KeyError, TypeError):
            return mod.module.get_global_var(name)

    cp.cuda.runtime.memcpy(var("fbw_tl_pick").ptr, picks.ctypes.data, picks.nbytes,
                           cp.cuda.runtime.memcpyHostToDevice)  # fmt: skip
    buf = var("fbw_tl")

    def call():
        return fb.backward_mode(q, k, v, o, do, lse, causal=causal, mode=mode)

    def median_ms(reps: int = 10) -> float:
        call()
        times = []
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            call()
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b))
        return float(np.median(times))

    shipped_ms = median_ms()
    with mock.patch.object(fb, "_functions", lambda *a, **kw: (pre, main, post)):
        tl_ms = median_ms()
        cp.cuda.runtime.memset(buf.ptr, 0xFF, CTAS * WARPS * (BLOCKS + 1) * EV * 4)
        call()
        cp.cuda.Device().synchronize()
    raw = np.empty((CTAS, WARPS, BLOCKS + 1, EV), dtype=np.uint32)
    cp.cuda.runtime.memcpy(raw.ctypes.data, buf.ptr, raw.nbytes, cp.cuda.runtime.memcpyDeviceToHost)
    rel = relative(raw)
    items = [int(raw[c, 0, BLOCKS, 3]) if raw[c, 0, BLOCKS, 3] != MISSING else 0
             for c in range(CTAS)]  # fmt: skip
    order = ORDERS[kind(mode)]
    case = {"config": {"mode": mode, "d": d, "n": n, "dtype": dtype, "causal": causal,
                       "batch_heads": bh, "grid": grid, "picks": picks.tolist()},
            "shipped_ms": round(shipped_ms, 4), "timeline_ms": round(tl_ms, 4),
            "tensor_clocks": tensor_clocks(mode, d), "items": items,
            "smid": [int(raw[c, 0, BLOCKS, 1]) for c in range(CTAS)],
            "cta_clocks": [int(rel[c, 0, BLOCKS, 2]) for c in range(CTAS)],
            "cta_ns": [int((int(raw[c, 0, BLOCKS, 5]) - int(raw[c, 0, BLOCKS, 4])) % (1 << 32))
                       for c in range(CTAS)]}  # fmt: skip
    case.update(reduce(rel, items, order))
    case["summary"] = summary(case)
    # Raw stamps of the third picked CTA (mid-grid): the producer and each consumer's warp 0.
    keep = rel[2][[0, 4, 8], : min(items[2], BLOCKS)]
    case["raw"] = {"cta": 2, "warps": [0, 4, 8], "events": [ev for ev, _ in order],
                   "stamps": keep[:, :, : max(ev for ev, _ in order) + 1].tolist()}  # fmt: skip
    return case


def table(case: dict) -> str:
    """Markdown: one row per phase, one column per role (the summary's means)."""
    roles = case["summary"]["roles"]
    cols = list(roles)
    phases: list[str] = []
    for r in cols:
        phases += [p for p in roles[r] if p not in phases]
    lines = ["| phase | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for p in phases:
        lines.append(f"| {p} | " + " | ".join(str(roles[r].get(p, "")) for r in cols) + " |")
    return "\n".join(lines)


DEFAULT_CASES = [(25, 64, 8192, "bfloat16", False), (25, 64, 8192, "bfloat16", True),
                 (23, 128, 8192, "bfloat16", False), (23, 128, 8192, "bfloat16", True)]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case", nargs=5, action="append", metavar=("MODE", "D", "N", "DTYPE", "CAUSAL")
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    cases = DEFAULT_CASES
    if args.case:
        cases = [(int(m), int(d), int(n), dt, c == "1") for m, d, n, dt, c in args.case]
    data = {"command": "python -m compute.gpu.lab.backward_timeline " + " ".join(sys.argv[1:]),
            "clock": "%clock (SM cycles)", "cases": []}  # fmt: skip
    t0 = time.time()
    for mode, d, n, dtype, causal in cases:
        case = run_case(mode, d, n, dtype, causal)
        data["cases"].append(case)
        print(f"mode {mode} d={d} N={n} {dtype} {'causal' if causal else 'full'}: shipped "
              f"{case['shipped_ms']} ms, timeline {case['timeline_ms']} ms, tensor share "
              f"{case['summary']['tensor_share']}, handoff {case['ctas'][0]['handoff'] if case['ctas'] else None}")  # fmt: skip
        print(table(case), flush=True)
        if args.json:
            data["seconds"] = round(time.time() - t0, 1)
            args.json.write_text(json.dumps(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
