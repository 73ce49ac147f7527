"""Inputs for both lanes: the reference example, seeded random data, and user .npy/.npz files.

Everything a user can get wrong is checked here and reported as one `InputError`
sentence that says what is wrong and what to do.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

# The reference example's vectors ship inside the package, so a wheel install finds them.
REFERENCE_EXAMPLE = "reference_example.json"

# The dense lane materialises S and P (float64) in memory; refuse sizes beyond this.
DEFAULT_MEMORY_BUDGET_BYTES = 2 * 1024**3


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
        a = a.astype(np.float64)
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
    check_dense_budget(q.shape[0], k.shape[0], memory_budget)
    return q, k, v


def check_dense_budget(
    n_q: int, n_k: int, memory_budget: int = DEFAULT_MEMORY_BUDGET_BYTES
) -> None:
    """Refuse sizes whose dense lane (S and P in float64) would exceed the memory budget."""
    need = 2 * 8 * n_q * n_k
    if need > memory_budget:
        raise InputError(
            f"N_q × N_k = {n_q} × {n_k} needs {need / 2**20:,.0f} MiB for the dense lane's S and P, "
            f"over the {memory_budget / 2**20:,.0f} MiB budget; choose fewer positions."
        )


def seed_example() -> Inputs:
    """The reference example's fixed vectors: N = 6, d = d_v = 2."""
    data = json.loads(resources.files("compute.data").joinpath(REFERENCE_EXAMPLE).read_text())
    q, k, v = (np.array(data[name], dtype=np.float64) for name in ("q", "k", "v"))
    return Inputs(q, k, v, "seed example")


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
    check_dense_budget(n_q, n_k)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n_q, d)) * scale
    k = rng.standard_normal((n_k, d)) * scale
    v = rng.standard_normal((n_k, d_v))
    return Inputs(q, k, v, f"random (seed {seed}, scale {scale:g})")


def load_inputs(path: str | Path) -> Inputs:
    """Read Q, K, V from a .npz (arrays q, k, v in any case) or a .npy of shape (3, N, d)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; choose an existing .npy or .npz file.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                names = {name.lower(): name for name in data.files}
                missing = [n for n in ("q", "k", "v") if n not in names]
                if missing:
                    raise InputError(
                        f"{path.name} lacks array(s) {', '.join(missing)}; save it with "
                        "np.savez(path, q=Q, k=K, v=V)."
                    )
                q, k, v = (np.array(data[names[n]]) for n in ("q", "k", "v"))
        elif suffix == ".npy":
            stacked = np.load(path, allow_pickle=False)
            if stacked.ndim != 3 or stacked.shape[0] != 3:
                raise InputError(
                    f"{path.name} has shape {stacked.shape}; "
                    "a .npy must stack Q, K, V as (3, N, d) — "
                    "use a .npz with arrays q, k, v for other shapes."
                )
            q, k, v = stacked
        else:
            raise InputError(f"{path.name} is not a .npy or .npz file; choose one of those.")
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(
            f"{path.name} could not be read as a NumPy file ({exc.__class__.__name__}); "
            "save it with numpy.save or numpy.savez."
        ) from None
    q, k, v = validate_inputs(q, k, v)
    return Inputs(q, k, v, path.name)
