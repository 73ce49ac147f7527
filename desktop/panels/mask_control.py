"""The Mask control: the causal diagonal's alignment, a sliding window, packed sequences.

Next to the controls panel's "Causal mask" box, these set the rest of the Config's mask
(compute.mask): which way the diagonal is aligned when N_q ≠ N_k (bottom-right as
FlashAttention ≥ 2.1, top-left as PyTorch SDPA's is_causal), FlashAttention's
window_size (left, right; −1 = unbounded) and the lengths of packed sequences. A packed
list that is not whole numbers is refused in one sentence under the field, not applied;
one that does not sum to N is refused by the build, on the lanes' veil.
"""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from compute.cli_fields import parse_packed, parse_window
from desktop.panels.alignment_compare import AlignmentDialog
from desktop.state.app_state import AppState
from desktop.state.config import N_MAX, Config

ALIGNMENTS = {False: "bottom-right (FA)", True: "top-left (SDPA)"}


def _side(tip: str) -> QSpinBox:
    w = QSpinBox()
    w.setRange(-1, 2 * N_MAX)
    w.setSpecialValueText("∞")  # −1: unbounded, as FlashAttention's window_size
    w.setKeyboardTracking(False)
    w.setToolTip(tip)
    return w


class MaskControl(QWidget):
    """Alignment, window and packed lengths; writes through AppState.update_config."""

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self.align_combo = QComboBox()
        for top_left, text in ALIGNMENTS.items():
            self.align_combo.addItem(text, top_left)
        self.align_combo.setToolTip(
            "Where the diagonal sits when N ≠ N_keys: bottom-right, row r sees keys "
            "c ≤ r + N_keys − N (rows with r < N − N_keys see none: output 0, L = −∞); "
            "top-left, row r sees c ≤ r"
        )
        self.swap_button = QPushButton("Swap")
        self.swap_button.setToolTip("Show the other alignment of the same problem (one click)")
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip(
            "Both causal alignments of this problem side by side: tiles loaded, rows that see "
            "no key, transfers"
        )
        self.left_spin = _side("Window left: keys before the diagonal each row sees (∞: all)")
        self.right_spin = _side(
            "Window right: keys after the diagonal each row sees (∞: all; 0 with Causal)"
        )
        self.packed_edit = QLineEdit()
        self.packed_edit.setPlaceholderText("e.g. 5,7,18 (sum N)")
        self.packed_edit.setToolTip(
            "Packed sequences (cu_seqlens): their lengths, summing to N; a row sees only keys "
            "of its own sequence, masked within it as above"
        )
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        names = ("align_combo", "swap_button", "compare_button", "left_spin", "right_spin")
        for name in (*names, "packed_edit"):
            getattr(self, name).setObjectName(name)
        self.error_label.setObjectName("mask_error")
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        # The buttons get a row of their own: beside the combo they would widen the panel.
        form.addRow("Diagonal", self.align_combo)
        buttons = QHBoxLayout()
        buttons.addWidget(self.swap_button)
        buttons.addWidget(self.compare_button)
        form.addRow("", buttons)
        window = QHBoxLayout()
        window.addWidget(self.left_spin)
        window.addWidget(self.right_spin)
        form.addRow("Window L, R", window)
        form.addRow("Packed", self.packed_edit)
        form.addRow(self.error_label)
        self.align_combo.currentIndexChanged.connect(
            lambda _i: state.update_config(top_left=self.align_combo.currentData())
        )
        self.swap_button.clicked.connect(
            lambda: state.update_config(top_left=not state.current_config.top_left)
        )
        self.compare_button.clicked.connect(self.compare)
        self.left_spin.valueChanged.connect(self._window)
        self.right_spin.valueChanged.connect(self._window)
        self.packed_edit.editingFinished.connect(self._packed)

    def compare(self) -> AlignmentDialog:
        """Open the side-by-side of both causal alignments for the config asked for."""
        dialog = AlignmentDialog(self.state.current_config, self)
        dialog.show()
        return dialog

    def _window(self, _value: int) -> None:
        left, right = self.left_spin.value(), self.right_spin.value()
        self.state.update_config(window="" if left == right == -1 else f"{left},{right}")

    def _packed(self) -> None:
        text = self.packed_edit.text().replace(" ", "")
        try:
            packed = ",".join(map(str, parse_packed(text))) if text else ""
        except ValueError as exc:
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        self.error_label.hide()
        self.state.update_config(packed=packed)

    def show_config(self, cfg: Config) -> None:
        """Set the widgets from the config shown, without firing requests."""
        left, right = parse_window(cfg.window) if cfg.window else (-1, -1)
        for spin, value in ((self.left_spin, left), (self.right_spin, right)):
            with QSignalBlocker(spin):
                spin.setValue(value)
        with QSignalBlocker(self.align_combo):
            self.align_combo.setCurrentIndex(self.align_combo.findData(cfg.top_left))
        with QSignalBlocker(self.packed_edit):
            self.packed_edit.setText(cfg.packed)
        self.error_label.hide()
