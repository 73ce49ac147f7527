"""compute/ must import without Qt, pyqtgraph, CuPy or desktop/ (the GPU server has none)."""

import subprocess
import sys

import pytest

FORBIDDEN = ("PySide6", "pyqtgraph", "cupy", "desktop")


@pytest.mark.parametrize("module", ["compute", "compute.gpu"])
def test_compute_imports_nothing_forbidden(module):
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_cli_imports_no_qt():
    code = (
        "import sys, desktop.cli.main\n"
        "print(','.join(m for m in ('PySide6', 'pyqtgraph', 'cupy') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
