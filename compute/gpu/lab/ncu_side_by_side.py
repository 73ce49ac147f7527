"""Side-by-side tables from backward_ncu.sh's text exports (ours against FA4, one case).

Reads, for each tag (``{path}_d{d}_n{n}_c{causal}``) in a folder that backward_ncu.sh filled:
``TAG.raw.csv`` (``ncu --page raw --csv`` of the main kernel's ``--set full`` profile),
``TAG.sass.csv`` (``--page source --csv --print-source sass``) and ``TAG.all.csv`` (every
kernel of the process, ``gpu__time_duration`` only, for the pre / post kernels' share), and
prints Markdown tables: the main kernel's counters, its shared-memory wavefronts by opcode
and its largest stall lines, and the last backward's kernels. Counts "per block" are per 64
× 128 block of scores (B·H·N_q·N_k / 8192), a unit both kernels' tilings share.

    python -m compute.gpu.lab.ncu_side_by_side DIR [--tags ours_d64_n8192_c0 fa4_d64_n8192_c0]
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import Counter
from pathlib import Path

# unit prefixes ncu prints in raw pages without --print-units base
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_TIME = {"ns": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3, "s": 1.0}
_FREQ = {"hz": 1.0, "Khz": 1e3, "Mhz": 1e6, "Ghz": 1e9}
MAIN_KERNEL = re.compile(r"flash_bwd_ws|BackwardSm90")
STALLS = "smsp__pcsamp_warps_issue_stalled_"


def number(text: str) -> float | None:
    """ncu's printed number ("1,702,639.43", "0", "n/a") as a float, None if not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def scaled(value: float, unit: str) -> float:
    """A value in ncu's printed unit brought to bytes, seconds or plain counts."""
    if unit in _TIME:
        return value * _TIME[unit]
    if unit in _FREQ:
        return value * _FREQ[unit]
    for tail in ("byte/block", "byte/s", "byte"):
        if unit.endswith(tail) and unit[: -len(tail)] in _SCALE:
            return value * _SCALE[unit[: -len(tail)]]
    return value


def read_raw(path: Path) -> list[dict[str, object]]:
    """Rows of a raw-page CSV (names, units, then one row per kernel) as {metric: value},
    numbers scaled to base units, text kept as text."""
    rows = list(csv.reader(path.read_text().splitlines()))
    head = next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), None)
    if head is None or len(rows) < head + 3:
        return []
    names, units = rows[head], rows[head + 1]
    out = []
    for row in rows[head + 2 :]:
        if len(row) < len(names) // 2:  # a trailing warning line
            continue
        rec: dict[str, object] = {}
        for name, unit, text in zip(names, units, row, strict=False):
            v = number(text)
            rec[name] = text if v is None else scaled(v, unit)
        out.append(rec)
    return out


def _f(rec: dict[str, object], name: str) -> float:
    v = rec.get(name)
    return v if isinstance(v, float) else float("nan")


def blocks(bh: int, n: int, causal: bool) -> float:
    """64 × 128 score blocks of the case (half of them, roughly, under the causal mask)."""
    return bh * n * n / 8192 / (2 if causal else 1)


