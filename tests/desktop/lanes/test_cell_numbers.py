"""Numbers written in heatmap cells fit their cell (no text spilling into neighbours)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PySide6")

from PySide6.QtGui import QFont, QFontMetricsF  # noqa: E402

from desktop.lanes.painting import NUMBER_GAP, format_number, number_px  # noqa: E402


def _metrics(pixels: int) -> QFontMetricsF:
    font = QFont()
    font.setPixelSize(pixels)
    return QFontMetricsF(font)


@pytest.mark.parametrize("width", [9.0, 14.0, 20.0, 24.0, 28.0, 36.0, 48.0])
def test_every_value_fits_its_cell_or_is_left_out(qapp, width):
    # As draw_numbers sizes the font for a cell this wide (and tall enough).
    fm = _metrics(number_px(width, 30.0))
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [rng.normal(size=200) * 10.0 ** rng.integers(-6, 6, size=200), [0.00074, -0.00074, 12345.0]]
    )
    shown_any = False
    for x in values:
        text = format_number(float(x), width, fm.horizontalAdvance)
        if not text:  # no form fits: the cell keeps its colour only (issue 29, item 3)
            continue
        shown_any = True
        # a gap to each neighbour: "−6e−30.007" was two numbers run together
        assert fm.horizontalAdvance(text) <= width - 2 * NUMBER_GAP, (x, text)
        # the text still says the value to its first significant digit
        shown = float(text.replace("−", "-"))
        assert shown == pytest.approx(float(x), rel=0.5), (x, text)
    assert shown_any or width < 14


def test_small_values_drop_to_a_short_exponent_in_narrow_cells(qapp):
    fm = _metrics(8)
    assert format_number(0.00074, 26.0, fm.horizontalAdvance) in {"7e−4", "7.4e−4"}
    assert format_number(0.5, 24.0, fm.horizontalAdvance) == "0.5"


def test_without_metrics_the_width_picks_the_digits():
    assert format_number(0.123456, 40) == "0.123"
    assert format_number(0.123456, 30) == "0.12"
    assert format_number(float("-inf"), 30) == "−∞"
