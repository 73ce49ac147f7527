"""Test-wide setup. Imports no Qt: the GPU machine runs tests/ without PySide6.

Qt tests (tests/desktop) need a platform plugin even with no display, so the
offscreen platform is the default before anything can import Qt.
"""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
