"""The GUI's exports: File menu actions, option dialogs and a cancellable progress dialog.

Each export asks for its options, then a file name, then runs through `exporter` or
`ledger_export` (atomic writes). Animation frames are drawn by the window's own views
on the GUI thread between event-loop turns, so the window keeps repainting and Cancel
answers at once; a cancelled or failed export leaves no file. Last choices persist.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QProgressDialog,
    QSpinBox,
    QWidget,
)

from desktop.export.atomic import ExportCancelled, ExportError
from desktop.export.exporter import export_animation, export_still
from desktop.export.frames import FramePlan
from desktop.export.ledger_export import export_ledger
from desktop.window.saved_settings import parse_row, parse_speed, read_value

VIEW_NAMES = {
    "window": "Whole window",
    "both": "Both lanes",
    "dense": "Dense lane",
    "tiled": "Tiled lane",
    "stats": "Row statistics",
    "ledger": "Ledger panel",
}


def _combo(options: dict[str, str], current: str) -> QComboBox:
    box = QComboBox()
    for key, label in options.items():
        box.addItem(label, key)
    box.setCurrentIndex(max(0, box.findData(current)))
    return box


class _Options(QDialog):
    """A small form with OK/Cancel."""

    def __init__(self, parent: QWidget, title: str) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.form = QFormLayout(self)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons

    def finish(self) -> None:
        self.form.addRow(self.buttons)


class FrameOptions(_Options):
    def __init__(self, parent: QWidget, settings: QSettings) -> None:
        super().__init__(parent, "Export frame")
        self.view = _combo(VIEW_NAMES, str(settings.value("export/frame_view", "window")))
        self.scale = _combo(
            {"1": "1× (screen)", "2": "2× (print)", "3": "3×"},
            str(settings.value("export/scale", "1")),
        )
        self.form.addRow("View", self.view)
        self.form.addRow("PNG scale", self.scale)
        self.finish()


class AnimationOptions(_Options):
    def __init__(self, parent: QWidget, settings: QSettings, n_steps: int, step: int) -> None:
        super().__init__(parent, "Export animation")
        anim_views = {
            k: v for k, v in VIEW_NAMES.items() if k in ("both", "dense", "tiled", "window")
        }
        self.view = _combo(anim_views, str(settings.value("export/anim_view", "both")))
        self.first, self.last = QSpinBox(), QSpinBox()
        for box, value in ((self.first, 1), (self.last, n_steps)):
            box.setRange(1, n_steps)
            box.setValue(value)
        self.first.setToolTip("First step to export (1-based, as the playback bar counts)")
        self.last.setToolTip("Last step to export")
        steps = QHBoxLayout()
        steps.addWidget(self.first)
        steps.addWidget(self.last)
        self.fps = QDoubleSpinBox()
        self.fps.setRange(0.5, 60)
        self.fps.setValue(read_value(settings, "export/fps", parse_speed, 6.0))
        self.hold = QSpinBox()
        self.hold.setRange(1, 30)
        self.hold.setValue(read_value(settings, "export/hold", parse_row, 2))
        self.hold.setToolTip("Frames per step: transfers travel across these frames")
        self.width, self.height = QSpinBox(), QSpinBox()
        for box, value in ((self.width, 0), (self.height, 0)):
            box.setRange(0, 8192)
            box.setSpecialValueText("view size")
            box.setValue(value)
        size = QHBoxLayout()
        size.addWidget(self.width)
        size.addWidget(self.height)
        self.form.addRow("View", self.view)
        self.form.addRow("Steps (from, to)", steps)
        self.form.addRow("Frames per second", self.fps)
        self.form.addRow("Frames per step", self.hold)
        self.form.addRow("Size (width, height)", size)
        self.finish()

    def size(self) -> tuple[int, int] | None:  # noqa: D401 (Qt-style accessor)
        w, h = self.width.value(), self.height.value()
        return (w, h) if w >= 16 and h >= 16 else None


class Exports:
    """Export actions for a MainWindow (File menu entries and their dialogs)."""

    def __init__(self, window) -> None:
        self.window = window

    def settings(self) -> QSettings:
        return self.window._settings()

    def add_actions(self, menu, before=None) -> None:
        """Add the three exports to `menu` (before `before`) and to an Export toolbar."""
        w = self.window
        specs = (
            ("Export &frame…", self.export_frame, "Ctrl+E", "PNG or SVG of the current step"),
            ("Export &animation…", self.export_animation, "Ctrl+Shift+E", "GIF or MP4 of steps"),
            ("Export &ledger…", self.export_ledger, "Ctrl+L", "PNG, CSV or JSON of the ledger"),
        )
        toolbar = w.addToolBar("Export")
        toolbar.setObjectName("toolbar_export")  # saveState needs stable names
        self.actions = []
        for text, slot, keys, tip in specs:
            act = w._action(menu, text, slot, QKeySequence(keys), tip)
            if before is not None:
                menu.removeAction(act)
                menu.insertAction(before, act)
            toolbar.addAction(act)
            self.actions.append(act)
        if before is not None:
            menu.insertSeparator(before)

    def _ask_path(self, title: str, default_name: str, filters: str) -> Path | None:
        s = self.settings()
        folder = str(s.value("export/folder", str(Path.home())))
        name, chosen = QFileDialog.getSaveFileName(
            self.window, title, str(Path(folder) / default_name), filters
        )
        if not name:
            return None
        path = Path(name)
        if not path.suffix and "(*" in chosen:
            # A typed name without extension takes the chosen filter's one.
            path = path.with_suffix(chosen.split("(*", 1)[1].rstrip(")").split()[0])
        s.setValue("export/folder", str(path.parent))
        return path

    def _report(self, exc: Exception) -> None:
        if not isinstance(exc, ExportCancelled):
            self.window.show_error(str(exc))

    def export_frame(self) -> None:
        w = self.window
        if w.state.trace is None:
            return
        s = self.settings()
        dialog = FrameOptions(w, s)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        view, scale = dialog.view.currentData(), dialog.scale.currentData()
        s.setValue("export/frame_view", view)
        s.setValue("export/scale", scale)
        path = self._ask_path(
            "Export frame",
            f"frame-step{w.state.step + 1}.png",
            "PNG image (*.png);;SVG vector image (*.svg)",
        )
        if path is None:
            return
        try:
            export_still(w, path, target=view, step=w.state.step, scale=float(scale))
            w.statusBar().showMessage(f"Wrote {path}", 5000)
        except ExportError as exc:
            self._report(exc)

    def export_animation(self) -> None:
        w = self.window
        if w.state.trace is None:
            return
        s = self.settings()
        dialog = AnimationOptions(w, s, w.state.n_steps, w.state.step)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        first, last = sorted((dialog.first.value(), dialog.last.value()))
        view, fps, hold = dialog.view.currentData(), dialog.fps.value(), dialog.hold.value()
        s.setValue("export/anim_view", view)
        s.setValue("export/fps", fps)
        s.setValue("export/hold", hold)
        path = self._ask_path(
            "Export animation", "flash-attention.gif", "Animated GIF (*.gif);;MP4 video (*.mp4)"
        )
        if path is None:
            return
        plan = FramePlan(range(first - 1, last), hold)
        self.run_animation(path, plan, fps, view, dialog.size())

    def run_animation(self, path: Path, plan: FramePlan, fps: float, view: str, size) -> bool:
        """Write the animation with a progress dialog; True when a file was written."""
        w = self.window
        w.playback.pause()
        progress = QProgressDialog(f"Rendering {path.name}…", "Cancel", 0, len(plan), w)
        progress.setWindowTitle("Export animation")
        progress.setWindowModality(Qt.WindowModality.WindowModal)
        progress.setMinimumDuration(0)

        def tick(done: int, total: int) -> bool:
            progress.setValue(done)
            QApplication.processEvents()
            return not progress.wasCanceled()

        try:
            export_animation(w, path, plan=plan, fps=fps, target=view, size=size, progress=tick)
        except ExportError as exc:
            progress.close()
            self._report(exc)
            return False
        progress.close()
        w.statusBar().showMessage(f"Wrote {path} ({len(plan)} frames)", 5000)
        return True

    def export_ledger(self) -> None:
        w = self.window
        if w.state.trace is None:
            return
        path = self._ask_path(
            "Export ledger", "ledger.png", "PNG image (*.png);;CSV table (*.csv);;JSON (*.json)"
        )
        if path is None:
            return
        try:
            export_ledger(w.state.trace.ledger(), path, scale=2.0)
            w.statusBar().showMessage(f"Wrote {path}", 5000)
        except ExportError as exc:
            self._report(exc)
