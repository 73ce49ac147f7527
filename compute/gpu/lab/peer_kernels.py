"""Which kernels the SDPA peers launch, with their CUDA times (torch.profiler).

Run on the GPU machine (needs torch):

    python -m compute.gpu.lab.peer_kernels [--n 4096 8192] [--d 64 128] [--dtype float16]

The names of cuDNN's generated kernels carry their tile shapes, which is how FLASH_NOTES.md
compares our kernel's shape with the peer's. Same setup as flash_vs_sdpa: B·N = 16k,
H·d = 2048, non-causal and causal.
"""

from __future__ import annotations

import argparse
import sys

from .flash_vs_sdpa import MODEL_DIM, TOKENS


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[4096, 8192])
    ap.add_argument("--d", type=int, nargs="*", default=[64, 128])
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    for d in args.d:
        for n in args.n:
            b, h = TOKENS // n, MODEL_DIM // d
            q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
            for causal in (False, True):
                for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
                    with sdpa_kernel([backend]):
                        for _ in range(3):
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.cuda.synchronize()
                        with profile(activities=[ProfilerActivity.CUDA]) as prof:
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            torch.cuda.synchronize()
                    for evt in prof.key_averages():
                        if evt.device_type.name == "CUDA" or "CUDA" in str(evt.device_type):
                            us = getattr(evt, "device_time_total", 0) or evt.cuda_time_total
                            print(f"d={d} N={n} causal={causal} {backend.name}: {us:8.1f} us  "
                                  f"{evt.key}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
