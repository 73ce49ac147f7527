"""compute.gpu.dram without a GPU: ncu's CSV, the markers, the sums, the declared ledger,
the reading, the report's version 4 and the --dram command line (with a stand-in ncu)."""

import json
import os
import stat
import sys
import textwrap

import pytest

from compute import closed_form_ledger, pass_ledger
from compute.gpu import bench_cli, dram
from compute.gpu.bench import BenchConfig
from compute.gpu.report import (
    VERSION,
    ReportError,
    bundled_report,
    dram_reading,
    format_report,
    split_reports,
)

HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"'
)


def _rows(kid: int, name: str, read: str, write: str, hit: str, ns: str, units=None) -> list:
    units = units or ("byte", "byte", "%", "nsecond")
    metrics = zip(dram.METRICS, units, (read, write, hit, ns), strict=True)
    return [
        f'"{kid}","1","python3","h","{name}","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0",'
        f'"Command line profiler metrics","{m}","{u}","{v}"'
        for m, u, v in metrics
    ]


def _csv(*kernels) -> str:
    lines = ["==PROF== Connected to process 1", "program output", HEADER]
    for k in kernels:
        lines += _rows(*k)
    return "\n".join(lines) + "\n"


def test_parse_ncu_csv_units_and_separators():
    text = _csv(
        (0, dram.MARKER, "0", "0", "0", "1,024"),
        (1, "void tiled_fwd<64>(float*)", "1,500,000", "2.5", "87.5", "2.0",
         ("byte", "Mbyte", "%", "usecond")),
    )  # fmt: skip
    k = dram.parse_ncu_csv(text)
    assert [x.name for x in k] == [dram.MARKER, "void tiled_fwd<64>(float*)"]
    assert k[0].duration_ns == 1024
    assert (k[1].dram_read_bytes, k[1].dram_write_bytes) == (1_500_000, 2_500_000)
    assert k[1].l2_hit_rate_pct == 87.5 and k[1].duration_ns == 2000


def test_parse_refuses_an_unknown_unit():
    with pytest.raises(ValueError, match="unit"):
        dram.parse_ncu_csv(_csv((0, "k", "1", "1", "1", "1", ("parsec", "byte", "%", "ns"))))


def test_no_header_means_no_kernels():
    assert dram.parse_ncu_csv("==PROF== nothing profiled\n") == []


def _k(i, name, r=0, w=0, hit=50.0, ns=10.0):
    return dram.KernelMetrics(i, name, r, w, hit, ns)


def test_split_and_summarize():
    ks = [_k(0, dram.MARKER), _k(1, "a", 100, 50, 90.0, 10), _k(2, "b", 300, 0, 10.0, 30),
          _k(3, dram.MARKER + "()"), _k(4, "c", 7, 3, None, 5)]  # fmt: skip
    groups = dram.split_at_markers(ks, 2)
    assert [[k.name for k in g] for g in groups] == [["a", "b"], ["c"]]
    s = dram.summarize(groups[0])
    assert (s["dram_read_bytes"], s["dram_write_bytes"], s["dram_bytes"]) == (400, 50, 450)
    assert s["duration_ns"] == 40 and s["bandwidth_gbs"] == 450 / 40
    assert s["l2_hit_rate_pct"] == pytest.approx((151 * 90 + 301 * 10) / 452)
    assert dram.summarize(groups[1])["l2_hit_rate_pct"] is None
    with pytest.raises(ValueError, match="3 paths ran"):
        dram.split_at_markers(ks, 3)


CFG = BenchConfig(n=1000, d=64, block_q=128, block_k=64, dtype="float16", batch_heads=3)


def test_declared_tiled_and_dense_are_the_ledgers_bytes():
    led = closed_form_ledger(1000, 1000, 64, 64, block_q=128, block_k=64, order="kv-outer",
                             dtype="float16")  # fmt: skip
    tiled = dram.declared(CFG, {"path": "tiled", "order": "kv-outer"})
    assert tiled["bytes"] == 3 * led.lanes["tiled"].total_bytes
    assert tiled["by_tensor"]["K"]["read"] == 3 * 2 * led.lanes["tiled"].counts["K"]["read"]
    assert sum(v for rw in tiled["by_tensor"].values() for v in rw.values()) == tiled["bytes"]
    dense = dram.declared(CFG, {"path": "dense"})
    assert dense["bytes"] == 3 * led.lanes["dense"].total_bytes  # the dense lane: no order
    assert dram.declared(CFG, {"path": "sdpa-flash"}) is None


