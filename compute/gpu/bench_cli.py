"""`flash-explorer bench`: measure the tiled kernel, the dense path and the tensor-core kernel
(and with --peers torch SDPA, and FA4 where it imports) in the forward, the backward or a
training step; print, write JSON.

Also runnable as `python -m compute.gpu.bench_cli ...` (the GPU server has no Qt).
With no usable GPU it prints status()'s reason on one stderr line and exits 1. A kernel
asked for by name (--kernel, --peers) that cannot take the problem is refused before
anything runs (exit 2); `--kernel all` leaves out, with a note, the paths that cannot. A
path that fails while it runs keeps its error row in the report, and its sentence goes to
stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .. import PASSES
from ..cli_fields import add_mask_flags, add_problem_flags, mask_fields, problem_fields
from . import bench
from .bench_rows import path_refusal
from .device import status
from .dtypes import BENCH_DTYPES
from .peers import FA4, PEERS, fa4_refusal
from .report import format_report

KERNEL_CHOICES = ("tiled", "dense", "flash", "all")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be 0 to 60 seconds, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flash-explorer bench",
        description="Time the tiled CUDA kernel, the dense S/P path and the tensor-core kernel "
        "on this GPU, in the forward, the backward or both (a training step).",
    )
    add_problem_flags(
        p, count=_positive, head=_positive, n=4096, d=64, block=64, dtypes=BENCH_DTYPES,
        dtype="float16", dtype_help="element type of Q, K, V and O",
    )  # fmt: skip
    # Masks beyond bottom-right causal run on the teaching kernel alone (the others refuse).
    add_mask_flags(p)
    p.add_argument("--batch-heads", type=_positive, default=32, help="batch*heads (default 32)")
    p.add_argument("--kernel", choices=KERNEL_CHOICES, default="all")
    p.add_argument(
        "--sweep-blocks", action="store_true",
        help="time the tiled kernel over a block_q x block_k grid (in the chosen pass)",
    )  # fmt: skip
    p.add_argument(
        "--peers", action="store_true",
        help="also time torch SDPA pinned to its FLASH and CUDNN backends (needs torch), and "
        "FlashAttention-4 where flash_attn.cute imports (a note on stderr where it does not)",
    )  # fmt: skip
    p.add_argument("--repeats", type=_positive, default=20, help="timed runs (default 20)")
    p.add_argument(
        "--preheat", type=_seconds, default=0.0, metavar="SECONDS",
        help="run the forward's paths untimed this long first, so they are timed at the clock "
        "the GPU holds under sustained load (the README's comparison uses 1; default 0)",
    )  # fmt: skip
    p.add_argument(
        "--settle", type=_seconds, default=0.0, metavar="SECONDS",
        help="run each forward path alone, untimed, this long before each of its timed slices, "
        "so none inherits the clock of the path before it (the README's comparison uses "
        "0.25; default 0)",
    )  # fmt: skip
    p.add_argument(
        "--pass", dest="pass_name", choices=PASSES, default="forward",
        help="time the forward (default), the backward alone (from what the path's forward "
        "saved), or a training step (forward + backward)",
    )  # fmt: skip
    p.add_argument(
        "--dram", action="store_true",
        help="instead of timing, profile each path once under Nsight Compute (ncu) and record "
        "its DRAM bytes read and written, L2 hit rate and bandwidth beside its declared ledger "
        "(the teaching kernels in both loop orders; with --peers also SDPA and FA4)",
    )  # fmt: skip
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="write the report")
    # One line on a bad flag, not the whole usage (8 lines for `--n 0`).
    p.error = lambda message: p.exit(2, f"{p.prog}: error: {message}\n")  # type: ignore[method-assign]
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse argv, run the benchmark, print a table, write JSON; 0 on success."""
    args = build_parser().parse_args(argv)
    try:
        masked = _config(args, ("tiled",))  # the mask, checked against N
        if args.dram and not masked.plain_mask:
            raise ValueError(
                f"--dram profiles unmasked or causal runs, not {masked.mask.label}; leave out "
                "--window, --packed or causal-top-left."
            )
        cfg = _config(args, _kernels(args))
    except ValueError as exc:  # a path that cannot take the problem, a bad combination
        print(f"flash-explorer bench: {exc}", file=sys.stderr)
        return 2
    st = status()
    if not st.usable:
        print(f"flash-explorer bench: {st.reason}", file=sys.stderr)
        return 1

    def progress(done: int, total: int, message: str) -> None:
        print(f"[{done}/{total}] {message}", file=sys.stderr, flush=True)

    if args.dram:
        return _dram(cfg, args)
    try:
        report = bench.run_bench(cfg, progress=progress)
    except (bench.GpuUnavailable, bench.BenchCancelled) as exc:
        print(f"flash-explorer bench: {exc}", file=sys.stderr)
        return 1
    return _finish(report, args.json)


