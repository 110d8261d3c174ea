#!/usr/bin/env bash
# After a refactor of the engine's silent-failure path, the fp8 pool sizing and the SDPA
# dispatch: those paths again on the GPU, natively and under memcheck. Usage: OUTDIR
K=.bin/kedge; O=${1:?outdir}; mkdir -p "$O"; export KEDGE_CACHE_DIR=/tmp/kc
{ echo "commit: $(cat .bin/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; compute-sanitizer --version | tail -1; } > "$O/env.txt"
R="$O/results.jsonl"
t() { local n=$1; shift; "$@" --results "$R" > "$O/$n.log" 2>&1; echo "$n rc=$?" >> "$O/summary.txt"; tail -1 "$O/$n.log" | cut -c1-300 >> "$O/summary.txt"; }
M='-p max_buffer_bytes=16777216'
for imp in unfused-fallback unfused-checked mlx-dispatch chunked; do
  t sdpa-$imp-513 $K run -o sdpa_prefill --impl $imp --ne 256,513,16,1 $M
  t sdpa-$imp-513-memcheck $K run -o sdpa_prefill --impl $imp --ne 256,513,16,1 $M --sanitize memcheck
done
t sdpa-dispatch-h200-limit $K run -o sdpa_prefill --impl mlx-dispatch --ne 256,49152,16,1 --timeout 600
for g in cublaslt simt; do
  S=(-o fp8_gemm --impl bucketed-short --ne 3072,300,3072,1 --dtype bf16 -p gemm=$g -p scratch=pool -p pool_prior_rows=512)
  t fp8-$g-pool $K run "${S[@]}" --alloc exact,guard
  t fp8-$g-pool-nvtx-memcheck $K run "${S[@]}" -p nvtx=true --sanitize memcheck
done
t fp8-bucketed-pool-memcheck $K run -o fp8_gemm --impl bucketed --ne 3072,300,3072,1 --dtype bf16 -p scratch=pool -p nvtx=true --sanitize memcheck
cat "$O/summary.txt"
