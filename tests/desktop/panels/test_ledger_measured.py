"""The ledger panel's declared-vs-measured tab, on the bundled H200 recording (no GPU)."""

from __future__ import annotations

import copy

import pyqtgraph as pg
import pytest

from compute.gpu.report import L2_CAVEAT, bundled_report, split_reports
from desktop.panels.ledger_measured import (
    X_MAX,
    LedgerMeasured,
    config_label,
    gap_reading,
    measured_reports,
    nearest,
)
from desktop.state.config import Config


@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    return measured_reports(split_reports(bundled_report()))


def _find(reports: list[dict], pass_name: str, n: int) -> int:
    return next(
        i
        for i, r in enumerate(reports)
        if (r["config"]["pass_name"], r["config"]["n"]) == (pass_name, n)
    )


def _ratio(e: dict) -> float:
    return e["measured"]["dram_bytes"] / e["declared"]["bytes"]


def test_the_recording_offers_each_pass_and_labels_it(recorded):
    assert [(r["config"]["pass_name"], r["config"]["n"]) for r in recorded] == [
        ("forward", 1024),
        ("forward", 4096),
        ("forward", 8192),
        ("training", 1024),
        ("backward", 4096),
    ]
    assert config_label(recorded[0]) == "forward, N=1024, batch·heads=8, d=64 (S 16 MiB ≤ L2)"
    assert config_label(recorded[4]).endswith("(S 1,024 MiB > L2)")


def test_nearest_takes_the_same_pass_then_the_nearest_n_on_a_log_scale(recorded):
    assert nearest(recorded, "forward", 6) == _find(recorded, "forward", 1024)
    assert nearest(recorded, "forward", 5000) == _find(recorded, "forward", 4096)
    assert nearest(recorded, "forward", 7000) == _find(recorded, "forward", 8192)
    assert nearest(recorded, "training", 64) == _find(recorded, "training", 1024)
    assert nearest(recorded, "backward", 1) == _find(recorded, "backward", 4096)
    # No recording of the pass: the nearest N of any (the later one on a tie).
    assert nearest(recorded[:3], "backward", 4096) == 1
    assert nearest(recorded[:4], "backward", 1024) == 3


@pytest.mark.parametrize("index", range(5))
def test_gap_reading_states_the_recorded_ratios_and_why(recorded, index):
    report = recorded[index]
    block = report["dram"]
    text = gap_reading(report)
    fused = [e for e in block["paths"] if e["path"] in ("tiled", "flash")]
    lo, hi = (f"{100 * f(map(_ratio, fused)):.0f}" for f in (min, max))
    assert f"fused kernels moved {lo}–{hi}% of their declared bytes" in text
    dense = next(e for e in block["paths"] if e["path"] == "dense")
    assert f"dense moved {100 * _ratio(dense):.0f}%" in text
    mib = f"S ({block['score_bytes'] / 2**20:,.0f} MiB)"
    if block["s_fits_l2"]:
        assert f"{mib} fits in the 60 MiB L2" in text
    else:
        square = {"forward": "S and P", "backward": "P, dP and dS",
                  "training": "S, P, dP and dS"}[report["config"]["pass_name"]]  # fmt: skip
        assert f"{mib} is too large for the 60 MiB L2, so {square} go to DRAM" in text
    assert f"its {len(dense['measured']['kernels'])} kernels" in text  # all moved > 125%
    assert text.count(";") == 1 and text.endswith(".") and "\n" not in text


def test_gap_reading_of_a_dense_path_that_l2_keeps(recorded):
    report = copy.deepcopy(recorded[0])
    dense = next(e for e in report["dram"]["paths"] if e["path"] == "dense")
    dense["measured"]["dram_bytes"] = dense["declared"]["bytes"] // 2
    text = gap_reading(report)
    assert "dense moved 50%: S (16 MiB) fits in the 60 MiB L2, so part of S and P never" in text
    report["dram"]["paths"] = [e for e in report["dram"]["paths"] if "declared" not in e
                               or e["declared"] is None]  # fmt: skip
    assert gap_reading(report).startswith("No path of this recording")


def _bars(view: LedgerMeasured) -> list[tuple[float, float, float]]:
    """(y, x0, width) of every bar piece drawn."""
    items = view.plot.getPlotItem().items
    return [
        (b.opts["y"][0], b.opts["x0"][0], b.opts["width"][0])
        for b in items
        if isinstance(b, pg.BarGraphItem)
    ]


