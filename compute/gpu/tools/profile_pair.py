"""Launch our forward kernel and SDPA's cuDNN kernel a few times each, for Nsight Compute.

Run on the GPU machine under ncu, one path per run, e.g. (FLASH_NOTES.md v9):

    ncu --kernel-name regex:flash_fwd_ws --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section InstructionStats \\
        python -m compute.gpu.tools.profile_pair --path ours --spec ws:128:2:176:2:pingpong
    ncu --kernel-name regex:cudnn --launch-skip 2 --launch-count 1 ... --path cudnn

Both paths get the same inputs and shapes as flash_vs_sdpa (B·N = 16k, H·d = 2048), so the
profiles compare instruction mixes, shared-memory and L2 traffic of one case side by side.
"""

from __future__ import annotations

import argparse
import sys

from .flash_vs_sdpa import MODEL_DIM, TOKENS


def main(argv: list[str] | None = None) -> int:
    import cupy as cp

    from .. import flash, peers
    from ..dtypes import device_array

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=["ours", "cudnn", "flash"], required=True)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--causal", type=int, choices=[0, 1], default=0)
    ap.add_argument("--spec", default=None, help="our kernel's variant (default: the default)")
    ap.add_argument("--launches", type=int, default=4)
    args = ap.parse_args(argv)
    b, h = TOKENS // args.n, MODEL_DIM // args.d
    rng = cp.random.default_rng(0)
    shape = (b, h, args.n, args.d)
    q, k, v = (device_array(rng.standard_normal(shape, dtype=cp.float32), args.dtype)
               for _ in range(3))  # fmt: skip
    causal = bool(args.causal)
    if args.path == "ours":
        cfg = flash.Config.parse(args.spec) if args.spec else None
        for _ in range(args.launches):
            flash.flash_attention(q, k, v, causal=causal, config=cfg)
    else:
        fn = peers.sdpa("sdpa-cudnn" if args.path == "cudnn" else "sdpa-flash")
        flat = [x.reshape(b * h, args.n, args.d) for x in (q, k, v)]
        for _ in range(args.launches):
            fn(*flat, causal=causal)
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
