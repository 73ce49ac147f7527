"""Whether a CUDA device is usable here, and what it offers (CuPy imported lazily).

`status()` never raises: with no CuPy, no driver or no device it returns a
`DeviceStatus` whose `reason` is one sentence a user can act on.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceStatus:
    """What the GPU backend can use: a device, or the one-sentence reason it cannot."""

    usable: bool
    reason: str = ""
    name: str = ""
    compute_capability: tuple[int, int] = (0, 0)
    shared_mem_per_block: int = 0  # bytes a block may opt into (dynamic shared memory)
    sm_count: int = 0
    l2_bytes: int = 0
    total_memory: int = 0

    def describe(self) -> str:
        """One line for a table header or a panel: the device, or why there is none."""
        if not self.usable:
            return self.reason
        major, minor = self.compute_capability
        return (
            f"{self.name} (sm_{major}{minor}, {self.sm_count} SMs, "
            f"{self.shared_mem_per_block // 1024} KB shared/block, "
            f"{self.total_memory / 2**30:.0f} GiB)"
        )

    def to_dict(self) -> dict:
        return {
            "usable": self.usable,
            "reason": self.reason,
            "name": self.name,
            "compute_capability": list(self.compute_capability),
            "shared_mem_per_block": self.shared_mem_per_block,
            "sm_count": self.sm_count,
            "l2_bytes": self.l2_bytes,
            "total_memory": self.total_memory,
        }


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def status() -> DeviceStatus:
    """Probe CuPy and device 0; never raises."""
    try:
        cupy = importlib.import_module("cupy")
    except Exception:  # ImportError, or a broken CuPy install failing at import
        return DeviceStatus(
            usable=False,
            reason="CuPy is not installed, so the GPU backend is off (pip install cupy-cuda13x).",
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, or a driver too old
        return DeviceStatus(
            usable=False,
            reason=f"No usable NVIDIA driver was found ({_first_line(exc)}).",
        )
    if count < 1:
        return DeviceStatus(usable=False, reason="No CUDA device was found.")
    try:
        props = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception as exc:
        return DeviceStatus(
            usable=False, reason=f"The CUDA device could not be queried ({_first_line(exc)})."
        )
    name = props.get("name", b"")
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return DeviceStatus(
        usable=True,
        name=name,
        compute_capability=(int(props.get("major", 0)), int(props.get("minor", 0))),
        shared_mem_per_block=int(
            props.get("sharedMemPerBlockOptin", 0) or props.get("sharedMemPerBlock", 0)
        ),
        sm_count=int(props.get("multiProcessorCount", 0)),
        l2_bytes=int(props.get("l2CacheSize", 0)),
        total_memory=int(props.get("totalGlobalMem", 0)),
    )
