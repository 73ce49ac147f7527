#!/usr/bin/env bash
# One device-machine call: run from the repository root on the GPU machine; logs and JSON
# land in $OUT. Use it whenever a kernel, the harness or a GPU test changed:
#   bash compute/gpu/lab/devrun.sh check    # tests, memcheck, CLI, flash vs SDPA (N 4096, 16384)
#   bash compute/gpu/lab/devrun.sh tests    # GPU tests and the nvcc compile checks only
#   bash compute/gpu/lab/devrun.sh figures  # the README's tiled-vs-dense figures (lab/figures.py)
#   bash compute/gpu/lab/devrun.sh cli      # the bench CLI twice (float16 sweep; float32 causal)
#   bash compute/gpu/lab/devrun.sh tune     # the CLI with a sweep, tiled source variants, one ncu pass
#   bash compute/gpu/lab/devrun.sh ws       # the TMA + warp-specialised kernel: a smoke test
#       of its switches first (stops there if it fails or hangs), then the GPU tests with
#       WS_VARIANTS and memcheck side by side, then flash vs SDPA at WS_N with every
#       WS_VARIANTS spec timed beside the default
#   bash compute/gpu/lab/devrun.sh bwd      # the tensor-core backward: its tests (stops there
#       if they fail), memcheck on sanitize_cases' backward launches, racecheck on one shape,
#       then flash_bwd_vs_sdpa at BWD_N (default 4096 16384) into $OUT/flash_bwd_vs_sdpa_h200.json
#   bash compute/gpu/lab/devrun.sh tail     # the forward's tail split (FLASH_NOTES v7): test_flash.py
#       with the `:tailsplit` variants beside memcheck on odd shapes of two of them only
#       (stops there if either fails), then flash vs SDPA (interleaved timing) at N 4096-16384
#       with three of them timed beside the default into $OUT/flash_vs_sdpa_ws_h200.json;
#       plan about 330 s of command time (tests up to 200 s, timing up to 105 s) plus the start
#   bash compute/gpu/lab/devrun.sh steady   # FLASH_NOTES v8: test_flash.py with STEADY_TESTS
#       beside memcheck on them, then flash vs SDPA at N 4096-16384 with a 1 s untimed
#       preheat per case (timed at the power-capped clock) and STEADY_TUNE timed beside the
#       default into $OUT/flash_vs_sdpa_ws_h200.json; about 300 s plus the start
#   bash compute/gpu/lab/devrun.sh mcast    # K/V multicast (FLASH_NOTES v8): its tests (stops
#       there if they fail or hang), memcheck on the :mcast variants, then flash vs SDPA,
#       non-causal, preheated, with MCAST_TUNE beside the default; about 200 s plus the start
#   bash compute/gpu/lab/devrun.sh record   # the recorded forward comparison after a default
#       changed: all GPU tests beside memcheck on sanitize_cases (stops there if either fails),
#       flash vs SDPA at N 4096-16384 preheated with RECORD_TUNE beside the default (into
#       $OUT/flash_vs_sdpa_ws_h200.json), then the bundled report's forward rows (figures
#       --keep, into $OUT/tiled_vs_dense_h200.json; RECORD_FIGURES=0 skips it); tests about
#       390 s, timing and figures about 230 s: run RECORD_BENCH=0 (tests only) and then
#       RECORD_TESTS=0 (timing only) as two calls, each plus the start
#   bash compute/gpu/lab/devrun.sh v9       # FLASH_NOTES v9: all GPU tests beside memcheck on
#       sanitize_cases with V9_SPECS added (stops there if either fails), flash vs SDPA at d=128
#       without a mask, preheated, with V9_SPECS beside the default, then Nsight Compute on
#       our default and on cuDNN's kernel (profile_pair, N 8192 fp16); about 450 s plus the start
#   bash compute/gpu/lab/devrun.sh v9b      # FLASH_NOTES v9: test_flash.py -k narrow beside
#       memcheck on the V9B_SPECS variants, then flash vs SDPA at d=128, settled, with V9B_SPECS
#       beside the default; about 200 s plus the start
#   bash compute/gpu/lab/devrun.sh v9c      # FLASH_NOTES v9, third call: flash vs SDPA at d=128
#       with each slice settled on its own path (--settle 0.25) and V9C_SPECS beside the
#       default, the non-causal half again without settling (the order bias it removes), then
#       energy_probe at N 16384 fp16 with FA2 beside cuDNN; about 200 s plus the start
#   bash compute/gpu/lab/devrun.sh v10      # FLASH_NOTES v10: test_flash.py -k panel beside
#       memcheck on the V10_SPECS variants (stops there if either fails), then flash vs SDPA at
#       N 4096 8192, settled, full attention with V10_FULL beside the default and causal with
#       V10_CAUSAL; about 300 s plus the start
#   bash compute/gpu/lab/devrun.sh v10b     # FLASH_NOTES v10: the causal warpgroups' own
#       diagonal: test_flash.py's float64 comparison and the diagonal, padded-warpgroup and
#       panel-staging tests beside memcheck on the ws
#       defaults (stops there if either fails), then flash vs SDPA causal at N 4096-16384,
#       settled, with `:wgalltiles` (every warpgroup computes all tiles) beside the default;
#       about 250 s plus the start
#   bash compute/gpu/lab/devrun.sh v11      # FLASH_NOTES v11: the narrow first key tile:
#       test_flash.py with V11_SPECS beside memcheck on the ws defaults and V11_SPECS (stops
#       there if either fails), then flash vs SDPA at d = 128, N 4096-16384, settled, without
#       a mask (V11_CAUSAL=1: causal), with V11_SPECS beside the default; about 260 s plus
#       the start
#   bash compute/gpu/lab/devrun.sh v11b     # FLASH_NOTES v11: test_flash.py -k narrow_first
#       beside memcheck on the `:narrowfirst` variants only, then flash vs SDPA at d = 128
#       without a mask, N 4096 8192, settled, with them beside the default; about 150 s
#   bash compute/gpu/lab/devrun.sh v12      # FLASH_NOTES v12: Q released early on the
#       persistent grid (`:earlyq`): test_flash.py's float64 comparison with V12_SPECS and
#       the many-tiles test of every switch, beside memcheck on the ws defaults and V12_SPECS
#       (stops there if either fails), then flash vs SDPA at N 4096 8192, settled: d = 128 full
#       with V12_FULL, d = 128 causal with V12_CAUSAL128, d = 64 causal with V12_CAUSAL64,
#       each beside the default; up to 590 s plus the start
#   bash compute/gpu/lab/devrun.sh v13      # FLASH_NOTES v13: end-aligned causal query blocks
#       (`:endq`) and the item trace (`:trace`): their tests and the many-tiles test beside
#       memcheck on V13_SPECS (stops there if either fails), then flash vs SDPA, d = 64 causal
#       at N 4096 8192, settled, with V13_CAUSAL64 beside the default, then item_trace on
#       d = 64 causal, d = 128 causal (fp16) and d = 128 full (bf16) at N 4096; logs stay in
#       /tmp/v13 (printed), only the JSON and the trace records come back; 277 s (call 1)
#   bash compute/gpu/lab/devrun.sh v13b     # FLASH_NOTES v13: Q prefetched into L2
#       (`:qprefetch`): test_flash.py -k qprefetch with V13B_SPECS beside memcheck on them
#       (stops there if either fails), then flash vs SDPA at N 4096 8192, settled: d = 128
#       causal, d = 64 causal and d = 128 full, each with its candidates beside the default;
#       138 s (call 2)
#   bash compute/gpu/lab/devrun.sh v13c     # FLASH_NOTES v13: every GPU test with V13C_SPECS
#       (Q in registers and released at the item's start) beside memcheck on the defaults and
#       them (stops there if either fails), then flash vs SDPA at d = 128, N 4096, settled,
#       full and causal, with V13C_SPECS beside the default; 472 s (call 3)
#   bash compute/gpu/lab/devrun.sh v13d     # FLASH_NOTES v13: balanced LPT sections against
#       sections filled to the L2 cap (lab/section_probe.py), causal, d = 128 and d = 64 at
#       N = 4096 and d = 64 at 8192, then item_trace of the LPT and head-order d = 128
#       candidates at N = 4096; JSON only comes back; about 200 s
#   bash compute/gpu/lab/devrun.sh v14      # FLASH_NOTES v14: the stream-K tail (`:sktail`):
#       its tests with V14_SPECS beside memcheck on them (stops there if either fails), then
#       flash vs SDPA at d = 128 without a mask, N 4096-16384, settled, each candidate beside
#       its twin without the switch; JSON only comes back; about 400 s planned (not yet run)
#   bash compute/gpu/lab/devrun.sh v14b     # FLASH_NOTES v14: warp-uniform counters
#       (`:uniform`): their tests with V14B_SPECS beside memcheck on them (stops there if
#       either fails), the item trace of the d = 64 causal default with and without it
#       (body cycles per key tile) beside the LPT grid, then flash vs SDPA at d = 64, N 4096
#       8192, settled, causal and without a mask, each beside its twin; about 350 s planned
#       (not yet run)
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-out}
mkdir -p "$OUT"
what=${1:-check}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    >"$OUT/smi.txt" 2>&1
python3 -c "import compute.gpu as g; print(g.status().describe())" | tee "$OUT/status.txt"
rc=0
# the ws kernel's default variants (flash.default_config), for memcheck beside new switches
WS_DEFAULTS="ws:64:3:128:2:pingpong ws:64:3:128:2:pingpong:lpt ws:128:2:176:2:pingpong"
WS_DEFAULTS="$WS_DEFAULTS ws:128:2:128:2:pingpong:persist:earlyq"
WS_DEFAULTS="$WS_DEFAULTS ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq"
WS_DEFAULTS="$WS_DEFAULTS ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq"
WS_DEFAULTS="$WS_DEFAULTS ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq"
step() {  # step NAME TIMEOUT CMD...: run, log to $OUT/NAME.log, remember a failure
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local r=$?
    echo "== $name rc=$r"
    tail -4 "$OUT/$name.log"
    [ $r -eq 0 ] || rc=$r
}
compare() {  # compare NAME TIMEOUT ARGS...: flash_vs_sdpa ARGS as step NAME, then its cases
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" python3 -m compute.gpu.lab.flash_vs_sdpa "$@"
    grep -E "^forward" "$OUT/$name.log" | sed -E 's/ \([0-9.e+-]+\)//g'
}
tests_beside_memcheck() {  # PATHS TEST_LIMIT MC_LIMIT: pytest -n 8 on PATHS beside memcheck
    # over sanitize_cases (FLASH_TEST_CONFIGS / FLASH_SANITIZE_* come in from the caller)
    timeout "$3" compute-sanitizer --tool memcheck --error-exitcode 1 \
        python3 -m compute.gpu.lab.sanitize_cases >"$OUT/memcheck.log" 2>&1 &
    local mc=$!
    # shellcheck disable=SC2086
    step pytest "$2" python3 -m pytest $1 -q -p no:cacheprovider -n 8
    wait $mc
    local r=$?
    echo "== memcheck rc=$r"
    grep -E "ERROR SUMMARY" "$OUT/memcheck.log"
    [ $r -eq 0 ] || rc=$r
}
logs_in_tmp() {  # NAME: logs go to /tmp/NAME (printed, not fetched; eight files come back at
    # most), JSON to $back, the fetched $OUT
    back=$OUT
    OUT=/tmp/$1
    mkdir -p "$OUT"
}
switch_tests() {  # SPECS FILTER LIMIT: test_flash.py -k FILTER, SPECS added to its variants,
    # beside memcheck on SPECS alone
    PYTEST_ADDOPTS="-k '$2'" FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS="$1" \
        FLASH_SANITIZE_CONFIGS="$1" tests_beside_memcheck tests/compute/gpu/test_flash.py "$3" "$3"
    grep -E "passed|failed|error" "$OUT/pytest.log" | tail -3
}
if [ "$what" = check ] || [ "$what" = tests ]; then
    step pytest 180 python3 -m pytest tests/compute/gpu -q \
        -p no:cacheprovider -n 8
