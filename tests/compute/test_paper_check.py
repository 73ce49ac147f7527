"""The paper check's declared figures: exact closed forms, held to hand-derived formulas."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compute import paper_check as pc
from compute.gpu import flash_backward, flash_select


def _tiled_training_bytes(n: int, d: int, b_r: int, b_c: int) -> int:
    """One head's training bytes of the tiled lane, forward K/V outer (Algorithm 1's loop),
    written out term by term: tensors of 2 bytes, statistics of 4."""
    t_c = math.ceil(n / b_c)
    nd, visits = n * d, n * t_c  # rows over all (key tile, query block) visits
    forward = 2 * nd + visits * d + visits * d + (nd + visits * d)  # K,V; Q; O read; O write
    forward_stats = 2 * (visits + n + visits) + n  # l, m read and write; L written
    backward = nd + (nd + visits * d) + (visits * d + nd + visits * d) + visits * d + 4 * nd
    backward_stats = (visits + n) + visits  # D read and written; L read
    return 2 * (forward + backward) + 4 * (forward_stats + backward_stats)


def _dense_training_bytes(n: int, d: int, b_r: int, b_c: int) -> int:
    """One head's training bytes of the dense lane, term by term (all 2-byte elements)."""
    t_r, t_c, nd, nn = math.ceil(n / b_r), math.ceil(n / b_c), n * d, n * n
    forward = nd + 2 * t_r * nd + nd + 4 * nn  # Q; K,V per query block; O; S, P both ways
    backward = 2 * nn + (t_c + 1) * nd + 2 * t_r * nd + t_c * nd + 2 * nn + 3 * nn + 3 * nd
    return 2 * (forward + backward)


def test_algorithm1_tiles_for_the_a100():
    # M = 192 KiB / 2 bytes = 98,304 float16 elements; B_c = ⌈M / 4d⌉ = 384, B_r = min(384, 64).
    assert pc.PAPER.sram_elements == 98_304
    assert pc.algorithm1_tiles() == (64, 384)


def test_declared_rows_match_the_hand_formulas():
    w = pc.PAPER
    rows = {r.label: r for r in pc.declared_rows(w)}
    br, bc = pc.algorithm1_tiles(w)
    heads = w.batch_heads
    tiled = rows["tiled lane, Algorithm 1 tiles"].total_bytes
    dense = rows["dense lane, Algorithm 1 tiles"].total_bytes
    assert tiled == heads * _tiled_training_bytes(w.n, w.d, br, bc)
    assert dense == heads * _dense_training_bytes(w.n, w.d, br, bc)
    # The figures the report quotes, as exact integers.
    assert tiled == 4_253_024_256
    assert dense == 33_822_867_456


@given(n=st.integers(1, 3000), d=st.sampled_from([16, 64, 128]), sram_kb=st.integers(16, 256))
def test_other_workloads_match_the_hand_formulas(n, d, sram_kb):
    # Blocks that do not divide N, and blocks larger than N.
    w = pc.Workload(batch=1, heads=3, n=n, d=d, sram_bytes=sram_kb * 1024)
    br, bc = pc.algorithm1_tiles(w)
    rows = {r.label: r for r in pc.declared_rows(w)}
    assert rows["tiled lane, Algorithm 1 tiles"].total_bytes == 3 * _tiled_training_bytes(
        n, d, br, bc
    )
    assert rows["dense lane, Algorithm 1 tiles"].total_bytes == 3 * _dense_training_bytes(
        n, d, br, bc
    )


def test_tensor_core_tiles_are_the_kernels_own():
    # N = 1024 is below the ws kernel's threshold for d = 64, so Hopper runs the wgmma one.
    assert pc.PAPER.n < flash_select.WS_MIN_N[64]
    cfg = flash_select.WGMMA_CONFIGS[64]
    assert pc.TENSOR_CORE_FORWARD_TILES == (cfg.block_m, cfg.block_n)
    assert pc.TENSOR_CORE_BACKWARD_TILES == (
        flash_backward.BLOCK_QUERIES,
        flash_backward.BLOCK_KEYS,
    )


