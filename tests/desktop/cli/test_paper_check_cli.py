"""`flash-explorer paper-check`: the table, the JSON, a bad flag."""

import json

import pytest

from compute import paper_check as pc
from desktop.cli.main import main


def test_table(capsys):
    assert main(["paper-check"]) == 0
    out = capsys.readouterr().out
    assert "40.3" in out and "35.3" in out and "key-padding mask" in out
    for row in pc.declared_rows():
        assert f"{row.total_bytes:,}" in out
    assert pc.flop_reading() in out and pc.sources() in out
    assert "41.7 / 7.3" in out and "35.1 / 11.7" in out


def test_json(capsys):
    assert main(["paper-check", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"]["algorithm1_tiles"] == [64, 384]
    assert [r["total_bytes"] for r in data["declared"]] == [
        r.total_bytes for r in pc.declared_rows()
    ]
    assert data["flops"]["workload_flops"] == 962_072_674_304


def test_bad_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["paper-check", "--nope"])
    assert exc.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_table_shows_the_bundled_measurement(capsys):
    from compute.gpu.report import bundled_report, split_reports

    report, measured = pc.measured_rows(split_reports(bundled_report()))
    assert report is not None and measured
    assert main(["paper-check"]) == 0
    out = capsys.readouterr().out
    assert "measured DRAM on NVIDIA H200 (ncu)" in out
    for m in measured:
        assert f"{m.gb:.3f}" in out
    assert pc.measured_reading(measured, "NVIDIA H200") in out