fi
if [ "$what" = check ]; then
    step memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 1 \
        python3 -m compute.gpu.lab.sanitize_cases
    grep -E "ERROR SUMMARY" "$OUT/memcheck.log"
    step cli 60 python3 -m compute.gpu.bench_cli --n 2048 --dtype float16 --kernel all \
        --block-q 128 --block-k 64 --json "$OUT/bench_cli_float16_n2048_h200.json"
    step flash_vs_sdpa 120 python3 -m compute.gpu.lab.flash_vs_sdpa --n 4096 16384 \
        --json "$OUT/flash_vs_sdpa_n4096_16384_h200.json"
    cat "$OUT/cli.log" | grep -v "^\[" | head -20
    sed -n '/^summary/,$p' "$OUT/flash_vs_sdpa.log"
fi
if [ "$what" = figures ]; then
    step figures "${FIG_TIMEOUT:-300}" python3 -m compute.gpu.lab.figures \
        --out "$OUT/tiled_vs_dense_h200.json"
    sed -n '/^dtype  N/,$p' "$OUT/figures.log"
fi
if [ "$what" = cli ]; then
    step cli_f16 150 python3 -m compute.gpu.bench_cli --n 4096 --dtype float16 --kernel all \
        --sweep-blocks --block-q 128 --block-k 64 --json "$OUT/bench_cli_float16_sweep_h200.json"
    step cli_f32 120 python3 -m compute.gpu.bench_cli --n 4096 --n-keys 6144 --causal \
        --dtype float32 --kernel all --block-q 128 --block-k 64 \
        --json "$OUT/bench_cli_float32_causal_h200.json"
