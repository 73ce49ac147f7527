"""The GPU bench report: its JSON schema, the reports bundled with the package, and its tables.

One report (format BENCH_FORMAT) is what `compute.gpu.bench.run_bench` returns and
`flash-explorer bench --json` writes; a figures file (FIGURES_FORMAT) holds several, as
the tools write them. Both carry `version`: 3 adds the passes (config `pass_name` "forward",
"backward" or "training"; every row and a sweep carry their `pass`), 2 named the
tensor-core kernel's rows "flash", version 1 said "fast"; 4 adds the optional "dram" block
(`bench --dram`, compute.gpu.dram: per path the DRAM bytes ncu measured beside the declared
ledger, its results list empty); `split_reports` reads all four
(an older report is a forward one) and refuses, with what to run instead, the backward
comparison that lab/flash_bwd_vs_sdpa writes (BWD_COMPARISON_FORMAT, rows of another
shape). `bundled_report()` reads the
H200 recording shipped inside the package (the desktop panel opens on it).
Also the plain-text tables `flash-explorer bench` prints.
"""

from __future__ import annotations

import json
import math
import os
from importlib import resources
from pathlib import Path

from ..cli_fields import mask_of

BENCH_FORMAT = "flash-explorer-gpu-bench"
FIGURES_FORMAT = "flash-explorer-gpu-figures"
# lab/flash_bwd_vs_sdpa's comparison (rows of its own shape, no device block): not a report
# the panel can show; files written before it had its own name claim FIGURES_FORMAT.
BWD_COMPARISON_FORMAT = "flash-explorer-bwd-comparison"
_NOT_A_REPORT = (
    "The file is a backward comparison from flash_bwd_vs_sdpa (its tables are in the README); "
    "to see the backward here, run `flash-explorer bench --pass backward --peers --json FILE`."
)
VERSION = 4
BUNDLED_DEFAULT = "tiled_vs_dense_h200"  # compute/gpu/reports/<name>.json
MIB = 2**20
# Real reports are tens of kB (the bundled figures file of 26 is 88 kB) and sweep 3x3 to
# 8x8 blocks; anything far past that is refused before it is parsed or drawn.
MAX_REPORT_BYTES = 16 * MIB
MAX_SWEEP_SIDE = 16
MAX_REPORTS = 1000
MAX_RESULTS = 64


def report_head(cfg, device: dict, timing: str) -> dict:
    """The keys every bench report starts with (format, version, when, the device, the
    configuration with its derived sizes and FLOPs, how it was timed); `cfg` is a
    bench.BenchConfig, `device` its device.status().to_dict()."""
    import datetime as _dt
    from dataclasses import asdict

    return {
        "format": BENCH_FORMAT,
        "version": VERSION,
        "created_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "device": device,
        "config": {**asdict(cfg), "n_keys": cfg.n_k, "d_v": cfg.dv, "flops": cfg.flops()},
        "timing": timing,
    }


def tiled_order(cfg) -> str:
    """The loop order the teaching kernel runs in cfg's pass: the forward's `order`, the
    backward always K/V outer, a training step the forward's order and then K/V outer."""
    if cfg.pass_name == "forward":
        return cfg.order
    return "kv-outer" if cfg.pass_name == "backward" else f"{cfg.order}+kv-outer"


def pass_of(report: dict) -> str:
    """The pass a report measured ("forward" for reports older than version 3)."""
    return report["config"].get("pass_name", "forward")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def result_rows(report: dict) -> list[list[str]]:
    """One list of cells per result of the report."""
    rows = []
    for r in report["results"]:
        blocks = f"{r['block_q']}x{r['block_k']}" if "block_q" in r else "-"
        if "error" in r:
            rows.append([r["kernel"], r.get("order", "-"), blocks, "error: " + r["error"]])
            continue
        rows.append(
            [
                r["kernel"],
                r.get("order", "-"),
                blocks,
                _fmt(r["ms"], ".3f"),
                _fmt(r["tflops"], ".2f"),
                _fmt(r["ledger_gbs"], ".0f"),
                _fmt(_mib(r.get("peak_bytes")), ".1f"),
                _fmt(_mib(r.get("extra_bytes")), ".1f"),
                _fmt(r["max_abs_err"], ".2e"),
                _fmt(r["rel_err"], ".2e"),
                _fmt(r.get("speedup_vs_dense"), ".2f"),
            ]
        )
    return rows


