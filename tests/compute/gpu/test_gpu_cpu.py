"""CPU-side tests of the GPU backend: status() reasons, bench CLI exit, tile arithmetic,
bfloat16 rounding, report versions and the bundled report."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from compute import dense_attention
from compute.attention import round_to
from compute.gpu import device
from compute.gpu.dtypes import bfloat16_bits, bfloat16_values, device_array, float64_values
from compute.gpu.reference import error_stats, reference_rows, sample_indices
from compute.gpu.report import VERSION, split_reports
from compute.gpu.tiled import TileShape, fits_message


def _fake_cupy(monkeypatch, runtime):
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)


def test_status_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    st = device.status()
    assert not st.usable
    assert st.reason == (
        "CuPy is not installed, so the GPU backend is off (pip install cupy-cuda13x)."
    )
    assert st.describe() == st.reason


def test_status_without_driver(monkeypatch):
    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    _fake_cupy(monkeypatch, types.SimpleNamespace(getDeviceCount=no_driver))
    st = device.status()
    assert not st.usable
    assert st.reason.startswith("No usable NVIDIA driver was found (cudaErrorInsufficientDriver")
    assert "\n" not in st.reason


def test_status_without_device(monkeypatch):
    _fake_cupy(monkeypatch, types.SimpleNamespace(getDeviceCount=lambda: 0))
    assert device.status().reason == "No CUDA device was found."


def test_status_with_device(monkeypatch):
    props = {
        "name": b"NVIDIA H200",
        "major": 9,
        "minor": 0,
        "sharedMemPerBlockOptin": 232448,
        "multiProcessorCount": 132,
        "l2CacheSize": 62914560,
        "totalGlobalMem": 150 * 2**30,
    }
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=lambda i: props)
    _fake_cupy(monkeypatch, runtime)
    st = device.status()
    assert st.usable and st.name == "NVIDIA H200" and st.compute_capability == (9, 0)
    assert st.shared_mem_per_block == 232448
    assert "227 KB shared/block" in st.describe()


def test_bench_cli_without_gpu_exits_1_with_one_line(monkeypatch, capsys):
    from compute.gpu import bench_cli

    monkeypatch.setattr(
        bench_cli, "status", lambda: device.DeviceStatus(False, "No CUDA device was found.")
    )
    assert bench_cli.main(["--n", "128"]) == 1
    err = capsys.readouterr().err
    assert err == "flash-explorer bench: No CUDA device was found.\n"


def test_bench_cli_module_runs_without_gpu():
    if device.status().usable:
        pytest.skip("this machine has a GPU; the no-GPU exit is tested above")
    proc = subprocess.run(
        [sys.executable, "-m", "compute.gpu.bench_cli", "--n", "64"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("flash-explorer bench: ")


def test_bench_cli_rejects_bad_sizes():
    from compute.gpu.bench_cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--block-q", "0"])
    for bad in ("-1", "61", "nan"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--preheat", bad])
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--settle", bad])


def test_bench_cli_preheat_reaches_the_config():
    from compute.gpu.bench_cli import _config, build_parser

    args = build_parser().parse_args(["--n", "256", "--dtype", "float16", "--preheat", "1.5"])
    assert _config(args, ("tiled",)).preheat_s == 1.5
    assert _config(build_parser().parse_args([]), ("tiled",)).preheat_s == 0.0
    args = build_parser().parse_args(["--settle", "0.25"])
    assert _config(args, ("tiled",)).settle_s == 0.25
    assert _config(build_parser().parse_args([]), ("tiled",)).settle_s == 0.0


def test_tile_shape_shared_memory():
    # 64x64 tiles, d = 64: Q, K, P~ rows padded (68, 68, 72 floats), V 64 floats.
    assert TileShape(64, 64, 64, 64).smem_bytes == 4 * (64 * 68 + 64 * 68 + 64 * 64 + 64 * 72)
    assert TileShape(64, 64, 64, 64).threads == 128
    assert TileShape(128, 64, 64, 64).threads == 256
    assert TileShape(7, 1, 20, 12).smem_bytes > 0


def test_fits_message_names_fitting_sizes():
    msg = fits_message(TileShape(512, 512, 64, 64), 227 * 1024)
    assert msg.startswith("block_q=512 x block_k=512 with d=64, d_v=64 needs ")
    assert "this device allows 227 KB" in msg and "block_q=64 with block_k<=" in msg
    for part in msg.split("these fit: ")[1].rstrip(".").split("; "):
        bq, bk = (int(x.split("=")[1].lstrip("<")) for x in part.split(" with "))
        assert TileShape(bq, bk, 64, 64).smem_bytes <= 227 * 1024
        assert TileShape(bq, bk + 8, 64, 64).smem_bytes > 227 * 1024


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_q,n_k", [(40, 40), (50, 30), (30, 50)])
def test_sampled_reference_rows_equal_dense(n_q, n_k, causal):
    rng = np.random.default_rng([n_q, n_k, int(causal)])
    q, k, v = (rng.standard_normal((n, 8)) for n in (n_q, n_k, n_k))
    rows = np.array([0, 3, n_q - 1])
    want = dense_attention(q, k, v, causal=causal)[rows]
    np.testing.assert_allclose(reference_rows(q, k, v, rows, causal=causal), want, atol=1e-12)


def test_sample_indices_and_error_stats():
    heads, rows = sample_indices(32, 16384, max_heads=2, max_rows=512)
    assert len(heads) == 2 and len(rows) == 512 and rows[-1] == 16383
    heads, rows = sample_indices(2, 100)
    assert heads.tolist() == [0, 1] and rows.tolist() == list(range(100))
    ref = np.ones((2, 3))
    assert error_stats(ref + 0.5, ref)["max_abs"] == 0.5
    assert error_stats(np.full((2, 3), np.nan), ref)["rel"] == float("inf")


def test_bfloat16_rounding_is_compute_attentions():
    # One rounding: the device helper equals compute.attention.round_to bit for bit,
    # ties to even included.
    rng = np.random.default_rng(21)
    x = (rng.standard_normal(10_000) * 10.0 ** rng.integers(-8, 8, 10_000)).astype(np.float32)
    ties = np.array([0x3F808000, 0x3F818000, 0xBF808000], dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, ties])
    bits = bfloat16_bits(x)
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal(bfloat16_values(bits), round_to(x, "bfloat16"))
    np.testing.assert_array_equal(float64_values(device_array(x, "bfloat16"), "bfloat16"),
                                  round_to(x, "bfloat16").astype(np.float64))  # fmt: skip


def test_energy_probe_reads_nvidia_smi_samples_and_skips_the_rest():
    import datetime as dt

    from compute.gpu.lab.energy_probe import _samples

    text = (
        "2026/11/29 22:10:01.120, 1755, 699.12\n"
        "[Not Supported]\n"
        "2026/11/29 22:10:01.140, 1590, 690.50\n"
        "2026/11/29 22:10:01.160, N/A, 690.5\n"
    )
    got = _samples(text)
    t0 = dt.datetime(2026, 11, 29, 22, 10, 1, 120000).timestamp()
    assert [(round(w - t0, 3), mhz, watts) for w, mhz, watts in got] == [
        (0.0, 1755.0, 699.12),
        (0.02, 1590.0, 690.5),
    ]


def test_backward_comparisons_are_refused_with_what_to_run_instead():
    from compute.gpu.report import BWD_COMPARISON_FORMAT, FIGURES_FORMAT, ReportError

    rows = [{"kernel": "flash-bwd", "median_ms": 1.0, "tflops": 300.0, "rel_err": {"max": 1e-3}}]
    root = Path(__file__).resolve().parents[3]
    recorded = json.loads((root / "assets/benchmarks/flash_bwd_vs_sdpa_h200.json").read_text())
    for data in (
        {"format": BWD_COMPARISON_FORMAT, "reports": [{"config": {}, "results": rows}]},
        {"format": FIGURES_FORMAT, "reports": [{"config": {}, "results": rows}]},  # older files
        recorded,
    ):
        with pytest.raises(ReportError, match=r"backward comparison .* --pass backward --peers"):
            split_reports(data)


def test_version_1_reports_read_with_flash_names():
    # A report recorded before the harness's version 2 (the kernel was called "fast" then).
    old = json.loads((Path(__file__).parent / "data" / "report_v1_h200.json").read_text())
    assert old["reports"][1]["version"] == 1
    assert "fast" in [r["kernel"] for r in old["reports"][1]["results"]]
    reports = split_reports(old)
    assert all(r["version"] == VERSION for r in reports)
    kernels = {r["kernel"] for rep in reports for r in rep["results"]}
    assert kernels == {"tiled", "dense", "flash"}
    # Same figures: float16 reports hold the kernel's timing, now under its new name.
    timed = [
        (i, j)
        for i, rep in enumerate(old["reports"])
        for j, r in enumerate(rep["results"])
        if r["kernel"] == "fast" and "ms" in r
    ]
    assert len(timed) == 4
    for i, j in timed:
        want = {"pass": "forward", **old["reports"][i]["results"][j], "kernel": "flash"}
        assert reports[i]["results"][j] == want


def test_flash_config_spec_round_trips():
    from compute.gpu.flash import MMA_CONFIGS, WGMMA_CONFIGS, WS_CONFIGS, Config

    for cfg in [
        *MMA_CONFIGS.values(),
        *WGMMA_CONFIGS.values(),
        *WS_CONFIGS.values(),
        Config("wgmma", 128, 2, 64, 1, True),
        Config("ws", 64, 3, 128, 1, False, 3, False),
        Config("ws", 128, 2, 128, 1, True, 2, True, True),
        Config("ws", 64, 3, 128, 1, True, 2, True, True, True),
        Config("ws", 64, 3, 128, 1, True, 2, True, False, True),
        Config("ws", 128, 2, 176, 1, True, 2, True, True, True, False, True, True),
    ]:
        assert Config.parse(cfg.spec()) == cfg
    assert Config("wgmma", 128, 2, 64, 2, True).name(1) == "flash_fwd_wgmma<1,128,2,64,2,1>"
    assert Config.parse("ws:128:2:128:2:pingpong").name(0) == "flash_fwd_ws<0,128,2,128,2,3>"
    assert Config.parse("ws:64:3:128:3:serial").name(1) == "flash_fwd_ws<1,64,3,128,3,0>"
    assert Config.parse("ws:64:3:128:3").threads == 512
    # each trait's bit (kernels/ws_traits.cuh) as the variants were measured with
    for spec, field, dt, name in (
        ("ws:128:2:128:2:pingpong:persist", "persistent", 1, "flash_fwd_ws<1,128,2,128,2,7>"),
        ("ws:64:3:128:2:pingpong:lpt", "lpt", 0, "flash_fwd_ws<0,64,3,128,2,11>"),
        ("ws:128:2:192:2:pingpong:qreg", "q_regs", 1, "flash_fwd_ws<1,128,2,192,2,259>"),
        ("ws:128:2:176:2:pingpong:persist:lpt:panelo", "panel_o", 1,
         "flash_fwd_ws<1,128,2,176,2,4111>"),
        ("ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq", "early_q", 1,
         "flash_fwd_ws<1,128,2,176,2,135183>"),
        ("ws:64:3:128:2:pingpong:lpt:endq", "end_q", 0, "flash_fwd_ws<0,64,3,128,2,262155>"),
        ("ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq", "early_q", 1,
         "flash_fwd_ws<1,128,2,128,2,131343>"),
    ):  # fmt: skip
        cfg = Config.parse(spec)
        assert getattr(cfg, field) and cfg.name(dt) == name
        assert Config.parse(cfg.spec()) == cfg
    # a staging tile one panel wide lets a persistent d = 128 grid fit 176-key tiles (227 KB)
    staged = Config.parse("ws:128:2:176:2:pingpong:persist")
    assert staged.smem_bytes() > 232448 >= replace(staged, panel_o=True).smem_bytes()
    # each refused spec with the sentence that says why
    for bad, why in (
        ("ws:128:2:176:2:pingpong:earlyq", "needs ':persist'"),
        ("ws:128:2:128:2:persist:serial:earlyq", "needs ':persist'"),
        ("wgmma:128:2:64:2:lpt", "is not a kernel spec"),  # scheduling flags: ws only
        ("wgmma:128:2:64:2:serial", "is not a kernel spec"),  # only ws has the serial flag
        ("wgmma:128:2:64:2:4", "is not a kernel spec"),  # the old EXTRA bits are gone
        ("ws:128:2:128:2:pingpong:bogus", "is not a kernel spec"),
    ):
        with pytest.raises(ValueError, match=why):
            Config.parse(bad)
    # the variants measured and removed are refused with a pointer to their record
    from compute.gpu.flash_variants import REMOVED_FLAGS

    assert len(REMOVED_FLAGS) == 14
    for flag in (*REMOVED_FLAGS, "tailsplit5"):
        with pytest.raises(ValueError, match="removed variant.*FLASH_NOTES"):
            Config.parse(f"ws:128:2:128:2:pingpong:persist:{flag}")


def test_default_kernel_per_device_head_dim_and_length(monkeypatch):
    from compute.gpu import flash, flash_select

    monkeypatch.setattr(flash_select, "is_hopper", lambda: True)
    assert flash.default_config(128, 1024) == flash.WS_CONFIGS[128]
    assert flash.default_config(128, 4095, causal=True) == flash.WS_CONFIGS[128]
    assert flash.default_config(64, 16384) == flash.WS_CONFIGS[64]
    for d in (64, 128):  # longest-first causal order where it measured faster (v6)
        assert flash.default_config(d, 4096, True).lpt
        assert flash.default_config(d, 8192, True).lpt
        assert flash.default_config(d, 8192, True).block_n == (176 if d == 128 else 128)
        assert not flash.default_config(d, 8193, True).lpt
        assert not flash.default_config(d, 8192).lpt  # nothing to order without the mask
    # d = 128: 176-key tiles from N = 4096 on (v8), except causal where LPT is the rule and
    # full attention below 8192, which takes 128-key tiles on the persistent grid (v12)
    for n, causal in ((8192, False), (16384, False), (8193, True), (1 << 20, True)):
        assert flash.default_config(128, n, causal).block_n == 176
    for n in (4096, 6000, 8191):
        assert flash.default_config(128, n) == flash.WS_MID_D128
    assert flash.WS_MID_D128.spec() == "ws:128:2:128:2:pingpong:persist:earlyq"
    assert flash.default_config(128, 4095) == flash.WS_CONFIGS[128]
    # d = 64 causal at N = 4096-8191: persistent, early Q, end-aligned blocks (v13)
    for n in (4096, 6000, 8191):
        assert flash.default_config(64, n, True) == flash.WS_CAUSAL_D64
    assert flash.WS_CAUSAL_D64.spec() == "ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq"
    assert flash.default_config(64, 8192, True) == replace(flash.WS_CONFIGS[64], lpt=True)
    # d = 128 causal at N = 4096-8191: 128-key persistent tiles, Q in registers released at
    # the item's start (v13); at 8192 the persistent LPT grid with 176-key tiles (v10-v12)
    for n in (4096, 6000, 8191):
        assert flash.default_config(128, n, True) == flash.WS_CAUSAL_MID_D128
    assert flash.WS_CAUSAL_MID_D128.spec() == "ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq"
    assert flash.default_config(128, 8192, True) == flash.WS_CAUSAL_D128
    assert flash.WS_CAUSAL_D128.spec() == "ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq"
    assert not flash.default_config(128, 8193, True).persistent
    assert flash.default_config(64, 16384).block_n == 128
    assert flash.default_config(64, 2047) == flash.WGMMA_CONFIGS[64]  # too few 192-row blocks
    monkeypatch.setattr(flash_select, "is_hopper", lambda: False)
    assert flash.default_config(64, 4096) == flash.MMA_CONFIGS[64]


def test_time_interleaved_rotates_paths_and_splits_repeats():
    from compute.gpu.timing import Timing, interleaved_order, time_interleaved

    calls = []

    def timer(fn, arg_sets, *, warmup, repeats, l2_bytes):
        calls.append((fn(), warmup, repeats, l2_bytes))
        return Timing((float(len(calls)),) * repeats)

    paths = {name: ((lambda n=name: n), [()]) for name in ("a", "b", "c")}
    got = time_interleaved(paths, warmup=4, repeats=10, rounds=3, l2_bytes=7, timer=timer)
    assert [c[0] for c in calls] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [c[1] for c in calls] == [4, 4, 4, 1, 1, 1, 1, 1, 1]  # full warm-up once per path
    assert [c[2] for c in calls[::3]] == [4, 3, 3] and {c[3] for c in calls} == {7}
    assert {n: len(t.times_ms) for n, t in got.items()} == {"a": 10, "b": 10, "c": 10}
    assert got["a"].times_ms == (1.0,) * 4 + (6.0,) * 3 + (8.0,) * 3
    assert interleaved_order([], 3) == [] and interleaved_order(["x"], 2) == [["x"], ["x"]]
    time_interleaved(paths, repeats=2, rounds=3, timer=timer)  # never more rounds than runs
    assert [c[2] for c in calls[9:]] == [1, 1, 1, 1, 1, 1]


def test_preheat_runs_every_path_untimed_until_its_time_is_up():
    from compute.gpu.timing import Timing, preheat, time_interleaved

    ran, syncs, now = [], [], [0.0]

    def clock():
        return now[0]

    def sync():
        syncs.append(len(ran))
        now[0] += 0.3  # each pass of both paths takes 0.3 s

    paths = {name: ((lambda *a, n=name: ran.append((n, a))), [(1,), (2,)]) for name in "ab"}
    assert preheat(paths, 1.0, sync=sync, clock=clock) == 4  # 0.3, 0.6, 0.9, then 1.2 >= 1
    assert [n for n, _ in ran] == ["a", "b"] * 4 and syncs == [2, 4, 6, 8]
    assert [a for _, a in ran[::2]] == [(1,), (2,), (1,), (2,)]  # rotating the input sets
    assert preheat(paths, 0.0, sync=sync, clock=clock) == 1  # at least one pass
    assert preheat({}, 5.0, sync=sync, clock=clock) == 0

    heated = []

    def timer(fn, arg_sets, *, warmup, repeats, l2_bytes):
        return Timing((1.0,) * repeats)

    def heater(p, seconds):
        heated.append((sorted(p), seconds))
        return 1

    time_interleaved(paths, repeats=3, timer=timer, heater=heater)
    assert heated == []  # off by default
    time_interleaved(paths, repeats=3, timer=timer, heater=heater, preheat_s=1.5)
    assert heated == [(["a", "b"], 1.5)]


def test_settle_runs_each_path_alone_right_before_each_of_its_slices():
    from compute.gpu.timing import Timing, time_interleaved

    events = []

    def timer(fn, arg_sets, *, warmup, repeats, l2_bytes):
        events.append(("timed", fn()))
        return Timing((1.0,) * repeats)

    def heater(p, seconds):
        events.append(("settle", *sorted(p), seconds))
        return 1

    paths = {name: ((lambda n=name: n), [()]) for name in "abc"}
    got = time_interleaved(paths, repeats=6, rounds=2, timer=timer, heater=heater, settle_s=0.25)
    pairs = list(zip(events[::2], events[1::2], strict=True))
    assert all(s == ("settle", name, 0.25) for s, (_, name) in pairs)
    assert [name for _, (_, name) in pairs] == ["a", "b", "c", "b", "c", "a"]
    assert {name: len(t.times_ms) for name, t in got.items()} == {"a": 6, "b": 6, "c": 6}


def test_bench_forward_rows_timed_together_keep_their_order_and_schema(monkeypatch):
    # No CuPy here: a stand-in for what bench's guard and release touch.
    from compute.gpu import bench
    from compute.gpu.timing import Timing

    class Oom(Exception):
        pass

    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            memory=types.SimpleNamespace(OutOfMemoryError=Oom),
            compiler=types.SimpleNamespace(CompileException=Oom),
        ),
        get_default_memory_pool=lambda: pool,
    )
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(bench, "status", lambda: types.SimpleNamespace(l2_bytes=1))
    cfg = bench.BenchConfig(n=1024, d=64, dtype="float16", batch_heads=2, repeats=6)
    inputs = types.SimpleNamespace(sets=[(1, 2, 3)])
    errs = {"max_abs": 1e-3, "rel": 1e-4}

    def pending(name, fn):
        return bench.PendingRow(name, fn, None, {"variant": name}, errs, 10, 4, {"after": 1})

    rows = [pending("flash", lambda *a: "f"), {"kernel": "dense", "error": "no"}]
    rows.append(pending("sdpa-cudnn", lambda *a: "c"))
    seen = []

    def together(paths, **kw):
        seen.append((list(paths), kw["repeats"]))
        return {key: Timing((1.0, 2.0, 3.0)) for key in paths}

    monkeypatch.setattr(bench, "time_interleaved", together)
    got = bench._time_rows(cfg, inputs, rows)
    assert seen == [(["0", "2"], 6)]
    assert [r["kernel"] for r in got] == ["flash", "dense", "sdpa-cudnn"]
    assert got[0]["ms"] == 2.0 and got[0]["runs"] == 3 and got[0]["after"] == 1
    assert got[0]["extra_bytes"] == 6 and got[1] == rows[1]
    assert got[2]["tflops"] == pytest.approx(cfg.flops() / 2e-3 / 1e12)

    # One path failing in the interleaved rounds: each path alone, only that one an error row.
    def fails(paths, **kw):
        raise Oom("boom")

    def alone(fn, arg_sets, **kw):
        if fn() == "c":
            raise ValueError("no cuDNN here")
        return Timing((5.0,))

    monkeypatch.setattr(bench, "time_interleaved", fails)
    monkeypatch.setattr(bench, "time_cuda", alone)
    got = bench._time_rows(cfg, inputs, rows)
    assert got[0]["ms"] == 5.0 and got[2]["error"] == "no cuDNN here"
    assert got[2]["variant"] == "sdpa-cudnn"


def test_tensor_map_is_the_drivers_size():
    import ctypes

    from compute.gpu import tma

    assert ctypes.sizeof(tma._TensorMap) == tma.MAP_BYTES == 128


def test_wheel_ships_kernels_and_reports_but_not_tools():
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "compute.gpu.lab*" in setup["packages"]["find"]["exclude"]
    data = setup["package-data"]["compute.gpu"]
    assert {"kernels/*.cu", "kernels/*.cuh", "reports/*.json"} <= set(data)
    assert (root / "compute" / "gpu" / "reports" / "tiled_vs_dense_h200.json").is_file()


def test_kernel_source_changes_when_a_header_does(tmp_path, monkeypatch):
    # CuPy's cache is keyed by the source text: a header edit must change that text.
    from compute.gpu import sources

    (tmp_path / "k.cu").write_text('#include "h.cuh"\n')
    (tmp_path / "h.cuh").write_text("#define A 1\n")
    monkeypatch.setattr(sources, "KERNEL_DIR", tmp_path)
    sources._headers_digest.cache_clear()
    before = sources.kernel_source(tmp_path / "k.cu")
    (tmp_path / "h.cuh").write_text("#define A 2\n")
    sources._headers_digest.cache_clear()
    after = sources.kernel_source(tmp_path / "k.cu")
    sources._headers_digest.cache_clear()
    assert before.startswith('#include "h.cuh"\n') and before != after


def test_one_scale_rule_for_the_forward_and_the_backward():
    import math

    from compute.gpu.flash import resolve_scale

    assert resolve_scale(None, 64) == 1 / math.sqrt(64)
    assert resolve_scale(0.25, 128) == 0.25
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="scale must be positive"):
            resolve_scale(bad, 64)


def test_flash_vs_sdpa_preheats_forward_cases_only():
    from compute.gpu.lab.flash_vs_sdpa import cases

    got = list(cases([4096], [128], ["float16"], [False, True], 0, 5, 20,
                     ["ws:128:2:176:2:pingpong", "ws:64:3:128:2"], ("forward", "backward"), 1.5,
                     0.25))  # fmt: skip
    assert [(c.pass_name, c.causal, c.preheat_s, c.settle_s) for c in got] == [
        ("forward", False, 1.5, 0.25), ("forward", True, 1.5, 0.25),
        ("backward", False, 0.0, 0.0), ("backward", True, 0.0, 0.0),
    ]  # fmt: skip
    assert got[0].flash_specs == ("ws:128:2:176:2:pingpong",) and got[2].flash_specs == ()
    assert got[0].batch_heads == 4 * 16


def test_lpt_sections_are_balanced_under_the_l2_cap():
    from compute.gpu.flash_plan import lpt_section, lpt_section_cap

    l2 = 60 << 20  # the H200's L2
    # d = 128, N_k = 4096: 2 MB of K and V per head, 15 heads in half of L2; 64 heads in five
    # sections of 13 (12 in the last) instead of four of 15 and one of 4 (FLASH_NOTES v13)
    assert lpt_section_cap(4096, 128, l2) == 15
    assert lpt_section(4096, 128, 64, l2) == 13
    assert lpt_section(4096, 64, 128, l2) == 26  # cap 30: 30, 30, 30, 30, 8 before
    assert lpt_section(8192, 128, 32, l2) == 7  # cap 7: already balanced (7 x 4 + 4)
    assert lpt_section(4096, 128, 4, l2) == 4  # fewer heads than the cap: one section
    assert lpt_section(4096, 128, 15, l2) == 15 and lpt_section(4096, 128, 16, l2) == 8
    assert lpt_section(1 << 24, 128, 3, l2) == 1  # a head larger than half of L2
    for heads in range(1, 200):
        section = lpt_section(4096, 128, heads, l2)
        sections = -(-heads // section)
        assert 1 <= section <= 15 and sections == -(-heads // 15)
        assert heads - (sections - 1) * section >= section - sections  # last one nearly full


# A hand-made cuobjdump -sass excerpt: a setup block, an outer loop (back to 0x0010) around
# an inner one (back to 0x0040) that holds the wgmma, and a later loop with none.
_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x0 */
        /*0010*/                   S2R R0, SR_TID.X ;                     /* 0x0 */
        /*0020*/                   R2UR UR4, R0 ;                         /* 0x0 */
        /*0030*/                   UIADD3 UR5, UR4, 0x10, URZ ;           /* 0x0 */
        /*0040*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5+0x30010], R3 ;
        /*0050*/                   R2UR UR6, R4 ;                         /* 0x0 */
        /*0060*/                   HGMMA.64x128x16.F32 R88, gdesc[UR4], R88 ;
        /*0070*/                   MUFU.EX2 R5, R5 ;                      /* 0x0 */
        /*0080*/                   FFMA R6, R6, UR6, -R7 ;                /* 0x0 */
        /*0090*/               @P1 BRA 0x40 ;                             /* 0x0 */
        /*00a0*/              @!P2 BRA 0x10 ;                             /* 0x0 */
        /*00b0*/                   IADD3 R8, R8, 0x1, RZ ;                /* 0x0 */
        /*00c0*/               @P3 BRA 0xb0 ;                             /* 0x0 */
        /*00d0*/                   EXIT ;                                 /* 0x0 */
"""


