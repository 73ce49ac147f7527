"""Export a configuration's ledger as JSON, CSV (the core's exact numbers), PNG, SVG or PDF.

The picture is drawn with QPainter (no window needed): a table of elements per tensor
and direction for both lanes, totals, bytes, and a bar chart of the totals. One paint
function serves every device, so the SVG and PDF hold the table as text and the chart
as rectangles, and the PNG is the same drawing rasterised.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from compute import DIRECTIONS, TENSORS, Ledger, element_bytes
from desktop.export.atomic import ExportError, write_bytes_atomic, write_text_atomic

LEDGER_SUFFIXES = (".png", ".svg", ".pdf", ".csv", ".json")
LANE_COLOURS = {"dense": "#d6604d", "tiled": "#4393c3"}
TENSOR_LABELS = {"l": "ℓ"}


def ledger_json(result: Ledger) -> str:
    return json.dumps(result.to_dict(), indent=2) + "\n"


def ledger_csv(result: Ledger) -> str:
    """One row per lane, tensor and direction, plus a total row per lane."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["lane", "tensor", "direction", "elements", "bytes"])
    for name, lane in result.lanes.items():
        for t in _tensors(result):
            for d in DIRECTIONS:
                n = lane.counts[t][d]
                w.writerow([name, t, d, n, n * _bytes(result, t)])
        w.writerow([name, "total", "both", lane.total_elements, lane.total_bytes])
    return out.getvalue()


def _tensors(result: Ledger) -> list[str]:
    """The tensors the ledger counts: the forward's, plus the gradients in a backward."""
    return list(next(iter(result.lanes.values())).counts) or list(TENSORS)


def _bytes(result: Ledger, tensor: str) -> int:
    return element_bytes(tensor, result.dtype)


def check_scale(scale: float) -> None:
    """PNG scale within 0.25 to 8 (a larger one asks Qt for a gigapixel image)."""
    if not 0.25 <= scale <= 8:
        raise ExportError(f"Scale {scale:g} is outside 0.25 to 8; choose e.g. 1 or 2.")


LEDGER_WIDTH, ROW_H, TOP = 760, 26, 86


def ledger_rows(result: Ledger) -> list[str]:
    """The tensors with any transfer in either lane, in the ledger's order."""
    return [
        t
        for t in _tensors(result)
        if any(result.lanes[ln].counts[t][d] for ln in result.lanes for d in DIRECTIONS)
    ]


def ledger_size(result: Ledger) -> tuple[int, int]:
    """The drawing's size in logical pixels (96 dpi)."""
    table_h = ROW_H * (len(ledger_rows(result)) + 3)
    return LEDGER_WIDTH, TOP + table_h + 150


def ledger_image(result: Ledger, scale: float = 1.0):
    """The ledger drawn as a QImage (needs a QGuiApplication)."""
    from PySide6.QtGui import QColor, QImage, QPainter

    width, height = ledger_size(result)
    image = QImage(int(width * scale), int(height * scale), QImage.Format.Format_ARGB32)
    image.setDevicePixelRatio(scale)
    image.fill(QColor("white"))
    p = QPainter(image)
    paint_ledger(p, result)
    p.end()
    return image