fi
if [ "$what" = tune ]; then
    step cli 150 python3 -m compute.gpu.bench_cli --n 4096 --dtype float16 --kernel all \
        --sweep-blocks --json "$OUT/bench_cli_sweep.json"
    for dt in float32 float16; do
        step "tune_$dt" 90 python3 -m compute.gpu.lab.tune_tiled --dtype $dt
    done
    step ncu 150 ncu --clock-control none --kernel-name regex:tiled_q_outer --launch-skip 3 \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
        python3 -m compute.gpu.bench_cli --n 4096 --kernel tiled --block-q 128 --block-k 64
    grep -E "Throughput|Pipe|Occupancy|Stall|Bank|Registers|Warp Cycles|Eligible|Issued" \
        "$OUT/ncu.log" | head -40
fi
if [ "$what" = ws ]; then
    # WS_VARIANTS: specs tested and timed beside the default (set but empty: none);
    # WS_TESTS: the GPU test paths (default: all of tests/compute/gpu).
    variants=${WS_VARIANTS-"ws:128:2:128:2:pingpong:persist ws:64:3:128:2:pingpong:persist:lpt"}
    # WS_SMOKE=0 skips the smoke step (variants that already passed it in an earlier call);
    # WS_SANITIZE: the specs memcheck runs beside the defaults (default: WS_VARIANTS).
    if [ "${WS_SMOKE:-1}" != 0 ]; then
        step smoke 90 python3 -m pytest tests/compute/gpu/test_flash.py -q -x \
            -p no:cacheprovider -n 4 -k "ws_kernel"
    fi
    if [ $rc -eq 0 ]; then
        # Correctness in parallel (timings come after, on a quiet GPU): the tests with every
        # variant, and memcheck over the odd shapes with every variant.
        FLASH_SANITIZE_CONFIGS="${WS_SANITIZE-$variants}" FLASH_TEST_CONFIGS="$variants" \
            tests_beside_memcheck "${WS_TESTS:-tests/compute/gpu}" 200 200
    fi
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        step flash_vs_sdpa "${WS_TIMEOUT:-200}" python3 -m compute.gpu.lab.flash_vs_sdpa \
            --n ${WS_N:-4096 16384} --dtype ${WS_DTYPE:-float16 bfloat16} \
            --tune $variants ${WS_EXTRA_TUNE:-} --json "$OUT/${WS_JSON:-flash_ws_h200.json}"
        grep -E "^(float16|bfloat16)" "$OUT/flash_vs_sdpa.log" | sed -E 's/ \([0-9.e+-]+\)//g'
        sed -n '/^summary/,$p' "$OUT/flash_vs_sdpa.log"
    fi