def test_sass_loop_finds_the_innermost_wgmma_loop_and_counts_it(monkeypatch):
    from compute.gpu.lab import sass_loop
    from compute.gpu.lab.sass_loop import _mangled_key, _spills, innermost_wgmma_loop, loop_stats

    assert innermost_wgmma_loop(_SASS) is None  # one exp2: no softmax, not the key-tile step
    monkeypatch.setattr(sass_loop, "_MIN_EXP", 1)
    body = innermost_wgmma_loop(_SASS)
    assert body[0].startswith("SYNCS.PHASECHK") and body[-1] == "@P1 BRA 0x40"
    assert loop_stats(body) == {
        "instructions": 6, "hgmma": 1, "r2ur": 1, "uniform": 0, "mufu": 1, "ffma": 1,
        "bar_sync": 0,
    }  # fmt: skip
    assert innermost_wgmma_loop(_SASS.replace("HGMMA.64x128x16.F32", "FMUL")) is None
    key = _mangled_key("flash_fwd_ws<0,128,2,128,2,2228231>")
    assert key == "flash_fwd_wsILi0ELi128ELi2ELi128ELi2ELi2228231EEv"
    log = (
        f"ptxas info    : Compiling entry function '_Z12{key}6FaTmapS0_' for 'sm_90a'\n"
        "ptxas info    : Function properties for x\n"
        "    24 bytes stack frame, 64 bytes spill stores, 68 bytes spill loads\n"
    )
    assert _spills(log) == {key: 64}