def paint_ledger(p, result: Ledger) -> None:
    """Table and bar chart onto any painter: text as text, bars as rectangles."""
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QColor, QFont, QPainter

    rows = ledger_rows(result)
    width, row_h, top = LEDGER_WIDTH, ROW_H, TOP
    p.fillRect(QRectF(0, 0, *ledger_size(result)), QColor("white"))
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setRenderHint(QPainter.RenderHint.TextAntialiasing)
    c = result.config()
    title = QFont()
    title.setPointSizeF(13)
    title.setBold(True)
    body = QFont()
    body.setPointSizeF(10)
    p.setPen(QColor("#222222"))
    p.setFont(title)
    p.drawText(QRectF(20, 12, width - 40, 24), "HBM transfer ledger")
    p.setFont(body)
    p.setPen(QColor("#555555"))
    p.drawText(
        QRectF(20, 40, width - 40, 40),
        Qt.TextFlag.TextWordWrap,
        f"N_q={c['n_q']}  N_k={c['n_k']}  d={c['d']}  d_v={c['d_v']}  B_r={c['block_q']}  "
        f"B_c={c['block_k']}  order={c['order']}  "
        f"mask={c['mask']['label'] if 'mask' in c else ('causal' if c['causal'] else 'none')}  "
        f"L {'saved' if c['save_lse'] else 'not saved'}  dtype={c['dtype']}"
        + (f"  pass={c['pass']}" if "pass" in c else ""),
    )
    cols = [20, 150, 300, 450, 600]
    heads = ["tensor", "dense read", "dense write", "tiled read", "tiled write"]

    def row(y, cells, bold=False, shade=None):
        if shade:
            p.fillRect(QRectF(14, y, width - 28, row_h), QColor(shade))
        f = QFont(body)
        f.setBold(bold)
        p.setFont(f)
        p.setPen(QColor("#222222"))
        for i, (x, text) in enumerate(zip(cols, cells, strict=True)):
            align = Qt.AlignmentFlag.AlignVCenter | (
                Qt.AlignmentFlag.AlignLeft if i == 0 else Qt.AlignmentFlag.AlignRight
            )
            p.drawText(QRectF(x, y, 130, row_h), align, text)

    y = top
    row(y, heads, bold=True, shade="#e8e8e8")
    dense, tiled = result.lanes["dense"], result.lanes["tiled"]
    for k, t in enumerate(rows):
        y += row_h
        cells = [TENSOR_LABELS.get(t, t)] + [
            f"{lane.counts[t][d]:,}" for lane in (dense, tiled) for d in DIRECTIONS
        ]
        row(y, cells, shade="#f6f6f6" if k % 2 else None)
    y += row_h
    row(
        y,
        ["total elements", f"{dense.total_elements:,}", "", f"{tiled.total_elements:,}", ""],
        bold=True,
    )
    y += row_h
    row(y, ["total bytes", f"{dense.total_bytes:,}", "", f"{tiled.total_bytes:,}", ""])
    # Bar chart of the totals, scaled to the dense lane.
    y += row_h + 24
    biggest = max(dense.total_elements, tiled.total_elements, 1)
    for lane, name in ((dense, "dense"), (tiled, "tiled")):
        bar = (width - 220) * lane.total_elements / biggest
        p.setPen(QColor("#222222"))
        p.setFont(body)
        p.drawText(QRectF(20, y, 90, 28), Qt.AlignmentFlag.AlignVCenter, name)
        p.fillRect(QRectF(110, y + 3, bar, 22), QColor(LANE_COLOURS[name]))
        p.drawText(
            QRectF(116 + bar, y, 200, 28), Qt.AlignmentFlag.AlignVCenter, f"{lane.total_elements:,}"
        )
        y += 34
    p.setPen(QColor("#555555"))
    p.drawText(
        QRectF(20, y + 2, width - 40, 24),
        Qt.AlignmentFlag.AlignVCenter,
        f"dense / tiled = {result.ratio:.2f}x",
    )


def export_ledger(result: Ledger, path: str | Path, *, scale: float = 1.0) -> Path:
    """Write the ledger to `path` by its extension (.json, .csv, .png, .svg, .pdf), atomically."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return write_text_atomic(path, ledger_json(result))
    if suffix == ".csv":
        return write_text_atomic(path, ledger_csv(result))
    if suffix == ".png":
        from desktop.export.frames import png_bytes

        check_scale(scale)
        return write_bytes_atomic(path, png_bytes(ledger_image(result, scale)))
    if suffix in (".svg", ".pdf"):
        from desktop.export.devices import pdf_bytes, svg_bytes

        size = ledger_size(result)
        title = "HBM transfer ledger"
        if suffix == ".svg":
            return write_bytes_atomic(path, svg_bytes(size, lambda p: paint_ledger(p, result)))
        return write_bytes_atomic(
            path, pdf_bytes(size, [lambda p: paint_ledger(p, result)], title=title)
        )
    raise ExportError(
        f"{path.name} has an unknown extension; use .png, .svg, .pdf, .csv or .json for a ledger."
    )
