#!/usr/bin/env bash
# One device-machine call: GPU tests, then the README figures. Logs and JSON land in $OUT.
#   run: bash compute/gpu/devrun.sh [tests|figures|all|tune]
#   tune: the bench CLI end to end (sweep, all kernels), source-variant timings, one ncu pass.
#   cli: the bench CLI end to end twice (float16 with sweep; float32 causal with N_q != N_k).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
what=${1:-all}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    >"$OUT/smi.txt" 2>&1
python3 -c "import compute.gpu as g; print(g.status().describe())" | tee "$OUT/status.txt"
rc=0
if [ "$what" = cli ]; then
    timeout 150 python3 -m compute.gpu.bench_cli --n 4096 --dtype float16 --kernel all \
        --sweep-blocks --block-q 128 --block-k 64 --json "$OUT/gpu_bench_cli_h200.json" \
        >"$OUT/cli.log" 2>"$OUT/cli.err"
    echo "bench_cli float16 rc=$?"
    timeout 120 python3 -m compute.gpu.bench_cli --n 4096 --n-keys 6144 --causal --dtype float32 \
        --kernel all --block-q 128 --block-k 64 --json "$OUT/gpu_bench_cli_causal_h200.json" \
        >>"$OUT/cli.log" 2>>"$OUT/cli.err"
    echo "bench_cli float32 causal rc=$?"
    tail -3 "$OUT/cli.err"
    cat "$OUT/cli.log"
    exit 0
fi
if [ "$what" = tune ]; then
    timeout 150 python3 -m compute.gpu.bench_cli --n 4096 --dtype float16 --kernel all \
        --sweep-blocks --json "$OUT/gpu_bench_cli_h200.json" >"$OUT/cli.log" 2>"$OUT/cli.err"
    echo "bench_cli rc=$?"
    tail -3 "$OUT/cli.err"
    cat "$OUT/cli.log"
    for dt in float32 float16; do
        timeout 90 python3 -m compute.gpu.tune_tiled --dtype $dt 2>&1 | tee -a "$OUT/tune.log"
    done
    timeout 150 ncu --clock-control none --kernel-name regex:tiled_q_outer --launch-skip 3 \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
        python3 -m compute.gpu.bench_cli --n 4096 --kernel tiled --block-q 128 --block-k 64 \
        >"$OUT/ncu.txt" 2>&1
    echo "ncu rc=$?"
    grep -E "Throughput|Pipe|Occupancy|Stall|Bank|Registers|Warp Cycles|Eligible|Issued" \
        "$OUT/ncu.txt" | head -40
    exit 0
fi
if [ "$what" != figures ]; then
    timeout 260 python3 -m pytest tests/gpu tests/test_cuda_sources_compile.py -q \
        -p no:cacheprovider -k "not test_flash" --durations=5 2>&1 | tee "$OUT/pytest.log" | tail -25
    rc=$?
fi
if [ "$what" != tests ]; then
    timeout "${FIG_TIMEOUT:-300}" python3 -m compute.gpu.figures --out "$OUT/gpu_tiled_h200.json" \
        >"$OUT/figures.log" 2>"$OUT/figures.err"
    echo "figures rc=$?"
    tail -5 "$OUT/figures.err"
    sed -n '/^dtype  N/,$p' "$OUT/figures.log"
fi
exit $rc
