"""Every CUDA source under compute/gpu/kernels compiles with nvcc (no GPU needed).

Each file is compiled to PTX with -DCOMPILE_CHECK (files may instantiate templates under
it) and again with -DCOUNT_TRANSFERS. A file may name another target in a line
`// compile-check-arch: compute_90a` (e.g. for wgmma); the default is sm_90.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

KERNELS = sorted((Path(__file__).resolve().parents[3] / "compute" / "gpu" / "kernels").glob("*.cu"))
NVCC = shutil.which("nvcc")


def _arch(source: Path) -> str:
    found = re.search(r"//\s*compile-check-arch:\s*(\S+)", source.read_text())
    return found.group(1) if found else "sm_90"


def test_there_are_kernels():
    assert KERNELS, "no .cu files found"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("flags", [(), ("-DCOUNT_TRANSFERS",)], ids=["plain", "counted"])
@pytest.mark.parametrize("source", KERNELS, ids=lambda p: p.name)
def test_compiles_to_ptx(source, flags, tmp_path):
    cmd = [NVCC, "-std=c++17", f"-arch={_arch(source)}", "--ptx", "-DCOMPILE_CHECK", *flags,
           str(source), "-o", str(tmp_path / "out.ptx")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
