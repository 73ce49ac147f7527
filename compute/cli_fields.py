"""The problem flags every command line shares: defined here once, read back by name.

`flash-explorer`'s commands (desktop/cli/args.py) and `flash-explorer bench`
(compute/gpu/bench_cli.py) both take --n, --n-keys, --d, --dv, --block-q, --block-k,
--order, --causal and --dtype. `add_problem_flags` defines them (each command passes its
own defaults, dtypes and number parsers), and `problem_fields` reads them back as keyword
arguments of a configuration type that names its fields alike.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from typing import Any

from .attention import ORDERS

PROBLEM_FIELDS: tuple[str, ...] = (
    "n", "n_keys", "d", "block_q", "block_k", "order", "causal", "dtype",
)  # fmt: skip


def add_problem_flags(
    group: Any,
    *,
    count: Callable[[str], int],
    head: Callable[[str], int],
    n: int,
    d: int,
    block: int,
    dtypes: tuple[str, ...],
    dtype: str,
    dtype_help: str,
) -> None:
    """Add the shared flags to an argparse parser or group: `count` parses positions and
    blocks, `head` head sizes (each refuses a bad value with one sentence)."""
    group.add_argument("--n", type=count, default=n, help=f"query positions N (default {n})")
    group.add_argument("--n-keys", type=count, help="key positions N_k (default: N)")
    group.add_argument("--d", type=head, default=d, help=f"head size d of Q and K (default {d})")
    group.add_argument("--dv", type=head, help="head size d_v of V (default: d)")
    group.add_argument(
        "--block-q", type=count, default=block, help=f"query block B_r (default {block})"
    )
    group.add_argument(
        "--block-k", type=count, default=block, help=f"key tile B_c (default {block})"
    )
    group.add_argument("--order", choices=ORDERS, default="q-outer", help="tiled loop order")
    group.add_argument("--causal", action="store_true", help="bottom-right aligned causal mask")
    group.add_argument(
        "--dtype", choices=dtypes, default=dtype, help=f"{dtype_help} (default {dtype})"
    )


def problem_fields(args: Namespace) -> dict[str, Any]:
    """The shared flags' values as keyword arguments of a configuration (same names)."""
    return {name: getattr(args, name) for name in PROBLEM_FIELDS}
