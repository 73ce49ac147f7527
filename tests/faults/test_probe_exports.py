"""Animations from the second fault probe (issue 27 items 4 and 9): frames are made one at
a time and an animation past reason is refused up front with its estimate; an export
shows the configuration it began on even when a build lands while it runs.
"""

from __future__ import annotations

import subprocess
import time
import tracemalloc

import pytest
from faultkit import leftovers, run_cli_peak

from desktop.export.frames import FramePlan


def test_a_plan_of_millions_of_frames_is_never_held():
    plan = FramePlan(range(20_000), 100)
    tracemalloc.start()
    try:
        frames = plan.frames()
        assert next(iter(frames)) == (0, 0.01) and len(plan) == 2_000_000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert iter(frames) is frames  # a generator, not a list
    assert peak < 2**20  # a list of the 2 million pairs takes about 200 MB


def test_an_animation_past_reason_is_refused_up_front_with_its_estimate(tmp_path):
    start = time.monotonic()
    try:
        result, peak_kb = run_cli_peak(
            "export", "--out", "long.gif", "--n", "64", "--block-q", "1", "--block-k", "1",
            "--input", "random", "--hold", "120", cwd=tmp_path, timeout=120,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the export started rendering hundreds of thousands of frames")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()
    assert len(line) == 1, result.stderr
    assert "frames (" in line[0] and "GiB" in line[0] and "to render" in line[0]
    assert "choose at most 10,000 frames" in line[0]
    assert time.monotonic() - start < 60  # a guard: refused before the first file byte
    assert peak_kb < 1_500_000
    assert leftovers(tmp_path, ()) == []


def test_an_export_keeps_the_configuration_it_began_on(tmp_path):
    from PySide6.QtWidgets import QApplication

    from desktop.cli.session import headless_window
    from desktop.export.exporter import export_animation
    from desktop.state.config import Config

    window = headless_window(Config(), size=(900, 600))  # the reference example, N = 6
    try:
        plan = FramePlan(range(8), 2)
        kw = {"plan": plan, "fps": 10, "target": "both", "size": (320, 180)}
        export_animation(window, tmp_path / "alone.gif", **kw)

        def tick(done: int, _total: int) -> bool:
            if done == 3:  # the user changes N while the export runs
                window.state.set_config(Config(n=48, d=4, dv=4, input="random"))
                deadline = time.monotonic() + 60  # a guard against hanging
                while window.state.config.n != 48 and time.monotonic() < deadline:
                    QApplication.processEvents()
            return True

        export_animation(window, tmp_path / "busy.gif", progress=tick, **kw)
        assert window.state.config.n == 48  # the build landed mid-export
        assert (tmp_path / "busy.gif").read_bytes() == (tmp_path / "alone.gif").read_bytes()
    finally:
        window.close()


def test_a_panel_export_at_a_size_never_steps_the_window(tmp_path):
    from desktop.cli.session import headless_window
    from desktop.export.exporter import export_animation
    from desktop.state.config import Config

    window = headless_window(Config(n=12, d=4, dv=4, input="random"), size=(900, 600))
    try:
        window.state.set_step(2)
        seen = []

        def tick(_done: int, _total: int) -> bool:
            seen.append(window.state.step)
            return True

        for target in ("stats", "ledger"):
            export_animation(window, tmp_path / f"{target}.gif", plan=FramePlan(range(6), 1),
                             fps=5, target=target, size=(480, 270), progress=tick)  # fmt: skip
        assert seen == [2] * 12  # the export stepped its own copy of the state
    finally:
        window.close()
