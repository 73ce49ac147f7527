"""Robustness: random control changes and steps, threaded builds, settings, screenshots."""

from __future__ import annotations

import random
import threading
import warnings

from PySide6.QtCore import QPoint, Qt, QThreadPool, QTimer
from PySide6.QtWidgets import QApplication

from desktop.state import worker
from desktop.state.config import Config
from desktop.window.main_window import MainWindow

IGNORED_QT_MESSAGES = ("propagateSizeHints",)  # the offscreen platform says this on show


def _qt_warnings(qtlog) -> list[str]:
    return [
        r.message
        for r in qtlog.records
        if r.type.name in ("QtWarningMsg", "QtCriticalMsg", "QtFatalMsg")
        and not any(s in r.message for s in IGNORED_QT_MESSAGES)
    ]


def _widgets_agree(w) -> None:
    """Every control shows the configuration the state stands for (never a mix of the
    shown and the asked-for one); when nothing is computing, that is the trace's."""
    from desktop.panels.controls import slider_from_n

    c, st = w.controls, w.state
    cfg = st.current_config
    shown = (
        c.n_spin.value(),
        c.n_slider.value(),
        c.nk_spin.value(),
        c.d_spin.value(),
        c.dv_spin.value(),
        c.bq_spin.value(),
        c.bk_spin.value(),
        c.order_combo.currentData(),
        c.causal_check.isChecked(),
        c.lse_check.isChecked(),
        c.dtype_combo.currentData(),
    )
    expected = (
        cfg.n,
        slider_from_n(cfg.n),
        cfg.n_keys or 0,
        cfg.d,
        cfg.dv,
        cfg.block_q,
        cfg.block_k,
        cfg.order,
        cfg.causal,
        cfg.save_lse,
        cfg.dtype,
    )
    assert shown == expected
    if not st.builder.busy:
        assert st.requested == st.config
        s = st.trace.schedule
        assert (s.n_q, s.d, s.block_q, s.block_k, s.order, s.causal) == (
            cfg.n, cfg.d, cfg.block_q, cfg.block_k, cfg.order, cfg.causal,
        )  # fmt: skip
        assert all(not v.isVisible() for v in w.veils)  # no veil over settled numbers
        # Streamed numbers: the lanes hold this trace's tensors, and a placeholder only
        # while its part is pending (never an image of another configuration).
        from desktop.scene.render import lane_shapes

        for lane, imgs in st.images.lanes.items():
            assert {n: i.shape for n, i in imgs.items()} == lane_shapes(st.trace, lane)
            assert st.pending_parts or not any(i.pending for i in imgs.values())


