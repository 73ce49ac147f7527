"""Exports of the backward pass and a training step: frames from the window's views,
ledgers with the gradient tensors."""

from __future__ import annotations

import csv
import json

from PIL import Image

from compute import PASS_TENSORS, pass_ledger
from desktop.cli.export import main as export_main
from desktop.cli.export import main_ledger


def test_backward_gif_has_a_frame_per_step_and_hold(tmp_path, capsys):
    out = tmp_path / "b.gif"
    assert export_main(["--out", str(out), "--pass", "backward", "--hold", "2", "--fps", "6"]) == 0
    with Image.open(out) as im:
        assert im.n_frames == 2 * 37  # the backward of the reference example has 37 steps
    assert "steps 1-37" in capsys.readouterr().out


def test_training_still_and_lane_export(tmp_path, capsys):
    for lane in ("tiled", "stats", "ledger"):
        out = tmp_path / f"{lane}.png"
        assert export_main(["--out", str(out), "--pass", "training", "--lane", lane]) == 0
        with Image.open(out) as im:
            assert im.width > 100 and im.height > 100


def test_export_ledger_of_a_pass_lists_the_gradients(tmp_path):
    for pass_name, dense, tiled in (("backward", 444, 270), ("training", 684, 372)):
        path = tmp_path / f"{pass_name}.csv"
        assert main_ledger(["--pass", pass_name, "--out", str(path)]) == 0
        rows = list(csv.DictReader(path.open()))
        totals = {r["lane"]: int(r["elements"]) for r in rows if r["tensor"] == "total"}
        assert totals == {"dense": dense, "tiled": tiled}
        assert {r["tensor"] for r in rows} == set(PASS_TENSORS) | {"total"}
        expected = pass_ledger(pass_name, 6, 6, 2, 2, block_q=2, block_k=2)
        for r in rows:
            if r["tensor"] != "total":
                lane = expected.lanes[r["lane"]]
                assert int(r["elements"]) == lane.counts[r["tensor"]][r["direction"]]
        path = tmp_path / f"{pass_name}.json"
        assert main_ledger(["--pass", pass_name, "--out", str(path)]) == 0
        assert json.loads(path.read_text())["config"]["pass"] == pass_name