def test_declared_flash_training_is_forward_plus_backward():
    cfg = BenchConfig(n=1000, d=64, dtype="float16", batch_heads=2, pass_name="training")
    entry = {"path": "flash", "forward_tiles": [128, 128], "backward_tiles": [64, 128]}
    fwd = closed_form_ledger(1000, 1000, 64, 64, block_q=128, block_k=128, save_lse=True,
                             dtype="float16")  # fmt: skip
    bwd = pass_ledger("backward", 1000, 1000, 64, 64, block_q=64, block_k=128, dtype="float16")
    want = 2 * (fwd.lanes["tiled"].total_bytes + bwd.lanes["tiled"].total_bytes)
    assert dram.declared(cfg, entry)["bytes"] == want


def test_dram_readings():
    dec = {"bytes": 1000, "by_tensor": {}}

    def m(b):
        return {"dram_bytes": b, "l2_hit_rate_pct": 80.0, "kernels": [{}] * 14}

    def read(path, measured, s_bytes=10, **kw):
        return dram_reading({"path": path, "measured": measured, "declared": dec, **kw},
                            s_bytes, 20)  # fmt: skip

    low = read("tiled", m(300), order="q-outer", **{"pass": "forward"})
    assert "30%" in low and "K/V tiles each query block re-reads are served by L2" in low
    kv = read("tiled", m(600), order="q-outer+kv-outer", **{"pass": "training"})
    assert "K/V tiles" in kv and "Q, dO, L, D and dQ" in kv and "partly served" in kv
    flash = read("flash", m(100), **{"pass": "training"})
    assert "K/V tiles" in flash and "dQ each key tile" in flash
    assert "partly kept in L2" in read("dense", m(300))
    spills = read("dense", m(950), s_bytes=30)
    assert "go to DRAM as declared" in spills and "95%" in spills
    more = read("dense", m(4000), s_bytes=30)
    assert "400%" in more and "14 kernels" in more and "is larger than" in more
    assert "fits in" in read("dense", m(2000))
    peer = dram_reading({"path": "sdpa-cudnn", "measured": m(5)}, 1, 2)
    assert "no ledger" in peer
    assert "not measured" in dram_reading({"path": "fa4", "error": "absent"}, 1, 2)


def _dram_report(entries=None) -> dict:
    entries = entries or [
        {"path": "tiled", "order": "q-outer", "block_q": 128, "block_k": 64, "pass": "forward",
         "measured": dram.summarize([_k(1, "a", 100, 50)]),
         "declared": dram.declared(CFG, {"path": "tiled", "order": "q-outer"})},
        {"path": "fa4", "pass": "forward", "error": "not importable", "declared": None},
    ]  # fmt: skip
    old = bundled_report()["reports"][-1]
    block = dram.dram_block(CFG, entries, 50 * 2**20)
    return {**old, "version": VERSION, "results": [], "sweep": None, "dram": block}


def test_version_4_report_reads_and_prints():
    rep = split_reports(_dram_report())[0]
    text = format_report(rep)
    assert "DRAM bytes measured by" in text and "tiled q-outer" in text
    assert "fa4: not measured: not importable" in text


def test_older_reports_still_open():
    # The bundled figures file as recorded (version 3) and a version-1 report.
    bundled = bundled_report()
    assert len(split_reports(bundled)) == len(bundled["reports"])
    v1 = {**bundled["reports"][-1], "version": 1}
    v1.pop("dram", None)
    assert split_reports(v1)[0]["version"] == VERSION


def test_bad_dram_block_is_one_sentence():
    rep = _dram_report()
    rep["dram"]["paths"][0]["measured"]["dram_bytes"] = -1
    with pytest.raises(ReportError, match="dram_bytes is not a byte count"):
        split_reports(rep)


