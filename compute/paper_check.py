"""The paper check: FlashAttention's Figure 2 (left) beside this project's declared ledgers.

The workload is the paper's: GPT-2 medium attention, batch 64, 16 heads, N = 1024, d = 64,
float16, forward plus backward (a training step), on an A100 (192 KB of SRAM per SM).
`declared_rows()` gives our closed-form ledgers for it (compute.backward_ledger's
`pass_ledger`, exact integers) at two tilings: Algorithm 1's block sizes for that SRAM
(B_c = ⌈M / 4d⌉, B_r = min(B_c, d), M in float16 elements, K/V outer as Algorithm 1
loops) and the tensor-core kernel's own tiles (forward 128 x 128 rows x keys with queries
outer, backward 64 x 128 with keys outer). `flop_check()` and `flop_reading()` set the
paper's GFLOPs row against 3.5 x 4·B·H·N²·d. `PAPER_FIGURES` are both printings of the
figure as the paper's text has them, each naming where it is printed. Measured DRAM bytes
for the same workload (on the H200) come from the bundled GPU report
(compute.gpu.report), not from here: this module runs anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from .backward_ledger import pass_ledger
from .ledger import Ledger, paper_block_sizes

GB = 10**9  # the paper's GB are decimal


@dataclass(frozen=True)
class Workload:
    """The attention of one GPT-2 medium layer as Figure 2 (left) measures it."""

    batch: int = 64
    heads: int = 16
    n: int = 1024
    d: int = 64
    dtype: str = "float16"
    element_bytes: int = 2
    sram_bytes: int = 192 * 1024  # the A100's shared memory + L1 per SM
    device: str = "A100"

    @property
    def batch_heads(self) -> int:
        return self.batch * self.heads

    @property
    def sram_elements(self) -> int:
        """M of Algorithm 1, in elements of the workload's dtype."""
        return self.sram_bytes // self.element_bytes

    def training_flops(self) -> int:
        """3.5 x 4·B·H·N²·d = 14·B·H·N²·d: the forward's two matmuls (4·N²·d a head) and
        the backward's five at 2.5 times that, the convention bench.PASS_FLOPS uses."""
        return 14 * self.batch_heads * self.n * self.n * self.d


PAPER = Workload()


@dataclass(frozen=True)
class PaperFigure:
    """One printing of Figure 2 (left): HBM reads + writes in GB, GFLOPs and runtime, for
    standard attention and FlashAttention, and where the printing is (`source`)."""

    label: str
    standard_gb: float
    flash_gb: float
    standard_gflops: float
    flash_gflops: float
    standard_ms: float
    flash_ms: float
    source: str


# Both printings read off the paper's text (arXiv 2205.14135), not recalled: the table in
# Figure 2 (left) and its caption. The June 2022 text's caption names GPT-2 medium and no
# mask; the revision's drops the model's name and adds "key-padding mask and no dropout".
# The GFLOPs row is the same in both; the HBM and runtime rows differ.
PAPER_FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("paper, June 2022 text", 40.3, 4.4, 66.6, 75.2, 41.7, 7.3,
                "the text dated June 24, 2022 (its caption: GPT-2 medium, no mask named)"),
    PaperFigure("paper, later revision (key-padding mask)", 35.3, 4.4, 66.6, 75.2, 35.1, 11.7,
                "a later revision (its caption: seq. length 1024, \"key-padding mask and no "
                "dropout\")"),
)  # fmt: skip

# The tensor-core kernel's tiles for this workload on Hopper (compute.gpu.flash_select:
# N = 1024 < WS_MIN_N[64] = 2048, so the wgmma variant, 128 query rows x 128 keys; the
# backward's 64 query rows x 128 keys, compute.gpu.flash_backward). Kept as numbers here so
# the check runs without the GPU package; a test holds them equal to those tables.
TENSOR_CORE_FORWARD_TILES = (128, 128)
TENSOR_CORE_BACKWARD_TILES = (64, 128)


@dataclass(frozen=True)
class DeclaredRow:
    """One declared ledger of the workload: the lane, how it is tiled, and its bytes."""

    label: str
    lane: str  # "dense" or "tiled"
    tiles: str
    order: str
    total_bytes: int

    @property
    def gb(self) -> float:
        return self.total_bytes / GB


def _training(w: Workload, bq: int, bk: int, order: str) -> Ledger:
    return pass_ledger(
        "training", w.n, w.n, w.d, w.d, block_q=bq, block_k=bk, order=order, dtype=w.dtype
    )


