"""The problem flags every command line shares: defined here once, read back by name.

`flash-explorer`'s commands (desktop/cli/args.py) and `flash-explorer bench`
(compute/gpu/bench_cli.py) both take --n, --n-keys, --d, --dv, --block-q, --block-k,
--order, --causal and --dtype. `add_problem_flags` defines them (each command passes its
own defaults, dtypes and number parsers), and `problem_fields` reads them back as keyword
arguments of a configuration type that names its fields alike. `add_mask_flags` adds
--mask, --window and --packed (compute.mask) and `mask_fields` reads them back.
"""

from __future__ import annotations

import re
from argparse import ArgumentTypeError, Namespace
from collections.abc import Callable
from typing import Any

from .attention import ORDERS
from .mask import MASK_KINDS, Mask

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


def _ints(text: str, what: str, example: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(
            f"{what} must be whole numbers separated by commas (e.g. {example}), not {text!r}."
        ) from None


def parse_window(text: str) -> tuple[int, int]:
    """--window LEFT,RIGHT: FlashAttention's window_size (−1 = unbounded)."""
    values = _ints(text, "--window", "128,0")
    if len(values) != 2 or min(values) < -1:
        raise ValueError(
            f"--window takes LEFT,RIGHT, each a whole number of at least -1 (-1 = unbounded), "
            f"not {text!r}."
        )
    return values[0], values[1]


def parse_packed(text: str) -> tuple[int, ...]:
    """--packed 5,7,18: the lengths of the packed sequences (summing to N)."""
    values = _ints(text, "--packed", "5,7,18")
    if min(values) < 1:
        raise ValueError(f"--packed lengths must each be at least 1, not {text!r}.")
    return values


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a parser: its ValueError becomes argparse's one-line refusal."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise ArgumentTypeError(str(exc)) from None

    read.__name__ = parse.__name__
    return read


# argparse takes "-1,0" for an option (only "-1" or "-1.5" pass as negative numbers), so
# `--window -1,0` would be refused; a parser that has no option like "-1" can take lists.
_NEGATIVE_VALUES = re.compile(r"^-\d+(,-?\d+)*$|^-\d*\.\d+$")


def add_mask_flags(parser: Any, group: Any | None = None) -> None:
    """--mask, --window and --packed (compute.mask) on `parser` (in `group` when given);
    --causal stays as --mask causal."""
    parser._negative_number_matcher = _NEGATIVE_VALUES
    group = parser if group is None else group
    group.add_argument(
        "--mask",
        choices=MASK_KINDS,
        help="none, causal (bottom-right, as FlashAttention) or causal-top-left (as PyTorch "
        "SDPA's is_causal); default none, or causal with --causal",
    )
    group.add_argument(
        "--window",
        type=_checked(parse_window),
        metavar="LEFT,RIGHT",
        help="sliding window as FlashAttention's window_size (-1 = unbounded), aligned as "
        "--mask says (bottom-right unless causal-top-left)",
    )
    group.add_argument(
        "--packed",
        type=_checked(parse_packed),
        metavar="L1,L2,...",
        help="packed sequences of these lengths (summing to N), each masked as --mask says",
    )


def mask_fields(args: Namespace) -> dict[str, Any]:
    """The mask flags as a configuration's fields: causal, top_left, window and packed (the
    last two as text, "" when not given). --causal with --mask none is refused."""
    kind = getattr(args, "mask", None)
    if kind == "none" and getattr(args, "causal", False):
        raise ValueError("--causal and --mask none contradict each other; give one of them.")
    kind = kind or ("causal" if getattr(args, "causal", False) else "none")
    window, packed = getattr(args, "window", None), getattr(args, "packed", None)
    return {
        "causal": kind != "none",
        "top_left": kind == "causal-top-left",
        "window": "" if window is None else f"{window[0]},{window[1]}",
        "packed": "" if packed is None else ",".join(map(str, packed)),
    }


def mask_of(causal: bool, top_left: bool, window: str, packed: str) -> Mask:
    """The Mask a configuration's mask fields describe (ValueError: one sentence); top_left
    aligns a window without causal too (the window's Diagonal control)."""
    kind = ("causal-top-left" if top_left else "causal") if causal else "none"
    mask = Mask.from_options(
        kind,
        parse_window(window) if window else None,
        parse_packed(packed) if packed else None,
    )
    return Mask(mask.left, mask.right, top_left, mask.lengths)
