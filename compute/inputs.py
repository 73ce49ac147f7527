"""Inputs for both lanes: the reference example, seeded random data, and user .npy/.npz files.

Everything a user can get wrong is checked here and reported as one `InputError`
sentence that says what is wrong and what to do.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from .chunk_pool import CHUNK_THREADS, ordered_map

# The reference example's vectors ship inside the package, so a wheel install finds them.
REFERENCE_EXAMPLE = "reference_example.json"

# One budget for every array a configuration makes the app hold (see memory_estimate).
DEFAULT_MEMORY_BUDGET_BYTES = 2 * 1024**3
# A file's Q, K, V may hold at most this many elements each before anything is read.
MAX_FILE_ELEMENTS = DEFAULT_MEMORY_BUDGET_BYTES // 8
# numpy writes headers of about 128 bytes; its own reader refuses more than 10,000.
MAX_HEADER_BYTES = 65_536
# An .npz of Q, K and V has three members; a few more (notes, a mask) are fine.
MAX_NPZ_MEMBERS = 64


class InputError(ValueError):
    """A user-facing problem with inputs or settings; str() is one complete sentence."""


@dataclass(frozen=True)
class Inputs:
    """Q (N_q × d), K (N_k × d) and V (N_k × d_v) in float64, with where they came from."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    source: str