fi
if [ "$what" = bwd ]; then
    cases="import numpy as np; from compute.gpu.lab import sanitize_cases as s"
    step pytest_bwd 240 python3 -m pytest tests/compute/gpu/test_flash_backward.py \
        tests/compute/gpu/test_cuda_sources_compile.py -q -p no:cacheprovider -n 8
    if [ $rc -eq 0 ]; then
        step memcheck_bwd 150 compute-sanitizer --tool memcheck --error-exitcode 1 python3 -c \
            "$cases; import cupy; cupy.cuda.set_allocator(None); s.backward_cases(np.random.default_rng(0))"
        grep -E "ERROR SUMMARY" "$OUT/memcheck_bwd.log"
        step racecheck_bwd 150 compute-sanitizer --tool racecheck --error-exitcode 1 python3 -c \
            "$cases; s.backward_cases(np.random.default_rng(0), s.CASES[:1], ('float16',))"
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/racecheck_bwd.log"
    fi
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        step flash_bwd_vs_sdpa "${BWD_TIMEOUT:-240}" python3 -m compute.gpu.lab.flash_bwd_vs_sdpa \
            --n ${BWD_N:-4096 16384} --json "$OUT/flash_bwd_vs_sdpa_h200.json"
        grep -E "^(float16|bfloat16)|MET|MISS" "$OUT/flash_bwd_vs_sdpa.log"
    fi
fi
if [ "$what" = tail ]; then
    # timed: d=128 with 3 and with 5 pieces, d=64 with the model's plan (no split at N >= 8192:
    # there it runs the default's code, a check on the timing's spread)
    tune="ws:128:2:128:2:pingpong:tailsplit3 ws:128:2:128:2:pingpong:tailsplit5"
    tune="$tune ws:64:3:128:2:pingpong:tailsplit"
    # test_flash.py's own tail-split tests cover grid and persistent at both d; these add the
    # generic shapes for two more. Its ~620 tests compile ~30 ws instantiations (NVRTC, per
    # worker): 100 s was too short on 2026-11-29 (609 of 617 done, none failed), so 200 s.
    tests="ws:64:3:128:2:pingpong:persist:tailsplit ws:128:2:128:2:pingpong:tailsplit5"
    # memcheck on the odd shapes with two of the new variants only (and every item in five)
    FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS="$tests" \
        FLASH_SANITIZE_CONFIGS="ws:128:2:128:2:pingpong:tailsplit ws:64:3:128:2:pingpong:persist:tailsplit" \
        tests_beside_memcheck tests/compute/gpu/test_flash.py "${TAIL_TEST_TIMEOUT:-200}" \
        "${TAIL_MC_TIMEOUT:-200}"
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare flash_vs_sdpa "${TAIL_TIMEOUT:-105}" \
            --n 4096 8192 16384 --dtype float16 bfloat16 --dense-max-n 0 --tune $tune \
            --json "$OUT/flash_vs_sdpa_ws_h200.json"
        sed -n '/^summary/,$p' "$OUT/flash_vs_sdpa.log"
    fi
