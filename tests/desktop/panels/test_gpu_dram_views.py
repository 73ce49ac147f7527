"""The GPU panel's DRAM view and paper check, offscreen, on a version-4 report."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from compute import paper_check as pc  # noqa: E402
from compute import pass_ledger  # noqa: E402
from compute.gpu import DeviceStatus, dram  # noqa: E402
from compute.gpu.bench import BenchConfig  # noqa: E402
from compute.gpu.report import VERSION, bundled_report, split_reports  # noqa: E402

NO_GPU = DeviceStatus(False, "No CUDA device was found.")


def _measured(read: int, write: int) -> dict:
    k = dram.KernelMetrics(1, "k", read, write, 75.0, 1000.0)
    return dram.summarize([k])


def _report(cfg: BenchConfig) -> dict:
    """A version-4 report of cfg with the tiled, dense, flash and a peer path."""
    tiled = {"path": "tiled", "order": "q-outer", "block_q": cfg.block_q,
             "block_k": cfg.block_k, "pass": cfg.pass_name}  # fmt: skip
    led = dram.declared(cfg, tiled)
    # Counted per head: the ledger's own counts, as the teaching kernel's build reports them.
    counts = pass_ledger(cfg.pass_name, cfg.n, cfg.n, cfg.d, cfg.d, block_q=cfg.block_q,
                         block_k=cfg.block_k, dtype=cfg.dtype).lanes["tiled"].counts  # fmt: skip
    per_head = {t: dict(rw) for t, rw in counts.items()}
    flash = {"path": "flash", "forward_tiles": [128, 128], "backward_tiles": [64, 128]}
    entries = [
        {**tiled, "counts_kernel": per_head, "measured": _measured(led["bytes"] // 4, 1000)},
        {"path": "dense", "measured": _measured(10**9, 10**9)},
        {**flash, "measured": _measured(5 * 10**7, 10**7)},
        {"path": "sdpa-cudnn", "measured": _measured(4 * 10**7, 10**7)},
        {"path": "fa4", "error": "FA4 (flash_attn.cute) is not importable here"},
    ]
    for e in entries:
        e["declared"] = dram.declared(cfg, e)
    old = bundled_report()["reports"][-1]
    config = {**old["config"], "n": cfg.n, "n_keys": cfg.n, "d": cfg.d, "d_v": cfg.d,
              "batch_heads": cfg.batch_heads, "dtype": cfg.dtype, "pass_name": cfg.pass_name,
              "causal": False}  # fmt: skip
    return {**old, "version": VERSION, "config": config, "results": [], "sweep": None,
            "dram": dram.dram_block(cfg, entries, 60 * 2**20)}  # fmt: skip


PAPER_CFG = BenchConfig(n=1024, d=64, dtype="float16", batch_heads=1024, block_q=32,
                        block_k=32, pass_name="training")  # fmt: skip


def test_path_bars_fractions_and_per_tensor_segments():
    from desktop.panels.gpu.dram_view import path_bars

    rep = split_reports(_report(PAPER_CFG))[0]
    bars = {b.name: b for b in path_bars(rep)}
    tiled = bars["tiled q-outer"]
    # Per tensor where the kernel counted them, summing to the declared bytes.
    assert len(tiled.declared) > 3
    assert sum(s.bytes for s in tiled.declared) == tiled.scale_bytes
    assert sum(s.bytes for s in tiled.measured) == tiled.scale_bytes // 4 + 1000
    assert [s.label for s in bars["dense"].declared] == ["declared"]
    peer = bars["sdpa-cudnn"]
    assert peer.declared == [] and peer.scale_bytes == bars["flash"].scale_bytes
    assert bars["fa4"].measured == [] and "not measured" in bars["fa4"].reading


def test_panel_shows_the_bundled_measurement_and_paper_check(qtbot):
    from desktop.panels.gpu.panel import GpuPanel

    panel = GpuPanel(device=NO_GPU)
    qtbot.addWidget(panel)
    reports = split_reports(bundled_report())
    panel.set_reports(reports)
    assert not panel.dram_toggle.isChecked()  # folded until a DRAM report is chosen
    paper, measured = pc.measured_rows(reports)
    assert paper is not None and paper["device"]["name"] == "NVIDIA H200"
    panel.pass_combo.setCurrentText("training")
    labels = [panel.selector.itemText(i) for i in range(panel.selector.count())]
    panel.selector.setCurrentIndex(labels.index(next(t for t in labels if "DRAM bytes" in t)))
    view = panel.dram_view
    assert panel.current_report() is paper
    assert panel.dram_toggle.isChecked() and not panel.dram_tabs.isHidden()
    assert [b.name for b in view.bars] == [
        "tiled q-outer+kv-outer", "tiled kv-outer+kv-outer", "dense", "flash", "sdpa-flash",
        "sdpa-cudnn", "fa4",
    ]  # fmt: skip
    assert "does not fit in the" in view.title.text()
    dense = next(e for e in paper["dram"]["paths"] if e["path"] == "dense")
    ratio = dense["measured"]["dram_bytes"] / dense["declared"]["bytes"]
    assert f"3. dense: DRAM moved {ratio:.0%}" in view.readings.text()
    # The teaching kernel's declared bar is split per tensor (its counted build), summing to
    # the ledger's bytes: the kernel's counts equal the ledger's.
    tiled = view.bars[0]
    assert len(tiled.declared) > 3 and sum(s.bytes for s in tiled.declared) == tiled.scale_bytes
    # The paper check lists the paper, the declared ledgers and the measured paths.
    table = panel.paper_view.table
    source = [table.item(r, table.columnCount() - 1).text() for r in range(table.rowCount())]
    assert source[:2] == [f"{f.label}: HBM reads + writes" for f in pc.PAPER_FIGURES]
    assert sum(t.startswith("declared ledger") for t in source) == 4
    assert sum(t.startswith("measured DRAM on NVIDIA H200: ") for t in source) == len(measured)
    assert len(measured) == 6  # every path but FA4, which was not installed
    dense_row = source.index("measured DRAM on NVIDIA H200: dense")
    dense = next(m for m in measured if m.label == "dense")
    assert table.item(dense_row, 0).text() == f"{dense.gb:.3f}"
    assert "14.4x" in panel.paper_view.notes.text()
    assert pc.measured_reading(measured, "NVIDIA H200") in panel.paper_view.notes.text()
    # A timing report of the same pass shows the measurement recorded beside it.
    panel.selector.setCurrentIndex(0)
    assert view.bars
    panel.shutdown()


def test_report_without_dram_says_so(qtbot):
    from desktop.panels.gpu.dram_view import DramView

    view = DramView()
    qtbot.addWidget(view)
    view.show_report(split_reports(bundled_report())[0])
    assert "No DRAM measurement" in view.title.text() and view.bars == []
