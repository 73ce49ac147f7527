"""Launch our forward kernel and SDPA's cuDNN kernel a few times each, for Nsight Compute.

Run on the GPU machine under ncu, one path per run, e.g. (FLASH_NOTES.md v9):

    ncu --kernel-name regex:flash_fwd_ws --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section InstructionStats \\
        python -m compute.gpu.lab.profile_pair --path ours --spec ws:128:2:176:2:pingpong
    ncu --kernel-name regex:cudnn --launch-skip 2 --launch-count 1 ... --path cudnn

Both paths get the same inputs and shapes as flash_vs_sdpa (B·N = 16k, H·d = 2048), so the
profiles compare instruction mixes, shared-memory and L2 traffic of one case side by side.
"""

from __future__ import annotations

import argparse
import sys

from .timing_probe import paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=["ours", "cudnn", "flash"], required=True)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--causal", type=int, choices=[0, 1], default=0)
    ap.add_argument("--spec", default=None, help="our kernel's variant (default: the default)")
    ap.add_argument("--launches", type=int, default=4)
    args = ap.parse_args(argv)
    import cupy as cp

    peer = {"cudnn": "sdpa-cudnn", "flash": "sdpa-flash"}.get(args.path)
    specs = [args.spec] if args.spec else []
    fns, _, _ = paths(args.n, args.d, args.dtype, specs, (peer,) if peer else (), bool(args.causal))
    # ours: the spec's path (added after the default), else the default's
    fn, sets = fns[peer] if peer else list(fns.values())[-1]
    for i in range(args.launches):
        fn(*sets[i % len(sets)])
    cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
