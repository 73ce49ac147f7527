#!/usr/bin/env bash
# Nsight Compute profiles of our ws backward and FA4's sm90 backward on the same inputs
# (lab/backward_profile.py), one main-kernel launch each, full section set with warp-state
# sampling; text exports (raw metrics CSV, details, per-SASS-line source counters) packed into
# $OUT/prof.tgz. From the repository root on the GPU machine, FA4 on PYTHONPATH:
#   bash compute/gpu/lab/backward_ncu.sh [N] [dtype] [causal] [d ...]
# PATHS="ours" profiles ours alone. BACKWARD_NOTES.md ("Nsight Compute: ours against FA4")
# reads these.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-out}
n=${1:-8192}
dt=${2:-bfloat16}
causal=${3:-0}
shift 3 2>/dev/null || shift $#
ds=${*:-64 128}
dir=$(mktemp -d)
for d in $ds; do
    for path in ${PATHS:-ours fa4}; do
        if [ $path = ours ]; then kn=regex:flash_bwd_ws; else kn=regex:BackwardSm90; fi
        tag=${path}_d${d}_n${n}_c${causal}
        timeout 150 ncu --clock-control none --kernel-name "$kn" --launch-skip 1 --launch-count 1 \
            --set full -f -o "$dir/$tag" \
            python3 -m compute.gpu.lab.backward_profile --path $path --d "$d" --n "$n" \
            --dtype "$dt" --causal "$causal" >"$dir/$tag.log" 2>&1
        echo "== $tag rc=$?"
        tail -3 "$dir/$tag.log"
        [ -f "$dir/$tag.ncu-rep" ] || continue
        ncu -i "$dir/$tag.ncu-rep" --page raw --csv >"$dir/$tag.raw.csv" 2>&1
        ncu -i "$dir/$tag.ncu-rep" --page details --print-units base >"$dir/$tag.details.txt" 2>&1
        ncu -i "$dir/$tag.ncu-rep" --page source --csv --print-source sass \
            >"$dir/$tag.sass.csv" 2>&1 || true
        rm -f "$dir/$tag.ncu-rep"
    done
done
tar -C "$dir" -czf "$OUT/prof.tgz" .
ls -la "$dir" "$OUT/prof.tgz"
