"""Launch one backward path a few times on backward_vs_fa4's inputs, for Nsight Compute.

Run on the GPU machine under ncu, one path per run (BACKWARD_NOTES.md, the last "What next"):

    ncu --kernel-name regex:flash_bwd_ws --launch-skip 1 --launch-count 1 --set full \\
        python -m compute.gpu.lab.backward_profile --path ours --d 64 --n 16384
    ncu --kernel-name regex:BackwardSm90 --launch-skip 1 --launch-count 1 --set full \\
        python -m compute.gpu.lab.backward_profile --path fa4 --d 64 --n 16384

Paths: "ours" (``flash_backward.backward_mode`` at --mode, default the shipped default),
"cudnn" (SDPA's cuDNN backward) and "fa4" (FA4's, where flash_attn.cute imports), each the
backward alone on a graph built once, on the same (1, B*H, N, d) inputs as backward_vs_fa4
(B*N = 16384 tokens, H*d = 2048), so the profiles compare one case side by side. Each path
runs --launches times, the first a warm-up (compiles, plans).
"""

from __future__ import annotations

import argparse
import sys

from ..dtypes import FLASH_DTYPES


def _runner(path: str, n: int, d: int, dtype: str, causal: bool, mode: int | None):
    """A zero-argument callable that runs the path's backward once."""
    import cupy as cp

    from .. import peers
    from ..flash_backward import backward_mode
    from .flash_bwd_vs_sdpa import _inputs
    from .flash_vs_sdpa import MODEL_DIM, TOKENS

    bh = (TOKENS // n) * (MODEL_DIM // d)
    ((q, k, v, o, do, lse),) = _inputs(cp, bh, n, d, dtype, causal, 1, n + d)
    if path == "ours":
        return lambda: backward_mode(q, k, v, o, do, lse, causal=causal, mode=mode)
    name = "sdpa-cudnn" if path == "cudnn" else peers.FA4
    flat = [x.reshape(bh, n, d) for x in (q, k, v, do)]
    return peers.peer_backward(name).prepare(*flat, causal)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=["ours", "cudnn", "fa4"], required=True)
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--d", type=int, choices=[64, 128], default=64)
    ap.add_argument("--dtype", choices=FLASH_DTYPES, default="bfloat16")
    ap.add_argument("--causal", type=int, choices=[0, 1], default=0)
    ap.add_argument("--mode", type=int, default=None, help="our backward's mode (default: d's)")
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        import cupy as cp

        run = _runner(args.path, args.n, args.d, args.dtype, bool(args.causal), args.mode)
        for _ in range(args.launches):
            run()
        cp.cuda.Device().synchronize()
    except (ImportError, RuntimeError, ValueError) as exc:
        print(f"backward_profile: {exc}", file=sys.stderr)
        return 1
    print(f"backward_profile: {args.path} ran {args.launches} times", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
