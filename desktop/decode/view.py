"""DecodeView: the decode pass in the window (Pass → Decode).

Its own controls (new queries N_q, cache length N_k, H_q / H_kv, splits, B_c, dtype, the
query head and token the statistics follow), the canvas (compute's walk as a picture:
one-pass streaming, the splits side by side, the combine), a play button and step slider,
the selected row's split statistics and their merge, and the ledger and roofline of every
schedule with the exactness check against the float64 dense reference. A change is
computed after a short pause; bad input shows one sentence in the view, never a dialog.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from compute.decode import MAX_NEW_QUERIES, SCHEDULES, DecodeProblem, filling_splits
from desktop.decode.canvas import DecodeCanvas
from desktop.decode.model import (
    MAX_VIEW_HEADS,
    MAX_VIEW_KEYS,
    MAX_VIEW_SPLITS,
    DecodeStep,
    decode_step,
    steps_to_finish,
)

DTYPES = ("float64", "float32", "float16", "bfloat16")
TICK_MS = 60
TICKS = 120  # the one-pass animation takes about this many ticks whatever T_c is
HEADERS = ("split", "keys", "m_s", "ℓ_s", "L_s", "α_s", "weight")


def _spin(low: int, high: int, value: int, tip: str) -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    box.setToolTip(tip)
    box.setKeyboardTracking(False)  # typed numbers apply on Enter, not per digit
    return box


class DecodeView(QWidget):
    """The decode pass: controls, canvas, statistics and ledger of one decode step."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data: DecodeStep | None = None
        self.nq = _spin(1, MAX_NEW_QUERIES, 1, "N_q: new tokens in this decode step")
        self.nk = _spin(1, MAX_VIEW_KEYS, 2048, "N_k: keys in the cache, the new ones included")
        self.hq = _spin(1, MAX_VIEW_HEADS, 8, "H_q: query heads")
        self.hkv = _spin(1, MAX_VIEW_HEADS, 2, "H_kv: K/V heads; G = H_q / H_kv share each")
        self.splits = _spin(0, MAX_VIEW_SPLITS, 0,
                            "S: splits per K/V head (0: enough for H_kv x S >= 2 x 132 SMs)")  # fmt: skip
        self.splits.setSpecialValueText("auto")
        self.bk = _spin(1, 4096, 64, "B_c: keys per tile")
        self.d = _spin(1, 256, 64, "d = d_v: head size")
        self.dtype = QComboBox()
        for name in DTYPES:
            self.dtype.addItem(name, name)
        self.head = _spin(0, MAX_VIEW_HEADS - 1, 0, "the query head the statistics follow")
        self.row = _spin(0, MAX_NEW_QUERIES - 1, 0, "the new token the statistics follow")
        self.play = QPushButton("Play")
        self.play.setCheckable(True)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Animation step: one tile per block per step")
        self.canvas = DecodeCanvas()
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setStyleSheet("color: #c0392b")
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.ledger = QLabel()
        self.ledger.setWordWrap(True)
        self.ledger.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._layout()
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        self.pending = QTimer(self)
        self.pending.setSingleShot(True)
        self.pending.setInterval(150)
        self.pending.timeout.connect(self.recompute)
        for box in (self.nq, self.nk, self.hq, self.hkv, self.splits, self.bk, self.d,
                    self.head, self.row):  # fmt: skip
            box.valueChanged.connect(lambda _v: self.pending.start())
        self.dtype.currentIndexChanged.connect(lambda _i: self.pending.start())
        self.play.toggled.connect(self._play)
        self.slider.valueChanged.connect(self._scrub)

    def _layout(self) -> None:
        form = QFormLayout()
        for label, widget in (
            ("New queries N_q", self.nq), ("Cache length N_k", self.nk),
            ("Query heads H_q", self.hq), ("K/V heads H_kv", self.hkv),
            ("Splits S", self.splits), ("Tile B_c", self.bk), ("Head size d", self.d),
            ("dtype", self.dtype), ("Follow head", self.head), ("Follow token", self.row),
        ):  # fmt: skip
            form.addRow(label, widget)
        left = QVBoxLayout()
        left.addLayout(form)
        left.addWidget(self.message)
        left.addStretch(1)
        steps = QHBoxLayout()
        steps.addWidget(self.play)
        steps.addWidget(self.slider, 1)
        right = QVBoxLayout()
        right.addWidget(self.canvas, 3)
        right.addLayout(steps)
        right.addWidget(self.table, 2)
        right.addWidget(self.ledger)
        outer = QHBoxLayout(self)
        outer.addLayout(left)
        outer.addLayout(right, 1)

    # Numbers --------------------------------------------------------------------------

    def problem(self) -> DecodeProblem:
        """The decode problem the controls describe; ValueError (one sentence) if none."""
        shape = DecodeProblem(
            self.nq.value(), self.nk.value(), self.d.value(), self.d.value(),
            self.hq.value(), self.hkv.value(), block_k=self.bk.value(),
            dtype=self.dtype.currentData(),
        )  # fmt: skip
        splits = self.splits.value() or filling_splits(shape.h_kv, shape.t_c)
        return replace(shape, splits=splits)

    def recompute(self) -> None:
        """Compute the step the controls describe, or show why it cannot be."""
        try:
            p = self.problem()
            if self.head.value() >= p.h_q or self.row.value() >= p.n_q:
                raise ValueError(f"Follow a query head below {p.h_q} and a token below {p.n_q}.")
            data = decode_step(p, head=self.head.value(), row=self.row.value())
        except ValueError as exc:
            self.message.setText(str(exc))
            return
        self.message.setText("")
        self.data = data
        one_pass, _ = steps_to_finish(p)
        with_signals = self.slider.blockSignals(True)
        self.slider.setRange(0, one_pass)
        self.slider.setValue(one_pass)  # the finished step first: every number is shown
        self.slider.blockSignals(with_signals)
        self._fill_table()
        self._fill_ledger()
        self.canvas.show_step(data, one_pass)

    def _fill_table(self) -> None:
        t = self.data.table
        rows = [
            (f"{r.split}", f"{r.keys[0]}–{r.keys[1] - 1}", r.m, r.l, r.lse, r.alpha, r.weight)
            for r in t.splits
        ]
        rows.append(("merge", "all", t.m, t.l, t.lse, float("nan"), 1.0))
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            for j, value in enumerate(row):
                text = (
                    value if isinstance(value, str) else ("" if value != value else f"{value:.4g}")
                )
                item = QTableWidgetItem(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, item)

    def _fill_ledger(self) -> None:
        d = self.data
        sched = d.summary["schedules"]
        parts = []
        for name in SCHEDULES:
            s = sched[name]
            roof = s["roofline"]
            parts.append(
                f"<b>{name}</b>: {s['bytes_per_token']:,.0f} B/token, {s['blocks']:,} blocks, "
                f"{roof['intensity']:.2f} FLOP/B, bound {roof['time_s'] * 1e6:.3g} µs "
                f"({roof['bound']})"
            )
        check = (
            f"Exact: max |O − O_dense| = {d.split_error:.2g} (split-KV), "
            f"{d.one_pass_error:.2g} (one-pass), against the float64 dense reference on the "
            "same inputs. Split-KV moves the one-pass's K/V bytes plus the partials: it buys "
            "parallelism, not fewer bytes."
        )
        self.ledger.setText("<br>".join([*parts, check]))

    # Animation ------------------------------------------------------------------------

    def _play(self, on: bool) -> None:
        if on and self.data is not None:
            if self.slider.value() >= self.slider.maximum():
                self.slider.setValue(0)
            self.timer.start()
        else:
            self.timer.stop()
        self.play.setText("Pause" if on else "Play")

    def _tick(self) -> None:
        stride = max(1, self.slider.maximum() // TICKS)
        value = min(self.slider.maximum(), self.slider.value() + stride)
        self.slider.setValue(value)
        if value >= self.slider.maximum():
            self.play.setChecked(False)

    def _scrub(self, value: int) -> None:
        self.canvas.show_step(self.data, value)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self.data is None:
            self.recompute()
