"""Two tiers of numbers per change: the streamed path equals the all-at-once one, and a
change while parts are pending never leaves a view showing two configurations.

The first tier (desktop.scene.render.prepare_first) is handed over before the pass over
S; complete_images fills the rest. Streamed through the worker's build_all (with a
cancellation check between chunks) and then compared, bit for bit, with a fresh build
(the number cache cleared) of the same configuration done at once.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compute.full_pass
from compute.forward_numbers import DISPLAY_CELLS
from compute.numbers import SHARED, Cancelled
from desktop.scene import render
from desktop.scene.backward import dense_backward_sram, is_backward, tiled_backward_sram
from desktop.scene.render import (
    FIRST_TIER,
    LaneImages,
    lane_shapes,
    prepare_first,
    prepare_images,
)
from desktop.state import worker
from desktop.state.app_state import AppState
from desktop.state.config import Config, build

IMAGE_FIELDS = ("name", "shape", "factor", "pending")


@pytest.fixture(autouse=True, scope="module")
def stream_every_size():
    """Small sizes stream too here (the app streams only large passes: STREAM_WORK)."""
    old = render.STREAM_WORK, render.BACKWARD_STREAM_WORK
    render.STREAM_WORK = render.BACKWARD_STREAM_WORK = 0
    yield
    render.STREAM_WORK, render.BACKWARD_STREAM_WORK = old


ARRAY_FIELDS = ("rgba", "values", "first_write", "last_write")


def assert_same_images(a: LaneImages, b: LaneImages) -> None:
    """Every scale and every tensor's pixels, numbers and write history identical."""
    for scale in ("scale", "prob_scale", "grad_scale", "score_scale", "qk_scale"):
        assert getattr(a, scale) == getattr(b, scale), scale
    assert a.lanes.keys() == b.lanes.keys()
    for lane in a.lanes:
        assert list(a.lanes[lane]) == list(b.lanes[lane])
        for name, x in a.lanes[lane].items():
            y = b.lanes[lane][name]
            for f in IMAGE_FIELDS:
                assert getattr(x, f) == getattr(y, f), (lane, name, f)
            for f in ARRAY_FIELDS:
                u, v = getattr(x, f), getattr(y, f)
                assert (u is None) == (v is None), (lane, name, f)
                if u is not None:
                    assert np.array_equal(u, v, equal_nan=True), (lane, name, f)


def assert_first_tier_of(first: LaneImages, complete: LaneImages, trace) -> None:
    """The first tier holds exactly what needs no pass over S, as the complete images
    hold it; the rest are placeholders of the complete image's display size."""
    for lane, imgs in first.lanes.items():
        assert list(imgs) == list(lane_shapes(trace, lane)) == list(complete.lanes[lane])
        for name, img in imgs.items():
            done = complete.lanes[lane][name]
            assert not done.pending
            assert img.pending == (name not in FIRST_TIER)
            assert img.shape == done.shape and img.factor == done.factor
            assert img.rgba.shape == done.rgba.shape
            if not img.pending:
                assert img is done  # kept as it is: never redrawn, never changed


