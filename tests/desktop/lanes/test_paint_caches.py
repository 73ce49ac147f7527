"""What the lanes cache or convert to paint faster still paints the same thing."""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor, QImage

from desktop.lanes.painting import draw_cells, paint_ready, veil_image
from desktop.theme import qimage


def test_one_veil_image_holds_both_masks_in_their_colours(qapp):
    never = np.zeros((3, 5), bool)
    partial = np.zeros((3, 5), bool)
    never[2, :] = True
    partial[1, 3:] = True
    opaque, translucent = QColor(10, 200, 30, 255), QColor(250, 240, 230, 150)
    image = veil_image((never, partial), (opaque, translucent))
    assert (image.width(), image.height()) == (5, 3)
    for r in range(3):
        for c in range(5):
            got = image.pixelColor(c, r)
            if never[r, c]:
                assert got.rgba() == opaque.rgba()
            elif partial[r, c]:
                assert got.alpha() == 150
                for a, b in zip(got.getRgb()[:3], translucent.getRgb()[:3], strict=True):
                    assert abs(a - b) <= 1  # premultiplied storage rounds
            else:
                assert got.alpha() == 0


def test_a_paint_ready_image_keeps_every_pixel(qapp):
    rgba = np.random.default_rng(3).integers(0, 256, size=(4, 6, 4), dtype=np.uint8)
    rgba[..., 3] = 255
    ready = paint_ready(qimage(rgba))
    assert ready.format() == QImage.Format.Format_ARGB32_Premultiplied
    for r in range(4):
        for c in range(6):
            assert ready.pixelColor(c, r).getRgb() == tuple(int(x) for x in rgba[r, c])


def test_vector_cells_of_a_premultiplied_image_have_the_straight_colour(qapp):
    """draw_cells reads pixel(): of a premultiplied image that is darker than the colour
    unless converted back."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QPainter

    veil = veil_image((np.ones((1, 1), bool),), (QColor(200, 100, 50, 128),))
    target = QImage(4, 4, QImage.Format.Format_ARGB32)
    target.fill(0)
    p = QPainter(target)
    p.setCompositionMode(QPainter.CompositionMode.CompositionMode_Source)
    draw_cells(p, QRectF(0, 0, 4, 4), veil)
    p.end()
    got = target.pixelColor(1, 1)
    assert got.alpha() == 128
    assert abs(got.red() - 200) <= 2 and abs(got.green() - 100) <= 2


def _lane_image(window, lane: str = "dense") -> QImage:
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    return window.lanes[lane].grab().toImage()


def test_a_lane_repaints_what_changed_and_reuses_only_an_unchanged_frame(window, qtbot):
    """The cached frame (and static layer) never outlive what they show: a new trace
    of other blocks, a step, a row or a theme each paint a different picture; the same
    state paints the same picture."""
    from desktop.state.config import Config

    st = window.state
    cfg = Config(n=12, d=2, block_q=4, block_k=4, input="random", seed=5)
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(cfg)
    st.set_step(3)
    before = _lane_image(window)
    assert _lane_image(window) == before  # nothing changed: the same frame
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(cfg.replace(block_q=3, block_k=3))
    st.set_step(3)
    blocks = _lane_image(window)
    assert blocks != before  # the block grid and the step's tiles moved
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(cfg)
    st.set_step(3)
    assert _lane_image(window) == before  # back: the same picture again
    st.set_step(4)
    assert _lane_image(window) != before
    st.set_step(3)
    st.set_row(7)
    assert _lane_image(window) != before
    st.set_row(0)
    assert _lane_image(window) == before
    window.set_theme("dark")
    assert _lane_image(window) != before
    window.set_theme("light")


def test_a_lane_paints_the_second_tier_when_it_arrives(window, qtbot):
    """The placeholders' frame is not reused once a part replaces the images."""
    st = window.state
    lane = window.lanes["dense"]
    first = _lane_image(window)
    images = st.images
    from desktop.scene.render import prepare_images

    st.images = prepare_images(st.trace)  # as AppState._part swaps them in
    st.pending_parts = frozenset()
    st.sigPartsChanged.emit(st.pending_parts)
    assert st.images is not images
    assert lane.frame_key() != lane._frame_key
    assert _lane_image(window) == first  # the same numbers, painted afresh


def test_cached_veils_equal_fresh_veils_at_every_step(qapp):
    """A tensor's veils come from the cache only before its first write or after its
    last: at every step of a training trace they are what a fresh veil would be."""
    import compute
    from desktop.lanes.hbm import VeilCache, veil_layer
    from desktop.scene.render import prepare_images

    inp = compute.random_inputs(7, 2, 2, n_k=5, seed=1)
    do = np.random.default_rng(1).normal(size=(7, 2))
    trace = compute.build_trace(
        inp.q, inp.k, inp.v, block_q=2, block_k=3, do=do, pass_name="training"
    )
    images = prepare_images(trace)
    colors = (QColor(240, 240, 240, 255), QColor(240, 240, 240, 150))
    reused = 0
    for tensors in images.lanes.values():
        cache = VeilCache()
        for step in range(trace.n_steps):
            for img in tensors.values():
                got, want = cache.layer(img, step, colors), veil_layer(img, step, colors)
                if want is None:
                    assert got is None
                    continue
                assert (got.image is None) == (want.image is None)
                if want.image is not None:
                    assert got.image == want.image
                    reused += got.image is cache.layer(img, step, colors).image
                if want.written_rows is None:
                    assert got.written_rows is None
                else:
                    assert np.array_equal(got.written_rows, want.written_rows)
    assert reused  # the untouched tensors' veils were reused, not remade