HEADER = [
    "kernel",
    "order",
    "blocks",
    "ms",
    "TFLOP/s",
    "ledger GB/s",
    "peak MiB",
    "extra MiB",
    "max abs err",
    "rel err",
    "x dense",
]


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [
        max([len(header[i]), *(len(r[i]) for r in rows if i < len(r))]) for i in range(len(header))
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)))
    return "\n".join(lines)


def format_counts(result: dict) -> str:
    """Kernel-counted transfers per head beside the modelled ledger."""
    kc, lc = result["counts_kernel"], result["counts_ledger"]
    rows = []
    for tensor in kc:
        for direction in ("read", "write"):
            k, m = kc[tensor][direction], lc[tensor][direction]
            if k or m:
                rows.append([tensor, direction, str(k), str(m), "yes" if k == m else "NO"])
    return _table(["tensor", "dir", "kernel", "ledger", "equal"], rows)


def format_report(report: dict) -> str:
    """The device line, the config, the results table, counts and the sweep grid."""
    c = report["config"]
    dev = report["device"]
    how = f"(median of {c['repeats']} runs, {report['rotated_input_sets']} rotated input sets)"
    out = [
        f"device: {dev['name']} (sm_{''.join(map(str, dev['compute_capability']))})",
        f"N_q={c['n']} N_k={c['n_keys']} d={c['d']} d_v={c['d_v']} dtype={c['dtype']} "
        f"batch*heads={c['batch_heads']} causal={c['causal']} pass={c.get('pass_name', 'forward')} "
        + ("(DRAM profile: each path once, untimed)" if report.get("dram") else how),
    ]
    if report["results"] or not report.get("dram"):
        out += ["", _table(HEADER, [r for r in result_rows(report) if len(r) == len(HEADER)])]
    for r in report["results"]:  # failures below the table, one sentence each
        if "error" in r:
            out.append(f"{r['kernel']} {r.get('order', '')}: {r['error']}".replace("  ", " "))
    for r in report["results"]:
        if "counts_kernel" in r:
            verdict = "equal" if r["counts_match"] else "DIFFERENT"
            out += ["", f"transfers per head, {r['order']} {r['block_q']}x{r['block_k']}: "
                    f"kernel-counted vs ledger ({verdict})", format_counts(r)]  # fmt: skip
    if report.get("dram"):
        out += ["", format_dram(report["dram"])]
    sweep = report.get("sweep")
    if sweep:
        header = ["block_q \\ block_k", *map(str, sweep["block_k"])]
        rows = [
            [str(bq), *(_fmt(ms, ".3f") for ms in line)]
            for bq, line in zip(sweep["block_q"], sweep["ms"], strict=True)
        ]
        what = f"{sweep.get('pass', 'forward')}, {sweep['order']}"
        out += ["", f"sweep of the tiled kernel ({what}), ms:", _table(header, rows)]
        if sweep["best"]:
            b = sweep["best"]
            out.append(f"best: {b['block_q']}x{b['block_k']} at {b['ms']:.3f} ms")
    return "\n".join(out)


# --cache-control none: L2 is not flushed, so what a path's warm-up runs left in it (its
# inputs, when they fit) is read from L2 in the profiled run, as in a steady loop.
L2_CAVEAT = (
    "L2 is not flushed before a path: inputs its warm-up left there are read from L2, "
    "so a small problem can read less from DRAM than its inputs' size."
)
DRAM_HEADER = ["path", "order / tiles", "declared GB", "DRAM read GB", "DRAM write GB",
               "DRAM / declared", "L2 hit %", "kernel ms", "GB/s"]  # fmt: skip


