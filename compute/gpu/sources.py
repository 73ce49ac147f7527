"""Kernel source text for CuPy, stamped with its headers' contents.

CuPy caches compiled modules by the source text and options only, not by the headers a
kernel includes: after an edit to `common.cuh` or `tiled_common.cuh` alone, a stale
binary would be loaded. A trailing comment holding a hash of every header in the kernels
folder makes the cache key change whenever one of them does (the code compiled is the same).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

KERNEL_DIR = Path(__file__).parent / "kernels"


@functools.cache
def _headers_digest() -> str:
    digest = hashlib.sha256()
    for header in sorted(KERNEL_DIR.glob("*.cuh")):
        digest.update(header.name.encode())
        digest.update(header.read_bytes())
    return digest.hexdigest()[:16]


def kernel_source(path: Path) -> str:
    """The .cu file's text plus a comment naming its headers' digest."""
    return path.read_text() + f"\n// headers sha256 {_headers_digest()}\n"
