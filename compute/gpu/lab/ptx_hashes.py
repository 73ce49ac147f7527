"""SHA-256 of the PTX of every shipped default kernel instantiation, without a GPU.

    python -m compute.gpu.lab.ptx_hashes [--json F] [--jobs 2]

The shipped defaults are the variants ``default_config`` picks over head dims, query lengths
and masks, on Hopper and elsewhere. Each is compiled alone with local nvcc as flash.py's
NVRTC build compiles it (``-std=c++17``, the kernels folder on the include path, and for the
Hopper kernels ``-arch=sm_90a -DFA_FORCE_WGMMA``; the mma.sync kernel for sm_80), through a
stub that takes the kernel's address so that only that instantiation is emitted. A
refactor of the kernels that is meant to change nothing must leave every hash as it was
(FLASH_NOTES.md, "PTX of the shipped defaults").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

from .. import flash, flash_select
from ..sources import KERNEL_DIR

_N_Q = (1, 1024, 2047, 2048, 4095, 4096, 8191, 8192, 16384, 1 << 30)


def shipped_configs() -> list:
    """Every distinct variant default_config returns, Hopper and not, d 64 and 128, and the
    wgmma variants flash_attention falls back to when there are no keys."""
    found = list(flash.WGMMA_CONFIGS.values())
    for hopper in (True, False):
        with mock.patch.object(flash_select, "is_hopper", lambda h=hopper: h):
            for d in flash.SUPPORTED_HEAD_DIMS:
                for n_q in _N_Q:
                    for causal in (False, True):
                        cfg = flash.default_config(d, n_q, causal)
                        if cfg not in found:
                            found.append(cfg)
    return found


def _ptx(cfg, dt: int, nvcc: str, work: Path) -> str:
    name = cfg.name(dt)
    stub = work / f"stub_{abs(hash((name,))):x}.cu"
    stub.write_text(
        f'#include "flash_fwd_{cfg.kernel}.cu"\nvoid* fa_keep_instantiation = (void*)&{name};\n'
    )
    arch = ("-arch=sm_90a", "-DFA_FORCE_WGMMA") if cfg.kernel != "mma" else ("-arch=sm_80",)
    out = stub.with_suffix(".ptx")
    cmd = [nvcc, "-std=c++17", *arch, "--ptx", "-I", str(KERNEL_DIR), str(stub), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{name}: nvcc failed:\n{proc.stderr}")
    return out.read_text()


def hashes(jobs: int = 2) -> dict[str, str]:
    """{'spec dtype': sha256 of its PTX} for every shipped default and both dtypes."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc is not on PATH: install the CUDA toolkit (12.8 or later)")
    jobs_list = [(cfg, dt) for cfg in shipped_configs() for dt in (0, 1)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
        texts = pool.map(lambda job: _ptx(*job, nvcc, Path(tmp)), jobs_list)
        return {
            f"{cfg.spec()} {('float16', 'bfloat16')[dt]}": hashlib.sha256(t.encode()).hexdigest()
            for (cfg, dt), t in zip(jobs_list, texts, strict=True)
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write {spec dtype: sha256} here")
    parser.add_argument("--jobs", type=int, default=2, help="nvcc processes at once")
    args = parser.parse_args(argv)
    table = hashes(args.jobs)
    for key, digest in table.items():
        print(f"{digest}  {key}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