def dram_label(entry: dict) -> str:
    """A path's name in the DRAM tables: the teaching kernels with their loop order."""
    return entry["path"] + (f" {entry['order']}" if entry["path"] == "tiled" else "")


def _gb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e9:.4g}"


def dram_rows(block: dict) -> list[list[str]]:
    """One list of cells per path of a "dram" block."""
    rows = []
    for e in block["paths"]:
        m, dec = e.get("measured"), e.get("declared")
        tiles = e.get("order", "") or e.get("variant", "")
        if e["path"] == "tiled":
            tiles = f"{e['order']} {e['block_q']}x{e['block_k']}"
        if m is None:
            rows.append([dram_label(e), tiles, _gb(dec and dec["bytes"]), "error: " + e["error"]])
            continue
        ratio = m["dram_bytes"] / dec["bytes"] if dec and dec["bytes"] else None
        rows.append([
            dram_label(e), tiles, _gb(dec and dec["bytes"]), _gb(m["dram_read_bytes"]),
            _gb(m["dram_write_bytes"]), _fmt(ratio, ".2f"), _fmt(m["l2_hit_rate_pct"], ".1f"),
            _fmt(m["duration_ns"] and m["duration_ns"] / 1e6, ".3f"),
            _fmt(m["bandwidth_gbs"], ".0f"),
        ])  # fmt: skip
    return rows


# What a schedule re-reads (the ledger counts it each time), by the loop order it runs.
RE_READS = {
    "q-outer": "the K/V tiles each query block re-reads",
    "kv-outer": "the Q, O and row statistics each key tile re-reads",
    "backward": "the Q, dO, L, D and dQ each key tile re-reads",
}


def _re_reads(entry: dict) -> str:
    if entry["path"] == "flash":
        orders = {"forward": ["q-outer"], "backward": ["backward"]}.get(
            entry.get("pass", "forward"), ["q-outer", "backward"]
        )
    else:
        orders = entry.get("order", "q-outer").split("+")
        if entry.get("pass") in ("backward", "training"):
            orders = [*orders[:-1], "backward"] if entry.get("pass") == "training" else ["backward"]
    return " and ".join(RE_READS[o] for o in orders)


def _dense_counts(entry: dict) -> str:
    """What the dense lane declares of the N x N matrices in the path's pass."""
    forward = "one write and one read of each of S and P"
    backward = "P read and dP and dS written and read"
    return {"forward": forward, "backward": backward}.get(
        entry.get("pass", "forward"), f"{forward}, then {backward}"
    )


def dram_reading(entry: dict, s_bytes: int, l2_bytes: int) -> str:
    """One line: how a path's measured DRAM bytes stand to its declared ones, and why."""
    m, dec = entry.get("measured"), entry.get("declared")
    if m is None:
        return f"not measured: {entry.get('error', 'no profile')}"
    hit = m.get("l2_hit_rate_pct")
    hit_text = "" if hit is None else f", L2 hit rate {hit:.0f}%"
    if dec is None:
        return (f"{m['dram_bytes'] / 1e9:.3g} GB from DRAM{hit_text}; its transfers are not "
                "modelled, so there is no ledger to set it against")  # fmt: skip
    ratio = m["dram_bytes"] / dec["bytes"] if dec["bytes"] else float("inf")
    what = f"DRAM moved {ratio:.0%} of the declared {dec['bytes'] / 1e9:.3g} GB{hit_text}"
    if entry["path"] == "dense":
        where = "fits in" if s_bytes <= l2_bytes else "is larger than"
        size = f"S ({s_bytes / 2**20:,.0f} MiB) {where} the {l2_bytes / 2**20:,.0f} MiB L2"
        if ratio > 1.25:
            return (f"{what}: {size}, and each of the path's {len(m.get('kernels', []))} kernels "
                    "(float32 copies around the matmuls, one per elementwise step) moves an "
                    f"N x N array again, where the dense lane counts {_dense_counts(entry)}")  # fmt: skip
        if ratio < 0.8:
            return f"{what}: {size}, so S and P are partly kept in L2"
        return f"{what}: {size}, so S and P go to DRAM as declared"
    if ratio < 0.5:
        return f"{what}: {_re_reads(entry)} are served by L2"
    if ratio < 0.8:
        return f"{what}: {_re_reads(entry)} are partly served by L2"
    if ratio > 1.25:
        return f"{what}: more than the ledger counts (temporaries, partial sectors)"
    return f"{what}: about what the ledger declares"


