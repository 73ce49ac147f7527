"""The configuration controls: inputs, shapes, tiling, SRAM capacity.

Every widget writes through AppState.update_config; when a Trace arrives (or a request
fails) the widgets are set back from the config actually shown, inside QSignalBlocker
so the programmatic update does not fire a new request. Tooltips give each quantity's
formula.
"""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

import compute
from desktop.panels.mask_control import MaskControl
from desktop.state.app_state import AppState
from desktop.state.config import D_MAX, N_MAX, Config, paper_blocks

INPUT_LABELS = {"seed": "Reference example", "random": "Seeded random", "file": "File…"}
PASS_LABELS = {"forward": "Forward", "backward": "Backward", "training": "Training step"}
DECODE_PASS = "decode"  # not a Config pass: the window swaps the lanes for desktop.decode's view


SLIDER_STEPS = 1000


def n_from_slider(position: int) -> int:
    """Slider position to N, logarithmic: N = 1 … 8 takes as much travel as 256 … 2048,
    so the small examples worth reading number by number stay easy to reach."""
    return max(1, min(N_MAX, round(N_MAX ** (position / SLIDER_STEPS))))


def slider_from_n(n: int) -> int:
    return round(math.log(max(1, n)) / math.log(N_MAX) * SLIDER_STEPS)


def _spin(lo: int, hi: int, tip: str, special: str | None = None) -> QSpinBox:
    w = QSpinBox()
    w.setRange(lo, hi)
    w.setToolTip(tip)
    w.setKeyboardTracking(False)  # typing "256" asks for one trace, not for 2, 25, 256
    w.setAccelerated(True)
    if special:
        w.setSpecialValueText(special)
    return w


