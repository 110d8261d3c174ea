#!/usr/bin/env bash
# The FP8 staging-overrun incident on the GPU: M = 300, K = 3072, N = 3072 at chunk 512
# (bucket 512; bucketed-short reads 212 x 3072 = 651,264 bytes past its staging).
# Natively (values + guard pages), then under compute-sanitizer memcheck, then the bucket-edge
# boundary sweep. Usage: scripts/fp8-gemm-incident.sh OUTDIR   (KEDGE=path/to/kedge)
set -u
OUT=${1:?outdir}
K=${KEDGE:-.bin/kedge}
mkdir -p "$OUT"
export KEDGE_CACHE_DIR=/tmp/kedge-cache
{
  date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  compute-sanitizer --version | tail -1
} > "$OUT/env.txt" 2>&1
R="$OUT/incident.jsonl"
for imp in bucketed-short bucketed exact-plan; do
  SEL=(-o fp8_gemm --impl $imp --ne 3072,300,3072,1 --dtype bf16)
  # strict: exact (values) and guard (bucketed-short faults natively on the guard page)
  $K run "${SEL[@]}" --param scratch=strict --alloc exact,guard --results "$R"; echo "$imp strict native rc=$?"
  # pool after a 512-row layer: the overrun lands in slack, hidden natively even in guard mode
  $K run "${SEL[@]}" --param scratch=pool --param pool_prior_rows=512 --param nvtx=false --alloc exact,guard --results "$R"; echo "$imp pool native rc=$?"
  # memcheck: strict exact (names the cuBLASLt kernel); pool without NVTX (hidden); pool with
  # NVTX sub-allocations registered (seen again)
  $K run "${SEL[@]}" --param scratch=strict --alloc exact --sanitize memcheck --results "$R"; echo "$imp strict memcheck rc=$?"
  $K run "${SEL[@]}" --param scratch=pool --param pool_prior_rows=512 --param nvtx=false --alloc exact --sanitize memcheck --results "$R"; echo "$imp pool memcheck rc=$?"
  $K run "${SEL[@]}" --param scratch=pool --param pool_prior_rows=512 --param nvtx=true --alloc exact --sanitize memcheck --results "$R"; echo "$imp pool+nvtx memcheck rc=$?"
done
# The same plans through kedge's SIMT GEMM (gemm=simt: plain loads, which memcheck
# instruments): memcheck in strict mode; pool without NVTX (hidden); pool with NVTX
# sub-allocations registered (memcheck checks the sub-allocation's bounds).
for imp in bucketed-short bucketed; do
  SEL=(-o fp8_gemm --impl $imp --ne 3072,300,3072,1 --dtype bf16 --param gemm=simt)
  $K run "${SEL[@]}" --param scratch=strict --alloc exact,guard --results "$R"; echo "$imp simt strict native rc=$?"
  $K run "${SEL[@]}" --param scratch=strict --alloc exact --sanitize memcheck --results "$R"; echo "$imp simt strict memcheck rc=$?"
  $K run "${SEL[@]}" --param scratch=pool --param pool_prior_rows=512 --param nvtx=false --alloc exact --sanitize memcheck --results "$R"; echo "$imp simt pool memcheck rc=$?"
  $K run "${SEL[@]}" --param scratch=pool --param pool_prior_rows=512 --param nvtx=true --alloc exact --sanitize memcheck --results "$R"; echo "$imp simt pool+nvtx memcheck rc=$?"
done
# Bucket edges, the chunk, K/N at and off 16 (unsupported), pool slack, chunk 64: natively in
# exact and guard, then the same under memcheck (FP8_BOUNDARY=0 leaves them out: the memcheck
# sweep of all 177 cases takes minutes).
if [ "${FP8_BOUNDARY:-1}" != 0 ]; then
  $K sweep boundary -o fp8_gemm --alloc exact,guard --out "$OUT/boundary"; echo "boundary rc=$?"
  $K sweep boundary -o fp8_gemm --alloc exact --sanitize memcheck --out "$OUT/boundary-memcheck"; echo "boundary memcheck rc=$?"
fi
ls -la "$OUT"
