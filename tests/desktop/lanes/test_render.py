"""Per-trace images and KV-outer's live HBM state (NumPy only, no widgets)."""

from __future__ import annotations

import numpy as np
import pytest

import compute
from desktop.scene.render import ColorScale, downsample, kv_outer_hbm, live_tensors, prepare_images


def _trace(**kw):
    inp = compute.random_inputs(9, 3, 2, n_k=7, seed=4)
    return compute.build_trace(inp.q, inp.k, inp.v, block_q=2, block_k=3, **kw)


def test_kv_outer_hbm_holds_each_blocks_last_written_state():
    tr = _trace(order="kv-outer", causal=True)
    assert live_tensors(tr, "tiled") == ("O", "m", "l") and live_tensors(tr, "dense") == ()
    first = kv_outer_hbm(tr, 0)  # after "initialise O = 0, ℓ = 0, m = −∞"
    assert np.isneginf(first["m"]).all() and (first["l"] == 0).all() and (first["O"] == 0).all()
    last = kv_outer_hbm(tr, tr.n_steps - 1)
    np.testing.assert_allclose(last["O"], tr.tiled_output, rtol=1e-12, atol=1e-12)
    final_m = [tr.row_history(r).m[-1] for r in range(tr.schedule.n_q)]
    np.testing.assert_allclose(last["m"][:, 0], final_m, rtol=1e-15)
    # Mid-run HBM lags SRAM: an update changes SRAM; the write_state after it, HBM.
    for st in tr.steps:
        a = st.tiled
        if a is None or a.phase != "update":
            continue
        assert tr.steps[st.index + 1].tiled.phase == "write_state"
        r0, r1 = tr.schedule.rows(a.block_i)
        sram = [tr.row_state(r, st.index).m for r in range(r0, r1)]
        after = kv_outer_hbm(tr, st.index + 1)["m"][r0:r1, 0]
        np.testing.assert_allclose(after, sram, rtol=1e-15)  # same maths, other row batch
        before = kv_outer_hbm(tr, st.index)["m"][r0:r1, 0]
        if np.isfinite(sram).all() and not np.allclose(before, sram, rtol=1e-15):
            assert not np.array_equal(before, after)  # HBM changes at write_state


def test_images_cover_both_lanes_and_write_history():
    tr = _trace(save_lse=True)
    images = prepare_images(tr)
    assert set(images.lanes["dense"]) == {"Q", "K", "V", "S", "P", "O"}
    assert set(images.lanes["tiled"]) == {"Q", "K", "V", "O", "L"}
    s = images.lanes["dense"]["S"]
    never, partial = s.veils(-1)
    assert never.all() and not partial.any()
    never, _ = s.veils(tr.n_steps - 1)
    assert not never.any()


def test_downsample_keeps_masked_blocks_and_means():
    a = np.arange(16.0).reshape(4, 4)
    a[0:2, 2:4] = -np.inf
    small, fr, fc = downsample(a, cap=2)
    assert (fr, fc) == (2, 2)
    assert np.isneginf(small[0, 1]) and small[1, 1] == np.mean([10, 11, 14, 15])
    rgba = ColorScale(3.0).rgba(np.array([[-3.0, 0.0, 3.0, -np.inf]]))
    assert rgba.shape == (1, 4, 4) and rgba[0, 1, :3].min() > 240


def test_step_equation_shows_the_cores_numbers_for_the_selected_row():
    from desktop.scene.equations import PHASE_TEXT, num, step_equation

    s = compute.seed_example()
    tr = compute.build_trace(s.q, s.k, s.v, block_q=2, block_k=2)
    steps, tiles = tr.row_updates(0)
    for step, tile in zip(steps.tolist(), tiles.tolist(), strict=True):
        after, before = tr.row_state(0, step), tr.row_state(0, step - 1)
        text = step_equation(tr, "tiled", step, 0)
        assert text.startswith(f"row 0, tile {tile}:")
        assert num(after.m) in text and num(after.l) in text and num(before.l) in text
        # ℓ = α ℓ_old + ΣP̃ holds for the numbers shown.
        c0, c1 = tr.schedule.cols(tile)
        sum_p = tr.row_history(0).p_tilde[c0:c1].sum()
        assert abs(after.alpha * before.l + sum_p - after.l) < 1e-12
    # Another block's row, or another phase: the phase in words.
    assert step_equation(tr, "tiled", int(steps[0]), 4) == PHASE_TEXT[("tiled", "update")]
    assert step_equation(tr, "dense", 0, 0) == PHASE_TEXT[("dense", "load_q")]
    assert step_equation(tr, "tiled", tr.n_steps - 1, 0) == "done"


