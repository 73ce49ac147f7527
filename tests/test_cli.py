"""The headless command line: `flash-explorer ledger` as text and JSON, and its errors."""

import json
import subprocess
import sys

import pytest

from compute import ledger
from desktop.cli import main


def test_ledger_table_shows_the_seed_totals(capsys):
    assert main(["ledger"]) == 0
    out = capsys.readouterr().out
    assert "240" in out and "96" in out and "2.50x" in out


def test_ledger_json_is_the_core_ledger(capsys):
    args = ["--n", "37", "--n-keys", "20", "--d", "8", "--dv", "4", "--block-q", "5"]
    args += [
        "--block-k",
        "6",
        "--order",
        "kv-outer",
        "--causal",
        "--save-lse",
        "--dtype",
        "float16",
    ]
    assert main(["ledger", *args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    expected = ledger(
        37,
        20,
        8,
        4,
        block_q=5,
        block_k=6,
        order="kv-outer",
        causal=True,
        save_lse=True,
        dtype="float16",
    ).to_dict()
    assert got == expected
    assert set(got["lanes"]["tiled"]) >= {"total_elements", "total_bytes", "by_tensor"}


@pytest.mark.parametrize(
    "args",
    [["--n", "0"], ["--block-k", "x"], ["--dtype", "int8"], ["--order", "sideways"], ["--bogus"]],
)
def test_bad_arguments_give_one_line_and_nonzero_exit(args):
    proc = subprocess.run(
        [sys.executable, "-m", "desktop.cli", "ledger", *args], capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_lists_subcommands(capsys):
    assert main(["--help"]) == 0
    assert "ledger" in capsys.readouterr().out