fi
if [ "$what" = steady ]; then
    tests=${STEADY_TESTS-"ws:128:2:176:2:pingpong:tailsplit"}
    tune=${STEADY_TUNE-"ws:128:2:128:2:pingpong:tailsplit ws:128:2:176:2:pingpong ws:128:2:176:2:pingpong:tailsplit"}
    if [ -n "$tests" ]; then
        FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS="$tests" FLASH_SANITIZE_CONFIGS="$tests" \
            tests_beside_memcheck "${STEADY_TEST_PATHS:-tests/compute/gpu/test_flash.py}" 200 200
    fi
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare flash_vs_sdpa "${STEADY_TIMEOUT:-200}" \
            --n 4096 8192 16384 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1 \
            --tune $tune --json "$OUT/flash_vs_sdpa_ws_h200.json"
        sed -n '/^summary/,$p' "$OUT/flash_vs_sdpa.log"
    fi
fi
if [ "$what" = mcast ]; then
    specs="ws:128:2:176:2:pingpong:mcast ws:128:2:128:2:pingpong:mcast ws:64:3:128:2:pingpong:mcast"
    step pytest_mcast 150 python3 -m pytest tests/compute/gpu/test_flash.py -q -x \
        -p no:cacheprovider -n 8 -k "multicast"
    if [ $rc -eq 0 ]; then
        FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_SANITIZE_CONFIGS="$specs" step memcheck 150 \
            compute-sanitizer --tool memcheck --error-exitcode 1 \
            python3 -m compute.gpu.lab.sanitize_cases
        grep -E "ERROR SUMMARY" "$OUT/memcheck.log"
    fi
    if [ $rc -eq 0 ]; then
        tune=${MCAST_TUNE-"ws:128:2:176:2:pingpong $specs"}
        # shellcheck disable=SC2086
        compare flash_vs_sdpa "${MCAST_TIMEOUT:-150}" \
            --n 4096 8192 16384 --dtype float16 bfloat16 --causal 0 --dense-max-n 0 \
            --preheat 1 --tune $tune --json "$OUT/flash_vs_sdpa_mcast_h200.json"
    fi
fi
if [ "$what" = record ]; then
    # Since v12 the GPU tests take about 385 s beside memcheck, so a record is two calls:
    # RECORD_BENCH=0 (the tests), then RECORD_TESTS=0 (the timing, on the same tree).
    if [ "${RECORD_TESTS:-1}" != 0 ]; then
        FLASH_TEST_CONFIGS= FLASH_SANITIZE_CONFIGS= tests_beside_memcheck tests/compute/gpu \
            "${RECORD_TEST_TIMEOUT:-450}" "${RECORD_TEST_TIMEOUT:-450}"
    fi
    if [ $rc -eq 0 ] && [ "${RECORD_BENCH:-1}" != 0 ]; then
        tune=${RECORD_TUNE-"ws:128:2:128:2:pingpong ws:128:2:176:2:pingpong:lpt"}
        # shellcheck disable=SC2086
        step flash_vs_sdpa 280 python3 -m compute.gpu.lab.flash_vs_sdpa \
            --n 4096 8192 16384 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1 \
            --tune $tune --json "$OUT/flash_vs_sdpa_ws_h200.json"
        sed -n '/^summary/,$p' "$OUT/flash_vs_sdpa.log" | grep -v "rel err.* ok"
        if [ "${RECORD_FIGURES:-1}" != 0 ]; then  # 0: no default of the report's cases changed
            step figures 150 python3 -m compute.gpu.lab.figures \
                --keep compute/gpu/reports/tiled_vs_dense_h200.json \
                --out "$OUT/tiled_vs_dense_h200.json"
            sed -n '/^dtype  N/,$p' "$OUT/figures.log" | head -30
        fi
    fi
fi
if [ "$what" = v9 ]; then
    specs=${V9_SPECS-"ws:128:2:192:2:pingpong ws:128:2:128:2:pingpong:qreg ws:128:2:176:2:pingpong:wgrelease"}
    FLASH_TEST_CONFIGS= FLASH_SANITIZE_CONFIGS="$specs" tests_beside_memcheck tests/compute/gpu \
        "${V9_TEST_TIMEOUT:-300}" "${V9_TEST_TIMEOUT:-300}"
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare flash_vs_sdpa 150 \
            --n 4096 8192 16384 --d 128 --causal 0 --dtype float16 bfloat16 --dense-max-n 0 \
            --preheat 1 --tune $specs --json "$OUT/flash_vs_sdpa_v9_h200.json"
    fi
    sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats"
    sections="$sections --section MemoryWorkloadAnalysis_Tables --section WarpStateStats"
    for path in ours cudnn; do
        regex=flash_fwd_ws
        [ $path = cudnn ] && regex=cudnn_generated
        # shellcheck disable=SC2086
        step "ncu_$path" 120 ncu $sections --kernel-name "regex:$regex" --launch-skip 2 \
            --launch-count 1 python3 -m compute.gpu.lab.profile_pair --path $path
    done
