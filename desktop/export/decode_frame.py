"""The decode view (Pass -> Decode) as a PNG or SVG: one place for the headless export and
the window's Export frame, so both write the same file for the same view."""

from __future__ import annotations

from pathlib import Path

from desktop.export.atomic import write_bytes_atomic
from desktop.export.devices import svg_bytes
from desktop.export.frames import png_bytes, render_scaled


def write_decode_frame(view, path: Path, scale: float = 1.0) -> int:
    """Write `view` (a desktop.decode.view.DecodeView, laid out) to `path` (.png or .svg)
    atomically; returns the step drawn. ExportError: one sentence."""
    step = view.slider.value()
    if path.suffix.lower() == ".png":
        data = png_bytes(render_scaled(view, scale))
    else:
        from PySide6.QtCore import QPoint

        data = svg_bytes(
            (view.width(), view.height()),
            lambda painter: view.render(painter, QPoint()),
            description=f"decode step {step} of {view.slider.maximum()}: {view.problem()}",
        )
    write_bytes_atomic(path, data)
    return step