class ControlsPanel(QWidget):
    decode_toggled = Signal(bool)  # Pass -> Decode chosen (True) or left (False)

    def __init__(self, state: AppState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = state
        self._build_inputs()
        self._build_shape()
        self._build_tiling()
        self._build_sram()
        self._name_widgets()
        self._build_layout()
        self._connect()
        state.sigConfigChanged.connect(self.show_config)
        # A request made elsewhere (the paper's rule, a menu, a dropped file) shows in
        # every control at once, not only when its trace arrives.
        state.sigRequested.connect(self.show_config)

    # ---- construction ----------------------------------------------------------------
    def _build_inputs(self) -> None:
        self.input_combo = QComboBox()
        self.input_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.input_combo.setMinimumContentsLength(len(INPUT_LABELS["seed"]))
        for key, text in INPUT_LABELS.items():
            self.input_combo.addItem(text, key)
        self.input_combo.setToolTip(
            "Where Q, K and V come from: the reference example's fixed vectors, seeded standard-normal values, or a .npy/.npz file"
        )
        self.seed_spin = _spin(
            0, 2**31 - 1, "Random seed for Q, K, V ~ scale · N(0, 1) (V unscaled)"
        )
        self.scale_spin = QDoubleSpinBox()
        self.scale_spin.setRange(0.01, 100.0)
        self.scale_spin.setDecimals(2)
        self.scale_spin.setKeyboardTracking(False)
        self.scale_spin.setToolTip(
            "Input scale: Q and K are multiplied by it, so scores S grow as scale²"
        )
        self.open_button = QPushButton("Open .npy/.npz…")
        self.open_button.setToolTip(
            "A .npz with arrays q, k, v, or a .npy stacking Q, K, V as (3, N, d)"
        )
        # A line under Source when a shape change had to switch it (never silently). Its
        # two lines are always reserved: a note that appeared would move every control
        # below it under the pointer, and the next click would hit the wrong one.
        self.source_note = QLabel()
        self.source_note.setWordWrap(True)
        self.source_note.setStyleSheet("color: #b9770e;")
        self.source_note.setMinimumHeight(2 * self.source_note.fontMetrics().lineSpacing() + 2)

    def _build_shape(self) -> None:
        self.n_slider = QSlider(Qt.Orientation.Horizontal)
        self.n_slider.setRange(0, SLIDER_STEPS)  # logarithmic in N: see n_from_slider
        self.n_slider.setToolTip(
            "N: query positions. Dense traffic grows as N² (S and P), tiled as N² d² / M"
        )
        self.n_spin = _spin(
            1,
            N_MAX,
            "N: query positions (the reference example and a file fix N; change it for seeded random inputs)",
        )
        self.nk_spin = _spin(0, N_MAX, "N_keys: key/value positions (= N unless set)", "= N")
        self.d_spin = _spin(1, D_MAX, "d: head size of Q and K; scores S = Q Kᵀ / √d")
        self.dv_spin = _spin(1, D_MAX, "d_v: head size of V and of the output O = softmax(S) V")

    def _build_tiling(self) -> None:
        self.bq_spin = _spin(
            1,
            N_MAX,
            "B_r (block_q): query rows per block; T_r = ⌈N / B_r⌉ blocks",
        )
        self.bk_spin = _spin(
            1,
            N_MAX,
            "B_c (block_k): keys per K/V tile; T_c = ⌈N_keys / B_c⌉ tiles",
        )
        self.order_combo = QComboBox()
        self.order_combo.addItem("Q-outer (FA-2)", "q-outer")
        self.order_combo.addItem("KV-outer (Alg. 1)", "kv-outer")
        self.order_combo.setToolTip(
            "Q-outer keeps Q_i and its state on chip while K/V tiles stream (K, V read T_r times); KV-outer keeps K_j, V_j and re-reads Q_i, O_i, ℓ_i, m_i per visit"
        )
        self.pass_combo = QComboBox()
        for key, text in PASS_LABELS.items():
            self.pass_combo.addItem(text, key)
        self.pass_combo.addItem("Decode (KV cache)", DECODE_PASS)
        self.pass_combo.setToolTip(
            "Which pass the lanes animate: the forward; the backward (dense reads the stored P "
            "and writes dP, dS; tiled recomputes P̃ = exp(S − L) tile by tile); or a training "
            "step, the forward then the backward on one timeline"
        )
        self.causal_check = QCheckBox("Causal mask")
        self.causal_check.setToolTip(
            "Row i sees keys j ≤ i + (N_keys − N) (bottom-right; the Diagonal below can align "
            "it top-left); fully masked tiles are skipped"
        )
        self.mask_control = MaskControl(self.state)
        self.lse_check = QCheckBox("Save L = m + log ℓ")
        self.lse_check.setToolTip(
            "Write the log-sum-exp per row (what the backward pass needs): N more elements"
        )
        self.dtype_combo = QComboBox()
        for dt in compute.DTYPES:
            self.dtype_combo.addItem(dt, dt)
        self.dtype_combo.setToolTip(
            "Element type of the tiled lane (inputs and P̃ rounded; m, ℓ, a in float32); bytes = elements × size"
        )

    def _build_sram(self) -> None:
        self.sram_spin = _spin(
            0,
            1 << 24,
            "M: SRAM capacity in elements. Tiled working set = B_r d + B_c (d + d_v) + B_r B_c + B_r d_v + 2 B_r",
            "not set",
        )
        self.paper_button = QPushButton("Paper's block sizes")
        self.paper_button.setToolTip(
            "Algorithm 1: B_c = ⌈M / 4d⌉, B_r = min(⌈M / 4d⌉, d); the rule ignores the score "
            "tile and m, ℓ, so the largest blocks near it that fit M are chosen"
        )
        # What the paper's rule gave and what was chosen: both shown, with the reason.
        self.paper_note = QLabel()
        self.paper_note.setWordWrap(True)
        self.paper_note.hide()
        self.fits_label = QLabel()
        self.fits_label.setWordWrap(True)

    def _name_widgets(self) -> None:
        names = {
            "input_combo": self.input_combo,
            "seed_spin": self.seed_spin,
            "scale_spin": self.scale_spin,
            "n_slider": self.n_slider,
            "n_spin": self.n_spin,
            "n_keys_spin": self.nk_spin,
            "d_spin": self.d_spin,
            "dv_spin": self.dv_spin,
            "block_q_spin": self.bq_spin,
            "block_k_spin": self.bk_spin,
            "order_combo": self.order_combo,
            "pass_combo": self.pass_combo,
            "causal_check": self.causal_check,
            "lse_check": self.lse_check,
            "dtype_combo": self.dtype_combo,
            "sram_spin": self.sram_spin,
            "source_note": self.source_note,
            "paper_note": self.paper_note,
        }
        for name, widget in names.items():  # stable names for tests and automation
            widget.setObjectName(name)

    def _build_layout(self) -> None:
        inputs = QFormLayout()
        inputs.addRow("Source", self.input_combo)
        inputs.addRow(self.source_note)
        inputs.addRow("RNG seed", self.seed_spin)
        inputs.addRow("Scale", self.scale_spin)
        inputs.addRow(self.open_button)
        n_row = QHBoxLayout()
        n_row.addWidget(self.n_slider, 1)
        n_row.addWidget(self.n_spin)
        shape = QFormLayout()
        shape.addRow("N", n_row)
        shape.addRow("N_keys", self.nk_spin)
        shape.addRow("d", self.d_spin)
        shape.addRow("d_v", self.dv_spin)
        tiling = QFormLayout()
        tiling.addRow("B_r (block_q)", self.bq_spin)
        tiling.addRow("B_c (block_k)", self.bk_spin)
        tiling.addRow("Pass", self.pass_combo)
        tiling.addRow("Loop order", self.order_combo)
        tiling.addRow(self.causal_check)
        tiling.addRow(self.mask_control)
        tiling.addRow(self.lse_check)
        tiling.addRow("dtype", self.dtype_combo)
        sram = QFormLayout()
        sram.addRow("M (elements)", self.sram_spin)
        sram.addRow(self.paper_button)
        sram.addRow(self.paper_note)
        sram.addRow(self.fits_label)
        layout = QVBoxLayout(self)
        for title, form in (
            ("Inputs", inputs),
            ("Shape", shape),
            ("Tiling", tiling),
            ("SRAM", sram),
        ):
            box = QGroupBox(title)
            box.setLayout(form)
            layout.addWidget(box)
        layout.addStretch(1)

    def _connect(self) -> None:
        st = self.state
        self.input_combo.activated.connect(self._input_chosen)
        self.seed_spin.valueChanged.connect(lambda v: st.update_config(seed=v, input="random"))
        self.scale_spin.valueChanged.connect(
            lambda v: st.update_config(input_scale=v, input="random")
        )
        self.open_button.clicked.connect(self.open_file)
        # The spin box asks for the trace; the slider only moves it.
        self.n_slider.valueChanged.connect(lambda v: self.n_spin.setValue(n_from_slider(v)))
        self.n_spin.valueChanged.connect(self._n_typed)
        self.nk_spin.valueChanged.connect(lambda v: self._shape(n_keys=v or None))
        self.d_spin.valueChanged.connect(lambda v: self._shape(d=v))
        self.dv_spin.valueChanged.connect(lambda v: self._shape(dv=v))
        self.bq_spin.valueChanged.connect(lambda v: st.update_config(block_q=v))
        self.bk_spin.valueChanged.connect(lambda v: st.update_config(block_k=v))
        self.order_combo.currentIndexChanged.connect(
            lambda _i: st.update_config(order=self.order_combo.currentData())
        )
        self.pass_combo.currentIndexChanged.connect(lambda _i: self._pass_chosen())
        self.causal_check.toggled.connect(lambda v: st.update_config(causal=v))
        self.lse_check.toggled.connect(lambda v: st.update_config(save_lse=v))
        self.dtype_combo.currentIndexChanged.connect(
            lambda _i: st.update_config(dtype=self.dtype_combo.currentData())
        )
        self.sram_spin.valueChanged.connect(lambda v: st.update_config(sram=v or None))
        self.paper_button.clicked.connect(self.apply_paper_rule)

    def _n_typed(self, n: int) -> None:
        # The slider follows the box at once (not when the trace arrives), so the two
        # never show different N while a large build is computing.
        with QSignalBlocker(self.n_slider):
            self.n_slider.setValue(slider_from_n(n))
        self._shape(n=n)

    def _shape(self, **changes: int) -> None:
        # The reference example and a file fix the shapes; a new shape needs generated
        # inputs. The switch is said beside Source, and nothing else changes: block sizes
        # stay the user's at every N (the drawing groups tiles, the numbers are exact).
        base = self.state.current_config
        if base.input != "random":
            what = (
                "the reference example is fixed at N = 6, d = 2"
                if base.input == "seed"
                else "a file fixes the shapes"
            )
            self.source_note.setText(f"Now Seeded random: {what}.")
        if "d" in changes and base.dv == base.d:
            changes["dv"] = changes["d"]  # d_v follows d until the user sets it apart
        self.state.set_config(base.replace(input="random", **changes))

    def _input_chosen(self, _index: int) -> None:
        self.source_note.clear()  # the user chose the source themselves
        mode = self.input_combo.currentData()
        if mode == "file":
            self.open_file()
        else:
            self.state.update_config(input=mode)

    def open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Open Q, K, V", "", "NumPy arrays (*.npy *.npz)"
        )
        if path:
            self.state.update_config(input="file", file=path)
        elif self.state.config is not None:
            self.show_config(self.state.config)

    def apply_paper_rule(self) -> None:
        """Set the largest blocks near the paper's rule that fit M, and say why."""
        cfg = self.state.current_config
        if not cfg.sram:
            return
        rule = paper_blocks(cfg)
        (pr, pc), m = rule.paper, cfg.sram
        said = f"Paper's rule: {pr}×{pc}, working set {rule.paper_need:,} of M = {m:,}"
        if rule.chosen is None:
            self.paper_note.setText(
                f"{said}. No blocks fit M = {m:,} at d = {cfg.d}, d_v = {cfg.dv}; "
                "the blocks are unchanged."
            )
        elif rule.chosen == rule.paper:
            self.paper_note.setText(f"{said}: it fits, so the rule's blocks are used.")
            self.state.update_config(block_q=pr, block_k=pc)
        else:
            cr, cc = rule.chosen
            self.paper_note.setText(
                f"{said}: the rule ignores S_ij, m and ℓ, which our working set counts. "
                f"Chose {cr}×{cc}, the largest near it that fits ({rule.chosen_need:,})."
            )
            self.state.update_config(block_q=cr, block_k=cc)
        self.paper_note.show()
        # A wrapped label shown late: give it the height its lines need at the column's
        # width, or the form (in a scroll area) overlaps it with the next row.
        width = max(self.fits_label.width(), self.paper_button.width(), 160)
        self.paper_note.setMinimumHeight(self.paper_note.heightForWidth(width))

    def show_config(self, cfg: Config) -> None:
        """Set every widget from the config shown, without re-firing requests."""
        values = (
            (self.seed_spin, cfg.seed),
            (self.n_spin, cfg.n),
            (self.n_slider, slider_from_n(cfg.n)),
            (self.nk_spin, cfg.n_keys or 0),
            (self.d_spin, cfg.d),
            (self.dv_spin, cfg.dv),
            (self.bq_spin, cfg.block_q),
            (self.bk_spin, cfg.block_k),
            (self.sram_spin, cfg.sram or 0),
        )
        for widget, value in values:
            with QSignalBlocker(widget):
                if widget is not self.n_slider and value > widget.maximum():
                    widget.setMaximum(value)  # a file can be larger than the sliders go
                widget.setValue(value)
        with QSignalBlocker(self.scale_spin):
            self.scale_spin.setValue(cfg.input_scale)
        for combo, value in (
            (self.input_combo, cfg.input),
            (self.order_combo, cfg.order),
            (self.dtype_combo, cfg.dtype),
        ):
            with QSignalBlocker(combo):
                combo.setCurrentIndex(combo.findData(value))
        if self.pass_combo.currentData() != DECODE_PASS:  # Decode stays chosen across traces
            with QSignalBlocker(self.pass_combo):
                self.pass_combo.setCurrentIndex(self.pass_combo.findData(cfg.pass_name))
        self._name_file(cfg)
        for check, value in ((self.causal_check, cfg.causal), (self.lse_check, cfg.save_lse)):
            with QSignalBlocker(check):
                check.setChecked(value)
        self.mask_control.show_config(cfg)
        self.paper_button.setEnabled(bool(cfg.sram))
        self._show_fits()

    def _pass_chosen(self) -> None:
        key = self.pass_combo.currentData()
        self.decode_toggled.emit(key == DECODE_PASS)
        if key != DECODE_PASS:
            self.state.update_config(pass_name=key)

    def _name_file(self, cfg: Config) -> None:
        """Source names the open file (elided to the box), not "File…"."""
        index = self.input_combo.findData("file")
        if cfg.input != "file" or not cfg.file:
            self.input_combo.setItemText(index, INPUT_LABELS["file"])
            self.input_combo.setItemData(index, None, Qt.ItemDataRole.ToolTipRole)
            return
        # As wide as the box's own longest label: a long name must not widen the box
        # past the dock (it was cut at the dock's edge).
        room = self.input_combo.fontMetrics().horizontalAdvance(INPUT_LABELS["seed"])
        name = self.input_combo.fontMetrics().elidedText(
            Path(cfg.file).name, Qt.TextElideMode.ElideMiddle, room
        )
        self.input_combo.setItemText(index, name)
        self.input_combo.setItemData(index, cfg.file, Qt.ItemDataRole.ToolTipRole)

    def _show_fits(self) -> None:
        trace = self.state.trace
        if trace is None:
            return
        need = trace.sram_need("tiled")  # of the pass shown: the backward holds more
        dense = trace.sram_need("dense")
        cap = trace.sram_capacity
        if cap is None:
            self.fits_label.setText(
                f"Tiled working set {need:,} elements; dense {dense:,}. Set M to check."
            )
            self.fits_label.setStyleSheet("")
            return
        ok = need <= cap
        mark = "✔ fits" if ok else "✘ does not fit"
        self.fits_label.setText(
            f"{mark}: tiled needs {need:,} of M = {cap:,} elements "
            f"(dense needs {dense:,}: {'fits' if dense <= cap else 'does not fit'})."
        )
        self.fits_label.setStyleSheet(
            f"color: {'#2e8b57' if ok else '#c0392b'}; font-weight: bold;"
        )