configs = st.builds(
    Config,
    n=st.integers(1, 48),
    n_keys=st.one_of(st.none(), st.integers(1, 48)),
    d=st.integers(1, 5),
    dv=st.integers(1, 5),
    block_q=st.integers(1, 56),  # blocks that do not divide N, and blocks past N
    block_k=st.integers(1, 56),
    order=st.sampled_from(["q-outer", "kv-outer"]),
    causal=st.booleans(),
    save_lse=st.booleans(),
    dtype=st.sampled_from(["float64", "float32", "float16", "bfloat16"]),
    input=st.just("random"),
    seed=st.integers(0, 999),
    pass_name=st.sampled_from(["forward", "backward", "training"]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, chunk=st.sampled_from([96, 1 << 20]))
def test_streamed_numbers_equal_a_fresh_build_at_once(config, chunk):
    SHARED.clear()
    old = compute.full_pass.CHUNK_ELEMENTS
    compute.full_pass.CHUNK_ELEMENTS = chunk  # many chunks: the stream's checks run
    try:
        firsts, checks = [], []
        shown, trace, complete = worker.build_all(
            config, on_first=lambda *r: firsts.append(r), check=lambda: checks.append(1)
        )
        SHARED.clear()  # a fresh build (same chunks): nothing found in the cache
        _, fresh = build(config)
        at_once = prepare_images(fresh)
    finally:
        compute.full_pass.CHUNK_ELEMENTS = old
    assert shown.n == config.n and trace.pass_name == config.pass_name
    # Nothing cached: every pass streams (a backward's first tier has its forward's O, L).
    assert firsts
    if firsts:
        ((first_config, first_trace, first),) = firsts
        assert first_config == shown and first_trace is trace
        assert_first_tier_of(first, complete, trace)
        assert checks  # the pass over S asked, between chunks, whether to go on
    assert fresh is not trace
    assert_same_images(complete, at_once)
    assert_same_images(prepare_first(fresh), prepare_first(trace))
    np.testing.assert_array_equal(fresh.tiled_output, trace.tiled_output)
    np.testing.assert_array_equal(fresh.reference, trace.reference)


@pytest.mark.parametrize("pass_name", ["forward", "backward", "training"])
def test_a_change_mid_stream_never_mixes_two_configurations(qtbot, monkeypatch, pass_name):
    """A forward (or a backward, a training step) streams its second tier slowly (tiny chunks, a pause in each check); a
    new change lands while it is pending. Every state a view could read (on each trace
    and part signal) is one configuration's: its images are that trace's first tier or
    its complete images, never another trace's; the old stream is cancelled."""
    SHARED.clear()  # (another pass of these inputs has its passes cached: one part)
    monkeypatch.setattr(worker, "THREAD_THRESHOLD_WORK", 0)  # every build threaded
    monkeypatch.setattr(compute.full_pass, "CHUNK_ELEMENTS", 64)
    # The worker waits for the first tier's paint however loaded the machine is (past
    # PAINT_WAIT_S it would go on unpainted, and the gate below would never close).
    monkeypatch.setattr(worker, "PAINT_WAIT_S", 30.0)
    real_check, cancelled = worker._BuildJob.check, []
    # Once its first tier is painted (job.painted), a's second tier waits until the test
    # has seen that tier and made the next change, so a loaded machine cannot finish a's
    # pass before the check; the first tier's own chunks (a backward's rows) never wait.
    gate = threading.Event()

    def slow_check(job):
        if job.painted.is_set():
            assert gate.wait(30)
        time.sleep(0.005)
        try:
            real_check(job)
        except Cancelled:
            cancelled.append(job.config)
            raise

    monkeypatch.setattr(worker._BuildJob, "check", slow_check)
    state = AppState()
    snapshots = []

    def snap(*_a):
        snapshots.append((state.config, state.trace, state.images, state.pending_parts))

    state.sigTraceChanged.connect(snap)
    state.sigPartsChanged.connect(snap)
    a = Config(n=60, d=3, dv=2, block_q=7, block_k=5, input="random", seed=1, causal=True)
    a = a.replace(pass_name=pass_name)
    b = a.replace(seed=2, block_q=4, order="kv-outer")
    state.set_config(a)
    qtbot.waitUntil(lambda: state.config == a, timeout=30000)
    assert state.pending_parts  # a's first tier is shown, its second tier still pending
    state.set_config(b)
    gate.set()
    qtbot.waitUntil(
        lambda: state.config == b and not state.pending_parts and not state.builder.busy,
        timeout=60000,
    )
    assert state.builder.wait(30000)
    assert cancelled == [a]  # a's pass over S was abandoned, not finished
    # a's first tier, b's, b's plots (their own part, right after its first paint), the rest
    rest = worker.PARTS - worker.CURVES_PART
    assert [(s[0], s[3]) for s in snapshots] == [
        (a, worker.PARTS), (b, worker.PARTS), (b, rest), (b, frozenset())
    ]  # fmt: skip
    for config, trace, images, pending in snapshots:
        assert trace.schedule.block_q == config.block_q and trace.schedule.order == config.order
        if pending:
            assert_same_images(images, prepare_first(trace))
        else:
            assert_same_images(images, prepare_images(trace))
    state.builder.shutdown()


def test_a_change_that_finds_its_passes_cached_comes_at_once():
    """B_r moved (the passes over S do not depend on it), or in float64 B_c and the
    order: nothing to stream, one part."""
    SHARED.clear()
    c = Config(n=40, d=3, dv=3, block_q=4, block_k=5, input="random", seed=4)
    firsts = []
    worker.build_all(c, on_first=lambda *r: firsts.append(r))
    assert len(firsts) == 1  # new inputs: the first tier went ahead
    _, trace, images = worker.build_all(c.replace(block_q=7), on_first=lambda *r: firsts.append(r))
    assert len(firsts) == 1 and not any(i.pending for i in images.lanes["dense"].values())
    worker.build_all(c.replace(block_k=6, order="kv-outer"), on_first=lambda *r: firsts.append(r))
    assert len(firsts) == 1  # float64: the tiled lane is the dense pass's fold (any B_c)
    worker.build_all(c.replace(dtype="float16"), on_first=lambda *r: firsts.append(r))
    assert len(firsts) == 2  # a narrow tiled lane has a pass of its own: streamed
    worker.build_all(c.replace(dtype="float16", block_q=9), on_first=lambda *r: firsts.append(r))
    assert len(firsts) == 2
    worker.build_all(c.replace(dtype="float16", block_k=6), on_first=lambda *r: firsts.append(r))
    assert len(firsts) == 3  # ... which B_c changes


def test_a_streamed_training_step_is_cancelled_between_chunks_and_leaves_nothing_half_done():
    """A newer change cancels a training step's build mid-pass (its check raises), and
    the next build of it equals a fresh one bit for bit."""
    SHARED.clear()
    c = Config(n=50, d=3, dv=2, block_q=6, block_k=7, input="random", seed=5, pass_name="training")
    calls = []

    def cancel_on_the_third_chunk():
        calls.append(1)
        if len(calls) == 3:
            raise Cancelled

    old = compute.full_pass.CHUNK_ELEMENTS
    compute.full_pass.CHUNK_ELEMENTS = 100  # two rows a chunk: many chunks
    try:
        with pytest.raises(Cancelled):
            worker.build_all(c, on_first=lambda *r: None, check=cancel_on_the_third_chunk)
        _, trace, images = worker.build_all(c, on_first=lambda *r: None, check=lambda: None)
        SHARED.clear()
        _, fresh = build(c)
        assert_same_images(images, prepare_images(fresh))
    finally:
        compute.full_pass.CHUNK_ELEMENTS = old
    assert len(calls) == 3


backward_configs = configs.filter(lambda c: c.pass_name != "forward")
# The SRAM tiles a backward's first tier marks "computing…": they need every row's L, D.
WAITING = {(lane, t) for lane in ("dense", "tiled") for t in ("dK", "dV")} | {
    ("dense", "dQ"),
    ("dense", "P"),
    ("dense", "dS"),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    config=backward_configs,
    chunk=st.sampled_from([96, 1 << 20]),
    where=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_a_backward_first_tier_equals_the_full_computation(config, chunk, where):
    """What a backward's first tier shows of the selected query row (L, D, P̃, dQ_row
    tile by tile) and its SRAM tiles comes from those rows alone, before any pass over
    every row (not even the forward's): the tiled lane's numbers bit for bit (each row's
    L, D and products are its own), the float64 references within rounding (the full
    pass's from its own chunks: a product's summation order may differ in the last
    place). The key row's dK, dV need every row's L and D: "computing…" in the first
    tier, and once the part is in, equal to a fresh build's."""
    SHARED.clear()
    old = compute.full_pass.CHUNK_ELEMENTS
    compute.full_pass.CHUNK_ELEMENTS = chunk
    seen = {}

    def first(_config, trace, _images):
        s = trace.schedule
        row, key = round(where[0] * (s.n_q - 1)), round(where[1] * (s.n_k - 1))
        seen.update(row=row, key=key, b=trace.backward_row(row))
        whole = s.block_q >= s.n_q  # the row's block is every row: its pass is the whole
        assert whole or not trace.key_tile_ready(key // s.block_k)
        for step in range(trace.n_steps):  # every SRAM tile a step shows
            for lane, tiles in (("dense", dense_backward_sram), ("tiled", tiled_backward_sram)):
                action = trace.action(lane, step)
                if is_backward(action):
                    for tile in tiles(trace, step, action):
                        if tile.values is None:  # what needs every row waits, and says so
                            assert tile.note == "computing…"
                            assert (lane, tile.tensor) in WAITING, (lane, tile.tensor)
                        elif not whole:
                            assert (lane, tile.tensor) not in WAITING
        seen["whole"] = whole
        seen["cached"] = trace.backward.summary_cached(DISPLAY_CELLS)
        seen["forward"] = trace.forward.summary_cached(DISPLAY_CELLS)
        seen["tiled"] = trace.forward._tiled_found()

    try:
        shown, trace, _ = worker.build_all(config, on_first=first, check=lambda: None, row=0)
        SHARED.clear()
        _, fresh = build(config)
        fresh.backward.backward_summary(DISPLAY_CELLS)  # the references from the full pass
    finally:
        compute.full_pass.CHUNK_ELEMENTS = old
    assert seen["cached"] is False  # the first tier came before the gradients' pass
    assert seen["whole"] or not (seen["forward"] or seen["tiled"])  # and the forward's
    assert trace.key_tile_ready(seen["key"] // trace.schedule.block_k)  # the part made it
    seen["k"] = trace.key_row(seen["key"])
    b, k = fresh.backward_row(seen["row"]), fresh.key_row(seen["key"])
    for got, want in ((seen["b"], b), (seen["k"], k)):
        for field in ("L", "D", "p_tilde", "dq", "dk", "dv"):
            if hasattr(want, field):
                np.testing.assert_array_equal(getattr(got, field), getattr(want, field), field)
        for field in ("dq_reference", "dk_reference", "dv_reference"):
            if hasattr(want, field):
                np.testing.assert_allclose(
                    getattr(got, field), getattr(want, field), rtol=1e-10, atol=1e-12
                )
    # ... and the full pass's references are what the first tier's stand for.
    dq, dk, dv = fresh.gradients("dense")
    np.testing.assert_allclose(seen["b"].dq_reference, dq[seen["row"]], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(seen["k"].dk_reference, dk[seen["key"]], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(seen["k"].dv_reference, dv[seen["key"]], rtol=1e-9, atol=1e-11)


def test_a_backward_blocks_change_streams_without_redoing_the_dense_rows():
    """B_c moved: a narrow tiled lane's passes are new (streamed), the dense pass of
    these inputs is kept and the first tier reads its rows instead of recomputing them;
    in float64 the tiled lane is the dense pass's, so nothing is new at all."""
    SHARED.clear()
    c = Config(n=40, d=3, dv=3, block_q=4, block_k=5, input="random", seed=4, pass_name="backward")
    for dtype, streamed in (("float16", 1), ("float64", 0)):
        c = c.replace(dtype=dtype)
        worker.build_all(c, on_first=lambda *r: None, check=lambda: None)
        firsts: list = []
        keep = firsts.append
        _, trace, _ = worker.build_all(
            c.replace(block_k=6), on_first=lambda *r, keep=keep: keep(r), check=lambda: None
        )
        assert len(firsts) == streamed and trace.forward.cached("dense_rows") == 0
        worker.build_all(c, on_first=lambda *r, keep=keep: keep(r))
        assert len(firsts) == streamed  # everything of c is cached: one part


def test_the_key_rows_gradients_say_computing_until_their_part_arrives(qtbot):
    """dK, dV of the key row need every row's L and D: the statistics panel says
    "computing…" in the first tier (never a number of another configuration, never the
    pass made on the GUI thread) and shows them when the second tier lands."""
    from desktop.panels.backward_stats import BackwardStats

    SHARED.clear()
    state = AppState()
    panel = BackwardStats(state)
    qtbot.addWidget(panel)
    c = Config(n=40, d=3, dv=3, block_q=4, block_k=5, input="random", seed=4, pass_name="backward")
    seen = {}

    def first(config, trace, images):
        state._built(config, trace, images, pending=worker.PARTS)
        seen.update(dk=panel.labels["dk"].text(), dv=panel.labels["dv"].text())
        seen["pass"] = trace.forward.summary_cached(DISPLAY_CELLS)

    _, trace, images = worker.build_all(c, on_first=first, check=lambda: None, row=0)
    assert seen == {"dk": "computing…", "dv": "computing…", "pass": False}
    state._part(trace, images)
    n = trace.backward_blocks_done(state.key, state.step)
    assert panel.labels["dk"].text().endswith(f"after {n} of {trace.schedule.t_r} blocks")
    assert panel.labels["dv"].text() != "computing…"
