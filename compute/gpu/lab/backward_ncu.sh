#!/usr/bin/env bash
# Nsight Compute profiles of our ws backward and FA4's sm90 backward on the same inputs
# (lab/backward_profile.py), one main-kernel launch each, full section set with warp-state
# sampling; text exports (raw metrics CSV, details, per-SASS-line source counters) packed into
# $OUT/prof.tgz; then every kernel of a second run, durations only (TAG.all.csv: the pre / post
# kernels' share of the last backward). From the repository root on the GPU machine, FA4 on
# PYTHONPATH:
#   bash compute/gpu/lab/backward_ncu.sh [N] [dtype] [causal] [d ...]
# PATHS="ours" profiles ours alone; REPS=1 also packs the .ncu-rep files into $OUT/reps.tgz.
# lab/ncu_side_by_side.py prints the side-by-side tables from the exports; BACKWARD_NOTES.md
# ("Nsight Compute: ours against FA4", round 52) reads them.
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
        ncu -i "$dir/$tag.ncu-rep" --page raw --csv --print-units base >"$dir/$tag.raw.csv" 2>&1
        ncu -i "$dir/$tag.ncu-rep" --page details --print-units base >"$dir/$tag.details.txt" 2>&1
        ncu -i "$dir/$tag.ncu-rep" --page source --csv --print-source sass \
            >"$dir/$tag.sass.csv" 2>&1 || true
        if [ "${REPS:-0}" = 1 ]; then mkdir -p "$dir/reps" && mv "$dir/$tag.ncu-rep" "$dir/reps/"; fi
        rm -f "$dir/$tag.ncu-rep"
    done
done
for d in $ds; do
    for path in ${PATHS:-ours fa4}; do
        tag=${path}_d${d}_n${n}_c${causal}
        timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum,launch__grid_size \
            -f -o "$dir/$tag.all" python3 -m compute.gpu.lab.backward_profile --path $path \
            --d "$d" --n "$n" --dtype "$dt" --causal "$causal" >"$dir/$tag.all.log" 2>&1
        echo "== $tag (all kernels) rc=$?"
        [ -f "$dir/$tag.all.ncu-rep" ] || continue
        ncu -i "$dir/$tag.all.ncu-rep" --page raw --csv --print-units base >"$dir/$tag.all.csv" 2>&1
        rm -f "$dir/$tag.all.ncu-rep"
    done
done
if [ -d "$dir/reps" ]; then tar -C "$dir/reps" -czf "$OUT/reps.tgz" . && rm -rf "$dir/reps"; fi
tar -C "$dir" -czf "$OUT/prof.tgz" .
ls -la "$dir" "$OUT"/*.tgz
python3 -m compute.gpu.lab.ncu_side_by_side "$dir" || true
