#!/usr/bin/env bash
# kedge's whole GPU check in one call on a machine with a GPU, compute-sanitizer and nvcc.
#   scripts/device-check.sh OUTDIR [PART ...]      (default: every part)
# Parts: env native guard memcheck int32 selftest incidents fp8 plugin source fixtures attribution
# Writes OUTDIR/summary.txt and OUTDIR/kedge-gpu.tar.gz (everything else, to commit under reports/).
set -u
OUT=${1:?usage: scripts/device-check.sh OUTDIR [PART ...]}; shift
PARTS=" ${*:-env native guard memcheck int32 selftest incidents fp8 plugin source fixtures attribution} "
K=${KEDGE:-$PWD/.bin/kedge}
W="$OUT/work"; mkdir -p "$W"
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
SUM="$OUT/summary.txt"; : > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
want() { [[ "$PARTS" == *" $1 "* ]]; }
run() { # run NAME CMD...: time it, keep its output, note its exit status
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" > "$W/$name.log" 2>&1; local rc=$?
  local t1=$(date +%s%N)
  say "$(printf '%-34s rc=%-3s %8d ms' "$name" "$rc" $(( (t1 - t0) / 1000000 )))"
  tail -n 3 "$W/$name.log" | sed 's/^/    /' | tee -a "$SUM" >/dev/null
  return 0
}

if want env; then
  { echo "commit: $(cat .bin/COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null)"; date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    compute-sanitizer --version | tail -1; nvcc --version | tail -1; } > "$W/env.txt" 2>&1
  cat "$W/env.txt" | tee -a "$SUM"
  run limits "$K" limits
fi

# The default suite (smoke + boundary) of every op, natively, in guard mode, under memcheck.
want native && run sweep-native "$K" sweep default --alloc exact --out "$W/native"
want guard && run sweep-guard "$K" sweep default --alloc guard --out "$W/guard"
want memcheck && run sweep-memcheck "$K" sweep default --alloc exact --sanitize memcheck --max-elements 268435456 --out "$W/memcheck"
for d in native guard memcheck; do
  [ -f "$W/$d/results.jsonl" ] && "$K" report "$W/$d/results.jsonl" --out "$W/$d" > /dev/null 2>&1
done

# Index width: 2^31 elements exactly, and one row more (16 GiB per tensor pair on the device).
if want int32; then
  for n in 2097152 2097153; do
    run cumsum-2e31-$n "$K" run -o cumsum --impl int32-index --ne 1024,$n,1,1 --timeout 900 --results "$W/int32.jsonl"
    run cumsum-2e31-$n-clamped "$K" run -o cumsum --impl clamped --ne 1024,$n,1,1 --timeout 900 --results "$W/int32.jsonl"
  done
fi

if want plugin; then
  ( cd examples/plugin-rmsnorm && \
    nvcc -O2 -arch=sm_90 -Xcompiler -fPIC -shared -I../../harness/include rmsnorm_plugin.cu -o "$W/libkedge_rmsnorm.so" && \
    nvcc -O2 -arch=sm_90 -Xcompiler -fPIC -shared -I../../harness/include rmsnorm_plugin_oob.cu -o "$W/libkedge_rmsnorm_oob.so" ) > "$W/plugin-build.log" 2>&1
  say "plugin build rc=$?"
  run plugin-sweep "$K" sweep default -o rms_norm --plugin "$W/libkedge_rmsnorm.so" --impl plugin:example-rmsnorm --alloc exact,guard,canary --out "$W/plugin"
  OOB='{"op":"rms_norm","impl":"plugin:example-rmsnorm-oob","dtype":"f32","ne":[64,5,4,3]}'
  run plugin-oob-exact "$K" run --plugin "$W/libkedge_rmsnorm_oob.so" --case "$OOB" --alloc exact --results "$W/plugin-oob.jsonl"
  run plugin-oob-guard "$K" run --plugin "$W/libkedge_rmsnorm_oob.so" --case "$OOB" --alloc guard --results "$W/plugin-oob.jsonl"
  run plugin-oob-memcheck "$K" run --plugin "$W/libkedge_rmsnorm_oob.so" --case "$OOB" --alloc exact --sanitize memcheck --results "$W/plugin-oob.jsonl"
fi
if want source; then
  for g in clamped ggml; do
    run source-$g "$K" sweep default -o rms_norm --kernel examples/source-kernel/my_rms_norm.cu --entry my_rms_norm --geometry $g --impl source:my_rms_norm:$g --out "$W/source-$g"
  done
fi

# Attribution does not depend on luck: the same cases (clean ones and the calibration read past
# the end) under memcheck with 16 cases per worker and with one case per worker.
if want attribution; then
  SEL=(default -o rms_norm --impl clamped,planted-read-past-end --alloc exact --sanitize memcheck)
  run attribution-batch16 "$K" sweep "${SEL[@]}" --batch 16 --out "$W/attr-batch16"
  run attribution-batch1 "$K" sweep "${SEL[@]}" --batch 1 --out "$W/attr-batch1"
  run attribution-compare python3 scripts/compare-attribution.py "$W/attr-batch16/results.jsonl" "$W/attr-batch1/results.jsonl"
fi

if want fp8; then
  KEDGE="$K" run fp8-incident bash scripts/fp8-gemm-incident.sh "$W/fp8"
fi

tar czf "$OUT/kedge-gpu.tar.gz" -C "$W" . 2>/dev/null
say "archive: $(du -h "$OUT/kedge-gpu.tar.gz" | cut -f1)"
