# shellcheck shell=bash
# The step helper of the device-call scripts (gpu_run.sh, backward_round.sh), sourced by them.
# step NAME TIMEOUT CMD...: run, log to $OUT/NAME.log, print its tail (TAIL lines, 6 by
# default), keep the first failure's status in rc.
step() {
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local r=$?
    echo "== $name rc=$r"
    tail -"${TAIL:-6}" "$OUT/$name.log"
    [ $r -eq 0 ] || [ $rc -ne 0 ] || rc=$r
}
