"""float16 overflow is visible (inf/NaN and a notice, never silent zeros); memory is
budgeted before allocating; GIF frames are streamed to the file one at a time."""

from __future__ import annotations

import numpy as np
import pytest
from faultkit import run_cli  # noqa: I001

from compute import InputError, tiled_attention
from compute.attention import overflow_notice
from compute.inputs import check_memory_budget
from desktop.export.animation_writer import write_animation
from desktop.state.config import Config


@pytest.fixture
def big_inputs():
    rng = np.random.default_rng(16)
    q, k = (rng.standard_normal((9, 4)) * 7e4 for _ in range(2))  # beyond float16's 65504
    return q, k, rng.standard_normal((9, 3))


@pytest.mark.parametrize("order", ["q-outer", "kv-outer"])
def test_float16_overflow_gives_nan_not_zeros(big_inputs, order):
    q, k, v = big_inputs
    out = tiled_attention(q, k, v, block_q=4, block_k=5, order=order, dtype="float16")
    assert not np.isfinite(out).any()  # a GPU gives inf/NaN here, not a masked-looking 0
    assert "beyond float16's largest value 65504" in overflow_notice(q, k, v, "float16", out)


def test_float32_score_overflow_is_reported():
    rng = np.random.default_rng(32)
    q = rng.standard_normal((6, 2)) * 1e20  # finite in float32; Q·K reaches 1e40
    out = tiled_attention(q, q, np.ones((6, 2)), block_q=3, block_k=4, dtype="float32")
    assert not np.isfinite(out).all()
    assert "overflowed float32" in overflow_notice(q, q, np.ones((6, 2)), "float32", out)


def test_no_notice_within_range():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((7, 3)) for _ in range(3))
    out = tiled_attention(q, k, v, block_q=3, block_k=4, dtype="float16")
    assert overflow_notice(q, k, v, "float16", out) is None


def test_masked_rows_still_give_zeros():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((5, 2)), rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    out = tiled_attention(q, k, v, block_q=2, block_k=2, causal=True, dtype="float16")
    assert np.all(out[:2] == 0) and np.isfinite(out).all()  # rows 0-1 see no key


def test_the_window_and_the_cli_report_overflow(tmp_path, qtbot):
    from desktop.window.main_window import MainWindow

    rng = np.random.default_rng(70)
    q, k, v = (rng.standard_normal((6, 2)) * 7e4 for _ in range(3))
    np.savez(tmp_path / "big.npz", q=q, k=k, v=v)
    config = Config(input="file", file=str(tmp_path / "big.npz"), dtype="float16")
    window = MainWindow(config, persist=False, build_inline=True)
    qtbot.addWidget(window)
    assert "beyond float16" in window.overflow_label.text()
    assert np.isnan(window.state.trace.tiled_output).any()  # NaN as on a GPU, not zeros
    window.state.update_config(input="seed")
    assert window.overflow_label.text() == ""
    window.close()
    result = run_cli(
        "export", "--open", str(tmp_path / "big.npz"), "--dtype", "float16",
        "--out", str(tmp_path / "x.png"), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0
    assert (
        result.stderr.strip().splitlines()
        == [
            ln
            for ln in result.stderr.strip().splitlines()
            if ln.startswith("warning: Inputs reach")
        ]
        and result.stderr.count("warning:") == 1
    )
    assert "RuntimeWarning" not in result.stderr


def test_the_budget_counts_every_array():
    """Inputs, S and P where held whole, per-row arrays and block histories all count:
    N = 11000 with S and P whole passed the old S-and-P-only check yet peaked at 5.1 GB."""
    with pytest.raises(InputError, match="lower N or N_keys"):
        check_memory_budget(11000, 11000, 64, 64, 172, block_q=64, whole=True)
    with pytest.raises(InputError, match="lower N, N_keys, d or d_v"):
        check_memory_budget(6, 6, 100_000_000, 100_000_000)
    with pytest.raises(InputError, match="lower d_v or block_q, or raise block_k"):
        check_memory_budget(20000, 20000, 64, 4096, 20000, block_q=1)
    check_memory_budget(4096, 4096, 256, 256, 2048, block_q=2)  # the GUI's largest N and d
    check_memory_budget(16000, 16000, 64, 64, 250, block_q=64)  # measured: 0.31 GB peak


def test_gif_frames_are_streamed(tmp_path):
    """Each frame reaches the file before the next is drawn (Pillow's save_all kept all)."""
    written: list[int] = []
    temp: list = []

    def frames():
        rng = np.random.default_rng(13)
        for i in range(6):
            if i:
                temp[:] = [p for p in tmp_path.iterdir() if "partial" in p.name]
                written.append(temp[0].stat().st_size)
            yield rng.integers(0, 255, (40, 64, 3), dtype=np.uint8)

    write_animation(tmp_path / "a.gif", frames(), total=6, fps=5)
    assert all(b > a for a, b in zip(written, written[1:], strict=False)) and written[0] > 0
    from PIL import Image

    with Image.open(tmp_path / "a.gif") as gif:
        assert gif.n_frames == 6 and gif.info["loop"] == 0


def test_huge_gif_frames_are_refused_up_front(monkeypatch, tmp_path):
    import compute.inputs

    monkeypatch.setattr(compute.inputs, "DEFAULT_MEMORY_BUDGET_BYTES", 64 * 2**20)
    from desktop.cli.session import headless_window
    from desktop.export.atomic import ExportError
    from desktop.export.exporter import export_animation
    from desktop.export.frames import FramePlan

    window = headless_window(Config())
    with pytest.raises(ExportError, match=r"Frames of 4096x4096 need about 512 MiB each"):
        export_animation(
            window, tmp_path / "a.gif", plan=FramePlan(range(3)), fps=5, size=(4096, 4096)
        )
    assert list(tmp_path.iterdir()) == []
    window.close()