def _fake_ncu(tmp_path, csv_text: str, entries: list) -> str:
    """An `ncu` that writes the driver's output file itself and prints a canned CSV."""
    (tmp_path / "profile.csv").write_text(csv_text)
    (tmp_path / "entries.json").write_text(json.dumps(entries))
    script = tmp_path / "ncu"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import shutil, sys
        shutil.copy({str(tmp_path / "entries.json")!r}, sys.argv[-1])
        sys.stdout.write(open({str(tmp_path / "profile.csv")!r}).read())
    """)
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_profile_with_a_stand_in_ncu(tmp_path, monkeypatch):
    entries = [{"path": "tiled", "order": "q-outer", "block_q": 128, "block_k": 64},
               {"path": "fa4", "error": "not importable"}, {"path": "dense"}]  # fmt: skip
    text = _csv((0, dram.MARKER, "0", "0", "0", "1"), (1, "t", "10", "5", "90", "100"),
                (2, dram.MARKER, "0", "0", "0", "1"), (3, "gemm", "700", "300", "20", "50"),
                (4, "softmax", "100", "0", "40", "50"))  # fmt: skip
    monkeypatch.setenv("PATH", _fake_ncu(tmp_path, text, entries) + os.pathsep + os.environ["PATH"])
    out = dram.profile(CFG, [{"path": "tiled", "order": "q-outer"}, {"path": "fa4"},
                             {"path": "dense"}])  # fmt: skip
    assert out[0]["measured"]["dram_bytes"] == 15
    assert "measured" not in out[1]
    assert out[2]["measured"]["dram_bytes"] == 1100
    assert [k["name"] for k in out[2]["measured"]["kernels"]] == ["gemm", "softmax"]


def test_missing_ncu_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setattr(dram.shutil, "which", lambda name: None)
    monkeypatch.setattr(dram, "NCU_ROOT", tmp_path)
    with pytest.raises(dram.DramUnavailable, match="ncu .* is not on PATH"):
        dram.profile(CFG, [{"path": "dense"}])


def test_default_paths():
    paths = dram.default_paths(("tiled", "dense", "sdpa-flash"), peers=True)
    assert paths == [{"path": "tiled", "order": "q-outer"}, {"path": "tiled", "order": "kv-outer"},
                     {"path": "dense"}, {"path": "sdpa-flash"}, {"path": "fa4"}]  # fmt: skip
    # The backward alone runs one tiled kernel whatever the forward's order: profiled once.
    alone = dram.default_paths(("tiled", "flash"), peers=False, pass_name="backward")
    assert alone == [{"path": "tiled", "order": "kv-outer"}, {"path": "flash"}]


def test_dram_refuses_the_sweep(capsys, monkeypatch):
    monkeypatch.setattr(bench_cli, "status", lambda: type("S", (), {"usable": True})())
    assert bench_cli.main(["--dram", "--sweep-blocks", "--kernel", "dense"]) == 2
    assert "leave out --sweep-blocks" in capsys.readouterr().err


def test_bench_dram_writes_a_version_4_report(tmp_path, monkeypatch, capsys):
    from compute.gpu import device

    usable = device.DeviceStatus(True, name="Fake GPU", compute_capability=(9, 0),
                                 l2_bytes=60 * 2**20)  # fmt: skip
    monkeypatch.setattr(device, "status", lambda: usable)
    monkeypatch.setattr(bench_cli, "status", lambda: usable)
    entries = [{"path": "dense", "pass": "forward"}]
    text = _csv((0, dram.MARKER, "0", "0", "0", "1"), (1, "gemm", "700", "300", "20", "50"))
    monkeypatch.setenv("PATH", _fake_ncu(tmp_path, text, entries) + os.pathsep + os.environ["PATH"])
    out = tmp_path / "r.json"
    args = ["--dram", "--kernel", "dense", "--n", "256", "--batch-heads", "2", "--json", str(out)]
    assert bench_cli.main(args) == 0
    rep = split_reports(json.loads(out.read_text()))[0]
    assert rep["version"] == VERSION == 4 and rep["results"] == []
    (path,) = rep["dram"]["paths"]
    assert path["measured"]["dram_bytes"] == 1000
    assert path["declared"] == dram.declared(BenchConfig(n=256, batch_heads=2, dtype="float16"),
                                             {"path": "dense"})  # fmt: skip
    assert "DRAM bytes measured by" in capsys.readouterr().out


def test_bundled_recording_covers_every_pass_and_its_counts_are_the_ledgers():
    # The bundled H200 figures hold a DRAM profile of each pass, at least one where S fits
    # in L2 and two where it does not; each teaching kernel's own COUNT_TRANSFERS counts
    # (per head) are the closed-form ledger's at its tiles, order and pass.
    measured = [r for r in split_reports(bundled_report()) if r.get("dram")]
    assert {r["config"]["pass_name"] for r in measured} == {"forward", "backward", "training"}
    fits = [r["dram"]["s_fits_l2"] for r in measured]
    assert fits.count(True) >= 1 and fits.count(False) >= 2
    counted = 0
    for r in measured:
        c = r["config"]
        for e in r["dram"]["paths"]:
            if e["path"] in dram.OURS:
                assert "measured" in e and e["measured"]["dram_bytes"] > 0
            if "counts_kernel" not in e:
                continue
            led = pass_ledger(c["pass_name"], c["n"], c["n_keys"], c["d"], c["d_v"],
                              block_q=e["block_q"], block_k=e["block_k"],
                              order=e["order"].split("+")[0], dtype=c["dtype"],
                              save_lse=c["pass_name"] != "forward").lanes["tiled"]  # fmt: skip
            zero = {"read": 0, "write": 0}
            assert {t: dict(rw) for t, rw in led.counts.items()} == {
                t: e["counts_kernel"].get(t, zero) for t in led.counts
            }
            assert set(e["counts_kernel"]) <= set(led.counts)
            counted += 1
    assert counted == 9
