"""Files that lie: huge declared shapes, short data, zip bombs, fifos, folders.

Declared shapes and dtypes are checked against the memory budget before any data is
read, so a 929-byte file claiming 10^12 elements is refused at once, in one sentence,
from every command and from the GUI.
"""

from __future__ import annotations

import io
import os
import threading
import tracemalloc
import zipfile

import numpy as np
import pytest
from faultkit import run_cli  # noqa: I001 (the suite's helpers)

from compute import InputError, load_inputs
from desktop.state.config import Config


def _npy_bytes(shape, dtype="<f8", body: bytes = b"") -> bytes:
    """A .npy whose header says `shape` and whose data is `body` (possibly a lie)."""
    out = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + body


@pytest.fixture
def huge_npy(tmp_path):
    path = tmp_path / "huge.npy"
    path.write_bytes(_npy_bytes((3, 10**11, 4), body=b"\0" * 800))
    return path


def test_a_lying_npy_header_is_refused_before_reading(huge_npy):
    assert huge_npy.stat().st_size < 1000
    with pytest.raises(InputError, match=r"declares shape \(3, 100000000000, 4\)"):
        load_inputs(huge_npy)


@pytest.mark.parametrize(
    "args",
    [
        ["export", "--out", "x.png"],
        ["export-ledger", "--out", "x.json"],
        ["--screenshot", "x.png"],
    ],
    ids=["export", "export-ledger", "screenshot"],
)
def test_every_command_refuses_a_lying_header_in_one_line(huge_npy, tmp_path, args):
    result = run_cli(*args, "--open", str(huge_npy), cwd=tmp_path)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "declares shape" in result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert leftovers_of(tmp_path) == ["huge.npy"]


def leftovers_of(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_short_data_is_refused(tmp_path):
    path = tmp_path / "short.npy"
    path.write_bytes(_npy_bytes((3, 4, 2), body=b"\0" * 40))  # 192 bytes declared
    with pytest.raises(InputError, match="shorter than its header says"):
        load_inputs(path)


@pytest.mark.parametrize("descr", ["|O", "<c16", "<U4"])
def test_non_numeric_declared_dtypes_are_refused(tmp_path, descr):
    path = tmp_path / "odd.npy"
    path.write_bytes(_npy_bytes((3, 2, 2), dtype=descr, body=b"\0" * 256))
    with pytest.raises(InputError, match="provide real numbers|could not be read"):
        load_inputs(path)


def test_an_npz_member_with_a_lying_header(tmp_path):
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("q", "k", "v"):
            z.writestr(f"{name}.npy", _npy_bytes((10**9, 64), body=b"\0" * 4096))
    with pytest.raises(InputError, match="array q declares shape"):
        load_inputs(path)


def test_an_npz_of_zeros_is_refused_before_decompressing(tmp_path):
    """8000 × 4000 zeros per array: 256 MB each unpacked, under 1 MB packed; Q, K, V
    together pass the memory budget, so nothing may be unpacked."""
    path = tmp_path / "zeros.npz"
    chunk = bytes(1 << 22)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name in ("q", "k", "v"):
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                member.write(_npy_bytes((8000, 4000)))
                for _ in range(8000 * 4000 * 8 // len(chunk)):
                    member.write(chunk)
    assert path.stat().st_size < 4_000_000
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="memory budget; lower N, N_keys, d or d_v"):
            load_inputs(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000  # headers only: nothing near one 256 MB array was unpacked


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "inputs.npy"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_inputs(fifo)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            outcome.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test run can end, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opening a fifo blocked")
    assert isinstance(outcome[0], InputError) and "not a regular file" in str(outcome[0])


def test_a_folder_named_like_a_file_is_refused(tmp_path):
    (tmp_path / "d.npz").mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        load_inputs(tmp_path / "d.npz")


def test_the_gui_shows_a_dialog_and_keeps_working(tmp_path, huge_npy, qtbot):
    """Built inline, a lying file gives a dialog; the window stays on the shown config."""
    from desktop.window.main_window import MainWindow

    window = MainWindow(Config(), persist=False, build_inline=True)
    qtbot.addWidget(window)
    errors: list[str] = []
    window.show_error = errors.append
    window.state.sigError.disconnect()
    window.state.sigError.connect(errors.append)
    window.state.update_config(input="file", file=str(huge_npy))
    assert errors and "declares shape" in errors[-1]
    assert window.state.requested == window.state.config == Config()
    window.state.update_config(n=8, input="random")  # the next change works
    assert window.state.config.n == 8
    window.close()


def test_a_saved_config_naming_a_lying_file_opens_the_default(huge_npy, qtbot, monkeypatch):
    import json

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox

    from desktop.window.main_window import APPLICATION, ORGANISATION, MainWindow

    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _p, _t, text, *a: shown.append(text))
    saved = Config(input="file", file=str(huge_npy))
    QSettings(ORGANISATION, APPLICATION).setValue("config", json.dumps(saved.to_dict()))
    window = MainWindow(build_inline=True)  # reads the saved settings, as a launch does
    qtbot.addWidget(window)
    assert shown and "declares shape" in shown[0]
    assert window.state.config == Config()
    window.persist = False
    window.close()


def test_a_headless_window_never_waits_on_a_dialog(monkeypatch):
    """A build error inside an export's window becomes an ExportError, not a modal dialog
    that nobody can click (the export would hang forever)."""
    import desktop.state.worker as worker
    from desktop.cli.session import headless_window
    from desktop.export.atomic import ExportError

    def broken(_config):
        raise InputError("This build fails on purpose.")

    monkeypatch.setattr(worker, "build_all", broken)
    with pytest.raises(ExportError, match="fails on purpose"):
        headless_window(Config(n=7, input="random"))
