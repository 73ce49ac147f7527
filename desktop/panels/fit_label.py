"""A read-out label whose vector drops trailing components to fit its width.

"[−0.0411954, 0.011342, 0.0168607, −0.00893386, …] after 11 of 64 tiles" does not fit a
statistics dock on a laptop; clipped, it lost its end (the part that says how far the
sum has come). This label keeps the words and shows as many components as fit, with
"…" for the rest (`full_text()` keeps the whole).
"""

from __future__ import annotations

import re

from PySide6.QtWidgets import QLabel, QSizePolicy

_VECTOR = re.compile(r"\[([^\[\]]*)\]")


def shortened(text: str, fits) -> str:
    """`text` with its first [a, b, …] list cut to as many items as `fits` allows."""
    if fits(text):
        return text
    found = _VECTOR.search(text)
    if found is None:
        return text
    items = [x for x in found.group(1).split(", ") if x != "…"]
    head, tail = text[: found.start()], text[found.end() :]
    for keep in range(len(items) - 1, 0, -1):
        candidate = f"{head}[{', '.join(items[:keep])}, …]{tail}"
        if fits(candidate):
            return candidate
    return f"{head}[{items[0]}, …]{tail}" if items else text


class FitLabel(QLabel):
    """A single-line read-out: vectors shortened to the label's width, never clipped."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self._fit()

    def full_text(self) -> str:
        return self._full

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        room = self.contentsRect().width() - 2
        advance = self.fontMetrics().horizontalAdvance
        super().setText(shortened(self._full, lambda t: advance(t) <= room))

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        self.set_full_text(text)