def test_soak_500_random_changes_and_steps(qtbot, qtlog, dialogs, monkeypatch):
    from desktop.scene import render

    # Every threaded build streams its second tier (the app streams only large passes),
    # so changes land while parts are pending and cancel them.
    monkeypatch.setattr(render, "STREAM_WORK", 1)
    monkeypatch.setattr(render, "BACKWARD_STREAM_WORK", 1)
    rng = random.Random(1234)
    threads_before = _python_threads()
    w = MainWindow(persist=False)
    qtbot.addWidget(w)
    w.resize(1300, 850)
    w.show()
    c, st, pb = w.controls, w.state, w.playback

    def large_n():  # tiny blocks at large N: millions of steps, the user's blocks kept
        c.bq_spin.setValue(rng.randint(1, 3))
        c.bk_spin.setValue(rng.randint(1, 3))
        c.n_spin.setValue(rng.choice([1000, 2048, 4096]))

    actions = [
        lambda: c.n_spin.setValue(rng.randint(1, 48)),
        lambda: c.n_spin.setValue(rng.randint(1, 48)),
        lambda: c.nk_spin.setValue(rng.choice([0, rng.randint(1, 48)])),
        lambda: c.d_spin.setValue(rng.randint(1, 9)),
        lambda: c.dv_spin.setValue(rng.randint(1, 9)),
        lambda: c.bq_spin.setValue(rng.randint(1, 20)),
        lambda: c.bk_spin.setValue(rng.randint(1, 20)),
        lambda: c.order_combo.setCurrentIndex(rng.randint(0, 1)),
        lambda: c.causal_check.setChecked(rng.random() < 0.5),
        lambda: c.lse_check.setChecked(rng.random() < 0.5),
        lambda: c.dtype_combo.setCurrentIndex(rng.randint(0, 3)),
        lambda: c.seed_spin.setValue(rng.randint(0, 99)),
        lambda: c.scale_spin.setValue(rng.choice([0.1, 1.0, 4.0, 30.0])),
        lambda: c.sram_spin.setValue(rng.choice([0, 16, 200, 5000])),
        lambda: c.paper_button.click(),
        lambda: st.update_config(input="seed"),
        lambda: pb.step_by(rng.randint(-5, 5)),
        lambda: w.bar.scrubber.setValue(rng.randint(0, max(0, st.n_steps - 1))),
        lambda: pb.toggle(),
        lambda: w.stats_panel.row_spin.setValue(rng.randint(0, 50)),
        lambda: qtbot.mouseClick(
            w.lanes[rng.choice(["dense", "tiled"])],
            Qt.MouseButton.LeftButton,
            pos=QPoint(rng.randint(0, 900), rng.randint(0, 400)),
        ),
        lambda: w.lanes["tiled"].grab(),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(500):
            if k % 60 == 30:
                large_n()
            else:
                rng.choice(actions)()
            if k % 25 == 0:
                QApplication.processEvents()
                w.render_frame(None, "window")
            if k % 60 == 31:  # let a large build arrive, then keep going from there
                qtbot.waitUntil(lambda: not st.builder.busy, timeout=60000)
                QApplication.processEvents()
            _widgets_agree(w)
        pb.pause()
        assert st.builder.wait(60000)
        qtbot.waitUntil(lambda: not st.builder.busy, timeout=60000)
        QApplication.processEvents()
    assert caught == [], [str(x.message) for x in caught]
    assert _qt_warnings(qtlog) == []
    assert dialogs == []  # every control value is one the core accepts
    # The state is coherent: the trace is the requested config's.
    _widgets_agree(w)
    assert st.trace.schedule.n_q == st.config.n
    w.close()
    assert not any(t.isActive() for t in w.findChildren(QTimer))
    assert QThreadPool.globalInstance().activeThreadCount() == 0
    assert st.builder._pool.activeThreadCount() == 0
    assert _python_threads() == threads_before


def _python_threads() -> int:
    """Threads Python started and still runs. A Qt pool thread that started one (the
    chunk threads of a pass, compute.chunk_pool) stays in threading's table as a dummy
    entry; Qt's own pools are counted by activeThreadCount above."""
    return sum(not isinstance(t, threading._DummyThread) for t in threading.enumerate())


def test_newest_threaded_request_wins(qtbot, dialogs):
    w = MainWindow(persist=False)
    qtbot.addWidget(w)
    st = w.state
    big = Config(n=1500, d=4, dv=4, block_q=2, block_k=2, input="random")
    assert big.estimated_work() > worker.THREAD_THRESHOLD_WORK  # goes to the worker thread
    seen = []
    st.sigTraceChanged.connect(lambda t: seen.append(t.schedule.n_q))
    st.set_config(big)
    assert st.builder.busy and st.config == Config()  # the window keeps showing the old trace
    st.set_config(big.replace(n=1490))
    st.set_config(big.replace(n=1480))
    qtbot.waitUntil(lambda: not st.builder.busy, timeout=60000)
    QApplication.processEvents()
    assert st.config.n == 1480 and seen == [1480]
    w.close()


def test_settings_restore_the_last_configuration(qtbot, dialogs):
    cfg = Config(n=12, d=3, dv=5, block_q=4, block_k=3, causal=True, input="random", seed=3)
    w = MainWindow(cfg)
    qtbot.addWidget(w)
    w.state.set_row(7)
    w.playback.set_speed(16)
    w.close()
    w2 = MainWindow()
    qtbot.addWidget(w2)
    assert w2.state.config == cfg
    assert w2.state.row == 7
    assert w2.playback.speed == 16
    w2.close()


def test_screenshot_command(tmp_path, capsys):
    from desktop.cli.gui import main

    out = tmp_path / "shot.png"
    assert (
        main(
            [
                "--screenshot",
                str(out),
                "--n",
                "16",
                "--d",
                "4",
                "--block-q",
                "4",
                "--block-k",
                "4",
                "--step",
                "5",
            ]
        )
        == 0
    )
    assert out.stat().st_size > 10_000
    assert "step 5 of" in capsys.readouterr().out
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"nope")
    assert main(["--screenshot", str(tmp_path / "x.png"), "--open", str(bad)]) == 2
    assert "could not be read" in capsys.readouterr().err
