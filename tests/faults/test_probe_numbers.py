"""Extreme input values from the second fault probe (issue 27 item 17): huge inputs in a
training pass give the app's one overflow line and no raw NumPy warnings; subnormal
inputs are coloured like any others.
"""

from __future__ import annotations

import numpy as np
from faultkit import run_cli  # noqa: I001 (the suite's helpers)

from desktop.scene.render import LUT, ColorScale


def _inputs(path, scale: float) -> None:
    rng = np.random.default_rng(3)
    np.savez(path, **{n: rng.standard_normal((8, 4)) * scale for n in "qkv"})


def test_huge_inputs_in_a_training_pass_give_one_line(tmp_path):
    _inputs(tmp_path / "huge.npz", 1e200)
    result = run_cli("export", "--open", "huge.npz", "--pass", "training", "--out", "x.png",
                     "--quiet", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "overflowed float64" in lines[0], result.stderr


def test_subnormal_inputs_export_without_warnings(tmp_path):
    _inputs(tmp_path / "tiny.npz", 1e-310)
    result = run_cli("export", "--open", "tiny.npz", "--pass", "training", "--out", "x.png",
                     "--quiet", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_subnormal_colour_scale_maps_like_any_other():
    vmax = 3e-320  # subnormal: 127.5 / vmax is inf
    rgba = ColorScale(vmax).rgba(np.array([[vmax, -vmax, 0.0, vmax / 2]]))
    expected = ColorScale(1.0).rgba(np.array([[1.0, -1.0, 0.0, 0.5]]))
    np.testing.assert_array_equal(rgba, expected)
    assert tuple(rgba[0, 0]) == tuple(LUT[255])
