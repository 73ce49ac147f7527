"""The numbers the next playback frame's SRAM tiles show, made on a second thread.

A frame that reaches a new query block used to make that block's numbers on the GUI
thread as it painted (a forward block's history of every key tile, 25-45 ms at N = 4096
with 2 × 2 tiles; a backward block; the dense lane's P, dP and dS regions of every step).
While one frame paints, this makes the next frame's (and, in a Q-outer forward, the next
query block's history) on one background thread, into the same memo entries the views
read (compute.forward_numbers.made_ahead: a view asking for one still being made waits
for it rather than making it twice). Only memoised values are made here, never a view's
running-sum entries or cursors (those are not thread-safe), and nothing while the worker
builds a change (the two would share the cores with the GUI). A failure here is dropped:
the view makes the same number when it paints and reports what goes wrong.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from compute import Trace
from compute.forward_numbers import made_ahead
from desktop.scene.backward import is_backward
from desktop.scene.grouping import grouping_for
from desktop.state.app_state import AppState


def step_numbers(trace: Trace, step: int) -> None:
    """Make (into the trace's memos) what the SRAM tiles of both lanes read at `step`,
    as desktop.scene.geometry and desktop.scene.backward ask for it."""
    if not 0 <= step < trace.n_steps:
        return
    _dense(trace, trace.action("dense", step))
    _tiled(trace, trace.action("tiled", step))


def _dense(trace: Trace, action) -> None:
    if action is None:
        return
    backward = is_backward(action)
    # A backward's P and dS of every row wait for the second tier (they are not made then)
    every_row = not backward or trace.forward.summary_cached()
    for r in action.resident:
        args = (*r.rows, *r.cols)
        if r.tensor == "S" and not backward:
            trace.scores_region(*args)
        elif r.tensor == "P" and every_row:
            trace.probs_region(*args)
        elif r.tensor == "dP" or (r.tensor == "dS" and every_row):
            trace.grad_region(r.tensor, *args)


def _tiled(trace: Trace, action) -> None:
    if action is None:
        return
    s = trace.schedule
    held = {r.tensor: r for r in action.resident}
    if "S" in held:
        trace.scores_region(*held["S"].rows, *held["S"].cols)
    i, j = action.block_i, action.block_j
    if is_backward(action):
        if i is not None and ("dQ" in held or "S" in held):
            trace.backward_block(i)
        if j is not None and "dK" in held and trace.key_tile_ready(j):
            trace.key_tile(j)
        return
    if i is not None and s.order == "q-outer":
        trace.block_history(i)
        if i + 1 < s.t_r:  # the block after it: a whole history, made well ahead
            trace.block_history(i + 1)


class NextFrame:
    """On each step, makes the numbers of the step one playback frame later (see the
    module) on its own thread, one job at a time: a job still running when the next
    step comes is left to finish, and that step makes none."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="next-frame")
        self._job: Future | None = None
        state.sigStepChanged.connect(self._on_step)

    def _on_step(self, step: int) -> None:
        trace = self.state.trace
        if trace is None or self.state.builder.busy:
            return
        if self._job is not None and not self._job.done():
            return
        self._job = self._pool.submit(_make, trace, step + grouping_for(trace).stride)

    def wait(self) -> None:
        """Until the job in progress (if any) is done (tests)."""
        if self._job is not None:
            self._job.exception()


def _make(trace: Trace, step: int) -> None:
    with made_ahead():
        step_numbers(trace, step)
