"""The ledger panel: totals always in view, separate labelled figures, a legend off the curves."""

from __future__ import annotations

import numpy as np
import pytest

import compute
from desktop.panels.ledger import COLUMNS, PENS, unbreakable
from desktop.state.config import Config


def test_totals_stay_pinned_below_the_scrolling_table_in_kv_outer(window, qtbot):
    st, panel = window.state, window.ledger_panel
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(Config(order="kv-outer", save_lse=True))
    panel.table.verticalScrollBar().setValue(0)  # scrolled to the top: totals still shown
    assert panel.totals_table.isVisible()
    assert panel.totals_table.verticalHeaderItem(0).text() == "total"
    labels = [panel.table.verticalHeaderItem(r).text() for r in range(panel.table.rowCount())]
    assert "total" not in labels and len(labels) >= 7
    counts = st.trace.counts_at(st.step)
    for c, (lane, d) in enumerate(COLUMNS):
        expected = sum(counts[lane][t][d] for t in compute.TENSORS)
        assert panel.totals_table.item(0, c).text() == f"{expected:,}"


def test_bytes_and_whole_run_elements_are_separate_labelled_figures(window):
    st, panel = window.state, window.ledger_panel
    st.set_step(st.n_steps - 1)
    assert panel.dense_bytes_label.text() == "1.9 KiB as float64"  # 240 elements × 8 B
    assert panel.tiled_bytes_label.text() == "768 B as float64"  # 96 × 8
    assert panel.dense_run_label.text() == "of 240 in the run"
    assert panel.tiled_run_label.text() == "of 96 in the run"


def test_sweep_legend_sits_outside_the_plot_and_names_every_curve(window):
    panel = window.ledger_panel
    assert panel.plot.getPlotItem().legend is None  # nothing drawn over the curves
    text = panel.legend_label.text()
    for _colour, _w, _style, name in PENS.values():
        assert unbreakable(name) in text
    assert "#7f8c8d" not in text  # the old low-contrast grey is gone


@pytest.mark.parametrize("pass_name", ["backward", "training"])
def test_sweep_plots_the_chosen_pass_totals(window, qtbot, pass_name):
    from PySide6.QtWidgets import QComboBox

    import compute
    from desktop.panels.ledger import SWEEP_N, sweep

    combo = window.findChild(QComboBox, "pass_combo")
    combo.setCurrentIndex(combo.findData(pass_name))
    qtbot.waitUntil(lambda: window.state.trace.pass_name == pass_name, timeout=5000)
    qtbot.waitUntil(lambda: "plots" not in window.state.pending_parts, timeout=5000)
    panel, cfg = window.ledger_panel, window.state.config
    data = sweep(cfg, 1000)
    i = int(np.flatnonzero(SWEEP_N == 18)[0])
    led = compute.pass_ledger(
        pass_name, 18, 18, cfg.d, cfg.dv, block_q=cfg.block_q, block_k=cfg.block_k,
        order="kv-outer", causal=cfg.causal, save_lse=cfg.save_lse,
    )  # fmt: skip
    assert data["dense"][i] == led.lanes["dense"].total_elements
    assert data["kv-outer"][i] == led.lanes["tiled"].total_elements
    kv_line = panel._lines["kv-outer"]
    assert kv_line.isVisible() == (pass_name == "training")  # the backward has one order
    assert (unbreakable("tiled (K/V outer)") in panel.legend_label.text()) == (
        pass_name == "backward"
    )
    assert f"{pass_name} pass" in panel.plot_note.text()


def test_sweep_axis_reads_plain_powers_of_ten_past_a_billion(window, qtbot):
    from PySide6.QtWidgets import QComboBox

    combo = window.findChild(QComboBox, "pass_combo")
    combo.setCurrentIndex(combo.findData("training"))  # its curves reach 2.9e8 at N = 4096
    qtbot.waitUntil(lambda: window.state.trace.pass_name == "training", timeout=5000)
    window.ledger_panel.plot.grab()  # the axis picks its ticks (and any SI factor) on paint
    axis = window.ledger_panel.plot.getPlotItem().getAxis("left")
    assert axis.autoSIPrefixScale == 1.0
    assert "1e+" not in axis.labelString()


def test_the_wheel_never_zooms_a_plot_away(window, qtbot):
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    for plot in (window.ledger_panel.plot,):
        view = plot.getPlotItem().getViewBox()
        before = view.viewRange()
        centre = QPointF(plot.viewport().rect().center())
        for _ in range(20):
            wheel = QWheelEvent(
                centre, QPointF(plot.viewport().mapToGlobal(centre.toPoint())), QPoint(0, 0),
                QPoint(0, 120), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                Qt.ScrollPhase.NoScrollPhase, False,
            )  # fmt: skip
            QApplication.sendEvent(plot.viewport(), wheel)
        assert view.viewRange() == before
    backward = window.stats_panel.backward.plot.getPlotItem()
    for item in [backward, *window.stats_panel._items.values()]:
        assert item.getViewBox().state["mouseEnabled"] == [False, False]