fi
if [ "$what" = v9b ]; then
    specs=${V9B_SPECS-"ws:128:2:176:2:pingpong:narrowtail ws:128:2:192:2:pingpong:narrowtail"}
    FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS= FLASH_SANITIZE_CONFIGS="$specs" \
        tests_beside_memcheck "tests/compute/gpu/test_flash.py -k narrow" 200 200
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare flash_vs_sdpa 200 \
            --n 4096 8192 16384 --d 128 --dtype float16 bfloat16 --dense-max-n 0 \
            --preheat 1 --settle 0.25 --tune $specs --json "$OUT/flash_vs_sdpa_v9b_h200.json"
    fi
fi
if [ "$what" = v9c ]; then
    specs=${V9C_SPECS-"ws:128:2:192:2:pingpong ws:128:2:192:2:pingpong:lpt"}
    common="--d 128 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1"
    # shellcheck disable=SC2086
    compare flash_vs_sdpa 200 --n 4096 8192 16384 \
        $common --settle 0.25 --tune $specs --json "$OUT/flash_vs_sdpa_v9c_settled_h200.json"
    # shellcheck disable=SC2086
    compare unsettled 100 --n 8192 16384 --causal 0 \
        $common --settle 0 --tune ${specs%% *} --json "$OUT/flash_vs_sdpa_v9c_unsettled_h200.json"
    # shellcheck disable=SC2086
    step energy 100 python3 -m compute.gpu.lab.energy_probe --n 16384 --spec ${specs%% *} \
        --json "$OUT/energy_probe_n16384_h200.json"
    cat "$OUT/energy.log"
fi
if [ "$what" = v10 ]; then
    full=${V10_FULL-"ws:128:2:176:2:pingpong:persist:panelo ws:128:2:176:2:pingpong:tailsplit ws:128:2:176:2:pingpong:persist:panelo:tailsplit ws:128:2:128:2:pingpong:persist"}
    causal=${V10_CAUSAL-"ws:128:2:176:2:pingpong:persist:lpt:panelo ws:128:2:128:2:pingpong:persist:lpt:panelo ws:128:2:128:2:pingpong:persist:lpt ws:64:3:128:2:pingpong:persist:lpt"}
    specs=${V10_SPECS-"ws:128:2:176:2:pingpong:persist:lpt:panelo ws:128:2:176:2:pingpong:persist:panelo:tailsplit"}
    FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS= FLASH_SANITIZE_CONFIGS="$specs" \
        tests_beside_memcheck "tests/compute/gpu/test_flash.py -k panel" 200 200
    common="--n ${V10_N:-4096 8192} --dtype float16 bfloat16 --dense-max-n 0 --preheat 1"
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare full 200 $common --causal 0 \
            --tune $full --json "$OUT/flash_vs_sdpa_v10_full_h200.json"
        # shellcheck disable=SC2086
        compare causal 200 $common --causal 1 \
            --tune $causal --json "$OUT/flash_vs_sdpa_v10_causal_h200.json"
    fi
fi
if [ "$what" = v10b ]; then
    FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS= FLASH_SANITIZE_CONFIGS="$WS_DEFAULTS" \
        tests_beside_memcheck "$(printf 'tests/compute/gpu/test_flash.py::test_%s ' \
        matches_float64 ws_causal_warpgroups_stop_at_their_diagonal \
        ws_padded_warpgroups_skip_exactly ws_persistent_panel_staged_o_exact)" 200 200
    if [ $rc -eq 0 ]; then
        tune="ws:64:3:128:2:pingpong:lpt:wgalltiles ws:128:2:176:2:pingpong:persist:lpt:panelo:wgalltiles"
        # shellcheck disable=SC2086
        compare causal 250 --n 4096 8192 16384 \
            --dtype float16 bfloat16 --dense-max-n 0 --preheat 1 --causal 1 --tune $tune \
            --json "$OUT/flash_vs_sdpa_v10b_causal_h200.json"
    fi
fi
if [ "$what" = v11 ]; then
    specs=${V11_SPECS-"ws:128:2:176:2:pingpong:narrowfirst"}
    FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS="$specs" \
        FLASH_SANITIZE_CONFIGS="$WS_DEFAULTS $specs" \
        tests_beside_memcheck tests/compute/gpu/test_flash.py 240 240
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare flash_vs_sdpa 250 \
            --n 4096 8192 16384 --d 128 --causal "${V11_CAUSAL:-0}" --dtype float16 bfloat16 \
            --dense-max-n 0 --preheat 1 --tune $specs --json "$OUT/flash_vs_sdpa_v11_h200.json"
    fi
fi
if [ "$what" = v11b ]; then
    specs="ws:128:2:176:2:pingpong:narrowfirst ws:128:2:176:2:pingpong:narrowfirst:narrowfirstpv"
    FLASH_SANITIZE_ONLY_EXTRA=1 FLASH_TEST_CONFIGS= FLASH_SANITIZE_CONFIGS="$specs" \
        tests_beside_memcheck "tests/compute/gpu/test_flash.py -k narrow_first" 150 150
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare flash_vs_sdpa 150 --n 4096 8192 \
            --d 128 --causal 0 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1 \
            --tune $specs --json "$OUT/flash_vs_sdpa_v11b_h200.json"
    fi