def _dram(cfg, args) -> int:
    """`--dram`: profile the paths under ncu; 0 unless one of ours failed (a peer that is
    not available here keeps its error row and is noted on stderr)."""
    from . import dram

    if args.sweep_blocks:
        print("flash-explorer bench: --dram profiles the chosen tiles; leave out "
              "--sweep-blocks.", file=sys.stderr)  # fmt: skip
        return 2
    try:
        report = dram.dram_report(cfg, dram.default_paths(cfg.kernels, args.peers, cfg.pass_name))
    except (dram.DramUnavailable, ValueError) as exc:
        print(f"flash-explorer bench: {exc}", file=sys.stderr)
        return 1
    status = _finish(report, args.json)
    failed = False
    for e in report["dram"]["paths"]:
        if "error" in e:
            failed |= e["path"] in dram.OURS
            print(f"flash-explorer bench: {e['path']} not profiled: {e['error']}", file=sys.stderr)
    return 1 if failed else status


def _kernels(args) -> tuple[str, ...]:
    """The paths to time: those named (ValueError with the sentence of one that cannot take
    the problem), or with `all` every one of ours that can (a note for each left out)."""
    d_v = args.d if args.dv is None else args.dv
    named = KERNEL_CHOICES[:-1] if args.kernel == "all" else (args.kernel,)
    masked = _config(args, ("tiled",))  # the mask, checked against N (ValueError)
    kernels = []
    for kernel in named:
        reason = path_refusal(kernel, args.dtype, args.d, d_v) or masked.mask_refusal(kernel)
        if reason is None:
            kernels.append(kernel)
        elif args.kernel == "all":
            print(f"flash-explorer bench: leaving out {kernel}: {reason}", file=sys.stderr)
        else:
            raise ValueError(f"{reason}.")
    for peer in (*PEERS, FA4) if args.peers else ():
        reason = path_refusal(peer, args.dtype, args.d, d_v) or masked.mask_refusal(peer)
        if reason is not None:
            raise ValueError(f"{reason} (--peers).")
        missing = fa4_refusal() if peer == FA4 else None
        if missing is not None:  # optional: the SDPA peers still run
            print(f"flash-explorer bench: leaving out {FA4}: {missing}", file=sys.stderr)
            continue
        kernels.append(peer)
    if not kernels:
        raise ValueError(f"no path takes this problem in {args.dtype}: choose another --dtype.")
    return tuple(kernels)


def _config(args, kernels):
    """The BenchConfig the parsed arguments describe (ValueError: one sentence)."""
    return bench.BenchConfig(
        **{**problem_fields(args), **mask_fields(args)},
        d_v=args.dv,
        batch_heads=args.batch_heads,
        kernels=kernels,
        sweep_blocks=args.sweep_blocks,
        repeats=max(args.repeats, 20),
        pass_name=args.pass_name,
        preheat_s=args.preheat,
        settle_s=args.settle,
    )


def _finish(report: dict, json_path: Path | None) -> int:
    """Print the report, write its JSON; 0 unless a path of ours failed."""
    print(format_report(report))
    if json_path is not None:
        try:
            tmp = json_path.with_suffix(json_path.suffix + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(report, indent=1))
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename: a crash keeps one whole file
            tmp.replace(json_path)  # atomic: a reader never sees half a report
        except OSError as exc:
            print(f"flash-explorer bench: could not write {json_path}: {exc}", file=sys.stderr)
            return 1
    # Every path in the report was asked for: one that failed fails the command.
    failed = [r for r in report["results"] if "error" in r]
    for r in failed:
        print(f"flash-explorer bench: {r['kernel']} failed: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
