#!/usr/bin/env bash
# Issue 6 on a GPU: selftest (native part), minimize + repro of the rms_norm incident, the
# standalone repro.cu built with nvcc and run, every zoo planted kernel under the
# compute-sanitizer tool it is planted for (through its standalone repro.cu, so this checks
# the kernels independently of kedge's sanitizer driver), and a short native fuzz run.
# Usage: scripts/issue6-gpu.sh OUTDIR   (KEDGE=path/to/kedge, default .bin/kedge)
set -u
OUT=${1:?outdir}
K=${KEDGE:-.bin/kedge}
mkdir -p "$OUT"
export KEDGE_CACHE_DIR=/tmp/kedge-cache
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  compute-sanitizer --version | tail -1; nvcc --version | tail -2
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== selftest (native + cpu; sanitizer groups need the sanitizer driver)"
time $K selftest --out "$OUT/selftest" > "$OUT/selftest.out" 2> "$OUT/selftest.err"; echo "selftest rc=$?"
cat "$OUT/selftest/selftest.md"

echo "== minimize + repro: rms_norm incident, natively"
INC='{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}'
time $K minimize "$INC" --out "$OUT/minimize-rms_norm" > "$OUT/minimize-rms_norm.out" 2> "$OUT/minimize-rms_norm.err"; echo "minimize rc=$?"
sed -n '/# minimized/,/## (c)/p' "$OUT/minimize-rms_norm.out"
$K repro "$INC" --out "$OUT/repro-rms_norm" > /dev/null 2>&1; echo "repro rc=$?"
( cd "$OUT/repro-rms_norm" && nvcc -arch=sm_90 -o repro repro.cu > nvcc.log 2>&1; echo "nvcc rc=$?"; ./repro > run.out 2>&1; echo "repro.cu run rc=$? (expect 1: launch refused)"; cat run.out )
PASS='{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65535,1]}'
$K repro "$PASS" --out "$OUT/repro-rms_norm-65535" > /dev/null 2>&1
( cd "$OUT/repro-rms_norm-65535" && nvcc -arch=sm_90 -o repro repro.cu > nvcc.log 2>&1; ./repro > run.out 2>&1; echo "repro.cu at 65535 rc=$? (expect 0)"; cat run.out )

echo "== zoo planted kernels under their tools (standalone repro.cu, exact cudaMalloc)"
zoo() { # impl tool [extra sanitizer args]
  local imp=$1 tool=$2; shift 2
  local d="$OUT/zoo/$imp-$tool"
  mkdir -p "$d"
  $K repro "{\"op\":\"zoo_rows\",\"impl\":\"$imp\",\"dtype\":\"f32\",\"ne\":[1000,3,1,1]}" --out "$d" > /dev/null 2>&1
  ( cd "$d" && nvcc -arch=sm_90 -o repro repro.cu > nvcc.log 2>&1 || { echo "$imp: nvcc failed"; cat nvcc.log; return; }
    compute-sanitizer --tool "$tool" "$@" --error-exitcode 99 ./repro > san.out 2>&1
    local rc=$?
    echo "$imp under $tool: rc=$rc; $(grep -m1 -E 'ERROR SUMMARY|Invalid|Uninitialized|Race|hazard' san.out)" )
}
for imp in clean planted-read-past-row-end-last-block planted-read-before-start planted-write-past-end; do zoo $imp memcheck --padding 512; done
for imp in clean planted-uninit-global-read; do zoo $imp initcheck; done
for imp in clean planted-missing-syncthreads; do zoo $imp racecheck; done
for imp in planted-unwritten-tail planted-wrong-at-one-size; do zoo $imp memcheck --padding 512; done

echo "== fuzz (native, 100 cases)"
time $K fuzz --cases 100 --finds "$OUT/fuzz-finds.jsonl" > "$OUT/fuzz.out" 2> "$OUT/fuzz.err"; echo "fuzz rc=$?"
tail -5 "$OUT/fuzz.out"; tail -3 "$OUT/fuzz.err"
ls -R "$OUT" | head -80
