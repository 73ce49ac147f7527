"""Measured DRAM bytes: Nsight Compute's counters for each path, beside the declared ledger.

`profile(cfg, paths)` runs `ncu` over compute.gpu.dram_driver (each path once, after an
empty MARKER kernel, inside a cudaProfilerStart/Stop range: `--profile-from-start off`
profiles only those kernels, `--launch-count` caps them), parses ncu's CSV
(`parse_ncu_csv`) into per-kernel DRAM bytes read and written, L2 hit rate and duration,
splits the kernels at the markers (`split_at_markers`) and sums each path
(`summarize`). ncu runs with `--clock-control none` (the clocks are left as the GPU sets
them) and `--cache-control none` (L2 is not flushed between kernels, so a kernel reading
what the one before it wrote sees it in L2 as the real pipeline does).
`declared(cfg, entry)` is the same path's closed-form ledger in bytes, all heads, per
tensor; report.dram_reading is the one line that says how the two differ and why.
The report's "dram" block (report.py, version 4) is what `dram_block` returns.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import closed_form_ledger, element_bytes, pass_ledger
from .dram_driver import MARKER
from .report import dram_reading

METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "gpu__time_duration.sum",
)
LAUNCH_CAP = 2000  # kernels profiled at most in one run: far above any path's few dozen
NCU_TIMEOUT_S = 540
# ncu's units: with --print-units base they are byte, nsecond and %; older or auto-scaled
# output uses the prefixed ones.
_SCALE = {
    "byte": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9,
    "nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
    "second": 1e9, "s": 1e9, "%": 1, "": 1,
}  # fmt: skip


class DramUnavailable(RuntimeError):
    """ncu is missing or could not read the counters; the message is one sentence."""


@dataclass(frozen=True)
class KernelMetrics:
    """One profiled kernel launch."""

    index: int
    name: str
    dram_read_bytes: int
    dram_write_bytes: int
    l2_hit_rate_pct: float | None
    duration_ns: float


def _value(text: str, unit: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    scale = _SCALE.get(unit.strip().lower())
    if scale is None:
        raise ValueError(f"ncu printed a unit this reader does not know: {unit!r}")
    return float(text) * scale


def parse_ncu_csv(text: str) -> list[KernelMetrics]:
    """ncu's `--csv` details (one row per kernel and metric) as one record per kernel, in
    launch order; lines before the header (ncu's ==PROF== log, the program's own output)
    are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    kernels: dict[int, dict] = {}
    for row in rows:
        if row.get("ID") is None or not row["ID"].strip().isdigit():
            continue  # a ==PROF== or ==WARNING== line between rows
        kid = int(row["ID"])
        name = row.get("Kernel Name") or row.get("Function Name") or ""
        k = kernels.setdefault(kid, {"name": name})
        k[row["Metric Name"]] = _value(row["Metric Value"], row.get("Metric Unit", ""))
    return [
        KernelMetrics(
            kid,
            k["name"],
            int(k.get("dram__bytes_read.sum") or 0),
            int(k.get("dram__bytes_write.sum") or 0),
            k.get("lts__t_sector_hit_rate.pct"),
            float(k.get("gpu__time_duration.sum") or 0.0),
        )
        for kid, k in sorted(kernels.items())
    ]


def _is_marker(name: str) -> bool:
    return name == MARKER or name.startswith(MARKER + "(")


def split_at_markers(kernels: Iterable[KernelMetrics], paths: int) -> list[list[KernelMetrics]]:
    """The kernels after each of the `paths` markers, up to the next (ValueError when the
    profile holds another number of markers: it was cut short or holds foreign launches)."""
    groups: list[list[KernelMetrics]] = []
    for k in kernels:
        if _is_marker(k.name):
            groups.append([])
        elif groups:
            groups[-1].append(k)
    if len(groups) != paths:
        raise ValueError(
            f"the profile holds {len(groups)} path markers where {paths} paths ran; "
            "profile again with fewer paths or a higher launch cap."
        )
    return groups


