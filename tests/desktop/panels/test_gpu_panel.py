"""The GPU side panel, offscreen, on the H200 recordings: the one bundled in the package
(compute/gpu/reports/) and the CLI's records under assets/benchmarks/."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from compute.gpu import DeviceStatus  # noqa: E402
from compute.gpu.bench import BenchCancelled  # noqa: E402
from compute.gpu.report import bundled_report, split_reports  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parents[3] / "assets" / "benchmarks"
NO_GPU = DeviceStatus(False, "No CUDA device was found.")
GPU = DeviceStatus(True, name="Fake GPU", compute_capability=(9, 0), shared_mem_per_block=232448)


@pytest.fixture
def panel_factory(qtbot):
    from desktop.panels.gpu.panel import GpuPanel

    made = []

    def make(**kwargs):
        panel = GpuPanel(device=kwargs.pop("device", NO_GPU), **kwargs)
        qtbot.addWidget(panel)
        made.append(panel)
        return panel

    yield make
    for panel in made:
        panel.shutdown()


def _cells(table, row):
    return [table.item(row, c).text() for c in range(table.columnCount()) if table.item(row, c)]


def _pick(panel, dtype, n, contains):
    for i in range(panel.selector.count()):
        text = panel.selector.itemText(i)
        full = text.startswith(f"{dtype} N={n} d=64") and "causal" not in text
        if full and contains in text:
            panel.selector.setCurrentIndex(i)
            return
    raise AssertionError(f"no report {dtype} N={n} with {contains}")


def _bundled_reports() -> list[dict]:
    return split_reports(bundled_report())


def test_bundled_report_is_a_real_h200_recording():
    data = bundled_report()
    assert data["format"] == "flash-explorer-gpu-figures"
    assert {r["device"]["name"] for r in data["reports"]} == {"NVIDIA H200"}


def test_shows_tiled_against_dense_with_counts(panel_factory):
    panel = panel_factory()
    panel.set_reports(_bundled_reports())
    forward = [r for r in bundled_report()["reports"] if r["config"]["pass_name"] == "forward"]
    assert panel.pass_combo.currentText() == "forward"
    assert panel.selector.count() == len(forward)  # the other passes: behind the pass selector
    _pick(panel, "float16", 4096, "tiled q-outer, dense")
    assert "NVIDIA H200" in panel.recorded_label.text()
    tiled, dense = _cells(panel.table, 0), _cells(panel.table, 1)
    assert tiled[:3] == ["tiled", "q-outer", "128x64"] and dense[0] == "dense"
    assert float(tiled[-1]) > 2.0  # speed-up over dense, as recorded
    counts = [_cells(panel.counts, r) for r in range(panel.counts.rowCount())]
    assert counts and all(row[-1] == "yes" for row in counts)
    assert counts[0][:2] == ["Q", "read"]


def test_sweep_heatmap_marks_sliders_and_best(panel_factory):
    panel = panel_factory()
    panel.set_reports(_bundled_reports())
    _pick(panel, "float32", 1024, "tiled q-outer, dense")  # no sweep of its own: dtype's sweep
    assert panel.sweep_view.image.image.shape == (3, 3)
    panel.set_blocks(64, 32)
    cell = panel.sweep_view.current_rect.rect()
    assert panel.sweep_view.current_rect.isVisible()
    assert (round(cell.x()), round(cell.y())) == (0, 1)  # block_k 32 is column 0, block_q 64 row 1
    assert "sliders: 64×32" in panel.sweep_view.sweep_note.text()
    bx, by = panel.sweep_view.best_mark.getData()
    assert (int(bx[0]), int(by[0])) == (1, 2)  # 128x64 was fastest
    panel.set_blocks(100, 50)
    assert "not in this sweep" in panel.sweep_view.sweep_note.text()
    assert not panel.sweep_view.current_rect.isVisible()


def test_bad_files_become_messages(panel_factory, tmp_path):
    panel = panel_factory()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert not panel.load_report(bad)
    assert panel.message.text() == "Could not open bad.json: it is not readable JSON"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something else"}))
    assert not panel.load_report(other)
    assert "does not hold a GPU bench report" in panel.message.text()
    assert not panel.load_report(tmp_path / "missing.json")


def test_no_gpu_shows_the_reason_and_cannot_run(panel_factory):
    panel = panel_factory(device=NO_GPU)
    assert panel.device_label.text() == "No GPU benchmark here: No CUDA device was found."
    assert not panel.run_button.isEnabled()
    assert not panel.run_current()
    assert panel.message.text().endswith("No CUDA device was found.")


def test_runs_in_a_worker_with_progress(panel_factory, qtbot):
    recorded = _bundled_reports()[1]
    seen = []

    def runner(config, *, progress, should_stop):
        seen.append(config)
        for i in range(3):
            progress(i, 3, f"step {i}")
        return recorded

    panel = panel_factory(device=GPU, runner=runner)
    panel.set_blocks(128, 64)
    with qtbot.waitSignal(panel.sigReportShown, timeout=5000):
        assert panel.run_current()
    qtbot.waitUntil(lambda: panel._thread is None, timeout=5000)
    assert seen[0].block_q == 128 and seen[0].block_k == 64 and seen[0].sweep_blocks
    assert panel.table.rowCount() == len(recorded["results"])
    assert panel.run_button.isEnabled()


def test_cancel_stops_the_worker(panel_factory, qtbot):
    def runner(config, *, progress, should_stop):
        while not should_stop():
            time.sleep(0.01)
        raise BenchCancelled("benchmark cancelled")

    panel = panel_factory(device=GPU, runner=runner)
    assert panel.run_current()
    assert panel.cancel_button.isEnabled()
    panel.cancel()
    qtbot.waitUntil(lambda: panel._thread is None, timeout=5000)
    assert panel.message.text() == "Benchmark cancelled."


def test_failures_show_message_and_detail(panel_factory, qtbot):
    def runner(config, *, progress, should_stop):
        raise RuntimeError("kernel compile error: NVRTC_ERROR_COMPILATION\nline 12: error")

    panel = panel_factory(device=GPU, runner=runner)
    panel.run_current()
    qtbot.waitUntil(lambda: panel._thread is None, timeout=5000)
    assert panel.message.text() == (
        "The benchmark failed: kernel compile error: NVRTC_ERROR_COMPILATION"
    )
    assert "line 12: error" in panel.detail.toPlainText()


def test_sliders_settling_rerun_once(panel_factory, qtbot):
    calls = []

    def runner(config, *, progress, should_stop):
        calls.append((config.block_q, config.block_k))
        return _bundled_reports()[1]

    panel = panel_factory(device=GPU, runner=runner)
    panel.auto_check.setChecked(True)
    for bq in (16, 32, 64):
        panel.set_blocks(bq, 64)
    qtbot.waitUntil(lambda: len(calls) == 1 and panel._thread is None, timeout=5000)
    assert calls == [(64, 64)]


CLI_REPORT = BENCHMARKS / "bench_cli_float16_sweep_h200.json"
CLI_CAUSAL = BENCHMARKS / "bench_cli_float32_causal_h200.json"


def test_single_cli_report_with_its_own_sweep(panel_factory):
    panel = panel_factory()
    assert panel.load_report(CLI_REPORT)
    assert panel.selector.count() == 1
    kernels = [_cells(panel.table, r)[0] for r in range(panel.table.rowCount())]
    assert kernels == ["tiled", "dense", "flash"]  # recorded as "fast" (version 1), read as flash
    assert panel.sweep_view.image.image.shape == (4, 4)
    panel.set_blocks(128, 64)
    assert (
        "sliders: 128×64" in panel.sweep_view.sweep_note.text()
        and "N=4096" in panel.sweep_view.sweep_note.text()
    )


def test_version_2_report_names_the_flash_kernel(panel_factory):
    panel = panel_factory()
    path = BENCHMARKS / "bench_cli_float16_n2048_h200.json"
    assert json.loads(path.read_text())["version"] == 2
    assert panel.load_report(path)
    assert panel.current_report()["config"]["pass_name"] == "forward"  # read as version 3
    kernels = [_cells(panel.table, r)[0] for r in range(panel.table.rowCount())]
    assert kernels == ["tiled", "dense", "flash"]


def test_failed_path_is_a_row_message(panel_factory):
    panel = panel_factory()
    assert panel.load_report(CLI_CAUSAL)
    flash = _cells(panel.table, 2)
    assert flash[0] == "flash" and flash[-1].startswith("error: flash_attention takes float16")
    assert panel.table.columnSpan(2, 3) == panel.table.columnCount() - 3
    assert "no block sweep" in panel.sweep_view.sweep_note.text()


def test_attach_follows_the_sliders_and_stops_on_close(qtbot, monkeypatch):
    from types import SimpleNamespace

    from PySide6.QtCore import QObject, Signal
    from PySide6.QtWidgets import QMainWindow

    import desktop.panels.gpu.panel as gp

    class State(QObject):
        sigConfigChanged = Signal(object)

    class Window(QMainWindow):
        def __init__(self):
            super().__init__()
            self.state, self.state.config, self.added = State(), None, []

        def add_side_panel(self, widget, title, key=None, beside="ledger"):
            self.added.append((title, key, beside))
            widget.setParent(self)

    monkeypatch.setattr(gp, "status", lambda: NO_GPU)
    window = Window()
    qtbot.addWidget(window)
    panel = gp.attach_gpu_panel(window)
    assert window.added == [("GPU benchmark", "gpu", "stats")]
    assert panel.selector.count() > 1  # the bundled H200 recording is shown at once
    window.state.sigConfigChanged.emit(SimpleNamespace(block_q=32, block_k=16, order="kv-outer"))
    assert (panel.blocks, panel.order) == ((32, 16), "kv-outer")
    stopped = []
    monkeypatch.setattr(panel, "shutdown", lambda: stopped.append(True))
    window.close()
    assert stopped == [True]


def test_gpu_tab_sits_beside_the_statistics_with_table_and_heatmap_together(window):
    from PySide6.QtCore import Qt

    gpu = window.docks["gpu"]
    assert window.dockWidgetArea(gpu) == Qt.DockWidgetArea.RightDockWidgetArea
    assert gpu in window.tabifiedDockWidgets(window.docks["stats"])
    gpu.raise_()
    panel = window.gpu_panel
    panel.resize(430, 900)  # the side dock's width: the results stack above the heatmap
    assert panel.minimumSizeHint().width() <= 430
    top = panel.sweep_view.mapTo(panel, panel.sweep_view.rect().topLeft()).y()
    # The results a path per column there (issue 29 item 17), and the heatmap shows too.
    assert panel.by_measure.isVisibleTo(panel) and top + 150 < 900
    label = panel.sweep_view.plot.getPlotItem().getAxis("left").labelText
    assert label == "B_r"  # short: a rotated long label is cut on a short plot


def test_pass_selector_shows_backward_reports_and_runs_that_pass(panel_factory, qtbot):
    seen = []
    recorded = split_reports(
        json.loads((BENCHMARKS / "gpu_bench_cli_backward_h200.json").read_text())
    )

    def runner(config, *, progress, should_stop):
        seen.append(config)
        return recorded[0]

    panel = panel_factory(device=GPU, runner=runner)
    panel.set_reports(_bundled_reports() + recorded)
    assert panel.pass_combo.currentText() == "forward"  # opens on the forward
    panel.pass_combo.setCurrentText("backward")
    labels = [panel.selector.itemText(i) for i in range(panel.selector.count())]
    assert labels and all("backward" in label for label in labels)
    assert panel.current_report()["config"]["pass_name"] == "backward"
    assert "backward pass" in panel.recorded_label.text()
    counts = [_cells(panel.counts, r) for r in range(panel.counts.rowCount())]
    assert any(row[0] == "dQ" for row in counts) and all(row[-1] == "yes" for row in counts)
    with qtbot.waitSignal(panel.sigReportShown, timeout=5000):
        assert panel.run_current()
    qtbot.waitUntil(lambda: panel._thread is None, timeout=5000)
    assert seen[0].pass_name == "backward"


def test_a_pass_with_no_report_says_so(panel_factory):
    panel = panel_factory()
    panel.set_reports([r for r in _bundled_reports() if r["config"]["pass_name"] == "forward"])
    panel.pass_combo.setCurrentText("training")
    assert panel.selector.count() == 0 and panel.table.rowCount() == 0
    assert panel.message.text().startswith("No training report here")
    assert panel.current_report() is None


@pytest.mark.parametrize("pass_name", ["backward", "training"])
def test_bundled_report_holds_backward_and_training_rows(panel_factory, pass_name):
    panel = panel_factory()
    panel.set_reports(_bundled_reports())
    panel.pass_combo.setCurrentText(pass_name)
    _pick(panel, "float16", 4096, "sdpa-cudnn")
    kernels = [_cells(panel.table, r)[0] for r in range(panel.table.rowCount())]
    assert kernels == ["tiled", "dense", "flash", "sdpa-flash", "sdpa-cudnn"]
    assert all("error" not in " ".join(_cells(panel.table, r)) for r in range(len(kernels)))
    # The teaching kernel's backward sweep (training shows it too: its blocks came from it).
    assert panel.sweep_view.sweep["pass"] == "backward"
    assert "Tiled kernel (backward)" in panel.sweep_view.sweep_note.text()
    assert (not panel.counts.isHidden()) == (pass_name == "backward")


def test_every_panel_colours_the_fastest_cell_brightest(panel_factory):
    # pyqtgraph hands out one cached colormap; reversing it in place flipped every other panel.
    import numpy as np

    first, second = panel_factory(), panel_factory()
    for panel in (first, second):
        panel.set_reports(_bundled_reports())
    luts = [np.asarray(p.sweep_view.image.lut) for p in (first, second)]
    np.testing.assert_array_equal(luts[0], luts[1])
    assert luts[0][0].sum() > luts[0][-1].sum()  # low ms (fast) maps to the bright end


NO_CUPY = DeviceStatus(
    False, "CuPy is not installed, so the GPU backend is off (pip install cupy-cuda13x)."
)


def test_without_an_nvidia_gpu_it_says_so_and_disables_what_only_a_run_uses(panel_factory):
    from desktop.panels.gpu.panel import nvidia_gpu_present

    if nvidia_gpu_present():
        pytest.skip("this machine has an NVIDIA GPU: the CuPy hint is the right one here")
    panel = panel_factory(device=NO_CUPY)
    text = panel.device_label.text()
    assert "no NVIDIA GPU" in text and "pip install" not in text
    for w in (panel.run_button, panel.auto_check, panel.sweep_check, panel.n_spin, panel.bh_spin):
        assert not w.isEnabled()
    assert panel.open_button.isEnabled() and panel.pass_combo.isEnabled()


def test_the_report_picker_shows_the_whole_name_in_a_side_dock(panel_factory, qtbot):
    panel = panel_factory()
    panel.set_reports(_bundled_reports())
    panel.resize(430, 900)
    panel.show()
    qtbot.waitExposed(panel)
    longest = max(panel.selector.itemText(i) for i in range(panel.selector.count()))
    fm = panel.selector.fontMetrics()
    assert fm.horizontalAdvance(longest) + 40 <= panel.selector.width()  # text + arrow
    assert panel.selector.itemData(0, 3) == panel.selector.itemText(0)  # the tooltip: all of it
    header = panel.table.horizontalHeader()
    for i in range(panel.table.columnCount()):
        label = panel.table.horizontalHeaderItem(i).text()
        assert header.fontMetrics().horizontalAdvance(label) <= header.sectionSize(i)


def test_the_panel_takes_the_app_state_and_follows_its_blocks_and_pass(qtbot):
    from desktop.panels.gpu.panel import GpuPanel
    from desktop.state.app_state import AppState
    from desktop.state.config import Config

    state = AppState()
    state.builder.force_inline = True
    state.set_config(Config(block_q=4, block_k=3, order="kv-outer", pass_name="backward"))
    panel = GpuPanel(state, device=NO_GPU)
    qtbot.addWidget(panel)
    assert (panel.blocks, panel.order) == ((4, 3), "kv-outer")
    assert panel.pass_combo.currentText() == "backward"
    state.set_config(Config(block_q=2, block_k=2))
    assert panel.blocks == (2, 2) and panel.pass_combo.currentText() == "forward"
    panel.shutdown()


def test_in_a_side_dock_results_read_a_path_per_column_and_names_are_elided(panel_factory, qtbot):
    """Issue 29 item 17: in the 422 px side dock (1280x720 to 1600x900) the results table
    ran past its edge ("peak Mi") and a backward report's name was cut. There the results
    are a path per column, fitting the table; the picker ends in "…" with the whole name
    on hover; where wide, the table of a path per row is back."""
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication

    from compute.gpu.report import HEADER

    panel = panel_factory()
    panel.set_reports(_bundled_reports())
    panel.pass_combo.setCurrentText("backward")
    panel.resize(422, 900)
    panel.show()
    qtbot.waitExposed(panel)
    QApplication.processEvents()
    report = panel.current_report()
    assert len(report["results"]) == 5  # tiled, dense, flash, sdpa-flash, sdpa-cudnn
    by, table = panel.by_measure, panel.table
    assert by.isVisibleTo(panel) and not table.isVisibleTo(panel)
    header = by.horizontalHeader()
    assert sum(header.sectionSize(c) for c in range(by.columnCount())) <= by.viewport().width()
    ms = HEADER.index("ms")
    for j in range(by.columnCount()):
        assert by.item(ms - 1, j).text() == table.item(j, ms).text()
        assert by.item(0, j).toolTip() == table.item(j, 1).text()  # "q-outer+kv-outer"
        assert by.horizontalHeaderItem(j).toolTip().startswith(table.item(j, 0).text())
        label = by.horizontalHeaderItem(j).text()
        widest = max(header.fontMetrics().horizontalAdvance(t) for t in label.split("\n"))
        assert widest + 8 <= header.sectionSize(j)  # "sdpa-flash" read "sdpa-flas"
    selector = panel.selector
    name = selector.currentText()
    assert selector.fontMetrics().horizontalAdvance(name) > selector.width()
    shown = selector.shown_text()
    assert shown.endswith("…") and name.startswith(shown[:-1])
    QApplication.sendEvent(selector, QHelpEvent(QEvent.Type.ToolTip, QPoint(5, 5), QPoint(5, 5)))
    assert selector.toolTip() == name
    panel.resize(1400, 600)  # the bottom dock: a path per row again
    QApplication.processEvents()
    assert table.isVisibleTo(panel) and not by.isVisibleTo(panel)