fi
if [ "$what" = v12 ]; then
    full=${V12_FULL-"ws:128:2:176:2:pingpong:persist:panelo ws:128:2:176:2:pingpong:persist:panelo:earlyq ws:128:2:128:2:pingpong:persist:earlyq"}
    causal128=${V12_CAUSAL128-"ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq"}
    causal64=${V12_CAUSAL64-"ws:64:3:128:2:pingpong:persist:lpt ws:64:3:128:2:pingpong:persist:lpt:earlyq"}
    specs=${V12_SPECS-"ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq ws:64:3:128:2:pingpong:persist:lpt:earlyq"}
    # (PYTEST_ADDOPTS is split like a shell line, so the -k expression keeps its spaces)
    PYTEST_ADDOPTS="-k 'earlyq or many_tiles'" FLASH_SANITIZE_ONLY_EXTRA=1 \
        FLASH_TEST_CONFIGS="$specs" FLASH_SANITIZE_CONFIGS="$WS_DEFAULTS $specs" \
        tests_beside_memcheck tests/compute/gpu/test_flash.py 200 240
    common="--n 4096 8192 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1"
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare full 150 $common --d 128 --causal 0 \
            --tune $full --json "$OUT/flash_vs_sdpa_v12_full_h200.json"
        # shellcheck disable=SC2086
        compare causal128 100 $common --d 128 --causal 1 \
            --tune $causal128 --json "$OUT/flash_vs_sdpa_v12_causal128_h200.json"
        # shellcheck disable=SC2086
        compare causal64 100 $common --d 64 --causal 1 \
            --tune $causal64 --json "$OUT/flash_vs_sdpa_v12_causal64_h200.json"
    fi
fi
if [ "$what" = v13 ]; then
    logs_in_tmp v13
    specs=${V13_SPECS-"ws:64:3:128:2:pingpong:lpt:endq ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq:endq"}
    switch_tests "$specs" "endq or end_aligned or trace or many_tiles" 240
    if [ $rc -eq 0 ]; then
        causal64=${V13_CAUSAL64-"ws:64:3:128:2:pingpong:lpt:endq ws:64:3:128:2:pingpong:persist:lpt:endq ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq"}
        # shellcheck disable=SC2086
        compare causal64 150 --n 4096 8192 --dtype float16 bfloat16 --dense-max-n 0 \
            --preheat 1 --d 64 --causal 1 --tune $causal64 \
            --json "$back/flash_vs_sdpa_v13_causal64_h200.json"
        trace() {  # trace NAME D CAUSAL DTYPE SPECS...
            local name=$1 d=$2 causal=$3 dtype=$4
            shift 4
            step "trace_$name" 120 python3 -m compute.gpu.lab.item_trace --n 4096 --d "$d" \
                --causal "$causal" --dtype "$dtype" --spec "$@" \
                --json "$back/item_trace_v13_${name}_h200.json" --npz "$OUT/trace_$name.npz"
            cat "$OUT/trace_$name.log"
        }
        trace d64_causal 64 1 float16 ws:64:3:128:2:pingpong:lpt ws:64:3:128:2:pingpong:lpt:endq \
            ws:64:3:128:2:pingpong:persist:lpt ws:64:3:128:2:pingpong:persist:lpt:earlyq
        trace d128_causal 128 1 float16 ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq \
            ws:128:2:176:2:pingpong:lpt
        trace d128_full 128 0 bfloat16 ws:128:2:128:2:pingpong:persist:earlyq \
            ws:128:2:176:2:pingpong
        tar -czf "$back/item_trace_v13_records.tgz" -C "$OUT" trace_d64_causal.npz \
            trace_d128_causal.npz trace_d128_full.npz
    fi
fi
if [ "$what" = v13b ]; then
    logs_in_tmp v13b
    specs=${V13B_SPECS-"ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq:qprefetch ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq:qprefetch ws:128:2:128:2:pingpong:persist:earlyq:qprefetch"}
    switch_tests "$specs" qprefetch 150
    common="--n 4096 8192 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1"
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare causal128 130 $common --d 128 --causal 1 --tune \
            ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq:qprefetch \
            ws:128:2:128:2:pingpong:persist:lpt:earlyq:qprefetch \
            --json "$back/flash_vs_sdpa_v13b_causal128_h200.json"
        # shellcheck disable=SC2086
        compare causal64 130 $common --d 64 --causal 1 --tune \
            ws:64:3:128:2:pingpong:persist:lpt:earlyq \
            ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq \
            ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq:qprefetch \
            --json "$back/flash_vs_sdpa_v13b_causal64_h200.json"
        # shellcheck disable=SC2086
        compare full128 130 $common --d 128 --causal 0 --tune \
            ws:128:2:128:2:pingpong:persist:earlyq:qprefetch \
            ws:128:2:176:2:pingpong:persist:panelo:earlyq:qprefetch \
            --json "$back/flash_vs_sdpa_v13b_full128_h200.json"
    fi
