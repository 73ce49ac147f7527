"""--mask, --window and --packed: through every command's flags into the Config, its saved
settings and the ledger; bad values are one sentence and a non-zero exit."""

import argparse
import json

import pytest

from compute import closed_form_ledger
from compute.mask import Mask
from desktop.cli.args import add_config_arguments, config_from_args
from desktop.cli.main import main
from desktop.state.config import Config


def _config(*flags: str) -> Config:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    return config_from_args(parser.parse_args(list(flags))).validated()


@pytest.mark.parametrize(
    "flags, mask",
    [
        ((), Mask()),
        (("--causal",), Mask.causal_mask()),
        (("--mask", "causal"), Mask.causal_mask()),
        (("--mask", "causal-top-left", "--n-keys", "9"), Mask.causal_mask(top_left=True)),
        (("--window", "2,-1"), Mask(2, -1)),
        (("--mask", "causal", "--window", "3,4"), Mask(3, 0)),
        (("--packed", "1,2,3", "--mask", "causal"), Mask(-1, 0, False, (1, 2, 3))),
    ],
)
def test_flags_reach_the_config_and_survive_saved_settings(flags, mask):
    config = _config("--n", "6", *flags)
    assert config.mask == mask
    assert config.problem.attention_mask == mask
    again = Config.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.mask == mask


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--packed", "5,7"], "sum to 12 but N is 30"),
        (["--packed", "15,15", "--n-keys", "20"], "as many keys as queries"),
        (["--window", "3"], "LEFT,RIGHT"),
        (["--window", "1,x"], "separated by commas"),
        (["--window", "-2,0"], "at least -1"),
        (["--packed", "3,0,27"], "at least 1"),
        (["--mask", "none", "--causal"], "contradict"),
    ],
)
def test_bad_mask_flags_are_one_sentence(flags, message, capsys):
    try:
        status = main(["ledger", "--n", "30", *flags])
    except SystemExit as exc:  # argparse refuses a flag's value itself
        status = exc.code
    assert status != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_ledger_json_carries_the_mask(capsys):
    assert main(["ledger", "--n", "30", "--packed", "5,7,18", "--mask", "causal", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    mask = Mask(-1, 0, False, (5, 7, 18))
    want = closed_form_ledger(30, 30, 2, 2, block_q=2, block_k=2, causal=mask).to_dict()
    assert got["config"]["mask"] == mask.to_dict()
    assert got["lanes"]["tiled"] == want["lanes"]["tiled"]


def test_a_bad_saved_window_falls_back_with_a_warning():
    warned = []
    config = Config.from_dict({**Config().to_dict(), "window": "x"}, warn=warned.append)
    assert config == Config() and warned