def algorithm1_tiles(w: Workload = PAPER) -> tuple[int, int]:
    """(B_r, B_c) of Algorithm 1 for the workload's SRAM: (64, 384) for the A100."""
    return paper_block_sizes(w.sram_elements, w.d)


def tensor_core_training_bytes(w: Workload = PAPER, lane: str = "tiled") -> int:
    """A training step's declared bytes at the tensor-core kernel's tiles: the forward
    (L saved) at its forward tiles plus the backward at its backward tiles, all heads."""
    fq, fk = TENSOR_CORE_FORWARD_TILES
    bq, bk = TENSOR_CORE_BACKWARD_TILES
    fwd = pass_ledger("forward", w.n, w.n, w.d, w.d, block_q=fq, block_k=fk, save_lse=True,
                      dtype=w.dtype)  # fmt: skip
    bwd = pass_ledger("backward", w.n, w.n, w.d, w.d, block_q=bq, block_k=bk, dtype=w.dtype)
    return w.batch_heads * (fwd.lanes[lane].total_bytes + bwd.lanes[lane].total_bytes)


def declared_rows(w: Workload = PAPER) -> list[DeclaredRow]:
    """Our closed-form declared ledgers for the workload, all heads, in bytes."""
    br, bc = algorithm1_tiles(w)
    alg1 = _training(w, br, bc, "kv-outer")
    fq, fk = TENSOR_CORE_FORWARD_TILES
    bq, bk = TENSOR_CORE_BACKWARD_TILES
    tc_tiles = f"fwd {fq}x{fk}, bwd {bq}x{bk}"
    return [
        DeclaredRow("dense lane, Algorithm 1 tiles", "dense", f"{br}x{bc}", "kv-outer",
                    w.batch_heads * alg1.lanes["dense"].total_bytes),
        DeclaredRow("tiled lane, Algorithm 1 tiles", "tiled", f"{br}x{bc}", "kv-outer",
                    w.batch_heads * alg1.lanes["tiled"].total_bytes),
        DeclaredRow("dense lane, tensor-core tiles", "dense", tc_tiles, "q-outer",
                    tensor_core_training_bytes(w, "dense")),
        DeclaredRow("tiled lane, tensor-core tiles", "tiled", tc_tiles, "q-outer",
                    tensor_core_training_bytes(w, "tiled")),
    ]  # fmt: skip


@dataclass(frozen=True)
class FlopCheck:
    """One printing's FLOP row against the workload's count."""

    workload_flops: int
    paper_gflops: float  # standard attention's
    ratio: float  # workload / paper
    flash_ms: float
    # FlashAttention's rate over the printing's runtime: by the workload's count, by the paper's.
    workload_tflops_per_s: float
    paper_tflops_per_s: float


def flop_check(w: Workload = PAPER, figure: PaperFigure = PAPER_FIGURES[0]) -> FlopCheck:
    """A printing's standard-attention GFLOPs beside the workload's training FLOPs."""
    flops = w.training_flops()
    seconds = figure.flash_ms * 1e-3
    return FlopCheck(
        flops,
        figure.standard_gflops,
        flops / (figure.standard_gflops * 1e9),
        figure.flash_ms,
        flops / seconds / 1e12,
        figure.flash_gflops * 1e9 / seconds / 1e12,
    )


def flop_reading(w: Workload = PAPER) -> str:
    """One sentence on the paper's GFLOPs row against the workload, over both printings."""
    checks = [flop_check(w, f) for f in PAPER_FIGURES]
    first, fig = checks[0], PAPER_FIGURES[0]
    gflops = sorted({(f.standard_gflops, f.flash_gflops) for f in PAPER_FIGURES})
    same = "both printings give" if len(gflops) == 1 else "the June 2022 text gives"
    runs = " and ".join(f"{c.flash_ms} ms" for c in checks)
    return (
        f"The workload is 3.5 x 4·B·H·N²·d = {first.workload_flops / 1e12:.3f} TFLOP, "
        f"{first.ratio:.1f}x the {first.paper_gflops} GFLOPs {same} standard attention "
        f"({fig.flash_gflops} for FlashAttention); no factor of the workload (B = {w.batch}, "
        f"H = {w.heads}, N/d = {w.n // w.d}) accounts for that, so the row is not this "
        f"workload's FLOPs. Over FlashAttention's runtimes ({runs}) the workload's count "
        "gives "
        + " and ".join(f"{c.workload_tflops_per_s:.0f}" for c in checks)
        + " TFLOP/s, the paper's "
        + " and ".join(f"{c.paper_tflops_per_s:.1f}" for c in checks)
        + "."
    )