def summarize(kernels: list[KernelMetrics]) -> dict:
    """One path's measured totals: DRAM bytes, their rate over the kernels' time, and the
    L2 hit rate averaged over the kernels weighted by their DRAM traffic plus one byte
    (so kernels that reach DRAM little still count a little)."""
    read = sum(k.dram_read_bytes for k in kernels)
    write = sum(k.dram_write_bytes for k in kernels)
    ns = sum(k.duration_ns for k in kernels)
    rated = [k for k in kernels if k.l2_hit_rate_pct is not None]
    weights = [k.dram_read_bytes + k.dram_write_bytes + 1 for k in rated]
    hit = (
        sum(w * k.l2_hit_rate_pct for w, k in zip(weights, rated, strict=True)) / sum(weights)
        if rated
        else None
    )
    return {
        "dram_read_bytes": read,
        "dram_write_bytes": write,
        "dram_bytes": read + write,
        "l2_hit_rate_pct": hit,
        "duration_ns": ns,
        "bandwidth_gbs": (read + write) / ns if ns else None,  # bytes per ns = GB/s
        "kernels": [asdict(k) for k in kernels],
    }


def _lane_bytes(lane, heads: int) -> tuple[int, dict]:
    by_tensor = {
        t: {d: heads * n * element_bytes(t, lane.dtype) for d, n in rw.items()}
        for t, rw in lane.counts.items()
        if any(rw.values())
    }
    return heads * lane.total_bytes, by_tensor


def declared(cfg, entry: dict) -> dict | None:
    """The path's declared ledger, all heads: total bytes and bytes per tensor and direction
    (None for the peers, whose transfers are not modelled). The teaching kernels at their
    tiles and order; the dense lane at the config's tiles; the tensor-core kernel at its own
    tiles (a training step: its forward's, then its backward's)."""
    path, heads = entry["path"], cfg.batch_heads
    shape = (cfg.n, cfg.n_k, cfg.d, cfg.dv)
    common = dict(causal=cfg.causal, dtype=cfg.dtype)
    if path == "tiled" or path == "dense":
        order = entry.get("order", cfg.order).split("+")[0]
        lane = "tiled" if path == "tiled" else "dense"
        led = pass_ledger(cfg.pass_name, *shape, block_q=cfg.block_q, block_k=cfg.block_k,
                          order=order, **common)  # fmt: skip
        total, by_tensor = _lane_bytes(led.lanes[lane], heads)
        return {"bytes": total, "by_tensor": by_tensor,
                "ledger": f"{lane} lane, {cfg.block_q}x{cfg.block_k}, {order}"}  # fmt: skip
    if path != "flash" or "forward_tiles" not in entry:
        return None
    (fq, fk), (bq, bk) = entry["forward_tiles"], entry["backward_tiles"]
    parts = []
    if cfg.pass_name != "backward":
        save = cfg.pass_name == "training"
        parts.append(closed_form_ledger(*shape, block_q=fq, block_k=fk, save_lse=save, **common))
    if cfg.pass_name != "forward":
        parts.append(pass_ledger("backward", *shape, block_q=bq, block_k=bk, **common))
    total, by_tensor = 0, {}
    for led in parts:
        t, b = _lane_bytes(led.lanes["tiled"], heads)
        total += t
        for tensor, rw in b.items():
            row = by_tensor.setdefault(tensor, {"read": 0, "write": 0})
            for d, n in rw.items():
                row[d] += n
    tiles = f"{fq}x{fk}" + ("" if cfg.pass_name == "forward" else f" then {bq}x{bk}")
    return {"bytes": total, "by_tensor": by_tensor, "ledger": f"tiled lane, {tiles}"}


def score_bytes(cfg) -> int:
    """Bytes of one N_q x N_k matrix (S or P) over all heads in the config's dtype."""
    return cfg.batch_heads * cfg.n * cfg.n_k * element_bytes("S", cfg.dtype)


NCU_ROOT = Path("/opt/nvidia")  # where Nsight Compute installs when ncu is not on PATH


def _ncu() -> str:
    found = shutil.which("ncu") or next(
        (str(p) for p in sorted(NCU_ROOT.glob("nsight-compute/*/ncu"))), None
    )
    if found is None:
        raise DramUnavailable(
            "ncu (Nsight Compute) is not on PATH; install it or run --dram on a machine that has it."
        )
    return found


