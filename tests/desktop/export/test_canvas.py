"""Lane exports laid out for their size: true vectors, PDF pages, storyboards, GUI = CLI.

Values are checked against a float64 dense reference (S = Q Kᵀ / √d with NumPy) on the
reference example and on fresh seeded random inputs whose block sizes do not divide N.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image
from PySide6.QtCore import QRectF

from desktop.cli.export import _checked_config, export_parser
from desktop.cli.export import main as export_main
from desktop.export.canvas import Frame, LaneCanvas, LanePainter, lane_rects
from desktop.export.exporter import export_still
from desktop.export.frames import FramePlan
from desktop.lanes.painting import number_forms
from desktop.state.config import make_inputs

SVG_NS = "{http://www.w3.org/2000/svg}"
RANDOM = ["--input", "random", "--seed", "7", "--n", "7", "--d", "3", "--block-q", "3"]
RANDOM += ["--block-k", "4"]


def run(argv, capsys):
    code = export_main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def reference_scores(flags: list[str]) -> np.ndarray:
    """S = Q Kᵀ / √d in float64 for the inputs that `flags` name."""
    inputs = make_inputs(_checked_config(export_parser().parse_args(["--out", "x.png", *flags])))
    q, k = np.asarray(inputs.q, dtype=np.float64), np.asarray(inputs.k, dtype=np.float64)
    return q @ k.T / np.sqrt(q.shape[1])


def svg_texts(path) -> list[str]:
    root = ET.parse(path).getroot()
    return ["".join(t.itertext()).strip() for t in root.iter(f"{SVG_NS}text")]


def as_cell(x: float) -> set[str]:
    """How a cell may write x: 3 significant digits in a wide cell, 2 in a narrow one, or
    a short exponent form where those do not fit."""
    return set(number_forms(x, 40, short=True)) | set(number_forms(x, 30, short=True))


def pdf_text(path) -> str:
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed")
    out = subprocess.run(["pdftotext", str(path), "-"], capture_output=True, text=True, check=True)
    # Neighbouring cells can run together in the extracted text ("−0.54−0.049"): a space
    # before each minus sign splits them again.
    return out.stdout.replace("\N{MINUS SIGN}", " -")


def pdf_pages(data: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page[^s]", data))


def test_seed_svg_at_step_9_is_vectors_with_the_cell_values_as_text(tmp_path, capsys):
    path = tmp_path / "s9.svg"
    run(["--out", str(path), "--steps", "9"], capsys)
    text = path.read_text()
    assert "<image" not in text  # every cell a rectangle, every number text
    texts = svg_texts(path)
    scores = reference_scores([])
    # At step 9 the dense lane has written S for query blocks 0 and 1 (rows 0-3).
    for x in scores[:4].ravel():
        assert as_cell(float(x)) & set(texts), x
    assert "now: S: load Q block 2" in texts


def test_seed_pdf_text_layer_holds_the_cell_values(tmp_path, capsys):
    path = tmp_path / "s9.pdf"
    run(["--out", str(path), "--steps", "9"], capsys)
    words = set(pdf_text(path).split())
    for x in reference_scores([])[:4].ravel():
        assert {s.replace("\N{MINUS SIGN}", "-") for s in as_cell(float(x))} & words, x


def test_random_inputs_svg_and_pdf_hold_every_score_at_the_last_step(tmp_path, capsys):
    scores = reference_scores(RANDOM)
    assert scores.shape == (7, 7)
    svg, pdf = tmp_path / "r.svg", tmp_path / "r.pdf"
    for path in (svg, pdf):
        run(["--out", str(path), "--lane", "dense", "--steps", "21", *RANDOM], capsys)
    texts = set(svg_texts(svg))
    # Narrow neighbouring cells run together in extracted PDF text ("-0.00860.18"), so
    # the PDF is searched as one string.
    flat = "".join(pdf_text(pdf).split())
    for x in scores.ravel():  # the last step: the dense lane has written all of S
        assert as_cell(float(x)) & texts, x
        assert any(s.replace("\N{MINUS SIGN}", "-") in flat for s in as_cell(float(x))), x


def test_a_heatmap_beyond_64x64_stays_an_image(tmp_path, capsys):
    path = tmp_path / "big.svg"
    run(["--out", str(path), "--lane", "dense", "--input", "random", "--n", "80"], capsys)
    assert "<image" in path.read_text()


def test_pdf_of_a_step_range_has_a_page_per_step(tmp_path, capsys):
    path = tmp_path / "range.pdf"
    assert "4 pages, steps 3-6" in run(["--out", str(path), "--steps", "3:6"], capsys)
    assert pdf_pages(path.read_bytes()) == 4


@pytest.mark.parametrize("size", [(1280, 720), (800, 450), (600, 338), (3840, 2160), (1440, 1080)])
@pytest.mark.parametrize("target", ["both", "tiled"])
def test_every_size_lays_out_with_nothing_cut(window, size, target):
    """Both frames, the wrapped "now:" line and the footer fit inside the output."""
    trace = window.state.trace
    canvas = LaneCanvas(trace, target, size, lines=2)
    assert canvas.logical[0] * canvas.zoom == pytest.approx(size[0])
    lanes_h = canvas.lanes_height()
    for step in range(window.state.n_steps):
        frame = Frame(trace, window.state.images, step, 0)
        for lane, rect in lane_rects(target, canvas.logical[0], lanes_h):
            painter = LanePainter(
                frame, lane, canvas.palette, canvas.font, rect.width(), rect.height()
            )
            hbm, sram = painter.frames()
            whole = QRectF(0, 0, rect.width(), rect.height())
            assert whole.contains(hbm) and whole.contains(sram), (size, step, lane)
            assert hbm.top() >= painter.header_height()
            assert rect.bottom() <= lanes_h + 1e-6


@pytest.mark.parametrize("size", [(1280, 720), (800, 450), (3840, 2160)])
def test_png_at_each_size_has_that_size_and_numbers_in_cells(tmp_path, capsys, size):
    png, svg = tmp_path / "f.png", tmp_path / "f.svg"
    flags = ["--steps", "9", "--size", f"{size[0]}x{size[1]}"]
    run(["--out", str(png), *flags], capsys)
    run(["--out", str(svg), *flags], capsys)
    image = np.asarray(Image.open(png).convert("RGB"))
    assert image.shape == (size[1], size[0], 3) and image.std() > 10
    assert "2.12" in svg_texts(svg)  # S[0, 4] = 3/√2 written in its cell at every size


def test_dark_on_request_light_by_default(tmp_path, capsys):
    light, dark = tmp_path / "l.png", tmp_path / "d.png"
    run(["--out", str(light), "--steps", "3"], capsys)
    run(["--out", str(dark), "--steps", "3", "--theme", "dark"], capsys)
    assert np.asarray(Image.open(light).convert("L"))[2, 2] > 200
    assert np.asarray(Image.open(dark).convert("L"))[2, 2] < 60


def test_storyboard_pdf_png_svg(tmp_path, capsys):
    pdf = tmp_path / "story.pdf"
    out = run(["--out", str(pdf), "--storyboard", "1,5,9,27", "--lane", "both"], capsys)
    assert "storyboard of steps 1,5,9,27" in out
    assert pdf_pages(pdf.read_bytes()) == 1
    text = pdf_text(pdf)
    for k in (1, 5, 9, 27):
        assert f"Step {k}." in text
    png, svg = tmp_path / "story.png", tmp_path / "story.svg"
    run(["--out", str(png), "--storyboard", "1,5,9,27"], capsys)
    assert Image.open(png).size == (1920, 1080)  # 2x2 panels of 960x540
    run(["--out", str(svg), "--storyboard", "2:4", "--lane", "tiled"], capsys)
    texts = svg_texts(svg)
    assert "<image" not in svg.read_text()
    assert {t[:7] for t in texts if t.startswith("Step ")} == {"Step 2.", "Step 3.", "Step 4."}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--storyboard", "1,99"], "falls outside 1:27"),
        (["--storyboard", "a,b"], "not a list of steps"),
        (["--storyboard", "1,2", "--lane", "stats"], "A storyboard draws lanes"),
    ],
)
def test_bad_storyboard_is_one_sentence(tmp_path, capsys, args, message):
    code = export_main(["--out", str(tmp_path / "s.png"), *args])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_lane_export_never_moves_the_users_view(window, tmp_path):
    window.state.set_step(4)
    moved: list[int] = []
    window.state.sigStepChanged.connect(moved.append)
    export_still(window, tmp_path / "x.svg", target="both", step=20)
    export_still(window, tmp_path / "x.pdf", target="tiled", step=3, steps=range(0, 5))
    assert window.state.step == 4 and moved == []


# ---- the GUI dialog writes what the CLI writes ------------------------------------------


def accept(monkeypatch, path, chosen):
    from PySide6.QtWidgets import QDialog, QFileDialog

    from desktop.window import export_dialogs

    monkeypatch.setattr(export_dialogs._Options, "exec", lambda self: QDialog.DialogCode.Accepted)
    monkeypatch.setattr(
        QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(path), chosen))
    )


@pytest.mark.parametrize(
    ("suffix", "chosen"),
    [(".png", "PNG image (*.png)"), (".svg", "SVG vector image (*.svg)")],
)
def test_gui_frame_equals_the_cli_file(window, monkeypatch, tmp_path, capsys, suffix, chosen):
    s = window.exports.settings()
    s.setValue("export/frame_view", "tiled")
    s.setValue("export/frame_preset", "readme")
    s.setValue("export/theme", "dark")
    window.state.set_step(8)
    gui = tmp_path / f"gui{suffix}"
    accept(monkeypatch, gui, chosen)
    window.exports.export_frame()
    cli = tmp_path / f"cli{suffix}"
    flags = ["--lane", "tiled", "--steps", "9", "--size", "800x450", "--theme", "dark"]
    run(["--out", str(cli), *flags], capsys)
    assert gui.read_bytes() == cli.read_bytes()
    assert s.value("export/frame_preset") == "readme"  # remembered for next time


def test_gui_animation_equals_the_cli_file(window, tmp_path, capsys):
    gui, cli = tmp_path / "gui.gif", tmp_path / "cli.gif"
    plan = FramePlan(range(2, 6), 2)
    assert window.exports.run_animation(gui, plan, 8, "both", (640, 360), theme="light")
    flags = ["--steps", "3:6", "--hold", "2", "--fps", "8", "--size", "640x360"]
    run(["--out", str(cli), *flags], capsys)
    assert gui.read_bytes() == cli.read_bytes()


def test_gui_storyboard_equals_the_cli_file(window, monkeypatch, tmp_path, capsys):
    from desktop.window import export_dialogs

    s = window.exports.settings()
    s.setValue("export/story_preset", "slide43")
    s.setValue("export/story_view", "both")
    monkeypatch.setattr(
        export_dialogs.StoryboardOptions,
        "__init__",
        _with_steps(export_dialogs.StoryboardOptions.__init__, "1,5,9,27"),
    )
    gui = tmp_path / "gui.png"
    accept(monkeypatch, gui, "PNG image (*.png)")
    window.exports.export_storyboard()
    cli = tmp_path / "cli.png"
    run(["--out", str(cli), "--storyboard", "1,5,9,27", "--size", "1440x1080"], capsys)
    assert gui.read_bytes() == cli.read_bytes()


def _with_steps(init, steps: str):
    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.steps.setText(steps)  # as a user types them

    return patched


def test_ledger_svg_and_pdf_are_vectors_with_the_core_numbers(tmp_path, capsys):
    from compute import ledger
    from desktop.cli.export import main_ledger

    core = ledger(6, 6, 2, 2, block_q=2, block_k=2)  # the reference example's shape
    totals = [f"{core.lanes[n].total_elements:,}" for n in ("dense", "tiled")]
    svg, pdf = tmp_path / "ledger.svg", tmp_path / "ledger.pdf"
    for path in (svg, pdf):
        assert main_ledger(["--out", str(path)]) == 0, capsys.readouterr().err
    assert "<image" not in svg.read_text()
    texts = svg_texts(svg)
    assert all(t in texts for t in totals) and "HBM transfer ledger" in texts
    assert f"dense / tiled = {core.ratio:.2f}x" in texts
    words = pdf_text(pdf).split()
    assert all(t in words for t in totals)


def test_fonts_grow_with_the_output(window):
    """Output pixels per logical pixel (so font sizes): 1 on a 720p slide, 3 on a 4K
    poster, and a README column shrinks only a little."""
    trace = window.state.trace
    zooms = {size: LaneCanvas(trace, "both", size).zoom for size in [(1280, 720), (3840, 2160)]}
    assert zooms[(1280, 720)] == pytest.approx(1.0)
    assert zooms[(3840, 2160)] == pytest.approx(3.0)
    assert LaneCanvas(trace, "both", (800, 450)).zoom >= 0.6


def test_backward_lanes_export_as_vectors_with_their_titles(tmp_path, capsys):
    path = tmp_path / "bw.svg"
    run(["--out", str(path), "--pass", "backward", "--steps", "20"], capsys)
    assert "<image" not in path.read_text()
    texts = svg_texts(path)
    assert any(t.startswith("Tiled backward") for t in texts)
    assert any(t.startswith("Dense backward") for t in texts)


def test_a_lane_frame_is_captioned_with_that_lane_only():
    import compute
    from desktop.export.canvas import step_caption

    inp = compute.random_inputs(6, 2, 2, seed=0)
    trace = compute.build_trace(inp.q, inp.k, inp.v, block_q=2, block_k=2)
    both = step_caption(trace, 3, "both")
    tiled = step_caption(trace, 3, "tiled")
    assert "dense:" in both and "tiled:" in both
    assert tiled.startswith("Step 4. tiled: ") and "dense" not in tiled
    assert step_caption(trace, 3, "dense").startswith("Step 4. dense: ")


def test_a_stats_slide_has_no_live_controls(window):
    from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox

    from desktop.export.frames import view_widget

    with view_widget(window, "stats", (1920, 1080)) as (panel, _state):
        buttons = [b for b in panel.findChildren(QAbstractButton) if b.isVisibleTo(panel)]
        assert buttons == []  # "‹ tile", "tile ›", "whole run" are not on a picture
        for spin in panel.findChildren(QAbstractSpinBox):
            assert spin.isReadOnly()
            assert spin.buttonSymbols() == QAbstractSpinBox.ButtonSymbols.NoButtons


def test_a_ledger_slide_keeps_its_table_to_its_rows(window):
    from desktop.export.frames import view_widget

    with view_widget(window, "ledger", (1920, 1080)) as (panel, _state):
        table = panel.table
        rows = table.rowCount() * table.verticalHeader().defaultSectionSize()
        assert table.height() <= table.horizontalHeader().height() + rows + 8
        # the totals sit right under the rows, not at the slide's foot
        assert panel.totals_table.y() - (table.y() + table.height()) < 20


@pytest.mark.parametrize("lane", ["both", "tiled"])
def test_storyboard_cell_numbers_are_legible_or_left_out(window, monkeypatch, lane):
    """Issue 29 item 15: a 2x2 storyboard at 1920x1080 shrinks each panel, and the cell
    numbers came out about 8 px; every number drawn is at least STORY_NUMBER_PX on the
    page (left out where a number that size does not fit its cell), and some are drawn."""
    from PySide6.QtGui import QImage, QPainter

    from desktop.export.exporter import STORY_NUMBER_PX, storyboard_pages

    sizes = []
    draw_text = QPainter.drawText

    def spy(painter, *args):
        text = args[-1] if isinstance(args[-1], str) else ""
        font = painter.font()
        if font.pixelSize() > 0 and re.fullmatch(r"[−\-0-9.e]+", text):  # a cell number
            sizes.append(font.pixelSize() * painter.worldTransform().m11())
        return draw_text(painter, *args)

    monkeypatch.setattr(QPainter, "drawText", spy)
    image = QImage(1920, 1080, QImage.Format.Format_RGB32)
    paint = storyboard_pages(window, [0, 8, 16, 26], lane, (1920, 1080), "light", False)
    painter = QPainter(image)
    paint(painter)
    painter.end()
    assert sizes, "no numbers in the storyboard's cells"
    assert min(sizes) >= STORY_NUMBER_PX >= 11


def test_number_size_with_a_floor_is_at_least_it_or_none():
    from desktop.lanes.painting import number_px

    assert number_px(30.0, 20.0, 14.67) == 15  # grows past the usual 12 to reach the floor
    assert number_px(30.0, 12.0, 14.67) is None  # 15 px digits overflow a 12 px cell
    assert number_px(30.0, 20.0) == 10  # no floor: as before