def sources() -> str:
    """One sentence saying where each kind of figure in the check comes from."""
    june, revised = PAPER_FIGURES
    return (
        "Sources: the paper's figures are read off Figure 2 (left) of arXiv 2205.14135, "
        f"{june.source} and {revised.source}; the declared ones are this project's "
        "closed-form ledgers (exact integers); the measured ones Nsight Compute's DRAM "
        "counters in the bundled GPU report."
    )


def reading(w: Workload = PAPER) -> str:
    """One sentence on where the declared ledgers meet the paper's figures and why not."""
    rows = {r.label: r for r in declared_rows(w)}
    tiled = rows["tiled lane, Algorithm 1 tiles"].gb
    dense = rows["dense lane, Algorithm 1 tiles"].gb
    first, later = PAPER_FIGURES
    return (
        f"At Algorithm 1's tiles the tiled ledger declares {tiled:.2f} GB, "
        f"{tiled / first.flash_gb:.0%} of the paper's {first.flash_gb} GB, and the dense lane "
        f"{dense:.1f} GB, {dense / later.standard_gb:.0%} of the revision's "
        f"{later.standard_gb} GB and {dense / first.standard_gb:.0%} of the June 2022 text's "
        f"{first.standard_gb} GB: the ledger moves each N x N matrix (S, P, dP, dS) once per "
        "declared write and read at 2 bytes, so a measured implementation that keeps one in "
        "float32 or adds an elementwise pass over it moves more."
    )


@dataclass(frozen=True)
class MeasuredRow:
    """One path's DRAM bytes on the workload, as a GPU report's "dram" block recorded them."""

    label: str
    read_bytes: int
    write_bytes: int
    declared_bytes: int | None  # the path's declared ledger at its own tiles (None: peers)
    reading: str = ""  # compute.gpu.report.dram_reading of the path

    @property
    def gb(self) -> float:
        return (self.read_bytes + self.write_bytes) / GB


def is_workload(report: dict, w: Workload = PAPER) -> bool:
    """Whether a GPU report measured the workload's training step (any device)."""
    c = report["config"]
    return (
        (c["n"], c["n_keys"], c["d"], c["d_v"], c["batch_heads"], c["dtype"])
        == (w.n, w.n, w.d, w.d, w.batch_heads, w.dtype)
        and not c["causal"]
        and c.get("pass_name") == "training"
    )


def measured_rows(reports: list[dict], w: Workload = PAPER) -> tuple[dict | None, list]:
    """The report of `reports` whose "dram" block measured the workload (the last one
    recorded), and its paths' measured bytes (no such report: None and no rows)."""
    found = [r for r in reports if r.get("dram") and is_workload(r, w)]
    if not found:
        return None, []
    from .gpu.report import dram_reading  # no CuPy: the report module reads JSON only

    report = found[-1]
    block = report["dram"]
    rows = []
    for e in block["paths"]:
        m = e.get("measured")
        if m is None:
            continue
        name = e["path"] + (f" {e['order']}" if e["path"] == "tiled" else "")
        dec = e.get("declared")
        reading = dram_reading(e, block["score_bytes"], block["l2_bytes"])
        rows.append(MeasuredRow(name, m["dram_read_bytes"], m["dram_write_bytes"],
                                None if dec is None else dec["bytes"], reading))  # fmt: skip
    return report, rows


def measured_reading(rows: list[MeasuredRow], device: str) -> str:
    """One sentence setting the measured bytes beside the paper's (empty without the dense
    path and a fused one)."""
    by = {r.label.split()[0]: r for r in rows}
    fused = by.get("flash") or by.get("tiled")
    if "dense" not in by or fused is None:
        return ""
    dense = by["dense"]
    first, later = PAPER_FIGURES

    def of_declared(r: MeasuredRow) -> str:
        return "" if not r.declared_bytes else f", {r.gb * GB / r.declared_bytes:.0%} of its ledger"

    return (
        f"Measured on the {device}: DRAM moved {dense.gb:.1f} GB for the dense path"
        f"{of_declared(dense)} (the paper's standard attention: {later.standard_gb} to "
        f"{first.standard_gb} GB) and {fused.gb:.2f} GB for {fused.label}{of_declared(fused)} "
        f"(the paper's FlashAttention: {first.flash_gb} GB). Dense: {dense.reading}. "
        f"{fused.label.capitalize()}: {fused.reading}."
    )
