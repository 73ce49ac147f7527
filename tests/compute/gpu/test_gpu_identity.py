"""The GPU identity a peer comparison records (compute/gpu/gpu_identity.py), without a GPU."""

import subprocess

from compute.gpu.gpu_identity import FIELDS, identity


def test_fields_are_named_in_the_order_asked():
    values = [f"v{i}" for i in range(len(FIELDS))]
    asked = []

    def run(args):
        asked.append(args)
        return ", ".join(values) + "\n"

    got = identity(1, run)
    assert list(got) == list(FIELDS) and list(got.values()) == values
    assert asked[0][0] == "--id=1" and asked[0][1] == "--query-gpu=" + ",".join(FIELDS)


def test_failures_give_one_sentence_not_an_exception():
    def missing(args):
        raise FileNotFoundError("nvidia-smi")

    def fails(args):
        raise subprocess.CalledProcessError(9, "nvidia-smi")

    assert "not on PATH" in identity(run=missing)["error"]
    assert "CalledProcessError" in identity(run=fails)["error"]
    assert "2 fields" in identity(run=lambda args: "a, b\n")["error"]
    assert "0 fields" in identity(run=lambda args: "")["error"]
