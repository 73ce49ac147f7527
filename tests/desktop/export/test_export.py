"""Exports read back from disk: GIF, MP4, PNG, SVG and the ledger files, CLI and GUI."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET

import imageio.v3 as iio
import numpy as np
import pytest
from PIL import Image
from PySide6.QtGui import QImage

from compute import TENSORS, ledger
from desktop.cli.export import main as export_main
from desktop.cli.export import main_ledger
from desktop.export.atomic import ExportError
from desktop.export.exporter import export_still
from desktop.export.frames import FramePlan, parse_size, parse_steps, to_rgb_array


def run(argv, capsys):
    code = export_main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def gif_frames(path):
    with Image.open(path) as im:
        frames = []
        for i in range(im.n_frames):
            im.seek(i)
            frames.append(np.asarray(im.convert("RGB")))
        return im.info, frames


def test_gif_loops_with_expected_frames_and_size(tmp_path, capsys):
    out = tmp_path / "seed.gif"
    code, stdout, err = run(
        ["--out", str(out), "--steps", "3:7", "--hold", "3", "--size", "320x240", "--fps", "5"],
        capsys,
    )
    assert code == 0, err
    assert "15 frames" in stdout
    info, frames = gif_frames(out)
    assert len(frames) == 15 and info["loop"] == 0 and info["duration"] == 200
    assert frames[0].shape == (240, 320, 3)
    assert any(not np.array_equal(frames[0], f) for f in frames[1:])  # it moves
    assert frames[0].std() > 10  # not blank


def test_gif_is_deterministic(tmp_path, capsys):
    a, b = tmp_path / "a.gif", tmp_path / "b.gif"
    for path in (a, b):
        assert run(["--out", str(path), "--steps", "1:6", "--lane", "tiled"], capsys)[0] == 0
    fa, fb = gif_frames(a)[1], gif_frames(b)[1]
    assert len(fa) == len(fb) == 12
    assert all(np.array_equal(x, y) for x, y in zip(fa, fb, strict=True))


def test_mp4_decodes_with_expected_frame_count(tmp_path, capsys):
    out = tmp_path / "seed.mp4"
    code, _, err = run(["--out", str(out), "--hold", "1", "--size", "640x360"], capsys)
    assert code == 0, err
    frames = list(iio.imiter(out))
    assert len(frames) == 27  # the reference example has 27 steps
    assert frames[0].shape == (360, 640, 3)


def test_png_of_a_panel_matches_the_window_rendering(window, tmp_path):
    for target in ("stats", "window"):  # lanes are laid out for the output: test_canvas
        path = tmp_path / f"{target}.png"
        export_still(window, path, target=target, step=10)
        expected = to_rgb_array(window.render_frame(10, target))
        got = np.asarray(Image.open(path).convert("RGB"))
        assert got.shape == expected.shape
        assert np.array_equal(got, expected)
        assert got.std() > 5


def test_png_at_twice_the_scale(window, tmp_path):
    path = tmp_path / "lane2x.png"
    export_still(window, path, target="dense", step=5, scale=2)
    image = QImage(str(path))
    assert (image.width(), image.height()) == (2 * 1280, 2 * 720)  # twice the default size
    panel = tmp_path / "stats2x.png"
    export_still(window, panel, target="stats", step=5, scale=2)
    one = window.render_frame(5, "stats")
    image = QImage(str(panel))
    assert (image.width(), image.height()) == (2 * one.width(), 2 * one.height())


def test_svg_frame_is_vector_and_names_the_step(window, tmp_path):
    path = tmp_path / "frame.svg"
    before = window.state.step
    export_still(window, path, target="tiled", step=8)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    assert len(list(root.iter())) > 50
    assert "Step 9." in path.read_text()
    assert window.state.step == before  # the export leaves the window where it was
    assert window.state.n_steps == 27


def test_export_keeps_the_windows_step(window, tmp_path):
    window.state.set_step(4)
    export_still(window, tmp_path / "x.png", target="both", step=20)
    assert window.state.step == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "x.bmp"], "unknown extension"),
        (["--out", "x.gif", "--steps", "9:3"], "run backwards"),
        (["--out", "x.gif", "--steps", "1:99"], "fall outside 1:27"),
        (["--out", "x.gif", "--size", "big"], "WIDTHxHEIGHT"),
        (["--out", "x.png", "--row", "6"], "Row 6 does not exist"),
        (["--out", "nowhere/x.gif"], "does not exist; create it"),
    ],
)
def test_bad_arguments_give_one_line_and_no_file(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run(args, capsys)
    assert code != 0
    assert message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_bad_flag_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        export_main(["--out", "x.gif", "--fps", "-3"])
    assert info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_ledger_json_and_csv_equal_the_core(tmp_path, capsys):
    flags = ["--n", "40", "--n-keys", "30", "--d", "8", "--dv", "4", "--block-q", "7"]
    flags += [
        "--block-k",
        "9",
        "--causal",
        "--save-lse",
        "--dtype",
        "float16",
        "--order",
        "kv-outer",
    ]
    expected = ledger(
        40,
        30,
        8,
        4,
        block_q=7,
        block_k=9,
        causal=True,
        save_lse=True,
        dtype="float16",
        order="kv-outer",
    )
    assert main_ledger([*flags, "--out", str(tmp_path / "l.json")]) == 0
    assert json.loads((tmp_path / "l.json").read_text()) == json.loads(
        json.dumps(expected.to_dict())
    )
    assert main_ledger([*flags, "--out", str(tmp_path / "l.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "l.csv").open()))
    for lane_name, lane in expected.lanes.items():
        for t in TENSORS:
            for d in ("read", "write"):
                row = next(
                    r for r in rows if (r["lane"], r["tensor"], r["direction"]) == (lane_name, t, d)
                )
                assert int(row["elements"]) == lane.counts[t][d]
        total = next(r for r in rows if (r["lane"], r["tensor"]) == (lane_name, "total"))
        assert (int(total["elements"]), int(total["bytes"])) == (
            lane.total_elements,
            lane.total_bytes,
        )


def test_ledger_png_is_a_clean_image(tmp_path, qapp):
    assert main_ledger(["--out", str(tmp_path / "l.png"), "--scale", "2"]) == 0
    image = np.asarray(Image.open(tmp_path / "l.png").convert("RGB"))
    assert image.shape[1] > 1000 and image.std() > 10


def test_ledger_bad_extension(tmp_path, capsys):
    assert main_ledger(["--out", str(tmp_path / "l.xlsx")]) == 1
    assert "unknown extension" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_parsers():
    assert parse_size("1280x720") == (1280, 720)
    assert parse_steps(None, 10) == range(10)
    assert parse_steps("3", 10) == range(2, 3)
    assert parse_steps(":4", 10) == range(0, 4)
    assert parse_steps("7:", 10) == range(6, 10)
    with pytest.raises(ExportError):
        parse_steps("0:3", 10)
    assert len(FramePlan(range(2, 5), 4)) == 12
    assert list(FramePlan(range(1), 4).frames()) == [(0, 0.25), (0, 0.5), (0, 0.75), (0, 1.0)]


# ---- the GUI's File-menu exports ------------------------------------------------------


def accept_dialogs(monkeypatch, path, chosen_filter="PNG image (*.png)"):
    from PySide6.QtWidgets import QDialog, QFileDialog

    from desktop.window import export_dialogs

    monkeypatch.setattr(export_dialogs._Options, "exec", lambda self: QDialog.DialogCode.Accepted)
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(path), chosen_filter))
    )


def test_gui_frame_export_writes_the_current_step(window, monkeypatch, tmp_path):
    window.state.set_step(7)
    window.exports.settings().setValue("export/frame_view", "window")  # lanes: test_canvas
    accept_dialogs(monkeypatch, tmp_path / "frame")  # no extension: the filter's is added
    window.exports.export_frame()
    got = np.asarray(Image.open(tmp_path / "frame.png").convert("RGB"))
    now = to_rgb_array(window.render_frame(7, "window"))
    # Everything but the status bar, which now says "Wrote …".
    top = now.shape[0] - window.statusBar().height()
    assert got.shape == now.shape and np.array_equal(got[:top], now[:top])
    assert window.state.step == 7


def test_gui_animation_export_and_cancel(window, monkeypatch, tmp_path, dialogs):
    from PySide6.QtWidgets import QProgressDialog

    plan = FramePlan(range(0, 5), 2)
    assert window.exports.run_animation(tmp_path / "a.gif", plan, 8, "tiled", (200, 150))
    info, frames = gif_frames(tmp_path / "a.gif")
    assert len(frames) == 10 and frames[0].shape == (150, 200, 3)

    calls = {"n": 0}

    def cancelled(self):
        calls["n"] += 1
        return calls["n"] >= 3

    monkeypatch.setattr(QProgressDialog, "wasCanceled", cancelled)
    target = tmp_path / "b.mp4"
    assert window.exports.run_animation(target, plan, 8, "both", None) is False
    assert not target.exists() and dialogs == []  # cancelling is not an error
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif"]


def test_gui_animation_export_never_moves_the_users_view(window, tmp_path):
    from desktop.export.frames import to_rgb_array

    st = window.state
    st.set_step(4)
    st.set_row(3)
    seen: list[int] = []
    st.sigStepChanged.connect(seen.append)
    st.sigProgressChanged.connect(seen.append)
    plan = FramePlan(range(0, 8), 2)
    assert window.exports.run_animation(tmp_path / "a.gif", plan, 8, "tiled", None)
    assert seen == [] and st.step == 4 and st.row == 3  # not one step shown behind the dialog
    _info, frames = gif_frames(tmp_path / "a.gif")
    assert len(frames) == 16
    # Lanes are laid out for the output (test_canvas); the window is drawn by a hidden
    # twin, which draws what the window draws: its frame is the window's own view.
    assert window.exports.run_animation(
        tmp_path / "w.gif", FramePlan(range(7, 8)), 8, "window", None
    )
    assert seen == [] and st.step == 4 and st.row == 3
    _info, frames = gif_frames(tmp_path / "w.gif")
    top = window.height() - window.statusBar().height()  # the status bar says "Wrote …"

    def distance(step: int) -> float:
        st.set_step(step)
        view = to_rgb_array(window.grab().toImage())
        return float(np.abs(frames[-1][:top].astype(int) - view[:top]).max(axis=2).mean())

    # Equal but for the GIF's 256-colour palette (a mean of 2.9-3.0 levels over the whole
    # window, which holds more colours than a palette has), and well apart from another
    # step's view (6.5).
    right, wrong = distance(7), distance(0)
    assert right < 3.5 and right < wrong / 2


def test_gui_export_failure_is_one_sentence_in_a_dialog(window, monkeypatch, tmp_path, dialogs):
    accept_dialogs(monkeypatch, tmp_path / "missing" / "x.png")
    window.exports.export_frame()
    assert len(dialogs) == 1 and "does not exist" in dialogs[0]
    assert not (tmp_path / "missing").exists()


def test_gui_ledger_export_csv(window, monkeypatch, tmp_path):
    accept_dialogs(monkeypatch, tmp_path / "ledger.csv", "CSV table (*.csv)")
    window.exports.export_ledger()
    rows = list(csv.DictReader((tmp_path / "ledger.csv").open()))
    totals = {r["lane"]: int(r["elements"]) for r in rows if r["tensor"] == "total"}
    assert totals == {"dense": 240, "tiled": 96}


def test_export_actions_are_in_the_file_menu_and_toolbar(window):
    texts = [a.text() for a in window.file_menu.actions()]
    assert "Export &animation…" in texts
    assert texts.index("Export &ledger…") < texts.index("&Quit")
    assert window.exports.actions[0].shortcut().toString() == "Ctrl+E"


@pytest.mark.parametrize("target", ["stats", "ledger"])
def test_panel_at_a_slide_size_is_laid_out_for_it_and_the_window_keeps_its_own(
    window, tmp_path, target
):
    """At --size, the stats and the ledger fill the slide (a fresh panel at its aspect,
    text drawn at the slide's scale), and the window's own panel neither moves nor resizes."""
    own = window.stats_panel if target == "stats" else window.ledger_panel
    before = (own.size(), window.state.step)
    path = tmp_path / f"{target}.png"
    export_still(window, path, target=target, step=8, size=(1920, 1080))
    got = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert got.shape == (1080, 1920, 3)
    background = got[0, -1]
    content = np.any(np.abs(got - background).sum(axis=2) > 30, axis=0)
    columns = np.flatnonzero(content)
    assert columns[-1] - columns[0] > 0.9 * 1920  # spans the slide, not a centred strip
    rows = np.flatnonzero(np.any(np.abs(got - background).sum(axis=2) > 30, axis=1))
    assert rows[-1] - rows[0] > 0.9 * 1080
    assert (own.size(), window.state.step) == before


def test_animation_dialog_defaults_to_a_clip_and_says_what_it_makes(window):
    from desktop.window.export_dialogs import DEFAULT_FRAMES, AnimationOptions, default_range

    # N = 256 has 33,152 steps: the default is a clip from the current step, not the run.
    assert default_range(33_152, 0, 2) == (1, DEFAULT_FRAMES // 2)
    assert default_range(33_152, 999, 2) == (1000, 999 + DEFAULT_FRAMES // 2)
    assert default_range(27, 26, 2) == (1, 27)  # at the last step: from the first
    dialog = AnimationOptions(window, window.exports.settings(), 27, 0)
    dialog.fps.setValue(6)
    dialog.hold.setValue(2)
    assert dialog.frame_count() == 54
    assert dialog.summary.text() == "54 frames: 9 s at 6 frames per second."
    dialog.last.setValue(20)
    assert dialog.summary.text().startswith("40 frames: 6.67 s")


def test_animation_dialog_shows_the_estimate_of_time_and_size_as_choices_change(window):
    """Item 6 of issue 29: before starting, the dialog says about how long the render
    takes and how big the file is, from one frame measured when it opened (the estimate
    the refusal of an over-long animation uses), updated as range, hold, fps, size change."""
    from desktop.export.exporter import FrameCost, estimate_words, lane_frame_cost
    from desktop.window.export_dialogs import AnimationOptions

    cost = FrameCost(seconds=0.05, bytes=200_000, pixels=1280 * 720)
    dialog = AnimationOptions(window, window.exports.settings(), 27, 0, cost=cost)
    dialog.preset.setCurrentIndex(dialog.preset.findData("hd"))
    dialog.fps.setValue(6)
    dialog.hold.setValue(2)
    assert estimate_words(54, cost) in dialog.summary.text()
    assert "about 3 s to render and about 10 MiB" in dialog.summary.text()
    dialog.hold.setValue(4)
    assert estimate_words(108, cost) in dialog.summary.text()
    dialog.preset.setCurrentIndex(dialog.preset.findData("poster"))  # 9x the pixels
    assert estimate_words(108, cost.at((3840, 2160))) in dialog.summary.text()
    # The measurement itself: one real frame, timed and encoded.
    measured = lane_frame_cost(window, "both", (320, 180), "light", 3)
    assert measured.seconds > 0 and measured.bytes > 1000 and measured.pixels == 320 * 180