fi
if [ "$what" = v13c ]; then
    logs_in_tmp v13c
    specs=${V13C_SPECS-"ws:128:2:128:2:pingpong:persist:qreg:earlyq ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq"}
    FLASH_TEST_CONFIGS="$specs" FLASH_SANITIZE_CONFIGS="$specs" \
        tests_beside_memcheck tests/compute/gpu 450 450
    grep -E "passed|failed|error" "$OUT/pytest.log" | tail -5
    common="--n 4096 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1 --d 128"
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare full128 110 $common --causal 0 --tune $specs \
            --json "$back/flash_vs_sdpa_v13c_full128_h200.json"
        # shellcheck disable=SC2086
        compare causal128 110 $common --causal 1 --tune $specs \
            --json "$back/flash_vs_sdpa_v13c_causal128_h200.json"
    fi
fi
if [ "$what" = v13d ]; then
    logs_in_tmp v13d
    probe() {  # probe N D DTYPE SPECS...
        local n=$1 d=$2 dtype=$3
        shift 3
        step "probe_${d}_${n}_$dtype" 120 python3 -m compute.gpu.lab.section_probe --n "$n" \
            --d "$d" --dtype "$dtype" --causal 1 --spec "$@" \
            --json "$back/section_probe_v13_d${d}_n${n}_${dtype}_h200.json"
        grep -E "TFLOP|balanced against" "$OUT/probe_${d}_${n}_$dtype.log"
    }
    d128="ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq ws:128:2:176:2:pingpong:persist:lpt:panelo:earlyq"
    # shellcheck disable=SC2086
    probe 4096 128 float16 $d128
    # shellcheck disable=SC2086
    probe 4096 128 bfloat16 $d128
    probe 4096 64 float16 ws:64:3:128:2:pingpong:lpt
    probe 4096 64 bfloat16 ws:64:3:128:2:pingpong:lpt
    probe 8192 64 float16 ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq
    step trace 120 python3 -m compute.gpu.lab.item_trace --n 4096 --d 128 --causal 1 \
        --spec ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq \
        ws:128:2:128:2:pingpong:persist:qreg:earlyq \
        --json "$back/item_trace_v13_call8_causal_h200.json"
    cat "$OUT/trace.log"
fi
if [ "$what" = v14 ]; then
    logs_in_tmp v14
    specs=${V14_SPECS-"ws:128:2:128:2:pingpong:persist:earlyq:sktail ws:128:2:176:2:pingpong:persist:panelo:earlyq:sktail ws:64:3:128:2:pingpong:persist:sktail"}
    switch_tests "$specs" "stream_k or sktail" 240
    if [ $rc -eq 0 ]; then
        # shellcheck disable=SC2086
        compare full128 240 --n 4096 8192 16384 --dtype float16 bfloat16 --dense-max-n 0 \
            --preheat 1 --d 128 --causal 0 --tune \
            ws:128:2:128:2:pingpong:persist:earlyq ws:128:2:128:2:pingpong:persist:earlyq:sktail \
            ws:128:2:176:2:pingpong:persist:panelo:earlyq \
            ws:128:2:176:2:pingpong:persist:panelo:earlyq:sktail \
            --json "$back/flash_vs_sdpa_v14_full128_h200.json"
    fi
fi
if [ "$what" = v14b ]; then
    logs_in_tmp v14b
    specs=${V14B_SPECS-"ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq:uniform ws:64:3:128:2:pingpong:persist:uniform ws:128:2:128:2:pingpong:persist:lpt:qreg:earlyq:uniform"}
    switch_tests "$specs" "uniform" 200
    common="--n 4096 8192 --dtype float16 bfloat16 --dense-max-n 0 --preheat 1 --d 64"
    if [ $rc -eq 0 ]; then
        step trace 120 python3 -m compute.gpu.lab.item_trace --n 4096 --d 64 --causal 1 \
            --spec ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq \
            ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq:uniform ws:64:3:128:2:pingpong:lpt \
            --json "$back/item_trace_v14_uniform_d64_causal_h200.json"
        cat "$OUT/trace.log"
        # shellcheck disable=SC2086
        compare causal64 120 $common --causal 1 --tune \
            ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq \
            ws:64:3:128:2:pingpong:persist:lpt:earlyq:endq:uniform \
            --json "$back/flash_vs_sdpa_v14b_causal64_h200.json"
        # shellcheck disable=SC2086
        compare full64 120 $common --causal 0 --tune \
            ws:64:3:128:2:pingpong:persist ws:64:3:128:2:pingpong:persist:uniform \
            --json "$back/flash_vs_sdpa_v14b_full64_h200.json"
    fi
fi
exit $rc