def format_dram(block: dict) -> str:
    """The DRAM table of a report, S against the L2, and each path's reading."""
    fits = "fits in" if block["s_fits_l2"] else "does not fit in"
    out = [
        f"DRAM bytes measured by {block['tool']}",
        f"S (one N_q x N_k matrix, all heads) is {block['score_bytes'] / 2**20:,.1f} MiB: "
        f"it {fits} the {block['l2_bytes'] / 2**20:,.0f} MiB L2. " + L2_CAVEAT,
        "",
        _table(DRAM_HEADER, dram_rows(block)),
        "",
    ]
    out += [f"{dram_label(e)}: {dram_reading(e, block['score_bytes'], block['l2_bytes'])}"
            for e in block["paths"]]  # fmt: skip
    return "\n".join(out)


class ReportError(ValueError):
    """A file that is not a GPU bench report; the message is one sentence."""


def report_label(report: dict) -> str:
    """A short name for a report: dtype, N, mask and what it holds."""
    c = report["config"]
    kinds = [
        f"{r['kernel']}" + (f" {r['order']}" if r["kernel"] == "tiled" else "")
        for r in report["results"]
    ]
    held = ", ".join(kinds) if kinds else ""
    if report.get("sweep"):
        held = (held + ", " if held else "") + "block sweep"
    if report.get("dram"):
        held = (held + ", " if held else "") + "DRAM bytes"
    mask = _mask_words(c)
    pass_name = pass_of(report)
    shown = "" if pass_name == "forward" else f" {pass_name}"
    return f"{c['dtype']} N={c['n']} d={c['d']}{mask}{shown}: {held or 'empty'}"


def _mask_words(config: dict) -> str:
    """' causal' for the bottom-right causal every path takes, the mask's label for any
    other (a window or packed run was named like a plain causal one)."""
    fields = (config.get("top_left", False), config.get("window", ""), config.get("packed", ""))
    if not any(fields):
        return " causal" if config["causal"] else ""
    try:
        return " " + mask_of(bool(config["causal"]), *fields).label
    except ValueError:  # a field the report holds but this version cannot read
        return " masked"


def _where(path: str) -> str:
    return f"its {path}" if path else "it"


def _need(ok: bool, path: str, what: str) -> None:
    if not ok:
        raise ReportError(
            f"{_where(path)} is not {what}; record it again with flash-explorer bench --json."
        )


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return (_is_int(x) or isinstance(x, float)) and math.isfinite(x)


def _check_fields(
    data: dict, path: str, fields: dict[str, tuple], required: tuple[str, ...]
) -> None:
    """Each field of `fields` present in `data` passes its check; `required` ones exist."""
    for name in required:
        _need(name in data, f"{path}.{name}" if path else name, "present")
    for name, (check, what) in fields.items():
        if name in data:
            _need(check(data[name]), f"{path}.{name}" if path else name, what)


