"""Which physical GPU a benchmark ran on, for the record's JSON.

The same kernel pair reads up to ±6-12% apart on different H200s drawn from one pool
(FLASH_NOTES v10, v11), so a peer comparison names its card: `nvidia-smi`'s UUID, the power
limit it was held to and its clocks, read once before and once after the timed cases.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

# nvidia-smi --query-gpu fields, in the order they are asked for.
FIELDS = (
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    "vbios_version",
    "power.limit",
    "power.max_limit",
    "clocks.max.sm",
    "clocks.sm",
    "clocks.mem",
    "temperature.gpu",
    "power.draw",
)

Runner = Callable[[list[str]], str]


def _nvidia_smi(args: list[str]) -> str:
    done = subprocess.run(
        ["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=True
    )
    return done.stdout


def identity(index: int = 0, run: Runner = _nvidia_smi) -> dict:
    """The queried fields of GPU `index` as a dict of strings (units as nvidia-smi prints
    them without their names: W, MHz, °C), or {"error": one sentence} when nvidia-smi is
    missing or fails; never raises."""
    try:
        out = run(
            [f"--id={index}", "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits"]
        )
    except FileNotFoundError:
        return {"error": "nvidia-smi is not on PATH, so the GPU's identity was not recorded."}
    except (OSError, subprocess.SubprocessError) as exc:
        return {
            "error": f"nvidia-smi failed ({type(exc).__name__}), so the GPU's identity was not recorded."
        }
    lines = [line for line in out.splitlines() if line.strip()]
    values = [v.strip() for v in lines[0].split(",")] if lines else []
    if len(values) != len(FIELDS):
        return {"error": f"nvidia-smi printed {len(values)} fields for {len(FIELDS)} asked."}
    return dict(zip(FIELDS, values, strict=True))
