"""`flash-explorer export --decode`: the decode view as PNG or SVG, headless, its numbers
the model's, and every refusal one sentence with no file written."""

from __future__ import annotations

import pytest
from PIL import Image

from compute.decode import filling_splits
from desktop.cli.export import decode_export_parser, export_parser
from desktop.cli.export import main as export_main

# N_k odd, splits not dividing the tiles, GQA group 4, two new tokens.
STEP = ["--n-q", "2", "--n-k", "1001", "--h-q", "8", "--h-kv", "2", "--d", "16",
        "--block-k", "64", "--splits", "5", "--dtype", "float64"]  # fmt: skip


def test_png_is_the_view_at_its_size_and_scale(tmp_path, capsys):
    out = tmp_path / "decode.png"
    args = [*STEP, "--size", "900x600", "--scale", "2", "--head", "5", "--token", "1"]
    assert export_main(["--decode", *args, "--out", str(out)]) == 0
    with Image.open(out) as im:
        assert im.size == (1800, 1200)
        colours = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # bars, text, the split hues
    assert "step 16 of 16" in capsys.readouterr().out  # T_c = 16: the finished step


def test_svg_of_a_step_names_it_and_holds_the_views_numbers(tmp_path, capsys):
    from desktop.cli.export import _decode_view
    from desktop.decode.model import decode_step

    out = tmp_path / "decode.svg"
    assert (
        export_main(["--decode", *STEP, "--step", "3", "--theme", "dark", "--out", str(out)]) == 0
    )
    text = out.read_text()
    assert text.startswith("<?xml") and "decode step 3 of 16" in text
    # The view the export renders computed the model's numbers for the same step.
    args = decode_export_parser().parse_args([*STEP, "--out", str(out)])
    view = _decode_view(args, (900, 600))
    want = decode_step(view.problem(), head=0, row=0)
    assert view.data.table == want.table and view.data.split_error < 1e-12
    assert view.problem().splits == 5
    view.close()


def test_auto_splits_are_the_clis(tmp_path):
    from desktop.cli.export import _decode_view

    args = decode_export_parser().parse_args(["--n-k", "4096", "--h-kv", "8", "--out", "x.png"])
    view = _decode_view(args, (900, 600))
    assert view.problem().splits == filling_splits(8, 64)
    view.close()


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--step", "17"], "Step 17 is past the end; choose 0 to 16"),
        (["--n-k", "20000"], "takes N_k from 1 to 16384"),
        (["--d-v", "8"], "draws d = d_v"),
        (["--h-q", "7"], "cannot share"),
        (["--token", "2"], "token below 2"),
    ],
)
def test_refusals_are_one_sentence_and_write_nothing(tmp_path, capsys, extra, words):
    out = tmp_path / "decode.png"
    assert export_main(["--decode", *STEP, *extra, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_gif_is_refused_and_help_names_the_decode_branch(tmp_path, capsys):
    assert export_main(["--decode", *STEP, "--out", str(tmp_path / "d.gif")]) == 1
    assert ".gif" in capsys.readouterr().err
    assert "--decode" in export_parser().format_help()


def test_a_short_view_shrinks_the_bands_and_keeps_the_combine():
    # Eight K/V heads in a 620-pixel export once pushed the combine off the canvas.
    from desktop.cli.export import _decode_view
    from desktop.decode.canvas import BAND_GAP, COMBINE_MIN, GAP, LABEL_H, MARGIN, ROW_H

    args = ["--n-k", "4096", "--h-q", "32", "--h-kv", "8", "--d", "64", "--out", "x.png"]
    for height in (620, 1400):
        view = _decode_view(decode_export_parser().parse_args(args), (1100, height))
        canvas = view.canvas
        rows = canvas._rows()
        bands = 2 * (2 * LABEL_H + rows * (ROW_H + GAP)) + 2 * BAND_GAP + 2 * MARGIN
        assert 1 <= rows <= 4 and bands + COMBINE_MIN <= canvas.height()
        view.close()
    assert rows == 4  # a tall view draws every row it may


def test_the_windows_export_frame_writes_the_decode_view_in_decode_mode(window, tmp_path):
    """Pass -> Decode: Export frame writes the decode view as shown (not the greyed lanes);
    the lanes' animation, storyboard and ledger exports wait until the lanes are back."""
    exports = window.exports
    window.show_decode(True)
    assert [a.isEnabled() for a in exports.actions] == [True, False, False, False]
    out = tmp_path / "shown.png"
    exports._ask_path = lambda *_args: out
    exports.export_frame()
    view = window.decode_view
    with Image.open(out) as im:
        assert im.size == (view.width(), view.height())
    bad = tmp_path / "shown.gif"
    exports._ask_path = lambda *_args: bad
    errors: list[str] = []
    window.show_error = errors.append
    exports.export_frame()
    assert not bad.exists() and len(errors) == 1 and "PNG or SVG" in errors[0]
    window.show_decode(False)
    assert all(a.isEnabled() for a in exports.actions)