def test_steps_of_equal_veil_state_have_equal_veils(qapp):
    """A lane keeps its veiled layer while VeilCache.state stays: that must mean the same
    masks (and a new state, new masks, so nothing stale is kept longer than it holds)."""
    from desktop.lanes.hbm import VeilCache
    from desktop.scene.render import prepare_images
    from desktop.state.config import Config, build

    for cfg in (
        Config(n=20, d=4, dv=4, block_q=3, block_k=4, input="random", pass_name="training"),
        Config(n=24, d=4, dv=4, block_q=5, block_k=3, input="random", causal=True),
    ):
        trace = build(cfg)[1]
        images = prepare_images(trace)
        for lane in ("dense", "tiled"):
            cache, seen = VeilCache(), {}
            tensors = images.lanes[lane]
            for step in range(-1, trace.n_steps + 1):
                state = cache.state(tensors, step)
                masks = [
                    (name, *(m.tobytes() for m in img.veils(step)))
                    for name, img in tensors.items()
                    if img.veils(step) is not None
                ]
                assert seen.setdefault(state, masks) == masks
            assert len(seen) > 2  # the state moves with the writes


def test_a_large_sram_tile_is_drawn_from_its_block_means_and_a_small_one_cell_for_cell(qapp):
    """A tile larger than DISPLAY_CAP a side (a dense backward's whole K at N = 4096)
    gets the HBM heatmaps' block means (render.downsample); a small one every cell."""
    from desktop.lanes.sram import TileImages
    from desktop.scene.render import DISPLAY_CAP, ColorScale, downsample

    rng = np.random.default_rng(5)
    scale, cache = ColorScale(2.5), TileImages()
    big = rng.standard_normal((DISPLAY_CAP * 4 + 3, 7))
    big[5, :3] = -np.inf  # a masked corner: its block stays what downsample makes of it
    small = rng.standard_normal((DISPLAY_CAP, 9))
    for values in (big, small):
        values.setflags(write=False)
        want = values if max(values.shape) <= DISPLAY_CAP else downsample(values)[0]
        image = cache.get(values, scale)
        assert (image.height(), image.width()) == want.shape
        rgba = scale.rgba(want)
        for r, c in ((0, 0), (want.shape[0] - 1, want.shape[1] - 1), (1, 2)):
            assert image.pixelColor(c, r).getRgb() == tuple(int(x) for x in rgba[r, c])
    assert cache.get(big, scale) is cache.get(big, scale)  # made once


def test_a_key_tile_made_late_replaces_its_computing_mark(window, qtbot):
    """A one-part backward's key tiles wait for the worker (key_tiles_deferred): the
    frame that marked dK_j computing is drawn again when the part comes, with no new
    heatmaps to say so."""
    from desktop.state.config import Config

    st = window.state
    cfg = Config(n=12, d=2, block_q=4, block_k=4, input="random", seed=5, pass_name="backward")
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(cfg)
    qtbot.waitUntil(lambda: not st.pending_parts, timeout=10_000)
    trace, lane = st.trace, window.lanes["tiled"]
    step = next(
        t for t in range(trace.n_steps)
        if (a := trace.action("tiled", t)) is not None and a.block_j == 2
        and any(r.tensor == "dK" for r in a.resident)
    )  # fmt: skip
    trace.backward.key_tiles_deferred = True
    st.set_step(step)
    marked = _lane_image(window, "tiled")
    notes = {t.tensor: t.note for t, _slot, _rect in lane._sram if t.tensor in ("dK", "dV")}
    assert notes == {"dK": "computing…", "dV": "computing…"}
    trace.backward.key_tiles_deferred = False
    st.sigPartsChanged.emit(st.pending_parts)  # as AppState._part, images unchanged
    assert _lane_image(window, "tiled") != marked
    held = {t.tensor: t.values for t, _slot, _rect in lane._sram if t.tensor in ("dK", "dV")}
    assert set(held) == {"dK", "dV"} and all(v is not None for v in held.values())


def test_a_finished_lane_keeps_one_frame_while_the_other_plays_on(window, qtbot):
    """After its last action a lane shows the same picture at every later step (its
    frame is keyed as one step): the kept frame is what a fresh paint at the run's last
    step draws, and playing on through the other lane's steps paints it no more."""
    from desktop.state.config import Config

    st = window.state
    cfg = Config(n=12, d=2, block_q=4, block_k=4, input="random", seed=5, pass_name="backward")
    with qtbot.waitSignal(st.sigTraceChanged, timeout=10_000):
        st.set_config(cfg)
    qtbot.waitUntil(lambda: not st.pending_parts, timeout=10_000)
    lengths = {lane: st.trace.lane_length(lane) for lane in ("dense", "tiled")}
    done, other = sorted(lengths, key=lengths.get)
    assert lengths[done] < lengths[other] <= st.trace.n_steps  # one lane ends first
    lane = window.lanes[done]
    st.set_step(lengths[done] - 1)
    last_action = _lane_image(window, done)
    st.set_step(lengths[done])
    kept = _lane_image(window, done)
    assert kept != last_action  # "done" differs from the last action's picture
    painted = []
    real = lane._paint_frame
    lane._paint_frame = lambda device: (painted.append(st.step), real(device))[1]
    for step in range(lengths[done] + 1, st.trace.n_steps):
        st.set_step(step)
        st.set_progress(0.5)
        assert _lane_image(window, done) == kept
    assert painted == []  # the other lane's steps did not paint this one
    lane._frame = None  # a fresh paint at the last step draws the kept picture
    assert _lane_image(window, done) == kept
    assert painted == [st.trace.n_steps - 1]
