#!/usr/bin/env bash
# One device-machine call: GPU tests, then the README figures. Logs and JSON land in $OUT.
#   run: bash compute/gpu/devrun.sh [tests|figures|all]
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
what=${1:-all}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    >"$OUT/smi.txt" 2>&1
python3 -c "import compute.gpu as g; print(g.status().describe())" | tee "$OUT/status.txt"
rc=0
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
