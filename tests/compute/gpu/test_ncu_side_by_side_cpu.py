"""The Nsight Compute side-by-side reader (compute/gpu/lab/ncu_side_by_side.py) on made-up
exports, without a GPU."""

import csv
import io

import pytest

from compute.gpu.lab import ncu_side_by_side as ns


def _csv(rows) -> str:
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL).writerows(rows)
    return buf.getvalue()


def _raw(tmp_path, name, metrics: dict, kernels=("k",)):
    """A raw page: ID and name columns, then `metrics` (value, unit) for each kernel."""
    names = ["ID", "Kernel Name", *metrics]
    units = ["", "", *(u for _, u in metrics.values())]
    rows = [names, units]
    for i, k in enumerate(kernels):
        vals = [v[i] if isinstance(v, list) else v for v, _ in metrics.values()]
        rows.append([str(i), k, *vals])
    p = tmp_path / name
    p.write_text("==PROF== a warning line first\n" + _csv(rows))
    return p


def test_numbers_and_units():
    assert ns.number("1,702,639.43") == pytest.approx(1702639.43)
    assert ns.number("n/a") is None
    assert ns.scaled(1.5, "ms") == pytest.approx(1.5e-3)
    assert ns.scaled(2.0, "Mbyte") == pytest.approx(2e6)
    assert ns.scaled(167.0, "Kbyte/block") == pytest.approx(167e3)
    assert ns.scaled(1.8, "Ghz") == pytest.approx(1.8e9)
    assert ns.scaled(7.0, "inst") == 7.0


def test_main_counters_per_block(tmp_path):
    p = _raw(tmp_path, "t.raw.csv", {
        "gpu__time_duration.sum": ("5,000,000", "ns"),
        "sm__cycles_elapsed.avg": ("1000", "cycle"),
        "device__attribute_multiprocessor_count": ("132", ""),
        "smsp__inst_executed.sum": ("2000", "inst"),
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": ("400", ""),
        "launch__occupancy_limit_registers": ("1", "block"),
        "launch__occupancy_limit_shared_mem": ("2", "block"),
        "launch__shared_mem_per_block": ("167", "Kbyte/block"),
        "smsp__pcsamp_warps_issue_stalled_wait": ("30", "warp"),
        "smsp__pcsamp_warps_issue_stalled_wait_not_issued": ("29", "warp"),
        "smsp__pcsamp_warps_issue_stalled_barrier": ("70", "warp"),
    })  # fmt: skip
    (rec,) = ns.read_raw(p)
    c = ns.main_counters(rec, n_blocks=100.0)
    assert c["time_ms"] == pytest.approx(5.0)
    assert c["cycles_per_block_sm"] == pytest.approx(1000 * 132 / 100)
    assert c["inst_per_block"] == pytest.approx(20.0)
    assert c["smem_wf_per_block"] == pytest.approx(4.0)
    assert c["ctas_per_sm"] == 1
    assert c["smem_kb"] == pytest.approx(167.0)
    assert c["stall_wait"] == pytest.approx(30.0)  # not-issued counts left out of the total
    assert c["stall_barrier"] == pytest.approx(70.0)
    assert "duration (ms) | 5.000" in ns.table({"ours": c})


def test_sass_summary_by_opcode():
    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
            "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal", "stall_wait", "stall_barrier"]  # fmt: skip
    rows = [["Kernel Name", "k"], head,
            ["0x0", "  @P0 HGMMA.64x64x16.F32.BF16 R1, gdesc[UR4], R1", "10", "200", "800", "800", "10", "0"],
            ["0x10", "  MUFU.EX2 R2, R2", "30", "100", "0", "0", "30", "0"],
            ["0x20", "  LDS.64 R4, [R5]", "60", "100", "300", "200", "0", "60"]]  # fmt: skip
    lines = list(csv.reader(io.StringIO(_csv(rows))))
    parsed = [dict(zip(head, r, strict=False)) for r in lines[2:]]
    s = ns.sass_summary(parsed, n_blocks=100.0, top=2)
    assert s["inst"] == {"HGMMA": 2.0, "MUFU": 1.0, "LDS": 1.0}
    assert s["wavefronts"] == {"HGMMA": 8.0, "LDS": 3.0}
    assert s["excess"] == {"LDS": 1.0}
    assert s["top"][0][0] == pytest.approx(60.0) and s["top"][0][2] == "stall_barrier"
    assert ns.opcode("@!P1 BRA 0x10") == "BRA"


def test_last_backward_takes_one_period(tmp_path):
    names = ["init", "pre", "flash_bwd_ws<1,64>", "post", "pre", "flash_bwd_ws<1,64>", "post",
             "pre", "flash_bwd_ws<1,64>", "post"]  # fmt: skip
    times = [str(t) for t in (9, 1, 10, 2, 1, 11, 2, 1, 12, 2)]
    p = _raw(tmp_path, "t.all.csv", {"gpu__time_duration.sum": (times, "ms")}, kernels=names)
    got = ns.last_backward(ns.read_raw(p))
    assert [n for n, _ in got] == ["pre", "flash_bwd_ws<1,64>", "post"]
    assert [ms for _, ms in got] == pytest.approx([1.0, 12.0, 2.0])


def test_case_of_tag():
    assert ns.case_of("fa4_d128_n8192_c0") == (128, 8192, False)
    assert ns.bh_of(64, 8192) == 64
    assert ns.blocks(64, 8192, False) == 524288
    with pytest.raises(ValueError):
        ns.case_of("nonsense")
