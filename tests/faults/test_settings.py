"""Corrupt or hand-edited settings never stop the app: each bad value falls back to its
default with one line on stderr, and the window opens."""

from __future__ import annotations

import pytest

from desktop.state.config import Config

# Lines as a user or another version could leave them in flash-explorer.conf.
CORRUPT = {
    "row=abc": "row",
    "row=-3": "row",
    "row=1, 2": "row",  # QSettings reads this as a list
    "speed=fast": "speed",
    "speed=inf": "speed",
    "theme=purple": "theme",
    'config="[1, 2, 3]"': "config",
    "config=null": "config",
    "config=42": "config",
    'config="{\\"n\\": 1e400}"': "config",
    'config="{\\"n\\": \\"six\\"}"': "config",
    'config="{\\"n\\": 100000000}"': "config",
    'config="{\\"order\\": \\"sideways\\"}"': "config",
    "config={not json": "config",
    "geometry=garbage": "geometry",
}


def _write_settings(folder, line: str) -> None:
    path = folder / "FlashAttentionExplorer" / "flash-explorer.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"[General]\n{line}\n", encoding="utf-8")


@pytest.mark.parametrize("line", list(CORRUPT))
def test_a_corrupt_setting_never_stops_the_window(isolated_settings, qtbot, capsys, line):
    from desktop.window.main_window import MainWindow, saved_config

    _write_settings(isolated_settings, line)
    assert saved_config() in (None, Config())
    capsys.readouterr()
    window = MainWindow(build_inline=True)
    qtbot.addWidget(window)
    err = capsys.readouterr().err.strip().splitlines()
    warnings = [ln for ln in err if ln.startswith("flash-explorer: warning:")]
    assert len(warnings) == 1 and CORRUPT[line] in warnings[0], err
    assert "Traceback" not in "\n".join(err)
    assert window.state.config == Config() and window.state.trace is not None
    window.persist = False
    window.close()


def test_good_settings_still_restore(isolated_settings, qtbot, capsys):
    from desktop.window.main_window import MainWindow

    _write_settings(
        isolated_settings,
        'row=3\nspeed=4\ntheme=dark\nconfig="{\\"n\\": 9, \\"input\\": \\"random\\"}"',
    )
    window = MainWindow(build_inline=True)
    qtbot.addWidget(window)
    assert capsys.readouterr().err.count("warning") == 0
    assert window.state.config.n == 9 and window.state.row == 3 and window.theme == "dark"
    window.persist = False
    window.close()
