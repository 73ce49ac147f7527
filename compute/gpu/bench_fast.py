"""One-process benchmark: this project's FlashAttention kernel against its peers.

    python -m compute.gpu.bench_fast [--quick] [--json FILE] [--tune SPEC ...]

On the same inputs (created by torch, handed to CuPy through DLPack) it times
  * ``fast``   -- ``compute.gpu.fast.flash_attention`` (default kernel per d, or each --tune spec);
  * ``flash``  -- torch ``scaled_dot_product_attention`` pinned to SDPBackend.FLASH_ATTENTION;
  * ``cudnn``  -- the same pinned to SDPBackend.CUDNN_ATTENTION;
  * ``dense``  -- a dense CuPy path (S materialised in fp16, fp32 softmax, P V), fp16 only.
Setup as the FlashAttention papers: batch*N = 16384, heads*d = 2048. TFLOP/s counts the two
matmuls, 4*B*H*N^2*d, halved for causal. Timing: CUDA events, warm-up, median of the timed
runs. Error: ||out - ref|| / ||ref|| against float64 on a sample of heads.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

TOKENS = 16384
MODEL_DIM = 2048
ERR_BAR = {"float16": 2e-3, "bfloat16": 1e-2}


def parse_spec(spec: str):
    """'mma:D:WARPS:BN:MINB' or 'wgmma:D:WG:BN:MINB:EXTRA' -> Config."""
    from compute.gpu.fast import Config

    parts = spec.split(":")
    kernel, nums = parts[0], [int(x) for x in parts[1:]]
    return Config(kernel, *nums)


def _timer(torch, fn, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _dense_cupy(cp, q, k, v, causal, scale, heads_per_chunk):
    """Materialised attention in CuPy: fp16 Q K^T, fp32 softmax, fp16 P V (fp16 only)."""
    b, h, n, d = q.shape
    out = cp.empty_like(q)
    qf = q.reshape(b * h, n, d)
    kf = k.reshape(b * h, n, d)
    vf = v.reshape(b * h, n, d)
    of = out.reshape(b * h, n, d)
    mask = None
    if causal:
        mask = cp.tri(n, n, 0, dtype=cp.bool_)
    for i in range(0, b * h, heads_per_chunk):
        s = cp.matmul(qf[i : i + heads_per_chunk], kf[i : i + heads_per_chunk].transpose(0, 2, 1))
        s = s.astype(cp.float32) * scale
        if mask is not None:
            s = cp.where(mask, s, -cp.inf)
        s -= s.max(axis=-1, keepdims=True)
        cp.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        of[i : i + heads_per_chunk] = cp.matmul(s.astype(cp.float16), vf[i : i + heads_per_chunk])
    return out


def _rel_err(torch, out, q, k, v, causal, scale, heads):
    num = 0.0
    den = 0.0
    for bi, hi in heads:
        qd = q[bi, hi].double()
        kd = k[bi, hi].double()
        vd = v[bi, hi].double()
        s = (qd @ kd.T) * scale
        if causal:
            n_q, n_k = s.shape
            r = torch.arange(n_q, device=s.device)[:, None]
            c = torch.arange(n_k, device=s.device)[None, :]
            s = s.masked_fill(c > r + (n_k - n_q), float("-inf"))
        ref = torch.softmax(s, dim=-1) @ vd
        o = out[bi, hi].double()
        if not torch.isfinite(o).all():
            return float("nan")
        num += float(((o - ref) ** 2).sum())
        den += float((ref**2).sum())
        del s, ref
    return math.sqrt(num / den)


def _bench_case(args, env, inputs, dtype, d, n, b, h, causal, tune) -> dict:
    """Time and check every implementation on one (dtype, d, N, causal) case."""
    cp, torch, F, SDPBackend, sdpa_kernel, fast = env
    q, k, v, qc, kc, vc = inputs
    tdt = q.dtype

    def to_torch(oc):
        if dtype == "float16":
            return torch.from_dlpack(oc)
        return torch.from_dlpack(oc.view(cp.int16)).view(tdt)

    heads = [(0, 0), (b - 1, h - 1)]
    scale = 1.0 / math.sqrt(d)
    flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
    rec = {"dtype": dtype, "d": d, "N": n, "B": b, "H": h, "causal": causal, "impl": {}}
    impls = []
    for cfg in tune or [None]:
        if cfg is not None and cfg.d != d:
            continue
        label = "fast" if cfg is None else "fast[" + ":".join(map(str, _spec(cfg))) + "]"
        impls.append(
            (
                label,
                lambda cfg=cfg: to_torch(
                    fast.flash_attention(qc, kc, vc, causal=causal, config=cfg)
                ),
            )
        )

    def f_flash():
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def f_cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    impls.append(("flash", f_flash))
    impls.append(("cudnn", f_cudnn))
    if dtype == "float16" and not args.no_dense and n <= args.dense_max_n:
        chunk = max(1, min(b * h, 2**31 // (n * n)))
        impls.append(("dense", lambda: to_torch(_dense_cupy(cp, qc, kc, vc, causal, scale, chunk))))
    for label, fn in impls:
        entry = {}
        try:
            out = fn()
            torch.cuda.synchronize()
            entry["err"] = _rel_err(torch, out, q, k, v, causal, scale, heads)
            del out
            dense = label == "dense"
            ms = _timer(torch, fn, 1 if dense else args.warmup, 3 if dense else args.reps)
            entry["ms"] = ms
            entry["tflops"] = flops / (ms * 1e-3) / 1e12
        except Exception as exc:  # noqa: BLE001 - a peer may be unavailable
            entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rec["impl"][label] = entry
    fast_tf = {lab: e.get("tflops") for lab, e in rec["impl"].items() if lab.startswith("fast")}
    for peer in ("flash", "cudnn", "dense"):
        pt = rec["impl"].get(peer, {}).get("tflops")
        if pt:
            for lab, tf in fast_tf.items():
                if tf:
                    rec["impl"][lab][f"x_{peer}"] = tf / pt
    return rec


def run(args) -> dict:
    import cupy as cp
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from compute.gpu import fast

    env = (cp, torch, F, SDPBackend, sdpa_kernel, fast)
    dev = torch.cuda.get_device_properties(0)
    ns = [int(x) for x in args.n] if args.n else [1024, 2048, 4096, 8192, 16384]
    ds = [int(x) for x in args.d] if args.d else [64, 128]
    dtypes = args.dtype or ["float16", "bfloat16"]
    causals = [False, True] if args.causal is None else [args.causal == "1"]
    if args.quick and not args.n:
        ns = [1024, 4096, 16384]
    tune = [parse_spec(s) for s in args.tune] if args.tune else []
    records = []
    torch.manual_seed(0)
    t_start = time.time()
    for dtype in dtypes:
        tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
        for d in ds:
            for n in ns:
                b = TOKENS // n
                h = MODEL_DIM // d
                q, k, v = (torch.randn(b, h, n, d, dtype=tdt, device="cuda") for _ in range(3))
                if dtype == "float16":
                    qc, kc, vc = (cp.from_dlpack(x) for x in (q, k, v))
                else:
                    qc, kc, vc = (
                        cp.from_dlpack(x.view(torch.int16)).view(cp.uint16) for x in (q, k, v)
                    )
                inputs = (q, k, v, qc, kc, vc)
                for causal in causals:
                    rec = _bench_case(args, env, inputs, dtype, d, n, b, h, causal, tune)
                    records.append(rec)
                    _print_row(rec)
                del q, k, v, qc, kc, vc, inputs
                torch.cuda.empty_cache()
                cp.get_default_memory_pool().free_all_blocks()
    return {
        "device": dev.name,
        "sm_count": dev.multi_processor_count,
        "torch": torch.__version__,
        "cupy": cp.__version__,
        "command": "python -m compute.gpu.bench_fast " + " ".join(sys.argv[1:]),
        "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - t_start, 1),
        "flops_formula": "4*B*H*N^2*d (x0.5 causal)",
        "timing": f"CUDA events, {args.warmup} warm-up, median of {args.reps} (dense: 1, 3)",
        "default_configs": {str(dd): _spec(fast.default_config(dd)) for dd in (64, 128)},
        "records": records,
    }


def _spec(cfg):
    out = [cfg.kernel, cfg.d, cfg.warps, cfg.block_n, cfg.min_blocks]
    if cfg.kernel == "wgmma":
        out.append(cfg.extra)
    return out


def _fmt(e):
    if "tflops" in e:
        bar = e.get("err", float("nan"))
        return f"{e['tflops']:7.1f} ({bar:.1e})"
    if "error" in e:
        return "   fail        "
    return "   n/a         "


def _print_row(rec):
    head = (
        f"{rec['dtype']:8s} d={rec['d']:3d} N={rec['N']:5d} "
        f"{'causal' if rec['causal'] else 'full  '}"
    )
    parts = []
    for lab, e in rec["impl"].items():
        part = f"{lab}={_fmt(e)}"
        if lab.startswith("fast") and "x_flash" in e:
            part += f" x{e['x_flash']:.2f}F"
            if "x_cudnn" in e:
                part += f" x{e['x_cudnn']:.2f}C"
        parts.append(part)
        if "error" in e:
            parts.append(f"[{lab}: {e['error'][:120]}]")
    print(head + "  " + "  ".join(parts), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N in {1024, 4096, 16384} only")
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--n", nargs="*", help="sequence lengths (default: 1024 .. 16384)")
    ap.add_argument("--d", nargs="*", help="head dims (default: 64 128)")
    ap.add_argument("--dtype", nargs="*", choices=["float16", "bfloat16"])
    ap.add_argument("--causal", choices=["0", "1"], help="only non-causal (0) or causal (1)")
    ap.add_argument("--tune", nargs="*", help="kernel variants, e.g. mma:128:8:64:1")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-dense", action="store_true")
    ap.add_argument("--dense-max-n", type=int, default=8192)
    args = ap.parse_args(argv)
    result = run(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    _summary(result)
    return 0


def _summary(result):
    print("\nsummary (fp16 bar: fast >= 1.0x flash for N >= 4096; errors vs float64)")
    worst = {}
    for rec in result["records"]:
        for lab, e in rec["impl"].items():
            err = e.get("err")
            if err is not None:
                key = (lab, rec["dtype"])
                worst[key] = max(worst.get(key, 0.0), err if err == err else float("inf"))
        if rec["dtype"] == "float16" and rec["N"] >= 4096:
            e = rec["impl"].get("fast", {})
            if "x_flash" in e:
                ok = "MET " if e["x_flash"] >= 1.0 else "MISS"
                print(
                    f"  {ok} d={rec['d']} N={rec['N']} causal={rec['causal']}: "
                    f"fast {e['tflops']:.1f} vs flash "
                    f"{rec['impl']['flash']['tflops']:.1f} TFLOP/s (x{e['x_flash']:.3f})"
                )
    for (lab, dt), err in sorted(worst.items()):
        flag = "ok" if err <= ERR_BAR[dt] else "OVER BAR"
        print(f"  worst err {lab:24s} {dt:8s} {err:.2e} {flag}")


if __name__ == "__main__":
    sys.exit(main())
