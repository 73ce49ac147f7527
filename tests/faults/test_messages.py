"""Bad input gets one sentence on stderr and a non-zero exit: every numeric flag is
range-checked with the allowed range named, never a traceback or library noise."""

from __future__ import annotations

import re

import pytest

from desktop.cli.main import main

RANGE = r"outside the allowed range|must be at least 1"

CASES = {
    "export-ledger --scale 1000": (
        ["export-ledger", "--out", "l.png", "--scale", "1000"],
        "0.25 to 8",
    ),
    "export-ledger --scale 0.0001": (
        ["export-ledger", "--out", "l.png", "--scale", "1e-4"],
        "0.25 to 8",
    ),
    "export --fps 1e-9 (mp4)": (["export", "--out", "a.mp4", "--fps", "1e-9"], "0.1 to 100"),
    "export --fps 1e-9 (gif)": (["export", "--out", "a.gif", "--fps", "1e-9"], "0.1 to 100"),
    "export --fps nan": (["export", "--out", "a.gif", "--fps", "nan"], "not a number"),
    "export --hold 0": (["export", "--out", "a.gif", "--hold", "0"], "1 to 120"),
    "export --scale 9": (["export", "--out", "a.png", "--scale", "9"], "0.25 to 8"),
    "export --d 100000000": (["export", "--out", "a.png", "--d", "100000000"], "1 to 65,536"),
    "export --dv 0": (["export", "--out", "a.png", "--dv", "0"], "1 to 65,536"),
    "export --n 0": (["export", "--out", "a.png", "--n", "0"], "1 to 1,000,000,000,000"),
    "export --n 3000000 --d 64": (
        ["export", "--out", "a.png", "--n", "3000000", "--d", "64", "--block-k", "100000"],
        "memory budget; lower N or d_v",  # the per-row arrays are its largest part
    ),
    "export --n 400 --d 60000": (
        ["export", "--out", "a.png", "--n", "400", "--d", "60000"],
        "lower N, N_keys, d or d_v",  # one frame: its 1.6 GiB of inputs are the largest part
    ),
    "export --seed -1": (["export", "--out", "a.png", "--input", "random", "--seed", "-1"], "0 to"),
    "export --input-scale 1e200": (
        ["export", "--out", "a.png", "--input-scale", "1e200"],
        "1e-06 to 1e+06",
    ),
    "export --sram -5": (["export", "--out", "a.png", "--sram", "-5"], "1 to"),
    "export --row 999": (["export", "--out", "a.png", "--row", "999"], "from 0 to 5"),
    "export --size 9x9": (["export", "--out", "a.gif", "--size", "9x9"], "between 16 and 8192"),
    "ledger --block-q 0": (["ledger", "--block-q", "0"], "1 to"),
    "bench --n 0": (["bench", "--n", "0"], "at least 1"),
    "screenshot shot.bmp": (["--screenshot", "shot.bmp"], "use .png"),
    "screenshot --step 0": (["--screenshot", "s.png", "--step", "0"], "from 1 to 27"),
    "screenshot --step -5": (["--screenshot", "s.png", "--step", "-5"], "from 1 to 27"),
    "screenshot --step 9999": (["--screenshot", "s.png", "--step", "9999"], "from 1 to 27"),
    "screenshot --row 999": (["--screenshot", "s.png", "--row", "999"], "from 0 to 5"),
    "screenshot /proc/x.png": (["--screenshot", "/proc/x.png"], "/proc cannot be written to"),
    "export /proc/x.png": (["export", "--out", "/proc/x.png"], "/proc cannot be written to"),
    "screenshot under a file": (["--screenshot", "ok.png/s.png"], "is a file, not a folder"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_sentence(case, tmp_path, monkeypatch, capsys):
    argv, expected = CASES[case]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.png").write_bytes(b"png")
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's one-line exit
        status = exc.code
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert status not in (0, None)
    assert len(lines) == 1, out.err
    assert expected in lines[0] and "Traceback" not in out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.png"]  # nothing written


def test_wide_ledger_numbers_never_run_together(capsys):
    """At N = 10^6 the counts have 13+ digits; every column stays separated."""
    assert main(["ledger", "--n", "1000000", "--block-q", "100000", "--block-k", "100000"]) == 0
    table = capsys.readouterr().out.splitlines()
    s_row = next(ln for ln in table if ln.startswith("S "))
    cells = s_row.split()
    assert cells == ["S", "1,000,000,000,000", "1,000,000,000,000", "0", "0"]
    assert all(re.fullmatch(r"[\d,]+", c) for c in cells[1:])
    assert "  1,000,000,000,000  " in s_row
