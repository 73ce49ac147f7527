"""`flash-explorer decode`: the decode step's bytes and roofline, as text and JSON, and its
refusals (one sentence, non-zero exit)."""

import json

import pytest

from compute.decode import DecodeProblem, decode_ledger, decode_summary, filling_splits
from desktop.cli.main import main


def test_json_is_the_counted_ledger_of_an_odd_problem(capsys):
    # N_k odd, splits not dividing the 13 tiles, GQA group 4: the CLI's closed-form ledgers
    # equal the ledgers counted from the walk.
    args = ["--n-q", "3", "--n-k", "797", "--d", "40", "--d-v", "24", "--h-q", "8"]
    args += ["--h-kv", "2", "--block-k", "64", "--splits", "5", "--dtype", "float16"]
    assert main(["decode", *args, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    p = DecodeProblem(3, 797, 40, 24, 8, 2, block_k=64, splits=5, dtype="float16")
    assert got == json.loads(json.dumps(decode_summary(p)))
    for name, row in got["schedules"].items():
        assert row["total_bytes"] == decode_ledger(p, name).total_bytes


def test_default_splits_fill_the_machine(capsys):
    assert main(["decode", "--n-k", "65536", "--h-q", "32", "--h-kv", "8", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["config"]["splits"] == filling_splits(8, 1024) == 33
    assert got["schedules"]["split-kv"]["blocks"] == 264 >= 2 * 132


def test_table_names_every_schedule_and_the_bound(capsys):
    assert main(["decode", "--n-k", "8192", "--h-q", "8", "--h-kv", "1"]) == 0
    out = capsys.readouterr().out
    assert all(s in out for s in ("dense", "one-pass", "split-kv", "memory", "per token"))
    one_pass = DecodeProblem(1, 8192, 128, 128, 8, 1, splits=128, dtype="bfloat16")
    assert f"{decode_ledger(one_pass, 'one-pass').total_bytes:,}" in out


@pytest.mark.parametrize(
    ("args", "words", "status"),
    [
        (["--h-q", "30", "--h-kv", "8"], "cannot share 8 K/V heads evenly", 1),
        (["--n-q", "4", "--n-k", "2"], "make the cache length at least", 1),
        (["--n-q", "17"], "outside the allowed range 1 to 16", 2),
        (["--splits", "0"], "outside the allowed range", 2),
        (["--dtype", "int8"], "invalid choice", 2),
    ],
)
def test_bad_input_is_one_sentence(capsys, args, words, status):
    if status == 2:  # argparse's refusals exit with 2
        with pytest.raises(SystemExit) as exited:
            main(["decode", *args])
        assert exited.value.code == 2
    else:
        assert main(["decode", *args]) == status
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
