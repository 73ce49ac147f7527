#!/usr/bin/env bash
# One device call for a ws-backward change: the backward's GPU tests, compute-sanitizer
# racecheck and memcheck of the ws modes on odd shapes, then backward_vs_fa4 on the modes
# given (FA4 joins as a peer where flash_attn.cute imports). From the repository root on the
# GPU machine; logs and JSON land in $OUT.
#   MODES="13 9" SAN_MODES="7 9" N="8192 16384" D="64 128" bash compute/gpu/lab/backward_round.sh
# TEST_LIMIT / TIME_BUDGET bound the steps; SKIP_TESTS=1 goes straight to the timing;
# XDIST=N runs the tests on N pytest-xdist workers; SKIP_BAND_SAN=1 leaves out the band's
# sanitizer runs;
# BAND_TIMING="ARGS" adds lab/backward_band.py ARGS (the band against causal) at the end;
# SAN_KW=", dims=(128,)" narrows the sanitizer cases (mode 13 is d = 128 only);
# CAUSAL=0 or 1 times only the full or the causal cases.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-out}
mkdir -p "$OUT"
rc=0
. "$(dirname "${BASH_SOURCE[0]}")/steps.sh"
if [ -z "${SKIP_TESTS:-}" ]; then
    step pytest "${TEST_LIMIT:-240}" python3 -m pytest tests/compute/gpu/test_flash_backward.py \
        -q -x -p no:cacheprovider ${XDIST:+-n $XDIST -o addopts= -m "not compile"} ${TEST_ARGS:-}
    for m in ${SAN_MODES:-7 9}; do
        step "racecheck_m$m" "${SAN_LIMIT:-120}" compute-sanitizer --tool racecheck --kernel-name kns=flash_bwd_ws \
            --error-exitcode 1 python3 -c "import numpy as np; from compute.gpu.lab.sanitize_cases \
import backward_cases as b; b(np.random.default_rng(7), cases=[(1, 77, 300)], \
dtypes=('float16',), mode=$m${SAN_KW:-})"
        grep -E "RACECHECK SUMMARY" "$OUT/racecheck_m$m.log"
        step "memcheck_m$m" "${SAN_LIMIT:-120}" compute-sanitizer --tool memcheck --kernel-name kns=flash_bwd \
            --error-exitcode 1 python3 -c "import numpy as np; from compute.gpu.lab.sanitize_cases \
import backward_cases as b, CASES; b(np.random.default_rng(9), cases=CASES[:3], mode=$m${SAN_KW:-})"
        grep -E "ERROR SUMMARY" "$OUT/memcheck_m$m.log"
    done
    if [ -z "${SKIP_BAND_SAN:-}" ]; then
        step band_racecheck 120 compute-sanitizer --tool racecheck \
            --kernel-name kns=flash_bwd_ws --error-exitcode 1 \
            python3 -m compute.gpu.lab.backward_band --sanitize
        grep -E "RACECHECK SUMMARY" "$OUT/band_racecheck.log"
        step band_memcheck 120 compute-sanitizer --tool memcheck --kernel-name kns=flash_bwd \
            --error-exitcode 1 python3 -m compute.gpu.lab.backward_band --sanitize
        grep -E "ERROR SUMMARY" "$OUT/band_memcheck.log"
    fi
fi
TAIL=40 step timing "${TIME_LIMIT:-300}" python3 -m compute.gpu.lab.backward_vs_fa4 \
    --dtype ${DTYPES:-bfloat16} --d ${D:-64 128} --n ${N:-8192 16384} --modes ${MODES:-9} \
    --peers ${PEERS:-sdpa-cudnn} ${CAUSAL:+--causal $CAUSAL} --settle 0.1 --preheat 0.5 \
    --budget-s "${TIME_BUDGET:-150}" \
    --json "$OUT/${JSON:-timing}.json"
if [ -n "${BAND_TIMING:-}" ]; then
    TAIL=12 step band_timing "${BAND_LIMIT:-120}" python3 -m compute.gpu.lab.backward_band \
        --json "$OUT/band.json" $BAND_TIMING
fi
exit $rc
