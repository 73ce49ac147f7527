"""Launch every production kernel once on odd shapes, for compute-sanitizer to watch.

Run on the GPU machine after editing any file under kernels/ (lab/gpu_run.sh sanitize does):

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 -m compute.gpu.lab.sanitize_cases

FLASH_SANITIZE_CONFIGS (kernel specs, space-separated, e.g. "ws:128:2:176:2") adds variants
beside each head dim's warp-specialised (the sm_90 default), wgmma and mma.sync kernels;
with FLASH_SANITIZE_ONLY_EXTRA=1 only those variants run (no defaults, tiled or backward).
CuPy's memory pool is switched off first, so each array is its own cudaMalloc and an
out-of-bounds access lands outside an allocation, where memcheck sees it. Shapes: tails in
both N_q and N_k, N_q != N_k, causal rows that see no key, a single row, tiles larger
than N. Prints one line per launch; the outputs are checked against float64 elsewhere.
Then the tensor-core backward (flash_backward.py) on the same shapes (sm_90 only).
"""

from __future__ import annotations

import os

import numpy as np

# (heads, N_q, N_k); the last has more work items than SMs for the persistent ws variants
CASES = [(1, 77, 300), (2, 190, 60), (1, 1, 513), (3, 200, 200), (150, 130, 260)]


def main() -> int:
    import cupy

    from .. import flash
    from ..dtypes import device_array
    from ..flash import MMA_CONFIGS, WGMMA_CONFIGS, WS_CONFIGS, Config, flash_attention
    from ..tiled import tiled_attention_gpu

    extra = [Config.parse(s) for s in os.environ.get("FLASH_SANITIZE_CONFIGS", "").split()]
    only_extra = os.environ.get("FLASH_SANITIZE_ONLY_EXTRA") == "1"

    cupy.cuda.set_allocator(None)  # plain cudaMalloc per array: memcheck sees every bound
    rng = np.random.default_rng(0)
    for h, n_q, n_k in CASES:
        for d in (64, 128):
            for dtype in ("float16", "bfloat16"):
                q, k, v = (
                    cupy.asarray(device_array(rng.standard_normal((1, h, n, d), np.float32), dtype))
                    for n in (n_q, n_k, n_k)
                )
                mine = [c for c in extra if c.d == d]
                ours = () if only_extra else (WS_CONFIGS[d], WGMMA_CONFIGS[d], MMA_CONFIGS[d])
                if d == 128 and not only_extra:  # the defaults from N = 4096 on (v8-v13)
                    ours += (flash.WS_WIDE_D128, flash.WS_MID_D128, flash.WS_CAUSAL_D128,
                             flash.WS_CAUSAL_MID_D128)  # fmt: skip
                if d == 64 and not only_extra:  # causal at N = 4096-8191 (v13)
                    ours += (flash.WS_CAUSAL_D64,)
                for cfg in (*ours, *mine):
                    for causal in (False, True):
                        flash_attention(q, k, v, causal=causal, return_lse=True, config=cfg)
                        cupy.cuda.Device().synchronize()
                        print(f"flash {cfg.spec()} {dtype} h={h} {n_q}x{n_k} causal={causal}")
        if only_extra:
            continue
        for order in ("q-outer", "kv-outer"):
            q, k, v = (
                cupy.asarray(rng.standard_normal((h, n, w)).astype(np.float32))
                for n, w in ((n_q, 40), (n_k, 40), (n_k, 24))
            )
            for bq, bk in ((16, 7), (128, 96)):
                tiled_attention_gpu(
                    q, k, v, block_q=bq, block_k=bk, order=order, causal=True, save_lse=True
                )
                cupy.cuda.Device().synchronize()
                print(f"tiled {order} {bq}x{bk} h={h} {n_q}x{n_k}")
    if not only_extra:
        backward_cases(rng)
    return 0


def backward_cases(
    rng, cases=CASES, dtypes=("float16", "bfloat16"), mode=None, dims=(64, 128),
    masks=(False, True),
) -> None:  # fmt: skip
    """flash_attention_backward (sm_90 only) on the odd shapes, both d, masks (devrun.sh bwd
    runs it alone under memcheck, and under racecheck on the first shape in float16, since
    racecheck took over 150 s for the first two shapes); `mode` picks flash_bwd_main's MODE,
    `masks` the causal flags (mode 13 is d = 128 only)."""
    import cupy

    from ..dtypes import device_array
    from ..flash import _is_hopper, flash_attention
    from ..flash_backward import DEFAULT_MODE, backward_mode

    mode = DEFAULT_MODE if mode is None else mode

    if not _is_hopper():
        print("flash backward: skipped (needs sm_90)")
        return
    for h, n_q, n_k in cases:
        for d in dims:
            for dtype in dtypes:
                q, k, v, do = (
                    cupy.asarray(device_array(rng.standard_normal((1, h, n, d), np.float32), dtype))
                    for n in (n_q, n_k, n_k, n_q)
                )
                for causal in masks:
                    o, lse = flash_attention(q, k, v, causal=causal, return_lse=True)
                    backward_mode(q, k, v, o, do, lse, causal=causal, mode=mode)
                    cupy.cuda.Device().synchronize()
                    print(f"flash backward m{mode} {dtype} d={d} h={h} {n_q}x{n_k} causal={causal}")


if __name__ == "__main__":
    raise SystemExit(main())
