"""One lane (dense or tiled): its HBM tensors, its SRAM tiles and the current transfers.

A LaneView reads AppState and paints; it never computes attention. Heatmaps come from
the images prepared once per Trace (desktop.scene.render), so a step only costs veils for
not-yet-written cells, a few highlight rectangles and the small SRAM tiles. Each lane
is its own widget so an exporter can `grab()` one lane at any step.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics, QMouseEvent, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from compute import Trace
from compute.timeline import BACKWARD_PHASES
from desktop.lanes import hbm as hbm_painter
from desktop.lanes import sram as sram_painter
from desktop.lanes.context import LaneContext
from desktop.lanes.painting import draw_fitted_text, paint_ready
from desktop.lanes.sprites import Sprites
from desktop.scene import geometry as geo
from desktop.scene.render import kv_outer_hbm, lane_sources, live_tensors
from desktop.state.app_state import AppState
from desktop.theme import accent, qimage

ARROW_GAP = 26.0  # room between HBM and SRAM for the transfer arrows
HBM_MIN, SRAM_MIN = 80.0, 52.0  # the frames' least heights: tiles, labels and a text line
MIN_HEIGHT = int(26 + HBM_MIN + ARROW_GAP + SRAM_MIN + 4)  # a lane is never squeezed below
TITLES = {
    "dense": "Dense: standard attention writes S and P to HBM",
    "tiled": "Tiled: FlashAttention keeps S and P on chip",
}
SHORT_TITLES = {"dense": "Dense", "tiled": "Tiled"}  # when the step's sentence needs the room
BACKWARD_TITLES = {
    "dense": "Dense backward: P read back, dP and dS written to HBM",
    "tiled": "Tiled backward (FA-2, K/V outer): P̃ = exp(S − L) recomputed on chip",
}
SHORT_BACKWARD_TITLES = {"dense": "Dense backward", "tiled": "Tiled backward"}


class LaneView(QWidget):
    """Paints one lane of the current trace at the current step."""

    def __init__(self, state: AppState, lane: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state, self.lane = state, lane
        self._images: dict[str, object] = {}
        self._rects: dict[str, QRectF] = {}
        self._static: QPixmap | None = None  # frames, heatmaps, numbers: fixed per trace
        # The last frame painted and what it showed: a repaint with nothing changed (the
        # busy veil over the lanes shown or lifted, an overlapping window) draws it again
        # instead of every layer (~8 ms a lane).
        self._frame: QPixmap | None = None
        self._frame_key: tuple = ()
        self._live: tuple[str, ...] = ()  # tensors whose HBM contents change (KV-outer)
        self._tiles = sram_painter.TileImages()
        self._veils = hbm_painter.VeilCache()  # per trace's images (see _on_trace)
        self._sprites = Sprites()  # strokes drawn on earlier frames (desktop.lanes.sprites)
        self._sram: sram_painter.PlacedTiles = []  # where the SRAM tiles were drawn
        self._fonts: tuple[QFont, QFont, QFont] | None = None  # see _title_fonts
        self._veiled: QPixmap | None = None  # the static layer with veils (_veiled_layer)
        self._veiled_key: tuple = ()
        self._advances: dict[tuple, int] = {}  # the fixed titles' widths (see _advance)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMinimumSize(420, MIN_HEIGHT)
        state.sigTraceChanged.connect(self._on_trace)
        state.sigImagesChanged.connect(self._on_images)
        state.sigStepChanged.connect(self._on_step)
        state.sigRowChanged.connect(self.update)
        state.sigProgressChanged.connect(self.update)
        state.sigPartsChanged.connect(self._on_parts)

    # ---- state -------------------------------------------------------------------
    def _on_trace(self, trace: Trace) -> None:
        self._live = live_tensors(trace, self.lane)
        imgs = self.state.images.lanes[self.lane]
        self._images = {name: paint_ready(qimage(t.rgba)) for name, t in imgs.items()}
        self._rects, self._static = {}, None
        self._tiles = sram_painter.TileImages()
        self._veils = hbm_painter.VeilCache()
        self._sprites = Sprites()
        self.update()

    def _on_images(self) -> None:
        """The second tier arrived: its heatmaps replace the placeholders."""
        if self.state.trace is not None:
            self._on_trace(self.state.trace)

    def _on_step(self, _step: int) -> None:
        self.update()

    def _on_parts(self, _pending: frozenset) -> None:
        """A part came without new heatmaps (a one-part build's late key tile): the frame
        is drawn again only if it shows a tile that was still computing."""
        if any(tile.values is None and tile.note for tile, _slot, _rect in self._sram):
            self._frame = None
            self.update()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        self._rects, self._static = {}, None
        super().resizeEvent(event)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt override)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.FontChange):
            self._static = None  # the cached layer holds the old colours
            self._fonts, self._advances = None, {}
            self._veils = hbm_painter.VeilCache()
        super().changeEvent(event)

    # ---- geometry ------------------------------------------------------------------
    def _frames(self) -> tuple[QRectF, QRectF]:
        """HBM above, SRAM below: data falls from memory onto the chip and back."""
        w, h = float(self.width()), float(self.height())
        # The SRAM frame keeps its minimum first: squeezed, it would show nothing readable.
        hbm_h = max(HBM_MIN, min((h - 30) * 0.60, h - 26 - ARROW_GAP - 4 - SRAM_MIN))
        hbm = QRectF(6, 26, w - 12, hbm_h)
        top = hbm.bottom() + ARROW_GAP
        return hbm, QRectF(6, top, w - 12, max(SRAM_MIN, h - top - 4))

    def _layout(self) -> dict[str, QRectF]:
        if not self._rects and self.state.trace is not None:
            hbm, _ = self._frames()
            area = hbm.adjusted(24, 24, -10, -6)
            self._rects = geo.layout_hbm(geo.hbm_slots(self.state.trace), area)
        return self._rects

    # ---- painting ------------------------------------------------------------------
    def frame_key(self) -> tuple:
        """Everything a frame shows depends on: the trace and its images (by identity),
        the step, transfer progress, selected rows, size, pixel ratio and the static layer
        (dropped on a palette, font or size change). Once the lane's own timeline has
        ended (its last action done, the other lane may go on) every later step shows
        the same finished lane, so it keys as one step, without progress: playback on
        through the other lane's steps draws this lane's frame once, not every frame."""
        st = self.state
        step, progress = st.step, st.progress
        if st.trace is not None and step >= st.trace.lane_length(self.lane):
            step, progress = st.trace.lane_length(self.lane), None
        return (
            id(st.trace), id(st.images), id(self._static), step, progress,
            st.row, st.key, self.width(), self.height(), self.devicePixelRatioF(),
        )  # fmt: skip

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt override)
        if self.state.trace is None:
            self._frame = None
            p = QPainter(self)
            p.fillRect(self.rect(), self.palette().color(QPalette.ColorRole.Window))
            p.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Building the trace…")
            p.end()
            return
        key = self.frame_key()
        if self._frame is None or key != self._frame_key:
            dpr = self.devicePixelRatioF()
            size = QSize(int(self.width() * dpr), int(self.height() * dpr))
            frame = self._frame
            if frame is None or frame.size() != size or frame.devicePixelRatio() != dpr:
                frame = QPixmap(size)
                frame.setDevicePixelRatio(dpr)
            # Otherwise the last frame's pixels are painted over, whole: a fresh pixmap
            # each frame cost its page faults (~1.3 MB a lane).
            self._paint_frame(frame)
            # The key after the paint (it made the static layer); held with the objects
            # it names by id, so no other object can take their ids while it stands.
            self._frame, self._frame_key = frame, self.frame_key()
            self._frame_holds = (self.state.trace, self.state.images, self._static)
        p = QPainter(self)
        p.drawPixmap(0, 0, self._frame)
        p.end()

    def _paint_frame(self, device: QPixmap) -> None:
        """Every layer of the current step onto `device` (the widget's size)."""
        trace = self.state.trace
        step = self.state.step
        hbm, sram = self._frames()
        ctx = self._context()
        static = self._static_layer(ctx, trace, hbm, sram)
        p = QPainter(device)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        # The static layer is opaque and the widget's size: it covers every pixel (no fill
        # under it), copied as it is.
        p.setCompositionMode(QPainter.CompositionMode.CompositionMode_Source)
        p.drawPixmap(0, 0, static if ctx.live else self._veiled_layer(ctx, step, static))
        p.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
        self._paint_title(p, trace, step)
        if ctx.live:  # KV-outer's HBM, then the veils over the rest (their outlines on it)
            hbm_painter.paint_live(p, ctx, trace, step)
            hbm_painter.paint_veils(p, ctx, step)
        hbm_painter.paint_row(p, ctx, trace)
        self._sram = sram_painter.paint_sram(p, ctx, trace, step, sram, self._tiles)
        sram_painter.paint_transfers(p, ctx, trace, step, self._sram)
        p.end()

    def _veiled_layer(self, ctx: LaneContext, step: int, static: QPixmap) -> QPixmap:
        """The static layer with the step's veils, outlines and written-row marks, kept
        while the veils stay the same (most steps write one tensor, or none). Drawn
        before the title, which shares no pixel with them, as they were drawn after it."""
        key = (id(static), self._veils.state(ctx.state.images.lanes[self.lane], step))
        if self._veiled is None or key != self._veiled_key:
            layer = self._veiled
            if layer is None or layer.size() != static.size():
                layer = QPixmap(static.size())
            layer.setDevicePixelRatio(static.devicePixelRatio())
            q = QPainter(layer)
            q.setCompositionMode(QPainter.CompositionMode.CompositionMode_Source)
            q.drawPixmap(0, 0, static)
            q.setCompositionMode(QPainter.CompositionMode.CompositionMode_SourceOver)
            q.setRenderHint(QPainter.RenderHint.Antialiasing, True)
            hbm_painter.paint_veils(q, ctx, step)
            q.end()
            # held with the static layer its key names by id
            self._veiled, self._veiled_key, self._veiled_over = layer, key, static
        return self._veiled

    def _context(self) -> LaneContext:
        return LaneContext(
            state=self.state,
            lane=self.lane,
            palette=self.palette(),
            font=self.font(),
            images=self._images,
            live=self._live,
            rects=self._layout(),
            veils=self._veils,
            sprites=self._sprites,
        )

    def _static_layer(self, ctx: LaneContext, trace: Trace, hbm: QRectF, sram: QRectF) -> QPixmap:
        """The cached per-trace layer; rebuilt too when the window moves to a screen of
        another pixel ratio."""
        dpr = self.devicePixelRatioF()
        if self._static is None or self._static.devicePixelRatio() != dpr:
            size = (self.width(), self.height())
            self._static = hbm_painter.static_layer(ctx, trace, hbm, sram, size, dpr)
        return self._static

    def _title_fonts(self) -> tuple[QFont, QFont, QFont]:
        """The lane's font, bold and italic: made once per font (changeEvent drops them)."""
        if self._fonts is None:
            bold, italic = QFont(self.font()), QFont(self.font())
            bold.setBold(True)
            italic.setItalic(True)
            self._fonts = (QFont(self.font()), bold, italic)
        return self._fonts

    def _advance(self, p: QPainter, text: str) -> int:
        """p.fontMetrics().horizontalAdvance(text) for the lane's fixed titles, measured
        once per font and pixel ratio (the step's own sentences are measured as drawn)."""
        key = (p.font().key(), self.devicePixelRatioF(), text)
        width = self._advances.get(key)
        if width is None:
            width = self._advances[key] = p.fontMetrics().horizontalAdvance(text)
        return width

    def _paint_title(self, p: QPainter, trace: Trace, step: int) -> None:
        """Lane name left, what it does at this step in the middle, transfers so far right."""
        font, bold, italic = self._title_fonts()
        text = self.palette().color(QPalette.ColorRole.WindowText)
        line = QRectF(8, 2, self.width() - 16, 22)
        action = trace.action(self.lane, step)
        backward = trace.pass_name == "backward" or (
            trace.pass_name == "training" and (action is None or action.phase in BACKWARD_PHASES)
        )
        order = ""
        if self.lane == "tiled" and not backward:
            order = f" ({'Q-outer' if trace.schedule.order == 'q-outer' else 'KV-outer'})"
        titles, short_titles = (
            (BACKWARD_TITLES, SHORT_BACKWARD_TITLES) if backward else (TITLES, SHORT_TITLES)
        )
        p.setFont(font)
        total = f"HBM transfers: {trace.totals_at(step)[self.lane]:,}"
        total_w = p.fontMetrics().horizontalAdvance(total) + 24
        now = f"now: {action.label}" if action is not None else "done"
        p.setFont(bold)
        title = titles[self.lane] + order
        room = line.width() - self._advance(p, title) - 24 - total_w
        if room < QFontMetrics(italic).horizontalAdvance(now) + 8:
            # The step's sentence matters more than the tagline: keep the lane's name only.
            title = short_titles[self.lane] + order
            room = line.width() - self._advance(p, title) - 24 - total_w
        p.setPen(text)
        p.drawText(line, Qt.AlignmentFlag.AlignVCenter, title)
        title_w = line.width() - total_w - room
        p.setFont(font)
        right = Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight
        p.drawText(line, right, total)
        if room > 60:
            p.setFont(italic)
            p.setPen(accent(self.palette()))
            # The whole sentence: wrapped onto two smaller lines when one is too short.
            draw_fitted_text(
                p, QRectF(line.left() + title_w, 0, room, 26), now, Qt.AlignmentFlag.AlignLeft
            )
            p.setFont(font)

    # ---- interaction -----------------------------------------------------------------
    def row_at(self, pos: QPointF) -> int | None:
        """The query row under `pos` in any query-row tensor of HBM or SRAM, else None."""
        trace = self.state.trace
        if trace is None:
            return None
        row = self._hbm_row_at(pos, geo.QUERY_TENSORS, trace.schedule.n_q)
        if row is not None:
            return row
        for tile, _slot, rect in self._sram:
            if tile.first_row is not None and tile.values is not None and rect.contains(pos):
                rows = tile.values.shape[0]
                return tile.first_row + min(
                    rows - 1, int((pos.y() - rect.top()) / rect.height() * rows)
                )
        return None

    def key_at(self, pos: QPointF) -> int | None:
        """The key row under `pos` in K, V, dK or dV of HBM, else None."""
        trace = self.state.trace
        if trace is None:
            return None
        return self._hbm_row_at(pos, ("K", "V", "dK", "dV"), trace.schedule.n_k)

    def _hbm_row_at(self, pos: QPointF, tensors, n_rows: int) -> int | None:
        """The row under `pos` in one of `tensors` (n_rows rows each) as drawn in HBM."""
        lane_imgs = self.state.images.lanes[self.lane]
        for name, r in self._layout().items():
            if name in tensors and name in lane_imgs and r.contains(pos):
                return min(n_rows - 1, int((pos.y() - r.top()) / r.height() * n_rows))
        return None

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt override)
        if event.button() == Qt.MouseButton.LeftButton:
            row = self.row_at(event.position())
            if row is not None:
                self.state.set_row(row)
            elif (key := self.key_at(event.position())) is not None:
                self.state.set_key(key)  # the statistics panel follows dK, dV of this key
        super().mousePressEvent(event)

    def event(self, ev: QEvent) -> bool:
        if ev.type() == QEvent.Type.ToolTip:
            QToolTip.showText(ev.globalPos(), self._tooltip(QPointF(ev.pos())) or "", self)
            return True
        return super().event(ev)

    def _tooltip(self, pos: QPointF) -> str | None:
        trace = self.state.trace
        if trace is None:
            return None
        sources = lane_sources(trace, self.lane)
        if self._live:  # KV-outer: what HBM holds now, as drawn
            sources.update(kv_outer_hbm(trace, self.state.step))
        for name, r in self._layout().items():
            if name in sources and r.contains(pos):
                values = sources[name]
                rows, cols = values.shape
                i = min(rows - 1, int((pos.y() - r.top()) / r.height() * rows))
                j = min(cols - 1, int((pos.x() - r.left()) / r.width() * cols))
                return f"{geo.SYMBOL.get(name, name)}[{i}, {j}] = {values[i, j]:.6g}"
        return None
