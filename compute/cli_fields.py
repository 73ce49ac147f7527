"""The problem flags every command line shares, read back from parsed arguments.

`flash-explorer`'s commands (desktop/cli/args.py) and `flash-explorer bench`
(compute/gpu/bench_cli.py) both take --n, --n-keys, --d, --block-q, --block-k, --order,
--causal and --dtype, and their configuration types name those fields alike; each
command keeps its own defaults and choices.
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

PROBLEM_FIELDS: tuple[str, ...] = (
    "n", "n_keys", "d", "block_q", "block_k", "order", "causal", "dtype",
)  # fmt: skip


def problem_fields(args: Namespace) -> dict[str, Any]:
    """The shared flags' values as keyword arguments of a configuration (same names)."""
    return {name: getattr(args, name) for name in PROBLEM_FIELDS}