def test_probabilities_have_their_own_scale():
    s = compute.random_inputs(48, 8, 8, seed=4)
    trace = compute.build_trace(s.q, s.k, s.v, block_q=8, block_k=8)
    images = prepare_images(trace)
    assert images.scale_for("P") is images.prob_scale
    assert images.prob_scale.vmax == pytest.approx(trace.probs.max())
    values = [trace.v, trace.reference]
    assert images.scale.vmax == pytest.approx(max(float(abs(v).max()) for v in values))
    qk = max(float(abs(trace.q).max()), float(abs(trace.k).max()))
    assert images.scale_for("Q").vmax == images.scale_for("K").vmax == pytest.approx(qk)
    assert images.scale_for("S").vmax == pytest.approx(float(abs(trace.scores).max()))
    # On its own scale the largest probability is fully saturated, not near white.
    top = images.prob_scale.rgba(np.array([[trace.probs.max()]]))[0, 0, :3]
    assert top.min() < 120


def test_inputs_keep_their_colours_when_the_scores_grow():
    # Scale 10: S is about 100 times the inputs; on one shared scale Q and K were white.
    s = compute.random_inputs(16, 4, 4, seed=2, scale=10.0)
    trace = compute.build_trace(s.q, s.k, s.v, block_q=4, block_k=4)
    images = prepare_images(trace)
    assert images.scale_for("S").vmax > 20 * images.scale_for("V").vmax
    for name in ("Q", "K", "V"):
        rgb = images.lanes["dense"][name].rgba[..., :3].astype(int)
        white = np.abs(rgb - 247).max(axis=-1) < 20
        assert white.mean() < 0.5, name  # shows its values, not a white block


@pytest.mark.parametrize("order", ["q-outer", "kv-outer"])
@pytest.mark.parametrize("cap", [3, 256])
def test_write_history_equals_walking_the_steps(order, cap, monkeypatch):
    import desktop.scene.render as render

    monkeypatch.setattr(render, "DISPLAY_CAP", cap)  # cells of several elements, or one
    inp = compute.random_inputs(11, 3, 2, n_k=8, seed=6)
    tr = compute.build_trace(
        inp.q, inp.k, inp.v, block_q=3, block_k=3, order=order, causal=True, save_lse=True
    )
    images = render.prepare_images(tr)
    for lane, tensors in images.lanes.items():
        for name, img in tensors.items():
            if img.first_write is None:
                continue
            fr, fc = img.factor
            first = np.full(img.display_shape, render.NEVER)
            last = np.full(img.display_shape, render.NEVER)
            for st in tr.steps:  # the oracle: every action's write regions, in order
                a = st.action(lane)
                for t in a.transfers if a else ():
                    if t.tensor == name and t.direction == "write":
                        (r0, r1), (c0, c1) = t.region.rows, t.region.cols
                        cells = np.s_[r0 // fr : -(-r1 // fr), c0 // fc : -(-c1 // fc)]
                        first[cells] = np.minimum(first[cells], st.index)
                        last[cells] = st.index
            np.testing.assert_array_equal(img.first_write, first, err_msg=f"{lane} {name}")
            np.testing.assert_array_equal(img.last_write, last, err_msg=f"{lane} {name}")


def test_a_long_sentence_is_drawn_whole_in_a_short_line(qapp):
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QImage, QPainter

    from desktop.lanes.painting import draw_fitted_text

    sentence = "now: scores, rescale by α and accumulate: block 12, tile 31"
    image = QImage(400, 60, QImage.Format.Format_RGB32)
    p = QPainter(image)
    width = p.fontMetrics().horizontalAdvance(sentence)
    drawn = draw_fitted_text(p, QRectF(0, 0, width * 0.7, 26), sentence, Qt.AlignmentFlag.AlignLeft)
    p.end()
    assert drawn == sentence  # wrapped at a smaller size, not cut


def test_the_sram_frame_keeps_its_height_at_the_lanes_minimum(window):
    from desktop.lanes.view import MIN_HEIGHT, SRAM_MIN

    lane = window.lanes["tiled"]
    assert lane.minimumHeight() == MIN_HEIGHT
    lane.resize(lane.width(), MIN_HEIGHT)
    hbm, sram = lane._frames()
    assert sram.height() >= SRAM_MIN and sram.bottom() <= MIN_HEIGHT
