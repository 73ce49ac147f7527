#!/usr/bin/env bash
# One device-machine call, from the repository root on the GPU machine; logs and JSON land in
# $OUT (default ./out). Each mode is a step with its own time limit; the call's exit status is
# the first failing step's.
#   bash compute/gpu/lab/gpu_run.sh tests      # the GPU tests (tests/compute/gpu, -m gpu)
#   bash compute/gpu/lab/gpu_run.sh sanitize   # compute-sanitizer memcheck over sanitize_cases
#   bash compute/gpu/lab/gpu_run.sh bench      # flash-explorer bench, small, fp16 and bf16
#   bash compute/gpu/lab/gpu_run.sh compare    # flash vs SDPA at N 4096 16384 (flash_vs_sdpa)
#   bash compute/gpu/lab/gpu_run.sh all        # tests, sanitize and bench
# GPU_TEST_ARGS adds pytest arguments (e.g. "-k ws"); BENCH_ARGS replaces bench's problem.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-out}
mkdir -p "$OUT"
what=${1:-all}
python3 -c "import compute.gpu as g; print(g.status().describe())" | tee "$OUT/status.txt"
rc=0
. "$(dirname "${BASH_SOURCE[0]}")/steps.sh"
if [ "$what" = tests ] || [ "$what" = all ]; then
    # shellcheck disable=SC2086
    step pytest "${TEST_LIMIT:-300}" python3 -m pytest tests/compute/gpu -q -x \
        -p no:cacheprovider ${GPU_TEST_ARGS:-}
fi
if [ "$what" = sanitize ] || [ "$what" = all ]; then
    step memcheck "${SANITIZE_LIMIT:-150}" compute-sanitizer --tool memcheck --error-exitcode 1 \
        python3 -m compute.gpu.lab.sanitize_cases
    grep -E "ERROR SUMMARY" "$OUT/memcheck.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    args=${BENCH_ARGS:-"--n 2048 --batch-heads 16 --repeats 20"}
    for dt in float16 bfloat16; do
        # shellcheck disable=SC2086
        step "bench_$dt" 120 python3 -m compute.gpu.bench_cli $args --dtype $dt \
            --json "$OUT/bench_cli_${dt}.json"
    done
fi
if [ "$what" = compare ]; then
    step flash_vs_sdpa 300 python3 -m compute.gpu.lab.flash_vs_sdpa --n 4096 16384 \
        --json "$OUT/flash_vs_sdpa.json"
fi
exit $rc