def _labels(view: LedgerMeasured) -> list[str]:
    return [t.textItem.toPlainText() for t in view.plot.getPlotItem().items
            if isinstance(t, pg.TextItem)]  # fmt: skip


def test_tab_draws_declared_per_tensor_and_measured_as_fractions(window, qtbot, recorded):
    panel = window.ledger_panel
    view = panel.measured
    assert view._reports is None  # not read until the tab is first shown
    panel.views.setCurrentIndex(1)
    qtbot.waitUntil(lambda: view._reports is not None)
    assert view.combo.count() == 5
    # The reference example is a forward pass at N = 6: the forward recording nearest it.
    assert view.combo.currentIndex() == _find(recorded, "forward", 1024)
    view.combo.setCurrentIndex(_find(recorded, "forward", 4096))
    view.combo.activated.emit(view.combo.currentIndex())  # as a user's pick
    report = recorded[_find(recorded, "forward", 4096)]
    paths = [e for e in report["dram"]["paths"] if e.get("measured")]
    assert [b.name for b in view.bars] == [
        "tiled q-outer", "tiled kv-outer", "dense", "flash", "sdpa-flash", "sdpa-cudnn"
    ]  # fmt: skip
    pieces = _bars(view)
    flash_bytes = next(e for e in paths if e["path"] == "flash")["declared"]["bytes"]
    for i, e in enumerate(paths):
        upper = [p for p in pieces if p[0] == pytest.approx(i - 0.18)]
        lower = [p for p in pieces if p[0] == pytest.approx(i + 0.18)]
        if e["declared"] is None:  # a peer: measured only, against the kernel's ledger
            assert upper == []
            scale = flash_bytes
        else:
            assert sum(w for _y, _x, w in upper) == pytest.approx(1.0)
            scale = e["declared"]["bytes"]
        measured = e["measured"]["dram_bytes"] / scale
        assert sum(w for _y, _x, w in lower) == pytest.approx(min(measured, X_MAX))
    # The teaching kernels' declared bars are split per tensor (their counted build).
    assert len([p for p in pieces if p[0] == pytest.approx(-0.18)]) >= 3
    # Dense measured 4x its ledger: cut at the axis and labelled with the multiple.
    dense = next(e for e in paths if e["path"] == "dense")
    assert f"{dense['measured']['dram_bytes'] / 1e9:.3g} GB, ×{_ratio(dense):.2f} ▸" in _labels(
        view
    )
    assert view.gap.text() == gap_reading(report)
    assert "fa4: FA4 (flash_attn.cute) is not importable here" in view.details.text()
    assert "re-reads included" in view.title.text() and L2_CAVEAT in view.title.text()
    # The user's pick stays when the configuration changes.
    with qtbot.waitSignal(window.state.sigConfigChanged, timeout=10_000):
        window.state.set_config(Config(pass_name="training"))
    assert view.combo.currentIndex() == _find(recorded, "forward", 4096)


def test_tab_follows_the_pass_until_picked(qtbot, recorded):
    from desktop.state.app_state import AppState

    state = AppState()
    view = LedgerMeasured(state, reports=split_reports(bundled_report()))
    qtbot.addWidget(view)
    assert view.combo.currentIndex() == len(recorded) - 1  # no configuration yet: the last
    with qtbot.waitSignal(state.sigConfigChanged, timeout=10_000):
        state.set_config(Config())
    assert view.combo.currentIndex() == _find(recorded, "forward", 1024)
    with qtbot.waitSignal(state.sigConfigChanged, timeout=10_000):
        state.set_config(Config(pass_name="backward"))
    assert view.combo.currentIndex() == _find(recorded, "backward", 4096)
    assert "backward pass" in view.title.text()
    assert view.title.text().startswith("The recording nearest this configuration (backward,")
    view.combo.setCurrentIndex(0)
    view.combo.activated.emit(0)
    assert view.title.text().startswith("Upper bar")  # picked: no longer "nearest"


def test_no_recording_says_so(qtbot):
    view = LedgerMeasured(reports=[])
    qtbot.addWidget(view)
    assert "No recording here holds DRAM bytes" in view.title.text() and view.bars == []
