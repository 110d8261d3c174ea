#!/usr/bin/env bash
# The H200, fourth call: kedge-core's GPU tests (staged copies both ways, guard mappings
# reused) after the staged copies' parallel copy became one helper.
set -u
B=.bin/run15/c4; xz -dc $B/core_tests.xz > /tmp/core_tests && chmod +x /tmp/core_tests
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{ echo "kedge-core tests at $(cat $B/COMMIT)"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1
  timeout 120 /tmp/core_tests --ignored --test-threads 1 2>&1 | tail -8
  echo "under memcheck:"
  timeout 120 compute-sanitizer --tool memcheck /tmp/core_tests --ignored --test-threads 1 guard_mappings 2>&1 | tail -8; } > $OUT/summary.txt 2>&1
cat $OUT/summary.txt
