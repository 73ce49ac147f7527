"""The ws backward with a sliding window (band) against the same kernel causal, one process.

Run on the GPU machine:

    python -m compute.gpu.lab.backward_band [--n 8192 16384] [--window 256 1024] [--json F]
    compute-sanitizer --tool racecheck python -m compute.gpu.lab.backward_band --sanitize

(--sanitize: the band on odd shapes, both d, default and deterministic, untimed.)

Inputs as backward_vs_fa4's (B*N = 16384 tokens, H*d = 2048, rotated past L2); O and LSE come
from the causal forward (this times the kernel; the band's gradients are checked against
float64 in tests/compute/gpu/test_flash_backward.py). Paths: "causal" and, per --window W,
"band-W" = ``flash_attention_backward(..., band=(-W, 0))``, i.e. FlashAttention's
window_size (W, 0): row r sees keys r - W .. r. TFLOP/s counts each path's visible (query,
key) pairs: 2.5 x 4 * pairs * d * B*H. The band's tiles are a fraction of causal's, so the
ratio that matters is ms(band) / ms(causal) against pairs(band) / pairs(causal).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..dtypes import FLASH_DTYPES


def visible_pairs(n: int, window: int | None) -> int:
    """(query, key) pairs a square N x N causal mask (window None) or band (-window, 0) keeps."""
    if window is None:
        return n * (n + 1) // 2
    w = min(window, n - 1)
    return (w + 1) * n - w * (w + 1) // 2


# (heads, N_q, N_k, band): a band reaching past the keys' end, one whose rows start past the
# first key block, one narrower than a warpgroup's 64 keys.
SANITIZE_CASES = [(1, 77, 300, (-40, 10)), (2, 190, 60, (-100, -20)), (1, 300, 300, (-5, 5))]


def sanitize_cases() -> None:
    """The band backward on SANITIZE_CASES (fp16, d 64 and 128, default and deterministic),
    for compute-sanitizer; O and LSE from the unmasked forward (memory safety, not values)."""
    import cupy as cp
    import numpy as np

    from ..dtypes import device_array
    from ..flash import flash_attention
    from ..flash_backward import flash_attention_backward

    rng = np.random.default_rng(5)
    for h, n_q, n_k, band in SANITIZE_CASES:
        for d in (64, 128):
            q, k, v, do = (
                cp.asarray(device_array(rng.standard_normal((1, h, n, d), np.float32), "float16"))
                for n in (n_q, n_k, n_k, n_q)
            )
            o, lse = flash_attention(q, k, v, return_lse=True)
            for det in (False, True):
                flash_attention_backward(q, k, v, o, do, lse, band=band, deterministic=det)
                cp.cuda.Device().synchronize()
                print(f"band backward d={d} h={h} {n_q}x{n_k} band={band} det={det}")


def run_case(n: int, d: int, dtype: str, windows, reps: int, preheat_s: float) -> dict:
    """One (N, d, dtype): per path median ms and TFLOP/s on its visible pairs."""
    import cupy as cp

    from ..device import status
    from ..flash_backward import flash_attention_backward
    from ..timing import rotation_count, time_interleaved
    from .flash_bwd_vs_sdpa import _inputs
    from .flash_vs_sdpa import MODEL_DIM, TOKENS

    bh = (TOKENS // n) * (MODEL_DIM // d)
    l2 = status().l2_bytes
    sets = _inputs(cp, bh, n, d, dtype, True, rotation_count(5 * bh * n * d * 2, l2), n + d)

    def path(band):
        def run(q, k, v, o, do, lse):
            return flash_attention_backward(q, k, v, o, do, lse, causal=band is None, band=band)

        return run

    paths = {"causal": (path(None), sets)}
    paths.update({f"band-{w}": (path((-w, 0)), sets) for w in windows})
    timings = time_interleaved(paths, warmup=3, repeats=reps, l2_bytes=l2, preheat_s=preheat_s,
                               settle_s=0.1)  # fmt: skip
    results = []
    for name in paths:
        w = None if name == "causal" else int(name.split("-")[1])
        pairs = visible_pairs(n, w)
        ms = timings[name].median_ms
        results.append({"kernel": name, "median_ms": ms, "pairs_fraction":
                        pairs / visible_pairs(n, None),
                        "tflops": 2.5 * 4 * pairs * d * bh / (ms * 1e-3) / 1e12})  # fmt: skip
    del sets, paths
    cp.get_default_memory_pool().free_all_blocks()
    return {"config": {"n": n, "d": d, "dtype": dtype, "batch_heads": bh}, "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[8192, 16384])
    ap.add_argument("--d", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--dtype", nargs="*", choices=FLASH_DTYPES, default=["bfloat16"])
    ap.add_argument("--window", type=int, nargs="*", default=[256, 1024])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--preheat", type=float, default=0.5)
    ap.add_argument("--json", type=Path, help="write the reports here")
    ap.add_argument("--sanitize", action="store_true", help="run SANITIZE_CASES untimed, exit")
    args = ap.parse_args(argv)
    if args.sanitize:
        sanitize_cases()
        return 0
    data = {"command": "python -m compute.gpu.lab.backward_band " + " ".join(sys.argv[1:]),
            "reports": []}  # fmt: skip
    t0 = time.time()
    try:
        for dtype in args.dtype:
            for d in args.d:
                for n in args.n:
                    rep = run_case(n, d, dtype, args.window, args.reps, args.preheat)
                    data["reports"].append(rep)
                    by = {r["kernel"]: r for r in rep["results"]}
                    causal = by["causal"]["median_ms"]
                    print(f"{dtype} d={d} N={n} " + "  ".join(
                        f"{k}={r['median_ms']:.3f} ms ({r['tflops']:.0f} TFLOP/s, "
                        f"ms/causal {r['median_ms'] / causal:.2f}, pairs {r['pairs_fraction']:.2f})"
                        for k, r in by.items()), flush=True)  # fmt: skip
    except (ImportError, RuntimeError, ValueError) as exc:
        print(f"backward_band: {exc}", file=sys.stderr)
        return 1
    data["seconds"] = round(time.time() - t0, 1)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
