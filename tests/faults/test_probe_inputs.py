"""Input files from the second fault probe (issue 27): memory order, lying header
lengths, ambiguous and duplicated members, archives of thousands of members.

Each file is real, opened by the real CLI in a subprocess or by `load_inputs`.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
from faultkit import run_cli  # noqa: I001 (the suite's helpers)

from compute import InputError, load_inputs


def _qkv(n=7, d=3, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) for _ in range(3))


def _one_line(result) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# ---- 1. Fortran order ----------------------------------------------------------------
def test_fortran_ordered_npz_exports(tmp_path):
    q, k, v = (np.asfortranarray(a) for a in _qkv())
    np.savez(tmp_path / "f.npz", q=q, k=k, v=v)
    result = run_cli("export", "--open", "f.npz", "--out", "x.png", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"


def test_fortran_ordered_stacked_npy_exports(tmp_path):
    np.save(tmp_path / "f.npy", np.asfortranarray(np.stack(list(_qkv()))))
    result = run_cli("export", "--open", "f.npy", "--out", "x.png", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    loaded = load_inputs(tmp_path / "f.npy")
    assert all(a.flags.c_contiguous for a in (loaded.q, loaded.k, loaded.v))
    np.testing.assert_array_equal(loaded.q, np.load(tmp_path / "f.npy")[0])


# ---- 2. a header length that claims gigabytes ----------------------------------------
def _lying_header_npz(path, claimed: int, body: int) -> None:
    """q.npy: a version-2.0 magic whose header length says `claimed` bytes, then `body`
    spaces (deflated, so the archive stays small); k and v are fine."""
    member = b"\x93NUMPY\x02\x00" + struct.pack("<I", claimed) + b" " * body
    q, k, v = _qkv()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("q.npy", member)
        for name, a in (("k", k), ("v", v)):
            out = io.BytesIO()
            np.save(out, a)
            z.writestr(f"{name}.npy", out.getvalue())


def test_a_header_length_claiming_4_gib_is_refused_before_reading(tmp_path):
    path = tmp_path / "lie.npz"
    _lying_header_npz(path, 2**32 - 1, 48 * 2**20)
    assert path.stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"4,294,967,295-byte header"):
            load_inputs(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20  # the header was never read: numpy's reader takes all 48 MiB


def test_every_command_refuses_a_lying_header_length_in_one_line(tmp_path):
    _lying_header_npz(tmp_path / "lie.npz", 2**32 - 1, 4096)
    line = _one_line(run_cli("export", "--open", "lie.npz", "--out", "x.png", cwd=tmp_path))
    assert "byte header" in line and "memory" not in line
    assert not (tmp_path / "x.png").exists()


# ---- 18. ambiguous and duplicated members --------------------------------------------
def _npy(a) -> bytes:
    out = io.BytesIO()
    np.save(out, a)
    return out.getvalue()


def test_q_and_Q_in_one_npz_is_refused(tmp_path):
    q, k, v = _qkv()
    np.savez(tmp_path / "two.npz", q=q, Q=q * 2, k=k, v=v)
    line = _one_line(run_cli("export", "--open", "two.npz", "--out", "x.png", cwd=tmp_path))
    assert "ambiguous" in line and "q.npy" in line and "Q.npy" in line


def test_a_member_name_twice_is_refused(tmp_path):
    q, k, v = _qkv()
    path = tmp_path / "dup.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate it writes
        with zipfile.ZipFile(path, "w") as z:
            for name, a in (("q", q), ("q", q * 2), ("k", k), ("v", v)):
                z.writestr(f"{name}.npy", _npy(a))
    with pytest.raises(InputError, match=r"holds q\.npy more than once"):
        load_inputs(path)


# ---- 19. thousands of members ----------------------------------------------------------
def test_an_npz_of_thousands_of_members_is_refused_before_its_directory(tmp_path):
    q, k, v = _qkv()
    path = tmp_path / "many.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, a in (("q", q), ("k", k), ("v", v)):
            z.writestr(f"{name}.npy", _npy(a))
        for i in range(3000):
            z.writestr(f"extra{i}.txt", b"")
    line = _one_line(run_cli("export", "--open", "many.npz", "--out", "x.png", cwd=tmp_path))
    assert "3,003 members" in line