_INT = (_is_int, "a whole number")
_POSITIVE = (lambda x: _is_int(x) and x >= 1, "a positive whole number")
_TEXT = (lambda x: isinstance(x, str), "text")
_FLAG = (lambda x: isinstance(x, bool), "true or false")
_MAYBE_NUMBER = (lambda x: x is None or _is_number(x), "a number or null")
_MAYBE_TEXT = (lambda x: x is None or isinstance(x, str), "text or null")
_CAPABILITY = (
    lambda x: isinstance(x, list) and 1 <= len(x) <= 3 and all(_is_int(v) for v in x),
    "a compute capability like [9, 0]",
)
_CONFIG = {
    "n": _POSITIVE, "n_keys": _POSITIVE, "d": _POSITIVE, "d_v": _POSITIVE, "dtype": _TEXT,
    "batch_heads": _POSITIVE, "causal": _FLAG, "repeats": _POSITIVE, "pass_name": _TEXT,
    "order": _TEXT, "kernels": (lambda x: isinstance(x, list), "a list"),
}  # fmt: skip
_RESULT = {
    "kernel": _TEXT, "order": _TEXT, "pass": _TEXT, "block_q": _POSITIVE, "block_k": _POSITIVE,
    "error": _TEXT, "error_detail": _TEXT, "counts_match": _FLAG,
    **{k: _MAYBE_NUMBER for k in ("ms", "tflops", "ledger_gbs", "max_abs_err", "rel_err",
                                  "peak_bytes", "extra_bytes", "speedup_vs_dense")},
}  # fmt: skip
_MEASURED = ("ms", "tflops", "ledger_gbs", "max_abs_err", "rel_err")


def _check_counts(counts: object, path: str) -> None:
    _need(isinstance(counts, dict) and len(counts) <= 64, path, "a table of counts by tensor")
    for tensor, row in counts.items():
        _need(
            isinstance(row, dict) and all(_is_int(row.get(d)) for d in ("read", "write")),
            f"{path}.{tensor}",
            "read and write counts",
        )


def _check_sweep(sweep: object, path: str) -> None:
    _need(isinstance(sweep, dict), path, "a block sweep")
    _check_fields(
        sweep, path, {"order": _TEXT, "pass": _TEXT}, ("order", "block_q", "block_k", "ms")
    )
    sides = []
    for axis in ("block_q", "block_k"):
        values = sweep[axis]
        _need(isinstance(values, list) and all(_is_int(v) and v >= 1 for v in values),
              f"{path}.{axis}", "a list of block sizes")  # fmt: skip
        if not 1 <= len(values) <= MAX_SWEEP_SIDE:
            raise ReportError(
                f"its {path}.{axis} lists {len(values):,} block sizes, outside the 1 to "
                f"{MAX_SWEEP_SIDE} a sweep measures; record it again with flash-explorer bench --json."
            )
        sides.append(len(values))
    ms = sweep["ms"]
    _need(
        isinstance(ms, list) and len(ms) == sides[0]
        and all(isinstance(r, list) and len(r) == sides[1] for r in ms)
        and all(_MAYBE_NUMBER[0](x) for r in ms for x in r),
        f"{path}.ms", f"a {sides[0]}x{sides[1]} grid of times",
    )  # fmt: skip
    best = sweep.get("best")
    _need(
        best is None or (isinstance(best, dict) and _is_int(best.get("block_q"))
                         and _is_int(best.get("block_k")) and _is_number(best.get("ms"))),
        f"{path}.best", "a best block pair with its time",
    )  # fmt: skip