def main_counters(rec: dict[str, object], n_blocks: float) -> dict[str, float]:
    """The side-by-side line items of one main-kernel profile."""
    samples = {k[len(STALLS) :]: _f(rec, k) for k in rec if k.startswith(STALLS)}
    samples = {k: v for k, v in samples.items() if not k.endswith("_not_issued")}
    total = sum(v for v in samples.values() if v == v) or float("nan")
    limits = [
        _f(rec, f"launch__occupancy_limit_{x}")
        for x in ("registers", "shared_mem", "warps", "blocks")
    ]
    sms = _f(rec, "device__attribute_multiprocessor_count")
    out = {
        "time_ms": _f(rec, "gpu__time_duration.sum") * 1e3,
        "sm_ghz": _f(rec, "sm__cycles_elapsed.avg.per_second") / 1e9,
        "cycles": _f(rec, "sm__cycles_elapsed.avg"),
        "cycles_per_block_sm": _f(rec, "sm__cycles_elapsed.avg") * sms / n_blocks,
        "tensor_pct": _f(rec, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
        "issue_pct": _f(rec, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
        "inst_per_block": _f(rec, "smsp__inst_executed.sum") / n_blocks,
        "eligible": _f(rec, "smsp__warps_eligible.avg.per_cycle_active"),
        "xu_pct": _f(rec, "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
        "smem_wf_per_block": _f(rec, "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum") / n_blocks,
        "smem_conf_per_block": _f(rec, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
        / n_blocks,
        "smem_st_conf_per_block": _f(
            rec, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
        )
        / n_blocks,
        "smem_ld_conf_per_block": _f(
            rec, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
        )
        / n_blocks,
        "l1_pct": _f(rec, "l1tex__throughput.avg.pct_of_peak_sustained_active"),
        "l2_hit_pct": _f(rec, "lts__t_sector_hit_rate.pct"),
        "l2_pct": _f(rec, "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        "dram_mb": (_f(rec, "dram__bytes_read.sum") + _f(rec, "dram__bytes_write.sum")) / 1e6,
        "dram_gbs": _f(rec, "dram__bytes.sum.per_second") / 1e9,
        "regs": _f(rec, "launch__registers_per_thread"),
        "smem_kb": _f(rec, "launch__shared_mem_per_block") / 1e3,
        "ctas_per_sm": min(limits),
        "grid": _f(rec, "launch__grid_size"),
        "block": _f(rec, "launch__block_size"),
    }
    for k, v in samples.items():
        out["stall_" + k] = 100.0 * v / total
    return out


def opcode(source: str) -> str:
    """A SASS line's mnemonic without its predicate and modifiers ("@P0 HGMMA.64x..." -> HGMMA)."""
    parts = source.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def read_sass(path: Path) -> list[dict[str, str]]:
    rows = list(csv.reader(path.read_text().splitlines()))
    head = next((i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"]), None)
    if head is None:
        return []
    return [dict(zip(rows[head], r, strict=False)) for r in rows[head + 1 :] if len(r) > 2]


def sass_summary(lines: list[dict[str, str]], n_blocks: float, top: int = 12) -> dict:
    """Per opcode: warp instructions and shared-memory wavefronts (and their excess over the
    ideal) per block; the `top` lines by warp-state samples, with their main stall reason."""
    inst, wf, excess = Counter(), Counter(), Counter()
    samples = []
    total = 0.0
    for r in lines:
        op = opcode(r.get("Source", ""))
        inst[op] += number(r.get("Instructions Executed", "0")) or 0.0
        w = number(r.get("L1 Wavefronts Shared", "0")) or 0.0
        ideal = number(r.get("L1 Wavefronts Shared Ideal", "0")) or 0.0
        wf[op] += w
        excess[op] += max(0.0, w - ideal)
        s = number(r.get("Warp Stall Sampling (All Samples)", "0")) or 0.0
        total += s
        stalls = {k: number(v) or 0.0 for k, v in r.items()
                  if k.startswith("stall_") and "(Not Issued)" not in k}  # fmt: skip
        why = max(stalls, key=stalls.get) if stalls and max(stalls.values()) > 0 else ""
        samples.append((s, r.get("Source", "").strip(), why))
    samples.sort(key=lambda x: -x[0])
    return {
        "inst": {k: v / n_blocks for k, v in inst.items()},
        "wavefronts": {k: v / n_blocks for k, v in wf.items() if v},
        "excess": {k: v / n_blocks for k, v in excess.items() if v},
        "top": [(100.0 * s / total if total else 0.0, src, why) for s, src, why in samples[:top]],
    }


def stall_cycles(lines: list[dict[str, str]], warp_cycles: float) -> Counter:
    """Warp-cycles per block by (stall reason, opcode): each line's samples of a reason over
    all samples, times the block's warp-cycles (cycles per block per SM x resident warps)."""
    got: Counter = Counter()
    for r in lines:
        op = opcode(r.get("Source", ""))
        for k, v in r.items():
            if k.startswith("stall_") and "(Not Issued)" not in k:
                got[(k[len("stall_") :], op)] += number(v) or 0.0
    total = sum(got.values()) or float("nan")
    return Counter({k: v * warp_cycles / total for k, v in got.items()})


def stall_table(stalls: dict[str, Counter], rows: int = 16) -> str:
    """The (reason, opcode) pairs with the largest warp-cycles per block in any column."""
    tags = list(stalls)
    keys: Counter = Counter()
    for c in stalls.values():
        for k, v in c.items():
            keys[k] = max(keys[k], v)
    out = ["| stall, opcode | " + " | ".join(tags) + " |", "|---|" + "---|" * len(tags)]
    for k, _ in keys.most_common(rows):
        cells = " | ".join(f"{stalls[t].get(k, 0.0):,.0f}" for t in tags)
        out.append(f"| {k[0]}, {k[1]} | {cells} |")
    return "\n".join(out)


def last_backward(kernels: list[dict[str, object]]) -> list[tuple[str, float]]:
    """(name, ms) of the kernels of the last backward in a process that ran the backward
    several times and nothing after it: the last (index of the last main kernel - index of the
    one before) kernels."""
    names = [str(k.get("Kernel Name", "")) for k in kernels]
    mains = [i for i, nm in enumerate(names) if MAIN_KERNEL.search(nm)]
    if len(mains) < 2:
        return []
    period = mains[-1] - mains[-2]
    tail = kernels[len(kernels) - period :]
    return [(str(k.get("Kernel Name", "")), _f(k, "gpu__time_duration.sum") * 1e3) for k in tail]


def short_name(name: str) -> str:
    """A readable kernel name: ours up to the template's end, FA4's class name."""
    m = re.search(r"FlashAttention\w*?(Preprocess|Postprocess|Sm90)", name)
    if m:
        return m.group(0)
    return name.split("(")[0].replace("void ", "")[:60]


ROWS = [
    ("duration (ms)", "time_ms", "{:.3f}"),
    ("SM clock (GHz)", "sm_ghz", "{:.2f}"),
    ("SM cycles per 64 × 128 block per SM", "cycles_per_block_sm", "{:,.0f}"),
    ("tensor pipe active (% of peak, active cycles)", "tensor_pct", "{:.1f}"),
    ("issue slots busy (%)", "issue_pct", "{:.1f}"),
    ("warp instructions per block", "inst_per_block", "{:,.0f}"),
    ("eligible warps per cycle", "eligible", "{:.2f}"),
    ("XU (MUFU) pipe (% of peak)", "xu_pct", "{:.1f}"),
    ("LSU shared wavefronts per block", "smem_wf_per_block", "{:,.0f}"),
    ("shared bank conflicts per block (ld, st)", "smem_conf_per_block", "{:,.1f}"),
    ("L1 throughput (%)", "l1_pct", "{:.1f}"),
    ("L2 hit rate (%)", "l2_hit_pct", "{:.1f}"),
    ("L2 throughput (%)", "l2_pct", "{:.1f}"),
    ("DRAM bytes (MB)", "dram_mb", "{:,.0f}"),
    ("DRAM (GB/s)", "dram_gbs", "{:,.0f}"),
    ("registers / thread", "regs", "{:.0f}"),
    ("shared memory / CTA (KB)", "smem_kb", "{:.1f}"),
    ("CTAs / SM", "ctas_per_sm", "{:.0f}"),
    ("grid (CTAs) × threads", "grid", "{:,.0f}"),
]


def _cell(c: dict[str, float], key: str, fmt: str) -> str:
    v = c.get(key, float("nan"))
    if v != v:
        return "-"
    text = fmt.format(v)
    if key == "smem_conf_per_block":
        text += " ({:,.1f}, {:,.1f})".format(
            c["smem_ld_conf_per_block"], c["smem_st_conf_per_block"]
        )
    if key == "grid":
        text += " × {:.0f}".format(c["block"])
    return text


def table(cols: dict[str, dict[str, float]], stalls: int = 7) -> str:
    """The counters of several profiles side by side, Markdown."""
    tags = list(cols)
    out = ["| counter | " + " | ".join(tags) + " |", "|---|" + "---|" * len(tags)]
    for label, key, fmt in ROWS:
        out.append(f"| {label} | " + " | ".join(_cell(cols[t], key, fmt) for t in tags) + " |")
    names = Counter()
    for c in cols.values():
        for k, v in c.items():
            if k.startswith("stall_") and v == v:
                names[k] += v
    for k, _ in names.most_common(stalls):
        cells = " | ".join(f"{cols[t].get(k, 0.0):.1f}%" for t in tags)
        out.append(f"| stall samples: {k[6:].replace('_', ' ')} | {cells} |")
    return "\n".join(out)


def opcode_table(sums: dict[str, dict], key: str, least: float = 1.0) -> str:
    tags = list(sums)
    ops = Counter()
    for s in sums.values():
        for k, v in s[key].items():
            ops[k] += v
    out = ["| opcode | " + " | ".join(tags) + " |", "|---|" + "---|" * len(tags)]
    for op, tot in ops.most_common():
        if tot < least * len(tags):
            break
        out.append(f"| {op} | " + " | ".join(f"{sums[t][key].get(op, 0.0):,.1f}" for t in tags) + " |")  # fmt: skip
    return "\n".join(out)


def case_of(tag: str) -> tuple[int, int, bool]:
    """(d, N, causal) of a tag ``{path}_d{d}_n{n}_c{causal}``."""
    m = re.search(r"_d(\d+)_n(\d+)_c(\d)", tag)
    if not m:
        raise ValueError(f"not a backward_ncu tag: {tag!r}")
    return int(m.group(1)), int(m.group(2)), m.group(3) == "1"


def bh_of(d: int, n: int) -> int:
    """backward_profile's B·H: B·N = 16384 tokens, H·d = 2048."""
    return (16384 // n) * (2048 // d)


def report(folder: Path, tags: list[str]) -> str:
    cols, sums, stalls, parts = {}, {}, {}, []
    for tag in tags:
        d, n, causal = case_of(tag)
        nb = blocks(bh_of(d, n), n, causal)
        raw = folder / f"{tag}.raw.csv"
        if raw.exists() and (recs := read_raw(raw)):
            cols[tag] = main_counters(recs[0], nb)
        sass = folder / f"{tag}.sass.csv"
        if sass.exists():
            lines = read_sass(sass)
            sums[tag] = sass_summary(lines, nb)
            if tag in cols:
                warps = cols[tag]["block"] / 32
                stalls[tag] = stall_cycles(lines, cols[tag]["cycles_per_block_sm"] * warps)
        allk = folder / f"{tag}.all.csv"
        if allk.exists():
            ks = last_backward(read_raw(allk))
            tot = sum(ms for _, ms in ks) or float("nan")
            lines = [f"{short_name(nm)} {ms:.3f} ms ({100 * ms / tot:.1f}%)" for nm, ms in ks]
            parts.append(f"- {tag}: total {tot:.3f} ms: " + "; ".join(lines))
    out = []
    if cols:
        out += ["### Main kernel", "", table(cols), ""]
    if sums:
        out += [
            "### Warp instructions per block, by opcode",
            "",
            opcode_table(sums, "inst", 2.0),
            "",
        ]
        out += ["### Shared-memory wavefronts per block, by opcode (excess over ideal below)", ""]
        out += [opcode_table(sums, "wavefronts", 0.5), "", opcode_table(sums, "excess", 0.1), ""]
        if stalls:
            out += ["### Warp-cycles per block by stall reason and opcode (all warps)", ""]
            out += [stall_table(stalls), ""]
        for tag, s in sums.items():
            out.append(f"### Largest stall lines, {tag} (share of samples, main reason)")
            out.append("")
            out += [f"- {p:.1f}% `{src}` {why}" for p, src, why in s["top"]]
            out.append("")
    if parts:
        out += ["### The last backward's kernels (ncu, caches flushed)", "", *parts, ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--tags", nargs="*", help="default: every TAG.raw.csv in the folder")
    args = ap.parse_args(argv)
    tags = args.tags or sorted(p.name[: -len(".raw.csv")] for p in args.folder.glob("*.raw.csv"))
    if not tags:
        print(f"ncu_side_by_side: no TAG.raw.csv in {args.folder}", file=sys.stderr)
        return 1
    print(report(args.folder, tags))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