def test_tensor_core_training_is_forward_plus_backward_ledgers():
    w = pc.PAPER
    # Forward q-outer at 128 x 128: Q, O once, K and V once per query block (8 blocks), L.
    n, d = w.n, w.d
    fwd = 2 * (n * d + 2 * 8 * n * d + n * d) + 4 * n
    # Backward at 64 x 128 (8 key tiles): as the tiled training formula's backward part.
    visits = n * 8
    bwd = 2 * (n * d + (n * d + visits * d) + (visits * d + n * d + visits * d) + visits * d
               + 4 * n * d) + 4 * ((visits + n) + visits)  # fmt: skip
    assert pc.tensor_core_training_bytes(w) == w.batch_heads * (fwd + bwd)


def test_dense_lane_at_the_tensor_core_tiles():
    # Forward at 128 x 128 (T_r = 8), backward at 64 x 128 (T_r = 16, T_c = 8), the dense
    # formula's two halves term by term; no L in the dense lane (it keeps P instead).
    w = pc.PAPER
    n, d = w.n, w.d
    nd, nn = n * d, n * n
    fwd = 2 * (nd + 2 * 8 * nd + nd + 4 * nn)
    bwd = 2 * (2 * nn + (8 + 1) * nd + 2 * 16 * nd + 8 * nd + 2 * nn + 3 * nn + 3 * nd)
    rows = {r.label: r for r in pc.declared_rows(w)}
    assert rows["dense lane, tensor-core tiles"].total_bytes == w.batch_heads * (fwd + bwd)
    assert w.batch_heads * (fwd + bwd) == 33_017_561_088


def test_paper_figures_are_the_printed_ones():
    # Figure 2 (left) as arXiv 2205.14135's text prints it: the June 24, 2022 text, then the
    # revision whose caption adds a key-padding mask (same GFLOPs, other HBM and runtimes).
    june, revised = pc.PAPER_FIGURES
    assert (june.standard_gflops, june.flash_gflops) == (66.6, 75.2)
    assert (june.standard_gb, june.flash_gb, june.standard_ms, june.flash_ms) == (
        40.3,
        4.4,
        41.7,
        7.3,
    )
    assert (revised.standard_gflops, revised.flash_gflops) == (66.6, 75.2)
    assert (revised.standard_gb, revised.flash_gb) == (35.3, 4.4)
    assert (revised.standard_ms, revised.flash_ms) == (35.1, 11.7)
    assert "June 24, 2022" in june.source and "key-padding mask" in revised.source
    text = pc.sources()
    assert june.source in text and revised.source in text


def test_flop_check():
    june, revised = (pc.flop_check(figure=f) for f in pc.PAPER_FIGURES)
    assert june.workload_flops == 14 * 64 * 16 * 1024 * 1024 * 64 == 962_072_674_304
    assert june.ratio == revised.ratio == pytest.approx(962_072_674_304 / 66.6e9)
    assert 14 < june.ratio < 15  # the "about 14x below"
    assert june.workload_tflops_per_s == pytest.approx(962_072_674_304 / 7.3e-3 / 1e12)
    assert revised.workload_tflops_per_s == pytest.approx(962_072_674_304 / 11.7e-3 / 1e12)
    assert revised.paper_tflops_per_s == pytest.approx(75.2e9 / 11.7e-3 / 1e12)
    text = pc.flop_reading()
    assert "0.962 TFLOP" in text and "14.4x" in text and "both printings" in text
    assert "132 and 82 TFLOP/s" in text and "10.3 and 6.4." in text


def test_reading_names_both_paper_figures():
    text = pc.reading()
    assert "4.25 GB" in text and "33.8 GB" in text and "35.3" in text and "40.3" in text
