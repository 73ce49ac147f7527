"""Qt fixtures for the desktop tests: isolated QSettings, a window on the reference example.

Where PySide6 or pytest-qt is missing (the GPU machine), this folder is not collected.
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("PySide6") is None or importlib.util.find_spec("pytestqt") is None:
    # cli/ stays: its ledger tests need no Qt, and its screenshot test skips by itself.
    collect_ignore_glob = ["test_*.py", "[!c]*/test_*.py"]
else:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QMessageBox

    @pytest.fixture(autouse=True)
    def isolated_settings(tmp_path, monkeypatch):
        """Every test reads and writes its own QSettings directory, never the user's."""
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
            QSettings.setPath(fmt, QSettings.Scope.UserScope, str(tmp_path / "settings"))
        yield tmp_path / "settings"

    @pytest.fixture
    def dialogs(monkeypatch):
        """Record message boxes instead of blocking on them."""
        shown: list[str] = []

        def record(_parent, _title, text, *args, **kwargs):
            shown.append(text)
            return QMessageBox.StandardButton.Ok

        monkeypatch.setattr(QMessageBox, "warning", record)
        monkeypatch.setattr(QMessageBox, "critical", record)
        monkeypatch.setattr(QMessageBox, "about", lambda *a: shown.append(a[-1]))
        return shown

    @pytest.fixture
    def window(qtbot, dialogs):
        """The main window on the reference example, shown offscreen, closed afterwards."""
        from desktop.window.main_window import MainWindow

        w = MainWindow(persist=False)
        qtbot.addWidget(w)
        w.resize(1400, 900)
        w.show()
        qtbot.waitExposed(w)
        yield w
        w.close()
