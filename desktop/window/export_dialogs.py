"""The GUI's exports: File menu actions, option dialogs and a cancellable progress dialog.

Each export asks for its options, then a file name, then runs through `exporter` or
`ledger_export` (atomic writes) with exactly the arguments the CLI passes for the same
flags, so the files are the same. Sizes are offered by purpose (slides, a README column,
a poster); exports are light unless dark is asked for. Animation frames are drawn on the
GUI thread between event-loop turns, so the window keeps repainting and Cancel answers
at once; a cancelled or failed export leaves no file. Last choices persist.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QSize, Qt
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
    QLabel,
    QLineEdit,
    QProgressDialog,
    QSpinBox,
    QToolBar,
    QWidget,
)

from desktop.export.atomic import ExportCancelled, ExportError
from desktop.export.canvas import LANE_TARGETS
from desktop.export.exporter import (
    FrameCost,
    estimate_words,
    export_animation,
    export_still,
    export_storyboard,
    lane_frame_cost,
    parse_storyboard,
)
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

# Sizes by purpose; a lane export is laid out for its size (fonts grow with the slide).
PRESETS: dict[str, tuple[str, tuple[int, int]]] = {
    "slide169": ("16:9 slide, 1920×1080", (1920, 1080)),
    "slide43": ("4:3 slide, 1440×1080", (1440, 1080)),
    "hd": ("720p video, 1280×720", (1280, 720)),
    "readme": ("README column, 800×450", (800, 450)),
    "poster": ("Poster 4K, 3840×2160", (3840, 2160)),
}
THEMES = {"light": "Light", "dark": "Dark"}


def preset_size(key: str) -> tuple[int, int]:
    return PRESETS.get(key, PRESETS["slide169"])[1]


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
        self.view = _combo(VIEW_NAMES, str(settings.value("export/frame_view", "both")))
        self.preset = _preset_combo(settings, "export/frame_preset", "slide169")
        self.theme = _combo(THEMES, str(settings.value("export/theme", "light")))
        for box in (self.preset, self.theme):
            box.setToolTip("For the lanes; the window and panels are exported as they are")
        self.form.addRow("View", self.view)
        self.form.addRow("Size", self.preset)
        self.form.addRow("Theme", self.theme)
        self.finish()

    def remember(self, settings: QSettings) -> None:
        settings.setValue("export/frame_view", self.view.currentData())
        settings.setValue("export/frame_preset", self.preset.currentData())
        settings.setValue("export/theme", self.theme.currentData())


def _preset_combo(settings: QSettings, key: str, default: str) -> QComboBox:
    return _combo(
        {k: label for k, (label, _) in PRESETS.items()}, str(settings.value(key, default))
    )


class StoryboardOptions(_Options):
    """Steps to show side by side (1-based, as the playback bar counts), view, size, theme."""

    def __init__(self, parent: QWidget, settings: QSettings, n_steps: int, step: int) -> None:
        super().__init__(parent, "Export storyboard")
        self.n_steps = n_steps
        self.view = _combo(
            {k: VIEW_NAMES[k] for k in LANE_TARGETS},
            str(settings.value("export/story_view", "both")),
        )
        picks = sorted({1, max(1, step + 1), max(1, (n_steps + 1) // 2), n_steps})
        self.steps = QLineEdit(",".join(str(k) for k in picks))
        self.steps.setToolTip("Steps from the timeline, e.g. 1,5,9,27 or 3:6 (the current is in)")
        self.preset = _combo(
            {"auto": "960×540 per step"} | {k: label for k, (label, _) in PRESETS.items()},
            str(settings.value("export/story_preset", "auto")),
        )
        self.theme = _combo(THEMES, str(settings.value("export/theme", "light")))
        self.form.addRow("View", self.view)
        self.form.addRow("Steps", self.steps)
        self.form.addRow("Size", self.preset)
        self.form.addRow("Theme", self.theme)
        self.finish()

    def size(self) -> tuple[int, int] | None:  # noqa: D401 (Qt-style accessor)
        key = self.preset.currentData()
        return None if key == "auto" else preset_size(key)

    def remember(self, settings: QSettings) -> None:
        settings.setValue("export/story_view", self.view.currentData())
        settings.setValue("export/story_preset", self.preset.currentData())
        settings.setValue("export/theme", self.theme.currentData())


DEFAULT_FRAMES = 240  # a default clip: 40 s at 6 frames per second


def default_range(n_steps: int, step: int, hold: int) -> tuple[int, int]:
    """The 1-based steps a new animation covers: from the current step (the first, at
    the last), about DEFAULT_FRAMES frames, never past the run."""
    first = 1 if step >= n_steps - 1 else step + 1
    last = min(n_steps, first + max(1, DEFAULT_FRAMES // max(1, hold)) - 1)
    return first, last


def clip_length(seconds: float) -> str:
    """A clip's length in words: '40 s', '12 min 5 s', '1 h 3 min'."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


