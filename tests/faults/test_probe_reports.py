"""GPU reports from the second fault probe (issue 27 items 3 and 6): sweeps and files far
past any real report are refused before they are parsed or drawn, and a malformed report
is one sentence in the panel, never an exception out of the slot or a half-filled panel.

Every case writes a real file and opens it through the panel, offscreen.
"""

from __future__ import annotations

import copy
import json
import time

import pytest

from compute.gpu import DeviceStatus
from compute.gpu.report import bundled_report

NO_GPU = DeviceStatus(False, "No CUDA device was found.")


def _report() -> dict:
    """A real recorded report that has both a block sweep and kernel counts."""
    reports = bundled_report()["reports"]
    swept = next(r for r in reports if r.get("sweep"))
    counted = next(r for r in reports if any("counts_kernel" in x for x in r["results"]))
    return copy.deepcopy({**counted, "sweep": swept["sweep"]})


@pytest.fixture
def panel(qtbot):
    from desktop.panels.gpu.panel import GpuPanel

    p = GpuPanel(device=NO_GPU)
    qtbot.addWidget(p)
    p.set_reports([_report()])
    yield p
    p.shutdown()


def _shown(panel) -> tuple:
    return panel.selector.count(), panel.table.rowCount(), panel.recorded_label.text()


def _refused(panel, path, *words) -> None:
    before = _shown(panel)
    assert panel.load_report(path) is False
    text = panel.message.text()
    assert text.startswith(f"Could not open {path.name}: "), text
    assert text.count(". ") == 0 and all(w in text for w in words), text
    assert _shown(panel) == before  # the panel still shows what it showed, whole


# ---- 3. sweeps and files far past any real report ------------------------------------
def test_a_100x100_sweep_is_refused_before_it_is_drawn(panel, tmp_path):
    report = _report()
    sizes = list(range(1, 101))
    report["sweep"].update(block_q=sizes, block_k=sizes, ms=[[1.0] * 100 for _ in sizes])
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(report))
    start = time.monotonic()
    _refused(panel, path, "100 block sizes", "16")
    assert time.monotonic() - start < 2  # a guard: drawing it froze the window for 7 s


def test_a_file_far_larger_than_any_report_is_refused_from_its_size(panel, tmp_path):
    path = tmp_path / "big.json"
    with open(path, "w") as f:  # a valid report padded to 20 MiB: parsing would succeed
        f.write(json.dumps(_report())[:-1] + " " * (20 * 2**20) + "}")
    _refused(panel, path, "20.0 MiB", "16 MiB")


def test_opening_from_the_dialog_reads_off_the_gui_thread(panel, tmp_path, qtbot):
    import threading

    path = tmp_path / "good.json"
    path.write_text(json.dumps(_report()))
    seen = []
    panel.sigReportShown.connect(lambda: seen.append(threading.current_thread()))
    panel.set_reports([])
    panel.open_report(path)
    assert panel.message.text() == "Reading good.json…"  # returned before the file was read
    qtbot.waitUntil(lambda: panel.selector.count() == 1, timeout=10000)
    assert seen[-1] is threading.main_thread()  # shown on the GUI thread once read


# ---- 6. malformed reports --------------------------------------------------------------
def _set(path: str, value):
    def change(report: dict) -> dict:
        *parents, last = path.split(".")
        node = report
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value
        return report

    return change


def _counted(report: dict) -> dict:
    return next(r for r in report["results"] if "counts_kernel" in r)


MALFORMED = {
    "config {}": _set("config", {}),
    "config.n text": _set("config.n", "4096"),
    "device []": _set("device", []),
    "device null": _set("device", None),
    "device.name 5": _set("device.name", 5),
    "results abc": _set("results", "abc"),
    "results [1, 2]": _set("results", [1, 2]),
    "results null": _set("results", None),
    "result kernel null": _set("results.0.kernel", None),
    "result ms text": _set("results.0.ms", "fast"),
    "version '3'": _set("version", "3"),
    "sweep ms text": _set("sweep.ms", "abc"),
    "sweep ms ragged": lambda r: _set("sweep.ms", [[1.0]] * len(r["sweep"]["block_q"]))(r),
    "sweep block_q text": _set("sweep.block_q", ["32", "64", "128"]),
    "sweep best []": _set("sweep.best", []),
    "counts not tables": lambda r: {**r, "results": [{**_counted(r), "counts_kernel": {"Q": 5}}]},
    "counts other tensors": lambda r: {
        **r,
        "results": [{**_counted(r), "counts_ledger": {"Z": {"read": 1, "write": 0}}}],
    },
}


@pytest.mark.parametrize("change", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_report_is_one_sentence(panel, tmp_path, change):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(change(_report())))
    _refused(panel, path)


def test_a_figures_file_whose_reports_is_a_number(panel, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "flash-explorer-gpu-figures", "reports": 5}))
    _refused(panel, path, "reports")


def test_200000_nested_brackets_are_not_readable_json(panel, tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    _refused(panel, path, "not readable JSON")
