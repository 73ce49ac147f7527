"""Every CUDA source under compute/gpu/kernels compiles with nvcc (no GPU needed).

Each file is compiled to PTX with -DCOMPILE_CHECK (files may instantiate templates under
it) and again with -DCOUNT_TRANSFERS, with the kernels folder on the include path as NVRTC
has it (flash.py passes -I kernels/ for common.cuh and wgmma_wrappers.cuh). A file may name
another target in a line `// compile-check-arch: sm_90a` (wgmma needs it); the default is
sm_90. The generated wgmma wrappers must equal their generator's output.

The nvcc runs are the `compile` group: the default run skips them, .ci/run runs them
(`pytest -m compile`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

KERNEL_DIR = Path(__file__).resolve().parents[3] / "compute" / "gpu" / "kernels"
KERNELS = sorted(KERNEL_DIR.glob("*.cu"))
NVCC = shutil.which("nvcc")


def _arch(source: Path) -> str:
    found = re.search(r"//\s*compile-check-arch:\s*(\S+)", source.read_text())
    return found.group(1) if found else "sm_90"


def test_there_are_kernels():
    assert KERNELS, "no .cu files found"


@pytest.mark.parametrize("source", KERNELS, ids=lambda p: p.name)
def test_local_includes_live_in_the_kernel_folder(source):
    # NVRTC sees only the -I folder, and the wheel ships kernels/*.cu and *.cuh.
    for name in re.findall(r'#include\s+"([^"]+)"', source.read_text()):
        assert (KERNEL_DIR / name).is_file() and name.endswith(".cuh"), name


def test_wgmma_wrappers_are_the_generators_output():
    from compute.gpu.lab.gen_wgmma_wrappers import HEADER, generate

    assert HEADER.read_text() == generate(), "run python -m compute.gpu.lab.gen_wgmma_wrappers"


@pytest.mark.compile
@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("flags", [(), ("-DCOUNT_TRANSFERS",)], ids=["plain", "counted"])
@pytest.mark.parametrize("source", KERNELS, ids=lambda p: p.name)
def test_compiles_to_ptx(source, flags, tmp_path):
    cmd = [NVCC, "-std=c++17", f"-arch={_arch(source)}", "--ptx", "-DCOMPILE_CHECK", *flags,
           "-I", str(KERNEL_DIR), str(source), "-o", str(tmp_path / "out.ptx")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr.lower(), proc.stderr
