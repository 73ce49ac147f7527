"""Command-line configuration flags shared by every flash-explorer command (no Qt here).

`ledger`, `export`, `export-ledger`, the GUI and `--screenshot` accept the same flags,
so a configuration typed once reproduces the same trace everywhere.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from compute import DTYPES, PASSES
from compute.cli_fields import add_mask_flags, add_problem_flags, mask_fields, problem_fields
from desktop.state.config import SEED_SIZES, Config


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value:  # NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    return value


def _ranged(read, low, high, shown: str, name: str):
    """An argparse type reading a value with `read`, refused with one sentence outside
    [low, high]; `shown` formats the bounds."""

    def parse(text: str):
        value = read(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"{text if read is _number else value} is outside the allowed range "
                f"{low:{shown}} to {high:{shown}}"
            )
        return value

    parse.__name__ = name
    return parse


def ranged_int(low: int, high: int):
    """An argparse type: a whole number in [low, high], else one sentence naming the range."""
    return _ranged(_whole, low, high, ",", "whole number")


def ranged_float(low: float, high: float):
    """An argparse type: a number in [low, high], else one sentence naming the range."""
    return _ranged(_number, low, high, "g", "number")


# Ranges: positions and blocks as large as the ledger can count (the memory budget
# limits what is built); head sizes far past any model; scales whose scores stay finite.
POSITIONS_MAX = 10**12
HEAD_MAX = 65_536
SRAM_MAX = 10**15
SEED_MAX = 2**32 - 1
INPUT_SCALE_RANGE = (1e-6, 1e6)
positive_int = ranged_int(1, POSITIONS_MAX)


def add_pass_argument(parser, help: str) -> None:
    """The --pass flag (dest `pass_name`, default forward) with each command's own help."""
    parser.add_argument("--pass", dest="pass_name", choices=PASSES, default="forward", help=help)


def add_config_arguments(parser: argparse.ArgumentParser, *, inputs: bool = True) -> None:
    """Add the shared configuration flags (defaults: the reference example)."""
    g = parser.add_argument_group("configuration")
    head = ranged_int(1, HEAD_MAX)
    add_problem_flags(
        g, count=positive_int, head=head, n=6, d=2, block=2, dtypes=DTYPES, dtype="float64",
        dtype_help="precision the tiled lane computes in; both lanes store O in it",
    )  # fmt: skip
    add_mask_flags(parser, g)
    g.add_argument("--save-lse", action="store_true", help="write L = m + log ℓ per row")
    g.add_argument(
        "--sram",
        type=ranged_int(1, SRAM_MAX),
        help="SRAM capacity M in elements (default: not set, so nothing is checked against it)",
    )
    if inputs:
        add_pass_argument(
            g, "which pass the lanes animate: forward, backward or training (default forward)"
        )
        g.add_argument(
            "--input",
            default="seed",
            help="reference (the reference example's vectors; 'seed' is the same), random, or a "
            ".npy/.npz file (default reference)",
        )
        g.add_argument(
            "--seed",
            type=ranged_int(0, SEED_MAX),
            default=0,
            help="random-number seed for --input random (default 0)",
        )
        g.add_argument(
            "--input-scale",
            type=ranged_float(*INPUT_SCALE_RANGE),
            default=1.0,
            help="scale of random Q and K (default 1)",
        )
        g.add_argument(
            "--row",
            type=ranged_int(0, POSITIONS_MAX - 1),
            default=0,
            help="selected query row, 0-based as the lanes number rows (default 0)",
        )


def config_from_args(args: argparse.Namespace, open_path: str | None = None) -> Config:
    """The Config the flags describe (same flags in every command).

    "--input seed" means the reference example's vectors at the reference example's sizes (N = 6, d = d_v = 2); with
    other sizes it means seeded random inputs, so size flags always apply. Any other
    --input value, or --open, is a .npy/.npz path.
    """
    d_v = args.d if args.dv is None else args.dv
    n_keys = args.n_keys
    source, path = getattr(args, "input", "seed"), ""
    if source == "reference":  # the user's word for it; "seed" stays for old commands
        source = "seed"
    if (
        source == "seed"
        and (args.n, args.n if n_keys is None else n_keys, args.d, d_v) != SEED_SIZES
    ):
        source = "random"
    elif source not in ("seed", "random"):
        source, path = "file", source
    if open_path:
        source, path = "file", open_path
    return Config(
        **{**problem_fields(args), **mask_fields(args)},
        dv=d_v,
        save_lse=args.save_lse,
        input=source,
        seed=getattr(args, "seed", 0),
        input_scale=getattr(args, "input_scale", 1.0),
        file=path,
        sram=args.sram or None,
        pass_name=getattr(args, "pass_name", "forward"),
    )


def fail(message: str, prog: str = "flash-explorer") -> int:
    """Print one error sentence on stderr and return the exit status for failures."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 1


def notice(text: str) -> None:
    """Print a success line ("wrote FILE"); if stdout cannot take it (a full disk, a
    closed pipe), the file is still written: one warning on stderr instead of an error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        print(f"flash-explorer: warning: {text}, but stdout could not be written ({exc.strerror}).",
              file=sys.stderr)  # fmt: skip


def requested_config(args: argparse.Namespace) -> Config:
    """The configuration the flags ask for, with `--open FILE` as the input source."""
    return config_from_args(args, args.open)
