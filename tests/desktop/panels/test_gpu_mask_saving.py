"""The GPU panel's mask view on the bundled H200 recording: the recording is the one under
assets/benchmarks/masks/, its counted transfers are today's closed-form ledgers, and the
view pairs each mask with its unmasked run and puts the window's kind of mask first."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from compute import closed_form_ledger  # noqa: E402
from compute.gpu import DeviceStatus  # noqa: E402
from compute.mask import Mask  # noqa: E402
from desktop.panels.gpu import mask_saving as ms  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
NO_GPU = DeviceStatus(False, "No CUDA device was found.")


def test_the_bundled_copy_is_the_recorded_one_and_counts_its_ledgers():
    bundled = ROOT / "compute" / "gpu" / "reports" / f"{ms.BUNDLED}.json"
    recorded = ROOT / "assets" / "benchmarks" / "masks" / f"{ms.BUNDLED}.json"
    assert bundled.read_bytes() == recorded.read_bytes()
    reports = ms.bundled()
    assert len(reports) == 14 and {r["device"]["name"] for r in reports} == {"NVIDIA H200"}
    for report in reports:
        c, (row,) = report["config"], report["results"]
        mask = ms.report_mask(report)
        assert report["command"].startswith("flash-explorer bench ")
        ledger = closed_form_ledger(
            c["n"], c["n_keys"], c["d"], c["d_v"], block_q=row["block_q"],
            block_k=row["block_k"], order=row["order"], causal=mask, dtype=c["dtype"],
        ).lanes["tiled"].counts  # fmt: skip
        assert row["counts_kernel"] == {t: dict(ledger[t]) for t in row["counts_kernel"]}
        assert row["counts_match"] and row["max_abs_err"] < 2e-3


def test_each_mask_is_paired_with_its_unmasked_run():
    rows = ms.savings(ms.bundled())
    labels = {(s.label, s.order) for s in rows}
    assert len(rows) == 10 == len(labels)  # five masks, both orders
    causal = next(s for s in rows if s.mask == Mask.causal_mask() and s.n_k == s.n_q)
    assert (causal.visits, causal.visits_all) == (32 * 33 // 2, 32 * 32)
    top = [s for s in rows if s.mask == Mask.causal_mask(top_left=True)]
    kv = next(s for s in top if s.order == "kv-outer")
    assert (kv.kv_tiles, kv.kv_tiles_all) == (32, 64)  # keys 2048..4095: never loaded
    for s in rows:  # the unmasked partner has the same shape, so more tiles and bytes
        assert s.visits < s.visits_all and s.bytes < s.bytes_none
        assert s.counts_match


def test_the_windows_kind_of_mask_comes_first_and_is_read():
    rows = ms.savings(ms.bundled())
    first = ms.ranked(rows, Mask(3, 0), 12, 12)[0]
    assert first.mask == Mask(256, 0)  # the same kind: a causal window
    text = ms.reading(rows, Mask(3, 0), 12, 12)
    assert "window (256, 0)" in text and "the same kind of mask" in text
    assert "equal to the closed-form ledger" in text
    top = ms.ranked(rows, Mask.causal_mask(top_left=True), 6, 9)[0]
    assert top.mask == Mask.causal_mask(top_left=True) and top.n_k == 2 * top.n_q
    packed = ms.ranked(rows, Mask(-1, 0, False, (2, 4)), 6, 6)[0]
    assert packed.mask.lengths
    assert "every tile is loaded" in ms.reading(rows, Mask(), 6, 6)
    assert "No mask-saving measurement" in ms.reading([], Mask(3, 0), 12, 12)


def test_the_view_follows_the_mask_and_sits_in_the_gpu_panel(qtbot):
    from desktop.panels.gpu.panel import GpuPanel
    from desktop.state.config import Config

    panel = GpuPanel(device=NO_GPU)
    qtbot.addWidget(panel)
    tabs = [panel.dram_tabs.tabText(i) for i in range(panel.dram_tabs.count())]
    assert "Masks: skipped tiles" in tabs
    view = panel.mask_view
    assert view.table.rowCount() == 10
    view.follow(Config(n=40, packed="8,32", causal=True))
    assert view.rows[0].mask.lengths and view.table.item(0, 0).font().bold()
    assert not view.table.item(view.table.rowCount() - 1, 0).font().bold()
    assert view.summary.text().startswith("Your mask, causal bottom-right, packed 8+32 at N = 40")
    view.follow(Config(n=40))
    assert "every tile is loaded" in view.summary.text()
    panel.shutdown()
