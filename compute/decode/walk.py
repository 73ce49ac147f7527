"""The decode schedules declared as actions: what each step reads and writes in HBM.

As compute.schedule does for the forward, each schedule is a walk of actions holding
compute.schedule's Regions and Transfers; the ledger (compute.decode.ledger) counts
them and the tests hold the count to the closed form. Tensors are laid out flat, so a
Region is rows × columns:
- Q (H_q · N_q, d) and O (H_q · N_q, d_v): query head h, new token r at row h · N_q + r,
  so the G heads of K/V head g are the rows [g · G · N_q, (g + 1) · G · N_q).
- K (H_kv · N_k, d) and V (H_kv · N_k, d_v): head g, key c at row g · N_k + c.
- S and P (H_q · N_q, N_k): the dense schedule's materialised scores and probabilities.
- O_s (S' · H_q · N_q, d_v) and L_s (S' · H_q · N_q, 1): split s's partial output and
  log-sum-exp, rows s · H_q · N_q + (the row of Q).
Schedules (one block per K/V head, its group's G · N_q rows resident):
- dense: load Q_g; per tile, load K_j and write S_gj; read S_g, write P_g; per tile,
  read P_gj and V_j; write O_g.
- one-pass: load Q_g; per tile, load K_j and V_j, update m, ℓ, a on chip; write O_g.
- split-kv: per split s, load Q_g, stream the split's tiles as one-pass does, write
  O_s and L_s; then the combine reads the group's S' partials and writes O_g.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..schedule import Region, Transfer
from .problem import SCHEDULES, DecodeProblem

TENSORS: tuple[str, ...] = ("Q", "K", "V", "S", "P", "O", "O_s", "L_s")


@dataclass(frozen=True)
class DecodeAction:
    """One step of a decode schedule: K/V head `group`, split and tile (None: not one)."""

    schedule: str
    phase: str
    label: str
    group: int
    split: int | None
    tile: int | None
    transfers: tuple[Transfer, ...]


def _move(direction: str, tensor: str, rows: tuple[int, int], cols: tuple[int, int]) -> Transfer:
    return Transfer(Region(tensor, rows, cols), direction)


class _Layout:
    """The rows and columns of each tensor region a decode action touches."""

    def __init__(self, p: DecodeProblem) -> None:
        self.p = p

    def q_rows(self, g: int) -> tuple[int, int]:
        r = self.p.block_rows
        return g * r, (g + 1) * r

    def kv_rows(self, g: int, tile: int) -> tuple[int, int]:
        c0, c1 = self.p.tile_cols(tile)
        return g * self.p.n_k + c0, g * self.p.n_k + c1

    def part_rows(self, g: int, split: int) -> tuple[int, int]:
        r0, r1 = self.q_rows(g)
        base = split * self.p.h_q * self.p.n_q
        return base + r0, base + r1

    def load_q(self, g: int) -> Transfer:
        return _move("read", "Q", self.q_rows(g), (0, self.p.d))

    def load_k(self, g: int, j: int) -> Transfer:
        return _move("read", "K", self.kv_rows(g, j), (0, self.p.d))

    def load_v(self, g: int, j: int) -> Transfer:
        return _move("read", "V", self.kv_rows(g, j), (0, self.p.d_v))

    def write_o(self, g: int) -> Transfer:
        return _move("write", "O", self.q_rows(g), (0, self.p.d_v))

    def partial(self, direction: str, g: int, s: int) -> tuple[Transfer, Transfer]:
        rows = self.part_rows(g, s)
        return _move(direction, "O_s", rows, (0, self.p.d_v)), _move(direction, "L_s", rows, (0, 1))


def _actions(schedule: str):
    """An action maker for `schedule`: (phase, label, group, split, tile, *transfers)."""

    def act(phase, label, g, split, tile, *transfers: Transfer) -> DecodeAction:
        return DecodeAction(schedule, phase, label, g, split, tile, transfers)

    return act


def dense_walk(p: DecodeProblem) -> Iterator[DecodeAction]:
    """The dense schedule: S and P materialised in HBM."""
    at, act = _Layout(p), _actions("dense")
    for g in range(p.h_kv):
        rows, all_keys = at.q_rows(g), (0, p.n_k)
        yield act("load_q", f"load Q of K/V head {g}", g, None, None, at.load_q(g))
        for j in range(p.t_c):
            s_tile = _move("write", "S", rows, p.tile_cols(j))
            yield act(
                "write_s", f"load K tile {j}, write S tile", g, None, j, at.load_k(g, j), s_tile
            )
        softmax = (_move("read", "S", rows, all_keys), _move("write", "P", rows, all_keys))
        yield act("softmax", f"softmax of head {g}'s S rows into P", g, None, None, *softmax)
        for j in range(p.t_c):
            p_tile = _move("read", "P", rows, p.tile_cols(j))
            yield act(
                "accumulate", f"read P tile and V tile {j}", g, None, j, p_tile, at.load_v(g, j)
            )
        yield act("write_o", f"write O of K/V head {g}", g, None, None, at.write_o(g))


def _stream(at: _Layout, act, g: int, split: int | None, t0: int, t1: int):
    for j in range(t0, t1):
        yield act(
            "load_kv",
            f"load K, V tile {j} of head {g}",
            g,
            split,
            j,
            at.load_k(g, j),
            at.load_v(g, j),
        )
        yield act("update", f"scores, rescale by α, accumulate: tile {j}", g, split, j)


def one_pass_walk(p: DecodeProblem) -> Iterator[DecodeAction]:
    """One-pass FlashAttention: one block per K/V head streams the whole cache."""
    at, act = _Layout(p), _actions("one-pass")
    for g in range(p.h_kv):
        yield act("load_q", f"load Q of K/V head {g}", g, None, None, at.load_q(g))
        yield from _stream(at, act, g, None, 0, p.t_c)
        yield act("write_o", f"write O of K/V head {g}", g, None, None, at.write_o(g))


def split_kv_walk(p: DecodeProblem) -> Iterator[DecodeAction]:
    """Split-KV: S' blocks per K/V head write partials; the combine merges them."""
    at, act = _Layout(p), _actions("split-kv")
    for g in range(p.h_kv):
        for s in range(p.splits_used):
            yield act("load_q", f"split {s}: load Q of K/V head {g}", g, s, None, at.load_q(g))
            yield from _stream(at, act, g, s, *p.split_tiles(s))
            yield act(
                "write_partial",
                f"split {s}: write O_s and L_s",
                g,
                s,
                None,
                *at.partial("write", g, s),
            )
    for g in range(p.h_kv):
        reads = (x for s in range(p.splits_used) for x in at.partial("read", g, s))
        yield act("read_partials", f"combine: read head {g}'s partials", g, None, None, *reads)
        yield act("write_o", f"combine: write O of K/V head {g}", g, None, None, at.write_o(g))


def decode_walk(p: DecodeProblem, schedule: str) -> Iterator[DecodeAction]:
    """The actions of one decode schedule."""
    walks = {"dense": dense_walk, "one-pass": one_pass_walk, "split-kv": split_kv_walk}
    if schedule not in walks:
        raise ValueError(
            f"The decode schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}."
        )
    return walks[schedule](p)
