"""Planning models of the tensor-core forward, computed on the host at launch.

The LPT order walks causal work items over heads in sections whose K and V share L2
(kernels/ws_scheduler.cuh, fa_tile); `lpt_section` sizes them (FLASH_NOTES v13).
"""

from __future__ import annotations


def lpt_section_cap(n_k: int, d: int, l2_bytes: int) -> int:
    """The most heads an LPT section may hold: as many as have their K and V (16-bit) in half
    of L2 together, so the blocks running at once re-read K and V from L2, not from HBM."""
    return max(1, (l2_bytes // 2) // max(1, 2 * n_k * d * 2))


def lpt_section(n_k: int, d: int, heads: int, l2_bytes: int) -> int:
    """Heads per section of the LPT order over `heads` heads: the fewest sections of at most
    lpt_section_cap heads, made as equal as they can be (a last section of a few heads has
    fewer blocks than SMs and finishes the SMs unevenly: FLASH_NOTES v13)."""
    cap = lpt_section_cap(n_k, d, l2_bytes)
    sections = -(-max(1, heads) // cap)
    return -(-max(1, heads) // sections)