def ncu_command(ncu: str, spec: Path, out: Path) -> list[str]:
    """The ncu command line that profiles the driver's marked range."""
    return [
        ncu, "--csv", "--print-units", "base", "--clock-control", "none",
        "--cache-control", "none", "--profile-from-start", "off",
        "--launch-count", str(LAUNCH_CAP), "--metrics", ",".join(METRICS),
        sys.executable, "-m", "compute.gpu.dram_driver", str(spec), str(out),
    ]  # fmt: skip


def _error_line(text: str) -> str:
    for line in text.splitlines():
        if "ERROR" in line or "Error" in line:
            return line.replace("==ERROR==", "").strip()
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1].strip() if lines else "no output"


def profile(cfg, paths: list[dict]) -> list[dict]:
    """Run ncu over the driver for `paths` ({"path": ..., "order": ...}) and return each
    path's entry: the driver's record, "measured" (summarize) and "declared"."""
    ncu = _ncu()
    fields = {k: v for k, v in asdict(cfg).items() if k not in ("kernels", "flash_specs")}
    root = Path(__file__).resolve().parents[2]
    python_path = [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path)}
    with tempfile.TemporaryDirectory(prefix="fe-dram-") as tmp:
        spec, out = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec.write_text(json.dumps({"config": fields, "paths": paths}), encoding="utf-8")
        try:
            proc = subprocess.run(ncu_command(ncu, spec, out), capture_output=True, text=True,
                                  timeout=NCU_TIMEOUT_S, env=env)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise DramUnavailable(
                f"ncu ran past {NCU_TIMEOUT_S} s; profile a smaller problem."
            ) from None
        if proc.returncode != 0 or not out.exists():
            raise DramUnavailable(
                f"ncu could not profile the paths: {_error_line(proc.stderr + proc.stdout)}."
            )
        entries = json.loads(out.read_text(encoding="utf-8"))
    kernels = parse_ncu_csv(proc.stdout)
    ran = [e for e in entries if "error" not in e]
    groups = split_at_markers(kernels, len(ran))
    measured = iter(groups)
    for e in entries:
        if "error" not in e:
            e["measured"] = summarize(next(measured))
        e["declared"] = declared(cfg, e)
    return entries


def dram_block(cfg, entries: list[dict], l2_bytes: int) -> dict:
    """The report's "dram" block: the method, S against the L2, each path with its reading."""
    s_bytes = score_bytes(cfg)
    for e in entries:
        e["reading"] = dram_reading(e, s_bytes, l2_bytes)
    return {
        "tool": "Nsight Compute (ncu --csv --clock-control none --cache-control none "
        "--profile-from-start off), each path once after a marker kernel",
        "metrics": list(METRICS),
        "score_bytes": s_bytes,
        "l2_bytes": l2_bytes,
        "s_fits_l2": s_bytes <= l2_bytes,
        "paths": entries,
    }


def default_paths(kernels: Iterable[str], peers: bool, pass_name: str = "forward") -> list[dict]:
    """The paths --dram profiles: the teaching kernels in both loop orders (the backward
    alone has one, K/V outer: the forward's order only decides what it saved), then the
    other kernels asked for, and with the peers FA4 (an error row where it is not importable)."""
    orders = ("kv-outer",) if pass_name == "backward" else ("q-outer", "kv-outer")
    paths: list[dict] = []
    for k in kernels:
        if k == "tiled":
            paths += [{"path": "tiled", "order": o} for o in orders]
        else:
            paths.append({"path": k})
    if peers:
        paths.append({"path": "fa4"})
    return paths


OURS = ("tiled", "dense", "flash")  # a failure of one of these fails the command


def dram_report(cfg, paths: list[dict]) -> dict:
    """A bench report (report.py's schema, version 4) holding only the "dram" block:
    no timings, since ncu's replay and counters change them (DramUnavailable: one sentence)."""
    from .device import status
    from .report import report_head

    st = status()
    if not st.usable:
        raise DramUnavailable(st.reason)
    entries = profile(cfg, paths)
    block = dram_block(cfg, entries, st.l2_bytes)
    return {
        **report_head(cfg, st.to_dict(), block["tool"]),
        "sample": None,
        "rotated_input_sets": 1,
        "results": [],
        "sweep": None,
        "dram": block,
    }
