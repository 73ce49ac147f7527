"""The backward kernel's host side agrees with its CUDA source, checked without a GPU."""

from __future__ import annotations

import re

from compute.backward_schedule import PASS_TENSORS
from compute.gpu.backward import COUNTER_SLOTS, KERNEL_PATH, BackwardShape, fits_message


def test_counter_slots_follow_the_kernel_enum():
    enum = re.search(r"enum Slot \{(.*?)\}", KERNEL_PATH.read_text(), re.S).group(1)
    names = [n.split("=")[0].strip() for n in enum.split(",") if n.strip()]
    assert names[-1] == "N_SLOTS"
    assert names[:-1] == [f"{t.upper()}_{d.upper()}" for t, d in COUNTER_SLOTS]
    assert all(t in PASS_TENSORS for t, _ in COUNTER_SLOTS)


def test_shared_memory_of_one_block():
    # K_j, V_j padded to 65 floats a row, dK_j, dV_j, Q_i, dO_i padded, P/dS, L_i, D_i.
    floats = 64 * 65 * 2 + 64 * 64 * 2 + 64 * 65 * 2 + 64 * 64 + 2 * 64
    assert BackwardShape(64, 64, 64, 64).smem_bytes == 4 * floats


def test_too_large_tiles_get_one_sentence_naming_what_fits():
    msg = fits_message(BackwardShape(512, 512, 64, 64), 227 * 1024)
    assert msg.count(".") == 2  # "1234.5 KB" and the full stop: one sentence
    assert "block_q=16 with block_k<=200" in msg
    assert BackwardShape(16, 200, 64, 64).smem_bytes <= 227 * 1024
    assert BackwardShape(16, 208, 64, 64).smem_bytes > 227 * 1024