class AnimationOptions(_Options):
    """Range, fps, hold, size, theme; says what they make. `cost` is one frame measured
    when the dialog opened: the estimate is scaled from it, never rendered per keystroke."""

    def __init__(
        self,
        parent: QWidget,
        settings: QSettings,
        n_steps: int,
        step: int,
        cost: FrameCost | None = None,
    ) -> None:
        super().__init__(parent, "Export animation")
        self.cost = cost
        anim_views = {
            k: v for k, v in VIEW_NAMES.items() if k in ("both", "dense", "tiled", "window")
        }
        self.view = _combo(anim_views, str(settings.value("export/anim_view", "both")))
        self.first, self.last = QSpinBox(), QSpinBox()
        # A clip, not the whole run: at N = 256 the run is 33,152 steps, 66k frames and
        # most of an hour of writing. The range starts at the current step.
        first, last = default_range(
            n_steps, step, read_value(settings, "export/hold", parse_row, 2)
        )
        for box, value in ((self.first, first), (self.last, last)):
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
        self.preset = _preset_combo(settings, "export/anim_preset", "hd")
        self.theme = _combo(THEMES, str(settings.value("export/theme", "light")))
        self.form.addRow("View", self.view)
        self.form.addRow("Steps (from, to)", steps)
        self.form.addRow("Frames per second", self.fps)
        self.form.addRow("Frames per step", self.hold)
        self.form.addRow("Size", self.preset)
        self.form.addRow("Theme", self.theme)
        # What the choice makes, before it is made: frames and the clip's length.
        self.summary = QLabel()
        self.summary.setObjectName("animation_summary")
        self.summary.setWordWrap(True)
        self.form.addRow(self.summary)
        for box in (self.first, self.last, self.hold):
            box.valueChanged.connect(self._summarise)
        self.fps.valueChanged.connect(self._summarise)
        self.preset.currentIndexChanged.connect(self._summarise)
        self.view.currentIndexChanged.connect(self._summarise)
        self._summarise()
        self.finish()

    def frame_count(self) -> int:
        first, last = sorted((self.first.value(), self.last.value()))
        return (last - first + 1) * self.hold.value()

    def _summarise(self) -> None:
        frames = self.frame_count()
        text = (
            f"{frames:,} frames: {clip_length(frames / self.fps.value())} "
            f"at {self.fps.value():g} frames per second."
        )
        if self.cost is not None:
            # The lanes are laid out for the preset; the window is grabbed at its size.
            lanes = self.view.currentData() in LANE_TARGETS
            size = self.size() if lanes else (self.parent().width(), self.parent().height())
            words = estimate_words(frames, self.cost.at(size))
            text += f" As a GIF, {words} (an MP4 is about a tenth the size)."
        self.summary.setText(text)

    def size(self) -> tuple[int, int]:  # noqa: D401 (Qt-style accessor)
        return preset_size(self.preset.currentData())

    def remember(self, settings: QSettings) -> None:
        settings.setValue("export/anim_view", self.view.currentData())
        settings.setValue("export/anim_preset", self.preset.currentData())
        settings.setValue("export/theme", self.theme.currentData())
        settings.setValue("export/fps", self.fps.value())
        settings.setValue("export/hold", self.hold.value())


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
            ("Export &storyboard…", self.export_storyboard, "Ctrl+Shift+B", "Steps side by side"),
            ("Export &ledger…", self.export_ledger, "Ctrl+L", "PNG, SVG, PDF, CSV or JSON"),
        )
        # In the menu bar's free right end, not a row of its own: on a 768-pixel screen
        # that row is worth more to the lanes.
        toolbar = QToolBar("Export")
        toolbar.setObjectName("toolbar_export")
        toolbar.setIconSize(QSize(0, 0))
        w.menuBar().setCornerWidget(toolbar, Qt.Corner.TopRightCorner)
        self.toolbar = toolbar
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

    def decode_shown(self, on: bool) -> None:
        """Pass -> Decode: Export frame writes the decode view; the lanes' animation,
        storyboard and ledger exports wait until the lanes are back."""
        for act in self.actions[1:]:
            act.setEnabled(not on)

    def _export_decode_frame(self) -> None:
        from desktop.export.decode_frame import write_decode_frame

        w = self.window
        path = self._ask_path(
            "Export the decode view",
            f"decode-step{w.decode_view.slider.value()}.png",
            "PNG image (*.png);;SVG vector image (*.svg)",
        )
        if path is None:
            return
        try:
            if path.suffix.lower() not in (".png", ".svg"):
                raise ExportError(
                    f"The decode view is written as PNG or SVG, not {path.suffix or 'no'} "
                    "files; choose a name ending in .png or .svg."
                )
            step = write_decode_frame(w.decode_view, path)
            w.statusBar().showMessage(f"Wrote {path} (decode view, step {step})", 5000)
        except ExportError as exc:
            self._report(exc)

    def export_frame(self) -> None:
        w = self.window
        if w.decode_view.isVisibleTo(w):
            self._export_decode_frame()
            return
        if w.state.trace is None:
            return
        s = self.settings()
        dialog = FrameOptions(w, s)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        dialog.remember(s)
        view = dialog.view.currentData()
        path = self._ask_path(
            "Export frame",
            f"frame-step{w.state.step + 1}.png",
            "PNG image (*.png);;SVG vector image (*.svg);;PDF document (*.pdf)",
        )
        if path is None:
            return
        try:
            # The arguments `flash-explorer export --lane V --steps K --size WxH --theme T`
            # passes, so the two write the same file.
            size = preset_size(dialog.preset.currentData()) if view in LANE_TARGETS else None
            step = w.state.step
            export_still(
                w,
                path,
                target=view,
                step=step,
                size=size,
                theme=dialog.theme.currentData(),
            )
            w.statusBar().showMessage(f"Wrote {path}", 5000)
        except ExportError as exc:
            self._report(exc)

    def export_storyboard(self) -> None:
        w = self.window
        if w.state.trace is None:
            return
        s = self.settings()
        dialog = StoryboardOptions(w, s, w.state.n_steps, w.state.step)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        dialog.remember(s)
        try:
            steps = parse_storyboard(dialog.steps.text(), w.state.n_steps)
        except ExportError as exc:
            self._report(exc)
            return
        path = self._ask_path(
            "Export storyboard",
            "storyboard.png",
            "PNG image (*.png);;SVG vector image (*.svg);;PDF document (*.pdf)",
        )
        if path is None:
            return
        try:
            export_storyboard(
                w,
                path,
                steps=steps,
                target=dialog.view.currentData(),
                size=dialog.size(),
                theme=dialog.theme.currentData(),
            )
            w.statusBar().showMessage(f"Wrote {path}", 5000)
        except ExportError as exc:
            self._report(exc)

    def export_animation(self) -> None:
        w = self.window
        if w.state.trace is None:
            return
        s = self.settings()
        # One frame, measured once per opening, is the basis of the dialog's estimate.
        cost = lane_frame_cost(w, "both", preset_size("hd"), "light", w.state.step)
        dialog = AnimationOptions(w, s, w.state.n_steps, w.state.step, cost=cost)
        if dialog.exec() != QDialog.DialogCode.Accepted:
            return
        dialog.remember(s)
        first, last = sorted((dialog.first.value(), dialog.last.value()))
        view, fps, hold = dialog.view.currentData(), dialog.fps.value(), dialog.hold.value()
        path = self._ask_path(
            "Export animation", "flash-attention.gif", "Animated GIF (*.gif);;MP4 video (*.mp4)"
        )
        if path is None:
            return
        plan = FramePlan(range(first - 1, last), hold)
        size = dialog.size() if view in LANE_TARGETS else None
        self.run_animation(path, plan, fps, view, size, theme=dialog.theme.currentData())

    def run_animation(
        self, path: Path, plan: FramePlan, fps: float, view: str, size, theme: str = "light"
    ) -> bool:
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

        # Lanes are painted from a frozen copy of the state, so the user's window never
        # moves; the window and panels are grabbed, so from a hidden twin of the window.
        twin = w.offscreen_copy() if view not in LANE_TARGETS else None
        try:
            export_animation(
                twin or w,
                path,
                plan=plan,
                fps=fps,
                target=view,
                size=size,
                progress=tick,
                theme=theme,
            )
        except ExportError as exc:
            progress.close()
            self._report(exc)
            return False
        finally:
            if twin is not None:
                twin.close()
                twin.deleteLater()
        progress.close()
        w.statusBar().showMessage(f"Wrote {path} ({len(plan)} frames)", 5000)
        return True

    def export_ledger(self) -> None:
        w = self.window
        if w.state.trace is None:
            return
        path = self._ask_path(
            "Export ledger",
            "ledger.png",
            "PNG image (*.png);;SVG vector image (*.svg);;PDF document (*.pdf);;"
            "CSV table (*.csv);;JSON (*.json)",
        )
        if path is None:
            return
        try:
            export_ledger(w.state.trace.ledger(), path, scale=2.0)
            w.statusBar().showMessage(f"Wrote {path}", 5000)
        except ExportError as exc:
            self._report(exc)
