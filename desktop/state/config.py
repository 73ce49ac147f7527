"""The explorer's configuration: one frozen value, its command-line flags, and its build.

No Qt here: `Config` is plain data, so the GUI, its tests, the screenshot path and
any headless exporter share one definition of "what is being shown". `build` turns a
Config into inputs and a Trace through the compute core (the GUI computes nothing).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Hashable
from dataclasses import dataclass

import compute
from compute import InputError, Inputs, Problem, Trace
from compute import numbers as numbers_cache
from compute.chunk_pool import CHUNK_THREADS
from compute.cli_fields import mask_of
from compute.forward_numbers import DISPLAY_CELLS
from compute.full_pass import chunk_rows
from compute.inputs import CHUNK_BYTES, DEFAULT_MEMORY_BUDGET_BYTES, LOWER_ADVICE, memory_terms
from compute.mask import Mask
from compute.numbers import NumberCache
from compute.schedule import Schedule

INPUT_MODES: tuple[str, ...] = ("seed", "random", "file")
SEED_SIZES = (6, 6, 2, 2)  # the reference example's N, N_keys, d, d_v
N_MAX = 4096  # the largest N the window offers
D_MAX = 256
OPTIONAL_INTS = ("n_keys", "sram")  # None means "same as N" / "not set"


@dataclass(frozen=True)
class Config:
    """Everything that decides the Trace. n_keys None means "same as N"; sram None means unset."""

    n: int = 6
    n_keys: int | None = None
    d: int = 2
    dv: int = 2
    block_q: int = 2
    block_k: int = 2
    order: str = "q-outer"
    causal: bool = False
    save_lse: bool = False
    dtype: str = "float64"
    input: str = "seed"
    seed: int = 0
    input_scale: float = 1.0
    file: str = ""
    sram: int | None = None
    pass_name: str = "forward"  # "forward", "backward" or "training" (forward then backward)
    # The mask beyond `causal` (compute.mask): the causal diagonal's alignment, a window
    # "LEFT,RIGHT" and packed lengths "5,7,18" ("" = none), as text so settings keep them.
    top_left: bool = False
    window: str = ""
    packed: str = ""

    @property
    def mask(self) -> Mask:
        """The compute.mask.Mask this config applies (ValueError for a bad window/packed)."""
        return mask_of(self.causal, self.top_left, self.window, self.packed)

    @property
    def n_k(self) -> int:
        """The number of keys: N_keys when set, else N."""
        return self.n if self.n_keys is None else self.n_keys

    @property
    def problem(self) -> Problem:
        """The compute.Problem this config shows (sizes as asked; `conform` takes a file's)."""
        return Problem(
            n=self.n, d=self.d, block_q=self.block_q, block_k=self.block_k,
            n_keys=None if self.n_keys == self.n else self.n_keys,
            dv=None if self.dv == self.d else self.dv, dtype=self.dtype,
            causal=self.causal, order=self.order, save_lse=self.save_lse, masking=self.mask,
        )  # fmt: skip

    def core_options(self) -> dict[str, object]:
        """The keywords the core's ledger and trace take from this config, named as they are."""
        return {**self.problem.options(), "sram_capacity": self.sram}

    def replace(self, **changes: object) -> Config:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: object, warn=None) -> Config:
        """Rebuild from saved settings, ignoring unknown keys and falling back on bad values.

        Saved settings can be anything (hand-edited, another version's): a value of the
        wrong type or out of range falls back to its default, reported through `warn`.
        """
        warn = warn or (lambda _text: None)
        if not isinstance(data, dict):
            warn(
                f"the saved configuration is not a mapping ({type(data).__name__}); using the default"
            )
            return cls()
        fields = {f.name for f in dataclasses.fields(cls)}
        clean = {}
        for name, value in data.items():
            if name not in fields:
                continue
            default = getattr(cls(), name)
            try:
                if name in OPTIONAL_INTS:  # saved as 0, "" or None when unset
                    if value is None or value == "" or value == 0:
                        clean[name] = None
                        continue
                    if isinstance(value, bool) or not isinstance(value, int):
                        raise TypeError
                    clean[name] = int(value)
                    continue
                if isinstance(default, bool) and not isinstance(value, bool):
                    raise TypeError
                if isinstance(default, (int, float)) and not isinstance(value, (int, float)):
                    raise TypeError  # "12" or [1] are not what the app saved
                clean[name] = type(default)(value)
                if isinstance(clean[name], float) and not math.isfinite(clean[name]):
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                clean.pop(name, None)
                warn(f"the saved setting config.{name}={value!r} is not valid; using {default!r}")
        try:
            config = cls(**clean).validated()
        except InputError as exc:
            warn(f"the saved configuration is not valid ({exc}); using the default")
            return cls()
        if config.n > N_MAX or config.n_k > N_MAX or config.d > D_MAX or config.dv > D_MAX:
            warn(f"the saved config exceeds N ≤ {N_MAX}, d ≤ {D_MAX}; using the default")
            return cls()
        return config

    def validated(self) -> Config:
        """Raise InputError (one sentence) for values no control can produce."""
        for name in ("n", "d", "dv", "block_q", "block_k"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, not {getattr(self, name)}.")
        for name in OPTIONAL_INTS:
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1 when set, not {getattr(self, name)}.")
        if self.order not in compute.ORDERS:
            raise InputError(f"The loop order must be one of {', '.join(compute.ORDERS)}.")
        if self.dtype not in compute.DTYPES:
            raise InputError(f"The dtype must be one of {', '.join(compute.DTYPES)}.")
        if self.pass_name not in compute.PASSES:
            raise InputError(f"The pass must be one of {', '.join(compute.PASSES)}.")
        if self.input not in INPUT_MODES:
            raise InputError(f"The input must be one of {', '.join(INPUT_MODES)}.")
        if self.input == "file" and not self.file:
            raise InputError("Choose a .npy or .npz file to open.")
        if not (math.isfinite(self.input_scale) and self.input_scale > 0):
            raise InputError(f"The input scale must be a positive number, not {self.input_scale}.")
        try:
            self.mask.check(self.n, self.n_k)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        return self

    def estimated_steps(self) -> int:
        """Roughly how many timeline steps the trace will hold."""
        t_r = math.ceil(self.n / self.block_q)
        t_c = math.ceil(self.n_k / self.block_k)
        return 3 * t_r * t_c + 2 * t_r

    def estimated_work(self) -> int:
        """Roughly the multiply-adds a build costs (decides threading): the full pass over
        S is N · N_k · (d + d_v); a query block's history loops over T_c key tiles."""
        t_c = math.ceil(self.n_k / self.block_k)
        return self.n * self.n_k * (self.d + self.dv) + 2000 * t_c


@dataclass(frozen=True)
class PaperBlocks:
    """Algorithm 1's block sizes for M and d, and the largest blocks near them that fit."""

    paper: tuple[int, int]  # (B_r, B_c) by the paper's rule
    paper_need: int  # our working set at the paper's blocks
    chosen: tuple[int, int] | None  # (B_r, B_c) ≤ the paper's, largest tile that fits
    chosen_need: int | None


def working_set(config: Config, block_q: int, block_k: int) -> int:
    """The tiled lane's SRAM working set in elements at these blocks (the schedule's count)."""
    schedule = Schedule(config.n, config.n_k, config.d, config.dv, block_q, block_k)
    return schedule.sram_elements("tiled")


def paper_blocks(config: Config) -> PaperBlocks:
    """The paper's rule B_c = ⌈M / 4d⌉, B_r = min(⌈M / 4d⌉, d) sizes Q_i, K_j, V_j and O_i
    to about M/4 each and ignores the score tile S_ij and the statistics m, ℓ that our
    working set counts, so its blocks can overflow M. Among blocks no larger than the
    paper's (and N), choose the largest tile B_r · B_c that fits (ties: the larger B_c,
    as the paper's rule favours key tiles). Blocks past N are clamped by the schedule,
    so the tile's size is counted as clamped."""
    m, d, dv = int(config.sram or 0), config.d, config.dv
    b_r, b_c = compute.paper_block_sizes(m, d)
    best: tuple[int, int, int] | None = None  # (clamped area, B_c, B_r)
    for r in range(1, b_r + 1):
        r_eff = min(r, config.n)
        # B_r d + B_c (d + d_v) + B_r B_c + B_r d_v + 2 B_r ≤ M, solved for B_c.
        c_max = (m - r_eff * (d + dv + 2)) // (d + dv + r_eff)
        c = b_c if c_max >= min(b_c, config.n_k) else c_max
        if c >= 1:
            key = (r_eff * min(c, config.n_k), c, r)
            best = key if best is None or key > best else best
    chosen = None if best is None else (best[2], best[1])
    return PaperBlocks(
        paper=(b_r, b_c),
        paper_need=working_set(config, b_r, b_c),
        chosen=chosen,
        chosen_need=None if chosen is None else working_set(config, *chosen),
    )


def _memory_args(config: Config) -> tuple[tuple, dict]:
    """compute.inputs.memory_terms' arguments for what one frame of `config` holds."""
    from desktop.scene.render import NUMBERS_CAP

    t_c = math.ceil(config.n_k / config.block_k)
    whole = max(config.n, config.n_k) <= NUMBERS_CAP  # small N: S and P are held whole
    t_r = math.ceil(config.n / config.block_q)
    backward = (config.block_k, t_r) if config.pass_name != "forward" else None
    return (config.n, config.n_k, config.d, config.dv, t_c), {
        "block_q": config.block_q,
        "whole": whole,
        "backward": backward,
        "history_blocks": 1,
        "key_tiles": 1,
    }


# "window": what the window holds at most (its caches fill as the user moves through
# blocks and sizes); "export": what a one-shot export of one frame holds (one query
# block's history and one key tile's, the shared cache as one configuration fills it).
MEMORY_CONTEXTS = ("window", "export")
_context = ["window"]  # this process's (the export command sets "export" for one frame)


def set_memory_context(context: str) -> None:
    """Make `context` the default of config_memory and the budget checks in this process:
    the export command, drawing one frame, sets "export" before its window builds."""
    if context not in MEMORY_CONTEXTS:
        raise ValueError(f"The memory context must be one of {', '.join(MEMORY_CONTEXTS)}.")
    _context[0] = context


# What the process itself holds before any array: the interpreter, Qt, pyqtgraph and
# NumPy (an offscreen export of the N = 6 reference example peaks at 153 MiB of RSS; a
# few MiB more on other machines, so the estimate keeps that much over it).
PROCESS_BYTES = 158 * 2**20
_LOWER_EXTRA = {
    "process": "lower N or d",
    "backward_chunk": "lower N or N_keys",
    "cached": "lower N, d or d_v",
    "curves": "raise block_q and block_k",
}


def config_memory_terms(config: Config, context: str | None = None) -> dict[str, int]:
    """Bytes by what holds them for `config`: compute.inputs.memory_terms (the arrays of
    the trace and its caches as one frame fills them), the process itself, and with a
    backward the second chunk of temporaries its pass over S holds (dP, dS beside S and
    P). The window's estimate is an export's plus what its caches add as the user moves
    through blocks, rows, keys and inputs (`_window_terms`). context None: this process's
    default."""
    context = _context[0] if context is None else context
    args, kwargs = _memory_args(config)
    terms = dict(memory_terms(*args, **kwargs))
    terms["process"] = PROCESS_BYTES
    # compute.inputs counts the pass over S's chunk as CHUNK_BYTES whatever the sizes;
    # it holds about three float64 arrays of the chunk's scores at once (S, P and one
    # temporary), and the backward's fused pass three more (dP, dS, a product).
    chunk = 24 * _chunk_elements(config)
    terms["rows"] += chunk - CHUNK_BYTES
    terms["backward_chunk"] = chunk if config.pass_name != "forward" else 0
    terms["cached"] = _cached_bytes(config)
    # One block's S and P regions drawn (and two temporaries), not the six regions
    # memory_terms counts for a window moving between blocks.
    terms["pairs"] -= 8 * 8 * min(config.n, config.block_q) * config.n_k
    if context == "window":
        for name, extra in _window_terms(config).items():
            terms[name] = terms.get(name, 0) + extra
    return terms


# The window's own memory beyond an export's once it has shown a few configurations (its
# widgets' pixmaps and what the allocator keeps of freed chunks), and per point of the
# statistics panel's step curves (their arrays and Qt's painter paths): fitted to
# `flash-explorer bench-memory --grid` and the budget tests' window cases
# (assets/benchmarks/memory/), with the process on one malloc arena (desktop/__init__).
WINDOW_BYTES = 25 * 2**20
CURVE_POINT_BYTES = 13


def _curve_points(config: Config) -> int:
    """Points of the statistics panel's step curves (two per key tile or query block):
    the forward's m, ℓ, α and a (d_v components) over the key tiles; the backward's
    dQ_row (d) over the key tiles and dK, dV (d + d_v) over the query blocks."""
    t_c = math.ceil(config.n_k / config.block_k)
    t_r = math.ceil(config.n / config.block_q)
    points = 0
    if config.pass_name != "backward":
        points += 2 * (3 + config.dv) * (t_c + 1)
    if config.pass_name != "forward":
        points += 2 * (config.d * (t_c + 1) + (config.d + config.dv) * (t_r + 1))
    return points


def _window_terms(config: Config) -> dict[str, int]:
    """What the window holds beyond an export of one frame: the histories at capacity
    (compute.inputs.HISTORY_BLOCKS query blocks, HISTORY_KEY_TILES key tiles; the
    forward's only where the pass shows it), the shared number cache full (ENTRIES
    configurations per kind, never over MAX_BYTES) with the previous inputs (float64),
    the window's own memory and its step curves."""
    from compute.inputs import HISTORY_BLOCKS, HISTORY_KEY_TILES

    args, kwargs = _memory_args(config)  # one block's and one tile's histories
    one = memory_terms(*args, **kwargs)["history"]
    kwargs.update(history_blocks=HISTORY_BLOCKS, key_tiles=HISTORY_KEY_TILES)
    if config.pass_name == "backward":
        kwargs["forward_blocks"] = 1
    full = memory_terms(*args, **kwargs)["history"]
    entry = _cache_entry_bytes(config)
    cached = min(numbers_cache.MAX_BYTES, numbers_cache.ENTRIES * entry) - min(
        numbers_cache.MAX_BYTES, entry
    )
    previous = 8 * (config.n * config.d + config.n_k * (config.d + config.dv))
    return {
        "history": full - one,
        "cached": max(0, cached) + previous,
        "process": WINDOW_BYTES,
        "curves": CURVE_POINT_BYTES * _curve_points(config),
    }


def _cache_entry_bytes(config: Config) -> int:
    """One configuration's values in compute.numbers' shared cache (every kind): the
    dense pass (reference output and row statistics, S and P at display size; with a
    backward its dP, dS and both lanes' gradients), the tiled lane's, and the first
    tier's block means of S and row sample."""
    n, n_k, d, d_v = config.n, config.n_k, config.d, config.dv
    cells = min(DISPLAY_CELLS, n) * min(DISPLAY_CELLS, n_k)
    sample_rows = min(n, max(1, -(-32768 // n_k)))
    total = 8 * n * (2 + d_v) + 2 * 8 * cells + 16 * n * d_v + 24 * n
    total += 8 * cells + 2 * 8 * sample_rows * n_k
    if config.pass_name != "forward":
        grads = 8 * (n + n * d + n_k * (d + d_v))
        total += 2 * 8 * cells + 2 * grads
    return total


def _chunk_elements(config: Config) -> int:
    """Scores in the chunks of compute.full_pass's rows held at once (compute.chunk_pool
    runs CHUNK_THREADS of them together)."""
    return min(config.n, CHUNK_THREADS * chunk_rows(config.n, config.n_k)) * config.n_k


def _cached_bytes(config: Config) -> int:
    """What compute.numbers' shared cache holds beyond the trace's own numbers after one
    configuration: the one entry of each kind is the trace's own (its rows and gradients
    counted in memory_terms' rows), so only the display-size S, P and dP, dS summaries
    are the cache's alone."""
    n, n_k = config.n, config.n_k
    cells = min(DISPLAY_CELLS, n) * min(DISPLAY_CELLS, n_k)
    summaries = 4 * 8 * cells + 2 * 8 * min(32768, n * n_k)
    if config.pass_name != "forward":
        summaries += 4 * 8 * cells + 2 * 8 * min(16384, n * n_k)
    return summaries


def config_memory(config: Config, context: str | None = None) -> int:
    """Bytes a process showing or exporting `config` holds at most (config_memory_terms);
    the memory budget is checked against this."""
    return sum(config_memory_terms(config, context).values())


class BudgetError(InputError):
    """A configuration over the memory budget (one sentence, as every InputError). The
    GUI treats it apart: the user may be passing through it on the way to one that fits."""


def check_config_memory(config: Config, context: str | None = None) -> None:
    """One sentence (a BudgetError), before allocating, if `config` would pass the
    memory budget (context as config_memory_terms)."""
    terms = config_memory_terms(config, context)
    need = sum(terms.values())
    if need > DEFAULT_MEMORY_BUDGET_BYTES:
        biggest = max(terms, key=terms.get)
        lower = _LOWER_EXTRA.get(biggest) or LOWER_ADVICE[biggest]
        raise BudgetError(
            f"N_q = {config.n:,}, N_k = {config.n_k:,}, d = {config.d:,}, d_v = {config.dv:,} "
            f"with {config.block_q}×{config.block_k} blocks ({config.pass_name}) need about "
            f"{need / 2**20:,.0f} MiB, over the {DEFAULT_MEMORY_BUDGET_BYTES / 2**20:,.0f} MiB "
            f"memory budget; {lower}."
        )


def inputs_key(config: Config) -> Hashable:
    """What the inputs of `config` are, by source: equal keys give equal arrays (so
    compute.numbers shares what depends on them). A file is named by its path and stat,
    so a file saved again is read again; a file that cannot be stat'ed gets a key of its
    own (load_inputs then says what is wrong)."""
    if config.input == "seed":
        return ("seed",)
    if config.input == "file":
        try:
            st = os.stat(config.file)
        except (OSError, ValueError):
            return object()
        path = os.path.realpath(config.file)
        return ("file", path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    c = config
    return ("random", c.seed, c.input_scale, c.n, c.n_k, c.d, c.dv)


_INPUTS = NumberCache(entries=2, max_bytes=None)  # the last two sources (config_memory)


def make_inputs(config: Config) -> Inputs:
    """The inputs a Config names (the same read-only arrays while its source is the
    same); shapes follow the inputs for seed and file sources."""
    key = inputs_key(config)

    def load() -> Inputs:
        inputs = _make_inputs(config)
        for a in (inputs.q, inputs.k, inputs.v):
            a.setflags(write=False)
        return inputs

    return _INPUTS.value("inputs", key, load)


def _make_inputs(config: Config) -> Inputs:
    if config.input == "seed":
        return compute.seed_example()
    if config.input == "file":
        return compute.load_inputs(config.file)
    check_config_memory(config)  # random sizes are known before drawing: check first
    return compute.random_inputs(
        config.n, config.d, config.dv, n_k=config.n_k, seed=config.seed, scale=config.input_scale
    )


def ledger_for(config: Config, pass_name: str | None = None) -> compute.Ledger:
    """The exact ledger of a config at the block sizes asked for, from the closed form.

    Only shapes matter: a file is read for its shapes, random inputs are not drawn.
    pass_name "backward" or "training" gives that pass's ledger (from its closed form);
    None means the config's own pass.
    """
    pass_name = config.pass_name if pass_name is None else pass_name
    if config.input != "random":
        config = conform(config, make_inputs(config))
    return compute.problem_ledger(config.problem, pass_name, sram_capacity=config.sram)


def conform(config: Config, inputs: Inputs) -> Config:
    """The config with N, N_keys, d, d_v taken from the inputs actually loaded. Block
    sizes are the user's, always: the drawing groups tiles, the numbers never change."""
    n_q, d = inputs.q.shape
    n_k, dv = inputs.v.shape
    return config.replace(n=n_q, n_keys=None if n_k == n_q else n_k, d=d, dv=dv)


def build(config: Config) -> tuple[Config, Trace]:
    """Inputs and Trace for a config; raises InputError with one user-facing sentence."""
    config = config.validated()
    key = inputs_key(config)
    inputs = make_inputs(config)
    config = conform(config, inputs)
    check_config_memory(config)
    try:
        trace = compute.build_trace(
            inputs.q,
            inputs.k,
            inputs.v,
            config.problem,
            pass_name=config.pass_name,
            sram_capacity=config.sram,
            inputs_key=key,
        )
    except InputError:
        raise
    except ValueError as exc:  # the core's own checks are already one sentence
        raise InputError(str(exc)) from None
    return config, trace