def check_report(report: object, path: str = "") -> None:
    """Refuse, with one ReportError sentence, a report whose fields the panel and the
    tables read do not have the schema's types and sizes."""
    _need(isinstance(report, dict), path, "a report (a JSON object)")
    _check_fields(
        report, path,
        {"version": (lambda x: _is_int(x) and 1 <= x <= VERSION, f"a version from 1 to {VERSION}"),
         "created_utc": _TEXT, "rotated_input_sets": _INT,
         "config": (lambda x: isinstance(x, dict), "an object"),
         "device": (lambda x: isinstance(x, dict), "an object"),
         "results": (lambda x: isinstance(x, list) and len(x) <= MAX_RESULTS,
                     f"a list of at most {MAX_RESULTS} results")},
        ("config", "device", "results"),
    )  # fmt: skip
    at = f"{path}." if path else ""
    _check_fields(
        report["config"], f"{at}config", _CONFIG,
        ("n", "n_keys", "d", "d_v", "dtype", "batch_heads", "causal", "repeats"),
    )  # fmt: skip
    _check_fields(
        report["device"],
        f"{at}device",
        {"name": _MAYBE_TEXT, "compute_capability": _CAPABILITY},
        (),
    )
    for i, result in enumerate(report["results"]):
        where = f"{at}results[{i}]"
        _need(isinstance(result, dict), where, "a result (a JSON object)")
        required = ("kernel",) if "error" in result else ("kernel", *_MEASURED)
        _check_fields(result, where, _RESULT, required)
        _need(("block_q" in result) == ("block_k" in result), f"{where}.block_k", "beside block_q")
        if "counts_kernel" in result or "counts_ledger" in result:
            _check_counts(result.get("counts_kernel"), f"{where}.counts_kernel")
            _check_counts(result.get("counts_ledger"), f"{where}.counts_ledger")
            _need(result["counts_kernel"].keys() == result["counts_ledger"].keys(),
                  f"{where}.counts_ledger", "counted for the same tensors as counts_kernel")  # fmt: skip
    if report.get("sweep") is not None:
        _check_sweep(report["sweep"], f"{at}sweep")
    if report.get("dram") is not None:
        _check_dram(report["dram"], f"{at}dram")


_BYTES = (lambda x: _is_int(x) and x >= 0, "a byte count")
_DRAM_MEASURED = {
    "dram_read_bytes": _BYTES, "dram_write_bytes": _BYTES, "dram_bytes": _BYTES,
    "l2_hit_rate_pct": _MAYBE_NUMBER, "duration_ns": _MAYBE_NUMBER,
    "bandwidth_gbs": _MAYBE_NUMBER,
}  # fmt: skip


def _check_dram(block: object, path: str) -> None:
    """The "dram" block of version 4: S and the L2 in bytes, and each path's entry."""
    _need(isinstance(block, dict), path, "a DRAM block")
    _check_fields(block, path, {"score_bytes": _BYTES, "l2_bytes": _BYTES, "s_fits_l2": _FLAG},
                  ("paths", "score_bytes", "l2_bytes"))  # fmt: skip
    paths = block["paths"]
    _need(isinstance(paths, list) and len(paths) <= MAX_RESULTS, f"{path}.paths",
          f"a list of at most {MAX_RESULTS} paths")  # fmt: skip
    for i, entry in enumerate(paths):
        where = f"{path}.paths[{i}]"
        _need(isinstance(entry, dict), where, "a path (a JSON object)")
        _check_fields(entry, where, {"path": _TEXT, "order": _TEXT, "error": _TEXT,
                                     "reading": _TEXT}, ("path",))  # fmt: skip
        measured = entry.get("measured")
        _need(measured is not None or "error" in entry, f"{where}.measured", "present")
        if measured is not None:
            _need(isinstance(measured, dict), f"{where}.measured", "an object")
            _check_fields(measured, f"{where}.measured", _DRAM_MEASURED,
                          ("dram_read_bytes", "dram_write_bytes", "dram_bytes"))  # fmt: skip
        dec = entry.get("declared")
        if dec is not None:
            _need(isinstance(dec, dict) and _BYTES[0](dec.get("bytes")), f"{where}.declared",
                  "a declared ledger with its bytes")  # fmt: skip
            _check_counts(dec.get("by_tensor"), f"{where}.declared.by_tensor")
        if "counts_kernel" in entry:
            _check_counts(entry["counts_kernel"], f"{where}.counts_kernel")


