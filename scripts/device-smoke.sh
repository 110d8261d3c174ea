#!/usr/bin/env bash
# First contact with the GPU machine: environment facts, live limits, the rms_norm sweep in
# exact and guard modes, the calibration impl natively and under memcheck, and raw sanitizer
# XML captures (fixtures for the parser). Usage: scripts/device-smoke.sh OUTDIR
set -u
OUT=${1:?outdir}
K=${KEDGE:-.bin/kedge}
mkdir -p "$OUT"
export KEDGE_CACHE_DIR=/tmp/kedge-cache
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  compute-sanitizer --version | tail -1; nvcc --version | tail -2
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
$K limits > "$OUT/limits.txt" 2>&1; echo "limits rc=$?"; cat "$OUT/limits.txt"
time $K sweep default -o rms_norm --alloc exact,guard --out "$OUT/rms" ; echo "sweep rc=$?"
P='{"op":"rms_norm","impl":"planted-read-past-end","dtype":"f32","ne":[64,4,3,1]}'
C='{"op":"rms_norm","impl":"clamped","dtype":"f32","ne":[64,4,3,1]}'
for m in exact guard guard-front canary; do $K run --case "$P" --alloc $m; echo "planted $m rc=$?"; done
# Raw sanitizer captures: a clean case, then the planted one, in one worker (markers between).
for tool in memcheck; do
  printf '%s\n%s\n%s\n' "$C" "$(echo $P | sed 's/}$/,"alloc":"exact"}/')" "$C" | \
    compute-sanitizer --tool $tool --xml --save "$OUT/$tool-batch.xml" --report-api-errors explicit $K worker > "$OUT/$tool-batch.out" 2> "$OUT/$tool-batch.err"
  echo "$tool rc=$?"
  printf '%s\n%s\n' "$C" "$(echo $P | sed 's/}$/,"alloc":"exact"}/')" | \
    compute-sanitizer --tool $tool $K worker > "$OUT/$tool-text.out" 2>&1
  echo "$tool text rc=$?"
done
ls -la "$OUT"