def test_ws_trait_bits_match_the_kernel_header():
    # flash_variants.WS_TRAITS and kernels/ws_traits.cuh name the same bits of MODE
    import re

    from compute.gpu.flash_variants import WS_TRAITS
    from compute.gpu.sources import KERNEL_DIR

    header = (KERNEL_DIR / "ws_traits.cuh").read_text()
    bits = {name.lower(): int(v) for name, v in re.findall(r"FA_WS_(\w+) = (\d+),", header)}
    assert bits == {"overlap": 1, "pingpong": 2, **{flag: bit for flag, _, bit in WS_TRAITS}}


def test_the_backward_default_per_head_size_mask_and_band():
    """d = 128 without a band: mode 23 (dQ before dK), causal or not, where it was measured
    faster than 13; d = 64: mode 25 (dV in two groups under the
    exponentials), bands included; d = 128 under a band: mode 7 (BACKWARD_NOTES.md)."""
    from compute.gpu.flash_backward import Q80_MODES, default_mode, query_rows

    assert default_mode(128, False) == 23 and default_mode(128, True) == 23
    assert {default_mode(64, c) for c in (False, True)} == {25}
    assert {default_mode(64, c, (4, 0)) for c in (False, True)} == {25}
    assert {default_mode(128, c, (4, 0)) for c in (False, True)} == {7}
    assert all((default_mode(128, c) in Q80_MODES) == (query_rows(128, c) == 80) for c in (0, 1))
