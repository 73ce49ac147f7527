"""`flash-explorer decode`: the ledger and roofline of one decode step, every schedule.

N_q new queries against a KV cache of N_k keys, H_q query heads over H_kv K/V heads, the
split-KV schedule at S splits (default: enough for H_kv · S to fill twice the H200's SMs).
Prints bytes per tensor and direction for dense, one-pass and split-KV, bytes per generated
token, thread blocks, arithmetic intensity and the roofline bound on the H200 (or one JSON
object: compute.decode.decode_summary, closed-form ledgers so any cache length answers at
once). Imports neither Qt nor CuPy.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import replace

from compute import DTYPES
from compute.decode import (
    MAX_NEW_QUERIES,
    SCHEDULES,
    DecodeProblem,
    decode_element_bytes,
    decode_summary,
    filling_splits,
)
from desktop.cli.args import HEAD_MAX, POSITIONS_MAX, OneLineParser, fail, ranged_int

ROWS = (
    ("Q", "read"),
    ("K", "read"),
    ("V", "read"),
    ("S", "write"),
    ("S", "read"),
    ("P", "write"),
    ("P", "read"),
    ("O_s", "write"),
    ("O_s", "read"),
    ("L_s", "write"),
    ("L_s", "read"),
    ("O", "write"),
)


def add_problem_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of one decode step (also `flash-explorer export --decode`'s)."""
    p.add_argument("--n-q", type=ranged_int(1, MAX_NEW_QUERIES), default=1,
                   help=f"new queries in the step, 1 to {MAX_NEW_QUERIES} (default 1)")  # fmt: skip
    p.add_argument("--n-k", type=ranged_int(1, POSITIONS_MAX), default=4096,
                   help="keys in the cache, the new tokens' own included (default 4096)")  # fmt: skip
    p.add_argument("--d", type=ranged_int(1, HEAD_MAX), default=128, help="head size (default 128)")
    p.add_argument("--d-v", type=ranged_int(1, HEAD_MAX), default=None,
                   help="value head size (default: d)")  # fmt: skip
    p.add_argument("--h-q", type=ranged_int(1, HEAD_MAX), default=32,
                   help="query heads (default 32)")  # fmt: skip
    p.add_argument("--h-kv", type=ranged_int(1, HEAD_MAX), default=8,
                   help="K/V heads; H_q must be a multiple (default 8)")  # fmt: skip
    p.add_argument("--block-k", type=ranged_int(1, POSITIONS_MAX), default=64,
                   help="keys per cache tile B_c (default 64)")  # fmt: skip
    p.add_argument("--splits", type=ranged_int(1, POSITIONS_MAX), default=None,
                   help="split-KV splits per K/V head (default: H_kv x S >= 2 x 132 SMs)")  # fmt: skip
    p.add_argument(
        "--dtype", choices=DTYPES, default="bfloat16", help="element type (default bfloat16)"
    )


def parser() -> OneLineParser:
    p = OneLineParser(
        prog="flash-explorer decode",
        description="Print the HBM bytes and roofline of one decode step for every schedule.",
    )
    add_problem_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    return p


def problem_from_args(args) -> DecodeProblem:
    """The decode problem the flags describe; ValueError with one sentence if it is not one."""
    shape = DecodeProblem(
        args.n_q, args.n_k, args.d, args.d if args.d_v is None else args.d_v,
        args.h_q, args.h_kv, block_k=args.block_k, dtype=args.dtype,
    )  # fmt: skip
    splits = filling_splits(shape.h_kv, shape.t_c) if args.splits is None else args.splits
    return replace(shape, splits=splits)


def format_summary(summary: dict) -> str:
    """decode_summary's data as a plain-text table, bytes per tensor then the roofline."""
    c, m, sched = summary["config"], summary["machine"], summary["schedules"]
    dtype = c["dtype"]
    w = max(14, 2 + max(len(f"{s['total_bytes']:,}") for s in sched.values()))
    lines = [
        f"Decode step  N_q={c['n_q']} N_k={c['n_k']} d={c['d']} d_v={c['d_v']} "
        f"H_q={c['h_q']} H_kv={c['h_kv']} (G={c['group']}) B_c={c['block_k']} T_c={c['t_c']} "
        f"splits={c['splits']} (used {c['splits_used']}) dtype={dtype}",
        "",
        f"{'bytes':<12}" + "".join(f"{s:>{w}}" for s in SCHEDULES),
    ]
    for tensor, direction in ROWS:
        per = [sched[s]["by_tensor"][tensor][direction] for s in SCHEDULES]
        if any(per):
            size = decode_element_bytes(tensor, dtype)
            lines.append(
                f"{tensor + ' ' + direction:<12}" + "".join(f"{n * size:>{w},}" for n in per)
            )

    def row(label: str, values: list[str]) -> str:
        return f"{label:<12}" + "".join(f"{v:>{w}}" for v in values)

    roof = [sched[s]["roofline"] for s in SCHEDULES]
    lines += [
        row("total", [f"{sched[s]['total_bytes']:,}" for s in SCHEDULES]),
        row("per token", [f"{sched[s]['bytes_per_token']:,.0f}" for s in SCHEDULES]),
        row("blocks", [f"{sched[s]['blocks']:,}" for s in SCHEDULES]),
        row("FLOP/byte", [f"{r['intensity']:.2f}" for r in roof]),
        row("bound (us)", [f"{r['time_s'] * 1e6:.2f}" for r in roof]),
        row("bound by", [r["bound"] for r in roof]),
        "",
        f"Roofline: {m['bandwidth'] / 1e12:.1f} TB/s (measured H200 copy), "
        f"{m['peak'] / 1e12:.0f} TFLOP/s (bf16 matmul); ridge at "
        f"{roof[0]['ridge']:.0f} FLOP/byte. The bound ignores parallelism: one-pass runs "
        f"{sched['one-pass']['blocks']:,} blocks on {m['sms']} SMs, split-KV "
        f"{sched['split-kv']['blocks']:,}.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    p = parser()
    args = p.parse_args(list(argv))
    try:
        summary = decode_summary(problem_from_args(args), closed_form=True)
    except ValueError as exc:
        return fail(str(exc), p.prog)
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0