def read_reports(path: str | Path) -> list[dict]:
    """The reports of a JSON file, its size checked before it is read and every report
    checked against the schema (ReportError: one sentence, never another exception)."""
    path = Path(path)
    try:
        size = os.stat(path).st_size
        if size > MAX_REPORT_BYTES:
            raise ReportError(
                f"it is {size / MIB:,.1f} MiB, larger than the {MAX_REPORT_BYTES // MIB} MiB a "
                "GPU report can be; choose a report that flash-explorer bench --json wrote."
            )
        with open(path, "rb") as f:
            text = f.read(MAX_REPORT_BYTES + 1).decode("utf-8")
        data = json.loads(text)
    except ReportError:
        raise
    except FileNotFoundError:
        raise ReportError("it does not exist; choose an existing report.") from None
    except OSError as exc:
        raise ReportError(f"it cannot be read ({exc.strerror}); choose another file.") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ReportError("it is not readable JSON") from None
    return split_reports(data)


def split_reports(data: object) -> list[dict]:
    """The bench reports in a parsed JSON file (one report, or a figures file of many)."""
    if not isinstance(data, dict):
        raise ReportError("The file does not hold a GPU bench report.")
    if data.get("format") == BWD_COMPARISON_FORMAT:
        raise ReportError(_NOT_A_REPORT)
    if data.get("format") == BENCH_FORMAT:
        reports = [data]
    elif data.get("format") == FIGURES_FORMAT:
        reports = data.get("reports", [])
        _need(isinstance(reports, list) and len(reports) <= MAX_REPORTS, "reports",
              f"a list of at most {MAX_REPORTS} reports")  # fmt: skip
    else:
        raise ReportError("The file does not hold a GPU bench report (no known 'format').")
    for rep in reports:
        rows = rep.get("results") if isinstance(rep, dict) else None
        if isinstance(rows, list) and any(isinstance(r, dict) and "median_ms" in r for r in rows):
            raise ReportError(_NOT_A_REPORT)
        if not isinstance(rep, dict) or not {"config", "results", "device"} <= rep.keys():
            raise ReportError("A report in the file is missing its config, device or results.")
    if not reports:
        raise ReportError("The file holds no reports.")
    for i, rep in enumerate(reports):
        check_report(rep, f"reports[{i}]" if len(reports) > 1 or rep is not data else "")
    return [_upgrade(rep) for rep in reports]


def _upgrade(report: dict) -> dict:
    """An older report in version 3's names: version 1's tensor-core kernel "fast" is
    "flash"; before version 3 a report without `pass_name` measured the forward, and its
    rows and sweep get their `pass`."""
    version = report.get("version", 1)
    if version >= VERSION:
        return report

    def renamed(name: str) -> str:
        return "flash" + name[4:] if version < 2 and name.startswith("fast") else name

    config = {"pass_name": "forward", **report["config"]}
    if "kernels" in config:
        config["kernels"] = [renamed(k) for k in config["kernels"]]
    pass_name = config["pass_name"]
    results = [{"pass": pass_name, **r, "kernel": renamed(r["kernel"])} for r in report["results"]]
    sweep = report.get("sweep")
    if sweep:
        sweep = {"pass": pass_name, **sweep}
    upgraded = {**report, "version": VERSION, "config": config, "results": results}
    return {**upgraded, "sweep": sweep} if "sweep" in report else upgraded


def bundled_report(name: str | None = None) -> dict:
    """A recording shipped in compute/gpu/reports/ (default: the panel's H200 figures), parsed."""
    ref = resources.files(__package__) / "reports" / f"{name or BUNDLED_DEFAULT}.json"
    return json.loads(ref.read_text(encoding="utf-8"))


def sweep_for(report: dict, reports: list[dict]) -> dict | None:
    """The report's own block sweep, else one recorded for the same dtype, d and pass (for a
    training step, else the backward's: the recorded training steps run its best blocks)."""
    if report.get("sweep"):
        return report["sweep"]
    c = report["config"]
    wanted = [pass_of(report)] + (["backward"] if pass_of(report) == "training" else [])
    for pass_name in wanted:
        for other in reports:
            oc = other["config"]
            if other.get("sweep") and (oc["dtype"], oc["d"], pass_of(other)) == (
                c["dtype"], c["d"], pass_name,
            ):  # fmt: skip
                return other["sweep"]
    return None
