"""The widget-free layers load no widget toolkit: state and scene import neither QtWidgets nor pyqtgraph.

import-linter cannot forbid a subpackage of an external package (PySide6.QtWidgets), so this
checks it in a fresh interpreter.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import desktop.scene
import desktop.state

WIDGET_FREE = sorted(
    f"{pkg.__name__}.{m.name}"
    for pkg in (desktop.state, desktop.scene)
    for m in pkgutil.iter_modules(pkg.__path__)
)


def test_there_are_widget_free_modules():
    assert "desktop.state.app_state" in WIDGET_FREE and "desktop.scene.render" in WIDGET_FREE


def test_state_and_scene_load_no_widgets():
    code = (
        "import importlib, sys\n"
        f"for name in {WIDGET_FREE!r}: importlib.import_module(name)\n"
        "loaded = [m for m in ('PySide6.QtWidgets', 'pyqtgraph') if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