def test_the_sweep_follows_a_block_change_and_back(window, qtbot):
    """The plot keeps what it shows while the sweep is the same (a new seed) and follows
    every change of what the sweep depends on, with the plots' part: until that part
    comes, no line of the old sweep is shown beside the new configuration."""
    from desktop.panels.ledger import sweep

    st, panel = window.state, window.ledger_panel
    on_arrival = []  # (sweep covered, plots pending) as the first tier arrives
    st.sigTraceChanged.connect(
        lambda _t: on_arrival.append((panel.plot_cover.isVisible(), "plots" in st.pending_parts))
    )

    def shown(key: str) -> np.ndarray:
        return panel._lines[key].getData()[1]

    def expect(cfg: Config) -> None:
        sram = st.trace.sram_capacity or st.trace.schedule.sram_elements("tiled")
        want = sweep(cfg, sram)
        for key in ("dense", "q-outer", "kv-outer"):
            # the plot is in log mode: it shows log10 of the totals
            np.testing.assert_allclose(shown(key), np.log10(np.asarray(want[key], float)))
        totals = st.trace.totals_at(st.trace.n_steps - 1)
        marks = panel._marks.getData()[1]
        np.testing.assert_allclose(marks, np.log10([totals["dense"], totals["tiled"]]))

    base = Config(input="random", seed=3)
    for cfg in (base, base.replace(seed=4), base.replace(block_q=3, block_k=3), base):
        with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
            st.set_config(cfg)
        qtbot.waitUntil(lambda: "plots" not in st.pending_parts, timeout=10_000)
        expect(st.config)
    # a new seed keeps its sweep in sight; each block change hides it until its part
    assert on_arrival == [(False, True), (False, True), (True, True), (True, True)]
    assert not panel.plot_cover.isVisible()  # (each part uncovered it)
    assert not np.array_equal(
        np.asarray(sweep(base.replace(block_q=3, block_k=3), 1000)["q-outer"]),
        np.asarray(sweep(base, 1000)["q-outer"]),
    )  # the block change is one the plot must show


def test_new_inputs_of_the_same_sizes_leave_the_sweep_plot_alone(window, qtbot, monkeypatch):
    """The sweep depends on sizes and blocks, not on the inputs: a new seed hands pyqtgraph
    nothing (its lines are not set again), a new block size does."""
    st, panel = window.state, window.ledger_panel

    def plotted() -> None:  # the plots come as a part after the first tier
        qtbot.waitUntil(lambda: "plots" not in st.pending_parts, timeout=10_000)

    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(Config(n=40, d=3, dv=3, block_q=4, block_k=5, input="random", seed=1))
    plotted()
    calls = []
    line = panel._lines["dense"]
    monkeypatch.setattr(line, "setData", lambda *a, **k: calls.append(a))
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.update_config(seed=2)
    plotted()
    assert calls == []
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.update_config(block_q=8)
    plotted()
    assert len(calls) == 1


def _table_texts(panel) -> list[list[str]]:
    rows = []
    for table in (panel.table, panel.totals_table):
        for r in range(table.rowCount()):
            head = table.verticalHeaderItem(r)
            cells = [table.item(r, c).text() for c in range(table.columnCount())]
            rows.append([head.text() if head else "", *cells])
    labels = (panel.dense_total_label, panel.tiled_total_label, panel.ratio_label,
              panel.dense_bytes_label, panel.tiled_bytes_label, panel.dense_run_label,
              panel.tiled_run_label)  # fmt: skip
    return [*rows, [w.text() for w in labels]]


@pytest.mark.parametrize("pass_name", ["forward", "training"])
def test_new_inputs_keep_the_table_and_it_still_follows_step_and_dtype(
    window, qtbot, monkeypatch, pass_name
):
    """New inputs of the same sizes keep the trace's timelines, so the counts: the table is
    not written again, and it reads as a fresh build's; a step, a dtype (its bytes) and a
    block size change it as before."""
    st, panel = window.state, window.ledger_panel
    base = Config(n=40, d=3, dv=3, block_q=4, block_k=5, input="random", seed=1,
                  pass_name=pass_name)  # fmt: skip
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(base)
    st.set_step(7)
    before = _table_texts(panel)
    writes = []
    real_set = panel._set
    monkeypatch.setattr(panel, "_set", lambda *a, **k: (writes.append(a), real_set(*a, **k)))
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.update_config(seed=2)
    assert st.step == 7 and writes == [] and _table_texts(panel) == before

    def fresh(config: Config) -> list[list[str]]:  # another window's panel, built anew
        from desktop.window.main_window import MainWindow

        other = MainWindow(persist=False)
        qtbot.addWidget(other)
        with qtbot.waitSignal(other.state.sigTraceChanged, timeout=10_000):
            other.state.set_config(config)
        other.state.set_step(st.step)
        return _table_texts(other.ledger_panel)

    assert _table_texts(panel) == fresh(base.replace(seed=2))
    st.set_step(12)
    assert writes and _table_texts(panel) == fresh(base.replace(seed=2))
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.update_config(dtype="float16")
    assert "as float16" in panel.dense_bytes_label.text()
    assert _table_texts(panel) == fresh(base.replace(seed=2, dtype="float16"))
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.update_config(block_q=8)
    assert _table_texts(panel) == fresh(base.replace(seed=2, dtype="float16", block_q=8))