def validate_inputs(
    q: object, k: object, v: object, *, memory_budget: int = DEFAULT_MEMORY_BUDGET_BYTES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check ranks, shapes, dtypes and values; return float64 copies of q, k, v."""
    arrays = []
    for name, x in (("Q", q), ("K", k), ("V", v)):
        a = np.asarray(x)
        if a.dtype.kind not in "biuf":
            raise InputError(
                f"{name} holds {a.dtype} values; provide real numbers (integer or floating point)."
            )
        if a.ndim != 2:
            raise InputError(
                f"{name} has {a.ndim} dimension(s) with shape {a.shape}; provide a 2-D matrix "
                "(rows = positions, columns = features)."
            )
        if 0 in a.shape:
            raise InputError(
                f"{name} is empty (shape {a.shape}); provide at least one row and column."
            )
        # C order whatever the file's: Fortran-ordered or strided rows would reach the
        # renderer, whose images need contiguous rows.
        a = np.ascontiguousarray(a, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise InputError(
                f"{name} contains NaN or infinite values; replace them with finite numbers."
            )
        arrays.append(a)
    q, k, v = arrays
    if q.shape[1] != k.shape[1]:
        raise InputError(
            f"Q has d = {q.shape[1]} columns but K has {k.shape[1]}; "
            "Q and K need the same head size d."
        )
    if k.shape[0] != v.shape[0]:
        raise InputError(
            f"K has {k.shape[0]} rows but V has {v.shape[0]}; every key needs exactly one value row."
        )
    # The inputs only: whoever picks block sizes checks the trace's arrays too.
    check_memory_budget(q.shape[0], k.shape[0], q.shape[1], v.shape[1], memory_budget=memory_budget)
    return q, k, v


CHUNK_BYTES = 64 * 2**20  # the full pass's temporaries: 1M scores in about 8 arrays
HISTORY_BLOCKS = 16  # query blocks whose history the trace keeps (compute.trace, backward_numbers)
HISTORY_KEY_TILES = 8  # key tiles whose dK, dV history the trace keeps (compute.backward_numbers)


def memory_terms(
    n_q: int,
    n_k: int,
    d: int,
    d_v: int,
    t_c: int | None = None,
    block_q: int | None = None,
    *,
    whole: bool = False,
    backward: tuple[int, int] | None = None,
    history_blocks: int = HISTORY_BLOCKS,
    key_tiles: int = HISTORY_KEY_TILES,
    forward_blocks: int | None = None,
) -> dict[str, int]:
    """Bytes by what holds them, for the arrays one configuration makes the app hold.

    inputs: 24 B per input element (the file's copy, the float64 copy, the rounded copy).
    With block_q (a trace will be built): per query row the statistics, reference and
    tiled output; the full pass's chunk; the 16 newest query blocks' histories (m, ℓ, α,
    a after each of the T_c tiles, and P̃); six cached S and P regions of a block's rows.
    whole: S and P held whole with their temporaries (56 B per pair; the app does this
    only for small N, where cells show numbers; the trace before it was chunked peaked
    at 42 B per pair, 5.1 GB at N = 11000).
    backward = (block_k, T_r) when the trace has a backward pass: the 16 newest query
    blocks' recomputed P̃, dP, dS and dQ after each key tile, the 8 newest key tiles' dK,
    dV after each query block (compute.backward_numbers), the gradients and operands.
    history_blocks, key_tiles: how many of those histories are held (a one-shot export
    draws one of each; the window fills its caches to HISTORY_BLOCKS, HISTORY_KEY_TILES).
    forward_blocks: how many of the forward's are (default history_blocks; a backward
    alone keeps one: nothing plots its online-softmax state).
    """
    terms = {"inputs": 24 * (n_q * d + n_k * (d + d_v)), "pairs": 0, "rows": 0, "history": 0}
    if whole:
        terms["pairs"] = 56 * n_q * n_k
    if block_q is not None:
        rows = min(n_q, history_blocks * block_q)
        forward_rows = rows if forward_blocks is None else min(n_q, forward_blocks * block_q)
        t_c = n_k if t_c is None else t_c
        terms["pairs"] += 12 * 8 * min(n_q, block_q) * n_k
        terms["rows"] = 8 * n_q * (6 + 2 * d_v) + CHUNK_BYTES
        terms["history"] = 8 * forward_rows * ((t_c + 1) * (3 + d_v) + n_k)
        if backward is not None:
            block_k, t_r = backward
            keys = min(n_k, key_tiles * block_k)
            terms["history"] += 8 * rows * (3 * n_k + (t_c + 1) * d)
            terms["history"] += 8 * keys * (t_r + 1) * (d + d_v)
            terms["rows"] += 8 * 3 * (n_q * d + n_k * (d + d_v))  # two lanes' gradients
    return terms


def memory_estimate(*args: object, **kwargs: object) -> int:
    """Total bytes of `memory_terms` (same arguments)."""
    return sum(memory_terms(*args, **kwargs).values())


# What to lower when a term dominates the estimate.
LOWER_ADVICE = {
    "inputs": "lower N, N_keys, d or d_v",
    "pairs": "lower N or N_keys",
    "rows": "lower N or d_v",
    "history": "lower d_v or block_q, or raise block_k",
}


def check_memory_budget(
    n_q: int,
    n_k: int,
    d: int,
    d_v: int,
    t_c: int | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET_BYTES,
    block_q: int | None = None,
    *,
    whole: bool = False,
    backward: tuple[int, int] | None = None,
) -> None:
    """Refuse, before allocating, a configuration whose arrays exceed the memory budget."""
    terms = memory_terms(n_q, n_k, d, d_v, t_c, block_q, whole=whole, backward=backward)
    need = sum(terms.values())
    if need > memory_budget:
        biggest = max(terms, key=terms.get)
        raise InputError(
            f"N_q = {n_q:,}, N_k = {n_k:,}, d = {d:,}, d_v = {d_v:,} need about "
            f"{need / 2**20:,.0f} MiB, over the {memory_budget / 2**20:,.0f} MiB memory budget; "
            f"{LOWER_ADVICE[biggest]}."
        )


def check_dense_budget(
    n_q: int, n_k: int, memory_budget: int = DEFAULT_MEMORY_BUDGET_BYTES
) -> None:
    """Refuse sizes whose whole S and P (and temporaries) exceed the budget (d = d_v = 1)."""
    check_memory_budget(n_q, n_k, 1, 1, memory_budget=memory_budget, whole=True)


def seed_example() -> Inputs:
    """The reference example's fixed vectors: N = 6, d = d_v = 2."""
    data = json.loads(resources.files("compute.data").joinpath(REFERENCE_EXAMPLE).read_text())
    q, k, v = (np.array(data[name], dtype=np.float64) for name in ("q", "k", "v"))
    return Inputs(q, k, v, "seed example")


PARALLEL_DRAW = 1 << 16  # fewer normals than this are drawn on one core (no pool to start)


def _halves(n: int) -> tuple[slice, slice]:
    """The two fixed halves of n rows (each drawn from its own stream)."""
    return slice(0, (n + 1) // 2), slice((n + 1) // 2, n)


def random_inputs(
    n_q: int, d: int, d_v: int, *, n_k: int | None = None, seed: int = 0, scale: float = 1.0
) -> Inputs:
    """Standard-normal Q, K, V times `scale` (large scales give large scores)."""
    n_k = n_q if n_k is None else n_k
    for name, value in (("N", n_q), ("N_keys", n_k), ("d", d), ("d_v", d_v)):
        if value < 1:
            raise InputError(f"{name} must be at least 1, not {value}.")
    if not np.isfinite(scale) or scale <= 0:
        raise InputError(f"The input scale must be a positive number, not {scale}.")
    check_memory_budget(n_q, n_k, d, d_v)  # the inputs; desktop checks the trace's arrays
    q, k, v = np.empty((n_q, d)), np.empty((n_k, d)), np.empty((n_k, d_v))
    # Each half of each array from its own stream of the seed, drawn on both cores (the
    # normals come before anything else of a new input). The halves are fixed, so the
    # values depend on the seed alone, never on how many cores drew them.
    parts = [x[half] for x in (q, k, v) for half in _halves(len(x))]
    streams = np.random.SeedSequence(seed).spawn(len(parts))
    threads = CHUNK_THREADS if q.size + k.size + v.size >= PARALLEL_DRAW else 1

    def draw(job) -> None:
        stream, out = job
        np.random.default_rng(stream).standard_normal(out=out)

    for _ in ordered_map(draw, zip(streams, parts, strict=True), threads=threads):
        pass
    if scale != 1.0:
        q *= scale
        k *= scale
    return Inputs(q, k, v, f"random (seed {seed}, scale {scale:g})")


def _check_header(name: str, where: str, shape: tuple, dtype: np.dtype) -> None:
    """Refuse a declared shape or dtype before any data is read (headers can lie)."""
    if dtype.kind not in "biuf" or dtype.hasobject:
        raise InputError(
            f"{where} holds {dtype} values; provide real numbers (integer or floating point)."
        )
    count = math.prod(shape)
    if any(n < 0 for n in shape) or count > MAX_FILE_ELEMENTS:
        raise InputError(
            f"{where} declares shape {shape} ({count:,} elements), over the {MAX_FILE_ELEMENTS:,}"
            f" the memory budget allows; save smaller arrays in {name}."
        )


def _read_header(stream, name: str, where: str) -> tuple[tuple, bool, np.dtype]:
    """A .npy stream's declared (shape, fortran_order, dtype), checked before any data.

    The header's length is read and capped before the header itself: a version-2 header
    may claim 4 GiB, which numpy would read whole before any check.
    """
    magic = stream.read(8)
    if len(magic) != 8 or magic[:6] != b"\x93NUMPY" or magic[6] not in (1, 2, 3):
        raise InputError(
            f"{where} could not be read as a NumPy file (no .npy magic); save it with "
            "numpy.save or numpy.savez."
        )
    raw = stream.read(2 if magic[6] == 1 else 4)
    length = int.from_bytes(raw, "little")
    if length > MAX_HEADER_BYTES:
        raise InputError(
            f"{where} declares a {length:,}-byte header, over the {MAX_HEADER_BYTES:,} bytes a "
            "NumPy header needs; save it again with numpy.save or numpy.savez."
        )
    header = stream.read(length)
    if len(header) != length:
        raise InputError(
            f"{where} is shorter than its header says; save it again with numpy.save or numpy.savez."
        )
    buffer = io.BytesIO(magic + raw + header)
    version = np.lib.format.read_magic(buffer)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(buffer)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(buffer)
    else:
        shape, fortran, dtype = np.lib.format._read_array_header(buffer, version)
    _check_header(name, where, shape, dtype)
    return shape, fortran, dtype


def _npz_member_count(path: Path) -> int | None:
    """The member count an .npz's end record declares, read before its directory (None if
    the record cannot be found; zipfile then says what is wrong)."""
    try:
        with open(path, "rb") as f:
            record = zipfile._EndRecData(f)
    except (OSError, AttributeError, IndexError):
        return None
    return None if not record else int(record[zipfile._ECD_ENTRIES_TOTAL])


def _npz_members(path: Path, archive: zipfile.ZipFile) -> dict[str, str]:
    """Member name by array name (q, k, v in any case); ambiguity and oversize refused."""
    infos = archive.infolist()
    names = [i.filename for i in infos]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(
            f"{path.name} holds {repeated[0]} more than once; save it again with "
            "np.savez(path, q=Q, k=K, v=V)."
        )
    members: dict[str, str] = {}
    largest = MAX_HEADER_BYTES + 16 * MAX_FILE_ELEMENTS  # the widest dtype at the cap
    for info in infos:
        if not info.filename.lower().endswith(".npy"):
            continue
        key = info.filename[:-4].lower()
        if key in members and key in ("q", "k", "v"):
            raise InputError(
                f"{path.name} holds both {members[key]} and {info.filename}, so which is "
                f"{key.upper()} is ambiguous; keep one of them."
            )
        if key in ("q", "k", "v") and info.file_size > largest:
            raise InputError(
                f"{path.name}'s array {key} is {info.file_size:,} bytes, more than the memory "
                "budget allows; save smaller arrays."
            )
        members[key] = info.filename
    return members


def _read_data(stream, header: tuple[tuple, bool, np.dtype], where: str) -> np.ndarray:
    """The array body after its header: exactly the declared bytes, or one sentence."""
    shape, fortran, dtype = header
    want = math.prod(shape) * dtype.itemsize
    data = stream.read(want)
    if len(data) != want:
        raise InputError(
            f"{where} is shorter than its header says ({len(data):,} of {want:,} bytes); "
            "save it again with numpy."
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def _check_declared(name: str, q_shape: tuple, k_shape: tuple, v_shape: tuple) -> None:
    """The three declared shapes together fit the element cap and the memory budget."""
    total = sum(math.prod(s) for s in (q_shape, k_shape, v_shape))
    if total > MAX_FILE_ELEMENTS:
        raise InputError(
            f"{name} declares {total:,} elements in Q, K and V, over the {MAX_FILE_ELEMENTS:,} "
            "the memory budget allows; save smaller arrays."
        )
    if all(len(s) == 2 for s in (q_shape, k_shape, v_shape)):
        check_memory_budget(q_shape[0], k_shape[0], q_shape[1], v_shape[1])


def load_inputs(path: str | Path) -> Inputs:
    """Read Q, K, V from a .npz (arrays q, k, v in any case) or a .npy of shape (3, N, d).

    Only regular files are opened (a fifo would block forever), and every array's
    declared shape is checked against the memory budget before its data is read.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; choose an existing .npy or .npz file.") from None
    except OSError as exc:
        raise InputError(
            f"{path} cannot be opened ({exc.strerror}); choose another file."
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(
            f"{path} is not a regular file (a folder, fifo or device); choose a .npy or .npz file."
        )
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            count = _npz_member_count(path)
            if count is not None and count > MAX_NPZ_MEMBERS:
                raise InputError(
                    f"{path.name} holds {count:,} members, over the {MAX_NPZ_MEMBERS} an .npz "
                    "of Q, K and V needs; save only q, k and v with np.savez."
                )
            with zipfile.ZipFile(path) as archive:
                members = _npz_members(path, archive)
                missing = [n for n in ("q", "k", "v") if n not in members]
                if missing:
                    raise InputError(
                        f"{path.name} lacks array(s) {', '.join(missing)}; save it with "
                        "np.savez(path, q=Q, k=K, v=V)."
                    )
                # Headers first (a few hundred bytes each), data only once all three pass.
                headers = {}
                for n in ("q", "k", "v"):
                    with archive.open(members[n]) as member:
                        headers[n] = _read_header(member, path.name, f"{path.name}'s array {n}")
                _check_declared(path.name, *(headers[n][0] for n in ("q", "k", "v")))
                arrays = []
                for n in ("q", "k", "v"):
                    with archive.open(members[n]) as member:
                        _read_header(member, path.name, n)
                        arrays.append(_read_data(member, headers[n], f"{path.name}'s array {n}"))
                q, k, v = arrays
        elif suffix == ".npy":
            with open(path, "rb") as f:
                header = _read_header(f, path.name, path.name)
                shape = header[0]
                if len(shape) != 3 or shape[0] != 3:
                    raise InputError(
                        f"{path.name} has shape {shape}; "
                        "a .npy must stack Q, K, V as (3, N, d) — "
                        "use a .npz with arrays q, k, v for other shapes."
                    )
                _check_declared(path.name, shape[1:], shape[1:], shape[1:])
                q, k, v = _read_data(f, header, path.name)
        else:
            raise InputError(f"{path.name} is not a .npy or .npz file; choose one of those.")
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise InputError(
            f"{path.name} could not be read as a NumPy file ({exc.__class__.__name__}); "
            "save it with numpy.save or numpy.savez."
        ) from None
    q, k, v = validate_inputs(q, k, v)
    return Inputs(q, k, v, path.name)
