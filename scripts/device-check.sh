#!/usr/bin/env bash
# kedge's whole GPU check in one call on a machine with a GPU, compute-sanitizer and nvcc.
#   scripts/device-check.sh OUTDIR [PART ...]      (default: every part; parts run in the order given)
# Parts: env native guard memcheck int32 selftest incidents zoo fp8 (fp8probe) sdpa plugin source attribution synccheck fuzz half resume
#        (not by default: ggmlrepro maxtime before-after fresh-cache memcheck-jobs own-jobs alone-again alone-again-memcheck; see each part for its parameters)
# CI parts, run only when named (the CI example's own commands, examples/ci/kedge-gpu.yml, run
# by the ci_local example: two shards, merge, report, gate; their settings are the CI_*
# variables below):
#   ci-kedge ci-ggml-build ci-ggml ci-ggml-pr-build ci-ggml-pr
# A ggml build's whole space (see each part): ggml-unpack ggml-build-start ggml-wait own-native
#   own-guard own-memcheck judging-own judging-ggml ggml-native ggml-tier coverage confirm ggml-memcheck
#   pr-gate scheduled pool-memcheck memcheck-bands leftover pack ggml-big
# timeout-phase: a kernel that never returns, under a short --timeout (HANG_TIMEOUT, default 5 s)
# A part PART@ARG passes ARG to the part (leftover@DIR).
# Lanes: a part lane:NAME:P1,P2,... runs those parts in the background, beside the parts after
# it, in the same OUTDIR/work (its lines in OUTDIR/summary-NAME.txt); part `wait` waits for every
# lane started before it (and the check waits for all before it ends). For work that does not
# compete for the GPU's memory or the host's cores: memcheck of small cases beside a native sweep.
# Writes OUTDIR/summary.txt and OUTDIR/kedge-gpu.tar.gz (everything else, to commit under reports/).
#   scripts/device-check.sh --collect OUTDIR DEST SECONDS
#        while a check started in the background writes OUTDIR: every 90 s (and at the end) put
#        what a reader needs into DEST (summary.txt, results.tar.xz, baselines/), for at most
#        SECONDS or until the check is done, so a call cut off still brings back the latest.
set -u
if [ "${1:-}" = "--collect" ]; then
  SRC=${2:?OUTDIR}; DEST=${3:?DEST}; SECS=${4:?SECONDS}; END=$(( $(date +%s) + SECS ))
  collect() {
    cp "$SRC"/summary*.txt "$DEST/" 2>/dev/null
    [ -d "$SRC/baselines" ] && mkdir -p "$DEST/baselines" && cp "$SRC"/baselines/*.jsonl "$DEST/baselines/" 2>/dev/null
    ( cd "$SRC/work" 2>/dev/null && tar cf - --exclude=workers --exclude='*.xml' --exclude='c-*' --exclude='.build' --exclude=test-backend-ops \
        --exclude='ci-*/jobs' --exclude='ci-*/cache' --exclude='ci-*/steps' --exclude='ggml-all.jsonl' --exclude='plan.jsonl' \
        $(ls -d own-* judging-* ggml-* confirm confirm-memcheck* ci-* pr-* before-after* coverage.txt confirm.txt upstream-support-cuda0.csv env.txt resume-* ggmlrepro-* pool-memcheck-* leftover-* fresh-cache.txt fresh-cache-*/sweep-summary.json fresh-cache-*.log memcheck-jobs* own-jobs* alone-again* 2>/dev/null) \
        2>/dev/null ) | xz -T0 -2 > "$DEST/results.tar.xz.part" && mv "$DEST/results.tar.xz.part" "$DEST/results.tar.xz"
  }
  while [ "$(date +%s)" -lt "$END" ]; do
    grep -q '^archive:' "$SRC/summary.txt" 2>/dev/null && break
    left=$(( END - $(date +%s) )); [ "$left" -gt 90 ] && left=90
    [ "$left" -gt 0 ] && sleep "$left"
    collect
  done
  collect
  tail -n 60 "$SRC/summary.txt" 2>/dev/null
  exit 0
fi
OUT=${1:?usage: scripts/device-check.sh OUTDIR [PART ...]}; shift
PARTS=" ${*:-env native guard memcheck int32 selftest incidents zoo fp8 sdpa plugin source attribution synccheck fuzz half resume} "
K=${KEDGE:-$PWD/.bin/kedge}
W="$OUT/work"; mkdir -p "$W"
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
SUM="$OUT/summary${LANE:+-$LANE}.txt"; : > "$SUM"

# CI: the GPU workflow's own commands end to end (ci_local runs each job's steps as a runner
# would; the kedge here stands in for the steps that build it), gated against a baseline given
# by path. Without that baseline, or with CI_UPDATE=1, the sweep jobs run first, the baseline is
# made from their results (kedge gate --update; a copy in OUTDIR/baselines/ to commit), then the
# merge job gates against it.
#   CI_LOCAL            the ci_local example (cargo build --release -p kedge --example ci_local)
#   CI_KEDGE_BASELINE   kedge's default suite (default corpora/baselines/kedge-h200-native.jsonl)
#   CI_GGML_BASELINE    the pinned ggml's CUDA0 sweep (default corpora/baselines/ggml-cuda0-h200-native.jsonl)
#   GGML_CUDA_DIR, GGML_PR_DIR  the ggml CUDA builds (default target/ggml/cuda, target/ggml/cuda-pr;
#                       resumable: a build cut off by a time limit continues on the next call)
#   KEDGE_GGML_TARBALL  an archive of the pinned commit, where the machine cannot fetch it
#   GGML_TBO_SOURCE     that commit's tests/test-backend-ops.cpp, xz-compressed: enough for
#                       confirm where the archive is not there
#   CI_SWEEP_ARGS       more sweep flags: the mode of a baseline of another mode ("--alloc guard",
#                       "--sanitize memcheck"), with its own CI_*_BASELINE
#   CI_SWEEP_OK         the sweep statuses the workflow lets through (default "0 1")
CI_LOCAL=${CI_LOCAL:-$PWD/.bin/ci_local}
CI_KEDGE_BASELINE=${CI_KEDGE_BASELINE:-corpora/baselines/kedge-h200-native.jsonl}
CI_GGML_BASELINE=${CI_GGML_BASELINE:-corpora/baselines/ggml-cuda0-h200-native.jsonl}
GGML_CUDA_DIR=${GGML_CUDA_DIR:-target/ggml/cuda}
GGML_PR_DIR=${GGML_PR_DIR:-target/ggml/cuda-pr}
GGML_PR_SRC=target/ggml/pr-src
abspath() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
# Whatever ran comes back, even when the caller's time limit stops this script part-way.
[ -z "${LANE:-}" ] && trap 'tar czf "$OUT/kedge-gpu.tar.gz" -C "$W" . 2>/dev/null' EXIT
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

# EVENTS=1: the own-* and ggml-native sweeps also print their JSON events (`--format json`),
# slimmed by scripts/timeline.py into WORK/NAME.timeline.jsonl: every event's time, so where a
# sweep's wall went (a tier's tail, idle slots) can be read afterwards
# (`scripts/timeline.py show FILE`).
evsweep() { # NAME CMD...: the command, with its events on a timeline when EVENTS=1
  local name=$1; shift
  if [ "${EVENTS:-0}" = 1 ]; then
    ( set -o pipefail; "$@" --format json | python3 scripts/timeline.py slim > "$W/$name.timeline.jsonl" )
  else
    "$@"
  fi
}

part_env() {
  # The binary's own word for its commit (what every result's run.commit says), beside the
  # checkout's.
  { echo "commit: $(cat .bin/COMMIT 2>/dev/null || git rev-parse HEAD 2>/dev/null)"; echo "binary: $("$K" --version 2>&1 | head -1)"; date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    compute-sanitizer --version | tail -1; nvcc --version | tail -1
    echo "compute-sanitizer --kernel-name-exclude: $(compute-sanitizer --help 2>&1 | grep -c -- '--kernel-name-exclude') lines of its help"
    for t in nsys ncu; do echo "$t: $(command -v $t || echo absent)"; done
    # The host's CPU: ggml's CPU reference is most of a ggml sweep's case time.
    echo "host: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2}') GiB"; } > "$W/env.txt" 2>&1
  cat "$W/env.txt" | tee -a "$SUM"
  run limits "$K" limits
}

# The default suite (smoke + boundary) of every op, natively, in guard mode, under memcheck.
# The same suite three ways (the >2^31-element cases are left out here: see the int32 part).
MAXE=268435456
# Every output directory here is this script's own: --force starts each over on a re-run.
# The baseline of kedge's default suite natively on this profile gates the native sweep (the
# shipped corpora/known-failures.jsonl is the CPU plan's, another mode).
part_native() {
  run sweep-native "$K" sweep default --alloc exact --max-elements $MAXE --force --out "$W/native"
  if [ -f "$CI_KEDGE_BASELINE" ]; then
    run gate-native "$K" gate --baseline "$CI_KEDGE_BASELINE" "$W/native/results.jsonl" --expect "$W/native/plan.jsonl"
  else
    say "gate-native: no baseline at $CI_KEDGE_BASELINE (part ci-kedge makes one)"
  fi
}
part_guard() {
  run sweep-guard "$K" sweep default --alloc guard --max-elements $MAXE --force --out "$W/guard"
}
part_memcheck() {
  run sweep-memcheck "$K" sweep default --alloc exact --sanitize memcheck --max-elements $MAXE --force --out "$W/memcheck"
}

# Index width: 2^31 elements exactly, and one row more (16 GiB per tensor pair on the device).
part_int32() {
  for n in 2097152 2097153; do
    run cumsum-2e31-$n "$K" run -o cumsum --impl int32-index --ne 1024,$n,1,1 --timeout 900 --results "$W/int32.jsonl"
    run cumsum-2e31-$n-clamped "$K" run -o cumsum --impl clamped --ne 1024,$n,1,1 --timeout 900 --results "$W/int32.jsonl"
  done
}

part_plugin() {
  ( cd examples/plugin-rmsnorm && \
    nvcc -O2 -arch=sm_90 -Xcompiler -fPIC -shared -I../../harness/include rmsnorm_plugin.cu -o "$W/libkedge_rmsnorm.so" && \
    nvcc -O2 -arch=sm_90 -Xcompiler -fPIC -shared -I../../harness/include rmsnorm_plugin_oob.cu -o "$W/libkedge_rmsnorm_oob.so" ) > "$W/plugin-build.log" 2>&1
  say "plugin build rc=$?"
  run plugin-sweep "$K" sweep default -o rms_norm --plugin "$W/libkedge_rmsnorm.so" --impl plugin:example-rmsnorm --alloc exact,guard,canary --force --out "$W/plugin"
  OOB='{"op":"rms_norm","impl":"plugin:example-rmsnorm-oob","dtype":"f32","ne":[64,5,4,3]}'
  run plugin-oob-exact "$K" run --plugin "$W/libkedge_rmsnorm_oob.so" --case "$OOB" --alloc exact --results "$W/plugin-oob.jsonl"
  run plugin-oob-guard "$K" run --plugin "$W/libkedge_rmsnorm_oob.so" --case "$OOB" --alloc guard --results "$W/plugin-oob.jsonl"
  run plugin-oob-memcheck "$K" run --plugin "$W/libkedge_rmsnorm_oob.so" --case "$OOB" --alloc exact --sanitize memcheck --results "$W/plugin-oob.jsonl"
}
part_source() {
  for g in clamped ggml; do
    run source-$g "$K" sweep default -o rms_norm --kernel examples/source-kernel/my_rms_norm.cu --entry my_rms_norm --geometry $g --impl source:my_rms_norm:$g --force --out "$W/source-$g"
  done
}

# Calibration: every planted bug against the detector it is planted for, natively and under
# memcheck, initcheck and racecheck; fixed impls must pass.
part_selftest() {
  # Every op by default; SELFTEST_OPS=rms_norm,... narrows it (the sweeps above cover the
  # other ops' fixed impls).
  run selftest "$K" selftest ${SELFTEST_OPS:+-o "$SELFTEST_OPS"} --sanitize memcheck,initcheck,racecheck --max-elements 268435456 --force --out "$W/selftest"
  cp "$W/selftest.log" "$OUT/selftest.txt" 2>/dev/null
}

# The incidents: shrink each to its minimal case and transition, then the repro for upstream,
# and the standalone .cu built with nvcc and run on both sides.
part_incidents() {
  run sweep-incidents "$K" sweep incidents --force --out "$W/incidents"
  for inc in \
    'rms_norm {"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}' \
    'add_id {"op":"add_id","impl":"ggml","dtype":"f32","ne":[64,4,65536,1],"params":{"n_experts":8}}' \
    'fp8_gemm {"op":"fp8_gemm","impl":"bucketed-short","dtype":"bf16","ne":[3072,300,3072,1],"params":{"scratch":"strict"},"alloc":"guard"}'; do
    name=${inc%% *}; line=${inc#* }
    run minimize-$name "$K" minimize "$line" --out "$W/minimize-$name"
    run repro-$name "$K" repro "$line" --out "$W/repro-$name"
    if [ -f "$W/repro-$name/repro.cu" ]; then
      ( cd "$W/repro-$name" && nvcc -arch=sm_90 -o repro repro.cu > nvcc.log 2>&1 && ./repro > run.out 2>&1; echo "repro.cu rc=$?" >> run.out )
      say "    $name repro.cu: $(tail -1 "$W/repro-$name/run.out")"
    fi
  done
}

# The zoo's planted kernels through their standalone repro.cu under the tool each is planted
# for (checks the kernels independently of kedge's sanitizer driver).
part_zoo() {
  zoo() { local imp=$1 tool=$2; shift 2; local d="$W/zoo/$imp-$tool"; mkdir -p "$d"
    "$K" repro "{\"op\":\"zoo_rows\",\"impl\":\"$imp\",\"dtype\":\"f32\",\"ne\":[1000,3,1,1]}" --out "$d" > /dev/null 2>&1
    ( cd "$d" && nvcc -arch=sm_90 -o repro repro.cu > nvcc.log 2>&1 && compute-sanitizer --tool "$tool" "$@" --error-exitcode 99 ./repro > san.out 2>&1; echo "rc=$?" >> san.out )
    say "$(printf '    zoo %-40s %-9s %s; %s' "$imp" "$tool" "$(tail -1 "$d/san.out")" "$(grep -m1 -E 'ERROR SUMMARY' "$d/san.out")")"; }
  for imp in clean planted-read-past-row-end-last-block planted-read-before-start planted-write-past-end; do zoo $imp memcheck --padding 512; done
  for imp in clean planted-uninit-global-read; do zoo $imp initcheck; done
  for imp in clean planted-missing-syncthreads; do zoo $imp racecheck; done
}

# synccheck over the smoke suite of the block-reducing ops: no planted synccheck bug (a
# divergent barrier can hang the GPU), so this captures clean real XML for the parser tests.
part_synccheck() {
  run synccheck "$K" sweep smoke -o ${SYNCCHECK_OPS:-rms_norm,softmax,cumsum,zoo_rows} --sanitize synccheck --force --out "$W/synccheck"
}

part_fuzz() {
  run fuzz "$K" fuzz --cases 60 --finds "$W/fuzz-finds.jsonl"
}

# kill -9 part-way (RESUME_KILLS times), --resume, finish: every case exactly once, no
# worker or compute-sanitizer process outlives a killed kedge. Guard mode natively (faults end
# workers) and memcheck (each worker inside compute-sanitizer); RESUME_OPS narrows the
# selections (default: every op).
part_resume() {
  for mode in guard memcheck; do
    case $mode in
      guard) args=(default ${RESUME_OPS:+-o "$RESUME_OPS"} --alloc guard --max-elements $MAXE) ;;
      memcheck) args=(default ${RESUME_OPS:+-o "$RESUME_OPS"} --alloc exact --sanitize memcheck --max-elements $MAXE) ;;
    esac
    scripts/resume-cycle.sh "$K" "$W/resume-$mode" "${RESUME_KILLS:-3}" "${args[@]}" > "$W/resume-$mode.txt" 2>&1
    say "resume-cycle $mode rc=$?"
    grep -E "^(PASS|FAIL|NOTE)" "$W/resume-$mode.txt" | sed 's/^/    /' | tee -a "$SUM" > /dev/null
  done
}

# Attribution does not depend on luck: the same cases (clean ones and the calibration read past
# the end) under memcheck with 16 cases per worker and with one case per worker.
part_attribution() {
  SEL=(default -o rms_norm --impl clamped,planted-read-past-end --alloc exact --sanitize memcheck)
  run attribution-batch16 "$K" sweep "${SEL[@]}" --batch 16 --force --out "$W/attr-batch16"
  run attribution-batch1 "$K" sweep "${SEL[@]}" --batch 1 --force --out "$W/attr-batch1"
  run attribution-compare python3 scripts/compare-attribution.py "$W/attr-batch16/results.jsonl" "$W/attr-batch1/results.jsonl"
}

part_fp8() {
  # cuBLASLt's own account of one incident GEMM, and a standalone probe of the same call.
  CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE="$W/cublaslt-%i.log" run fp8-one "$K" run -o fp8_gemm --impl bucketed --ne 3072,300,3072,1 --dtype bf16 --alloc exact
  ( nvcc -O2 -arch=sm_90 scripts/fp8-lt-probe.cu -lcublasLt -o "$W/fp8-lt-probe" && "$W/fp8-lt-probe" ) > "$W/fp8-lt-probe.txt" 2>&1
  cat "$W/fp8-lt-probe.txt" | tee -a "$SUM"
  grep -h -i -E "error|not supported|fail" "$W"/cublaslt-*.log 2>/dev/null | head -20 | tee -a "$SUM"
  want fp8 && KEDGE="$K" run fp8-incident bash scripts/fp8-gemm-incident.sh "$W/fp8"
}
part_fp8probe() {
  part_fp8
}

# The third incident: a resource limit as a boundary; a silent success is a failure.
part_sdpa() {
  # The limit scaled to 16 MiB (L* = 512), every impl on both sides.
  L='--param max_buffer_bytes=16777216'
  for imp in unfused-fallback unfused-checked chunked fused mlx-dispatch; do
    for n in 512 513; do
      run sdpa-$imp-$n "$K" run -o sdpa_prefill --impl $imp --ne 256,$n,16,1 $L --results "$W/sdpa-incident.jsonl"
    done
  done
  # Past the H200's own limit, no modelled one: 16 x 49152^2 x 4 = 154.6 GB of scores
  # against 150.1 GB of device memory. The device's allocator refuses.
  for imp in unfused-checked unfused-fallback mlx-dispatch; do
    run sdpa-h200-limit-$imp "$K" run -o sdpa_prefill --impl $imp --ne 256,49152,16,1 --timeout 600 --results "$W/sdpa-h200-limit.jsonl"
  done
  # The fix's claim, tested: chunked (q_chunk 1024: 3 full blocks and a 1-row one) against
  # unfused on the same inputs, f32 and bf16, MHA and GQA: output digests must be equal.
  for dt in f32 bf16; do
    for kv in 0 2; do
      for imp in unfused-fallback chunked; do
        run sdpa-bits-$dt-$kv-$imp "$K" run -o sdpa_prefill --impl $imp --ne 128,3073,8,1 --dtype $dt --param n_kv_head=$kv --param q_chunk=1024 --results "$W/sdpa-bitident.jsonl"
      done
    done
  done
  python3 scripts/compare-digests.py "$W/sdpa-bitident.jsonl" > "$W/sdpa-bitident.txt" 2>&1
  say "sdpa bit-identity rc=$?"; grep -E "^(SAME|DIFFER)" "$W/sdpa-bitident.txt" | tee -a "$SUM" > /dev/null
  run sdpa-sweep "$K" sweep default -o sdpa_prefill --alloc exact,guard --force --out "$W/sdpa"
}

# kedge's row ops in f16 and bf16: the default suite of each type natively, in guard mode and
# under memcheck, each judged against the same suite in f32 in the same mode: a case of both
# must get the same verdict (a pass, or the upstream launch's failure), and any case that does
# not is listed as DIFFERS; then the planted read past the end in 16 bits against its
# detectors, the example source kernel's _f16/_bf16 entries, and the incident's 16-bit
# repro.cu built and run on both sides. HALF_MAXE bounds a case's elements (default: the
# sweeps' 2^28; 0: none).
part_half() {
  HOPS=rms_norm,rms_norm_mul_add,norm,l2_norm,softmax,cumsum,tri,add_id
  HM=${HALF_MAXE:-$MAXE}
  half_sweep() { local dt=$1 m=$2; shift 2
    run half-$dt-$m "$K" sweep default -o $HOPS --dtype $dt --max-elements $HM "$@" --force --out "$W/half-$dt-$m"; }
  for m in native guard memcheck; do
    case $m in native) A=(--alloc exact);; guard) A=(--alloc guard);; memcheck) A=(--alloc exact --sanitize memcheck);; esac
    for dt in f32 f16 bf16; do half_sweep $dt $m "${A[@]}"; done
    for dt in f16 bf16; do
      [ -f "$W/half-$dt-$m/results.jsonl" ] && python3 - "$W/half-f32-$m/results.jsonl" "$W/half-$dt-$m/results.jsonl" <<'PY' | sed "s/^/    half-$dt-$m: /" | tee -a "$SUM"
import collections, json, sys
def load(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        c = r["case"]
        out[(c["op"], c["impl"], tuple(c["ne"]), json.dumps(c.get("params", {}), sort_keys=True), c.get("alloc"))] = r
    return out
f32, half = load(sys.argv[1]), load(sys.argv[2])
both = [k for k in half if k in f32]
fails, differ = collections.Counter(), []
for k in both:
    a, b = f32[k], half[k]
    if b["verdict"] not in ("pass", "skipped"):
        fails[(k[0], k[1], b["verdict"], b["detector"])] += 1
    if a["verdict"] != b["verdict"]:
        differ.append(f"DIFFERS {k[0]}/{k[1]} ne={list(k[2])} {k[3]}: f32 {a['verdict']}, this {b['verdict']} ({b['detector']}): {b['detail'][:160]}")
own = [r for k, r in half.items() if k not in f32 and r["verdict"] not in ("pass", "skipped")]
print(f"{len(half)} cases, {len(both)} also in f32, {len(differ)} with another verdict than f32; {sum(fails.values())} failures:")
for (op, imp, v, d), n in sorted(fails.items()):
    print(f"{n:4d} {op}/{imp} {v} ({d}), as in f32")
for line in differ:
    print(line)
for r in own:
    print(f"ONLY-THIS-DTYPE {r['case']['op']}/{r['case']['impl']} ne={r['case']['ne']}: {r['verdict']} ({r['detector']})")
PY
    done
  done
  for dt in f16 bf16; do
    P="{\"op\":\"rms_norm\",\"impl\":\"planted-read-past-end\",\"dtype\":\"$dt\",\"ne\":[300,3,2,1]}"
    run half-$dt-planted "$K" run --case "$P" --alloc exact,guard --results "$W/half-planted.jsonl"
    run half-$dt-planted-memcheck "$K" run --case "$P" --alloc exact --sanitize memcheck --results "$W/half-planted.jsonl"
    run half-$dt-source "$K" sweep default -o rms_norm --dtype $dt --kernel examples/source-kernel/my_rms_norm.cu --entry my_rms_norm --geometry clamped --impl source:my_rms_norm:clamped --alloc exact,guard --force --out "$W/half-$dt-source"
    for imp in ggml clamped; do
      d="$W/half-$dt-repro-$imp"
      "$K" repro "{\"op\":\"rms_norm\",\"impl\":\"$imp\",\"dtype\":\"$dt\",\"ne\":[64,1,65536,1]}" --out "$d" > /dev/null 2>&1
      ( cd "$d" && nvcc -arch=sm_90 -o repro repro.cu > nvcc.log 2>&1 && ./repro > run.out 2>&1; echo "repro.cu rc=$?" >> run.out )
      say "    half $dt $imp repro.cu: $(tail -2 "$d/run.out" | tr '\n' ' ')"
    done
  done
}

# The standalone C repro of ggml cases: `kedge minimize --ggml` shrinks each case, finds its
# transition (both sides run) and writes repro.c with both sides; the program is built with the
# command kedge prints, against the same build, and run on each side: the failing side must
# print FAIL (exit status 1) and the passing side PASS (exit status 0); the failing side also
# runs under memcheck. GGML_DIR: a CUDA build (scripts/build-ggml.sh --cuda DIR, default
# target/ggml/cuda); GGML_REPRO_CASES: a file of case lines (default: the padded-rows cumsum,
# whose layout test-backend-ops' constructor cannot express).
part_ggmlrepro() {
  G=${GGML_DIR:-$PWD/target/ggml/cuda}
  CASES=${GGML_REPRO_CASES:-$W/ggmlrepro-cases.jsonl}
  [ -n "${GGML_REPRO_CASES:-}" ] || echo '{"op":"cumsum","impl":"ggml:CUDA0","dtype":"f32","ne":[8194,2,1,1],"params":{"row_pad":7}}' > "$CASES"
  i=0
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    i=$((i + 1)); d="$W/ggmlrepro-$i"
    run ggmlrepro-$i-minimize "$K" minimize "$line" --ggml "$G" --out "$d" < /dev/null
    [ -f "$d/repro.c" ] || { say "    ggmlrepro-$i: no repro.c (see $d/../ggmlrepro-$i-minimize.log)"; continue; }
    build=$(grep -m1 '^cc -std=c11' "$d/repro.txt")
    ( cd "$d" && eval "$build" ) > "$d/cc.log" 2>&1
    say "    ggmlrepro-$i build rc=$?"
    grep '^\./repro ' "$d/repro.txt" | while read -r _ dev side _; do
      ( cd "$d" && ./repro "$dev" "$side" ) < /dev/null > "$d/run-$side.out" 2>&1; rc=$?
      say "    ggmlrepro-$i $side rc=$rc: $(grep -E 'NMSE|NaN|infinity|poison|aborted|could not run' "$d/run-$side.out" | head -3 | tr '\n' ';') $(tail -n 1 "$d/run-$side.out")"
      if [ "$side" = fail ] || [ "$side" = case ]; then
        ( cd "$d" && compute-sanitizer --tool memcheck --padding 512 ./repro "$dev" "$side" ) < /dev/null > "$d/memcheck-$side.out" 2>&1; rc=$?
        say "    ggmlrepro-$i $side memcheck rc=$rc: $(grep -m1 'ERROR SUMMARY' "$d/memcheck-$side.out")"
      fi
    done
  done < "$CASES"
}

# A time-limited sweep: the cases in order of expected yield, a clean stop after MAXTIME
# (default 20s) with exit status 6 and not-run.jsonl, the gate naming the cases not run as
# missing, and --resume running exactly those (exit 0 or 1).
part_maxtime() {
  MT=(default --max-elements $MAXE --out "$W/maxtime")
  run sweep-maxtime "$K" sweep "${MT[@]}" --max-time "${MAXTIME:-20s}" --force
  say "    not run: $(wc -l < "$W/maxtime/not-run.jsonl" 2>/dev/null || echo 0) cases"
  run gate-maxtime "$K" gate --baseline corpora/known-failures.jsonl "$W/maxtime/results.jsonl" --expect "$W/maxtime/plan.jsonl"
  run sweep-maxtime-resume "$K" sweep "${MT[@]}" --resume
  run gate-maxtime-resumed "$K" gate --baseline corpora/known-failures.jsonl "$W/maxtime/results.jsonl" --expect "$W/maxtime/plan.jsonl"
}

# A kernel that never returns (scripts/hang-kernel.cu, a user's source kernel): the timeout's
# verdict must name the phase its worker was killed in (`run`) and how long it had been there.
part_timeout-phase() {
  run timeout-phase "$K" run -o rms_norm --kernel scripts/hang-kernel.cu --entry hang_rms_norm \
    --impl source:hang_rms_norm:clamped --ne 64,4 --timeout "${HANG_TIMEOUT:-5}" --format json \
    --results "$W/timeout-phase.jsonl"
  grep -o '"detail":"[^"]*"' "$W/timeout-phase.jsonl" | head -2 | sed 's/^/    /' | tee -a "$SUM" > /dev/null
  grep -o '"killed_in":"[^"]*"' "$W/timeout-phase.jsonl" | head -2 | sed 's/^/    /' | tee -a "$SUM" > /dev/null
}

ci_workflow() { # NAME BASELINE EXPECT(pass|fail) [ci_local flags ...]
  local name=$1 base=$2 expect=$3; shift 3
  local st="$W/ci-$name" flags=(examples/ci/kedge-gpu.yml --kedge-dir "$(dirname "$K")" --env "KEDGE_BASELINE=$(abspath "$base")"
    --env "KEDGE_SWEEP_ARGS=${CI_SWEEP_ARGS:-}" --env "KEDGE_SWEEP_OK=${CI_SWEEP_OK:-0 1}"
    ${SWEEP_MAXE+--env "KEDGE_MAX_ELEMENTS=$SWEEP_MAXE"} "$@")
  rm -rf "$st"
  if [ "$expect" = fail ] && [ ! -f "$base" ]; then
    say "ci-$name: no baseline at $base to gate against (run ci-ggml first)"; return
  fi
  if [ "${CI_UPDATE:-0}" = 1 ] || [ ! -f "$base" ]; then
    run ci-$name-sweeps "$CI_LOCAL" "${flags[@]}" --state "$st" --job sweep
    mkdir -p "$(dirname "$base")" "$OUT/baselines"
    "$K" gate --update "$base" "$st"/artifacts/kedge-shard-*/results.jsonl > "$W/ci-$name-update.txt" 2>&1
    say "    baseline $base: $(head -1 "$W/ci-$name-update.txt")"
    cp "$base" "$OUT/baselines/"
    run ci-$name-merge "$CI_LOCAL" "${flags[@]}" --state "$st" --job merge
  else
    run ci-$name "$CI_LOCAL" "${flags[@]}" --state "$st"
  fi
  # What the gate said, and whether that is what was expected.
  local log; log=$(ls -t "$W"/ci-$name*.log | head -1)
  grep -E '^(baseline and results|gate: |NEW )' "$log" | cut -c1-300 | sed 's/^/    /' | tee -a "$SUM" > /dev/null
  if grep -q '^every job passed' "$log"; then got=pass; else got=fail; fi
  say "    ci-$name: expected $expect, got $got"
}
part_ci-kedge() {
  ci_workflow kedge "$CI_KEDGE_BASELINE" pass --env KEDGE_BACKEND=
}
part_ci-ggml-build() {
  run ci-ggml-build scripts/build-ggml.sh --cuda "$GGML_CUDA_DIR"
}
part_ci-ggml() {
  ci_workflow ggml "$CI_GGML_BASELINE" pass --env KEDGE_BACKEND=CUDA0 --restore "ggml-build=$(abspath "$GGML_CUDA_DIR")"
}
part_ci-ggml-pr-build() {
  # The pinned snapshot as a checkout of its own, then a pull request's commit on it.
  if [ ! -d "$GGML_PR_SRC/.git" ]; then
    rm -rf "$GGML_PR_SRC"
    T=$(scripts/ggml-source.sh target/ggml/download) && cp -r "$T" "$GGML_PR_SRC" && rm -f "$GGML_PR_SRC/.kedge-tree-hash" \
      && git -C "$GGML_PR_SRC" init -q && git -C "$GGML_PR_SRC" add -A \
      && git -C "$GGML_PR_SRC" -c user.name=kedge -c user.email=kedge@localhost commit -qm "ggml d99724f" \
      && patch -d "$GGML_PR_SRC" -p1 < examples/ci/pull-request-breaks-rms-norm.patch \
      && git -C "$GGML_PR_SRC" -c user.name=kedge -c user.email=kedge@localhost commit -qam "rms_norm: scale wide rows" \
      || say "ci-ggml-pr-build: could not make the pull request's tree"
  fi
  run ci-ggml-pr-build scripts/build-ggml.sh --cuda --src "$GGML_PR_SRC" "$GGML_PR_DIR"
}
# The pull request's build against the unchanged build's baseline: the gate must fail, naming
# the rms_norm cases the patch breaks.
part_ci-ggml-pr() {
  CI_UPDATE=0 ci_workflow ggml-pr "$CI_GGML_BASELINE" fail --env KEDGE_BACKEND=CUDA0 \
  --env "GGML_SRC=$(abspath "$GGML_PR_SRC")" --restore "ggml-build=$(abspath "$GGML_PR_DIR")"
}

# ---- every dtype, big cases on the device, a ggml build's whole space ---------------------
# GGML_CUDA_DIR: the ggml CUDA build (with test-backend-ops); KEDGE_GGML_TARBALL where there is
# no network. Time limits (a sweep stops starting cases after them, names the rest in
# not-run.jsonl, exit status 6): OWN_MAXTIME (kedge's own suite natively and in guard mode,
# default 4m), OWN_MEMCHECK_MAXTIME (2m), GGML_MAXTIME (the build's sweep natively, 8m),
# GGML_MEMCHECK_MAXTIME (4m); GGML_MEMCHECK_MAXE (ggml-memcheck's largest case).

# The ggml CUDA build, started in the background (about 5 minutes on 16 cores) so kedge's own
# sweeps use the GPU meanwhile; part ggml-wait waits for it.
part_ggml-build-start() {
  ( scripts/build-ggml.sh --cuda ${KEDGE_GGML_TARBALL:+--tarball "$KEDGE_GGML_TARBALL"} "$GGML_CUDA_DIR" \
      > "$W/ggml-build.log" 2>&1; echo $? > "$W/ggml-build.rc" ) &
  say "ggml-build started in the background (pid $!)"
}
# A ggml build made on another machine the way ggml-build-start makes it, carried as one archive
# (GGML_PREBUILT): base/ holds its lib/, bin/ and include/; pr/lib/ (optional) the pull request's
# libggml-cuda (pr-gate's patch on the same source, rebuilt in the same tree). Unpacked where the
# parts look for them, so ggml-build-start finds the stamp and builds nothing, and pr-gate takes
# the pull request's build as it is. The source is unpacked beside it (.build/config) for confirm.
part_ggml-unpack() {
  local G P S T; G=$(abspath "$GGML_CUDA_DIR"); P=$(abspath "$GGML_PR_DIR")
  [ -f "${GGML_PREBUILT:-}" ] || { say "ggml-unpack: no GGML_PREBUILT archive"; return 0; }
  T=$(mktemp -d) && tar xJf "$GGML_PREBUILT" -C "$T" && mkdir -p "$G/.build" && cp -a "$T"/base/. "$G"/ \
    && S=$(scripts/ggml-source.sh ${KEDGE_GGML_TARBALL:+--tarball "$KEDGE_GGML_TARBALL"} "$G/.build/download") \
    && printf '%s\n' "$S" > "$G/.build/config"
  say "ggml-unpack: $G rc=$? ($(head -1 "$G/lib/.kedge-ggml-stamp" 2>/dev/null))"
  # Without the source archive (too large to carry beside the build), GGML_TBO_SOURCE, the
  # snapshot's tests/test-backend-ops.cpp compressed with xz, is all confirm needs: it compiles
  # that one file against the build's include/ and lib/.
  if [ ! -s "$G/.build/config" ] && [ -f "${GGML_TBO_SOURCE:-}" ]; then
    mkdir -p "$G/.build/tbo/tests" && xz -dc "$GGML_TBO_SOURCE" > "$G/.build/tbo/tests/test-backend-ops.cpp" \
      && printf '%s\n' "$G/.build/tbo" > "$G/.build/config"
    say "ggml-unpack: test-backend-ops.cpp alone from $GGML_TBO_SOURCE rc=$?"
  fi
  if [ -d "$T/pr/lib" ]; then
    rm -rf "$P" && mkdir -p "$P" && cp -a "$G"/lib "$G"/bin "$G"/include "$P"/ && cp -a "$T"/pr/lib/. "$P"/lib/
    say "ggml-unpack: $P rc=$? (libggml-cuda $(sha256sum "$P"/lib/libggml-cuda.so.0.* | cut -c1-16), base $(sha256sum "$G"/lib/libggml-cuda.so.0.* | cut -c1-16))"
    export GGML_PR_PREBUILT=1
  fi
  rm -rf "$T"
}
part_ggml-wait() {
  local t0; t0=$(date +%s)
  while [ ! -f "$W/ggml-build.rc" ]; do sleep 2; done
  say "ggml-build rc=$(cat "$W/ggml-build.rc") (waited $(( $(date +%s) - t0 )) s; $(grep -m1 'built .* in' "$W/ggml-build.log"))"
}

# kedge's own default suite natively (every dtype, the big cases included) and in guard mode,
# each made into a baseline of its mode (OUT/baselines/) and gated against it.
fresh() { if [ "${SWEEP_RESUME:-0}" = 1 ]; then echo --resume; else echo --force; fi; }
# SWEEP_MAXE: the largest case of own-*, ggml-native, ggml-memcheck and the CI workflows, in
# elements (the workflow's KEDGE_MAX_ELEMENTS; its pull-request tier is 268435456). Empty: each
# as it defaults (the parts: the whole suite; the workflow: its own setting).
maxe() { [ -n "${SWEEP_MAXE:-}" ] && printf '%s\n' --max-elements "$SWEEP_MAXE"; }
# OWN_MAXE: the own-* parts' largest case, where it differs from SWEEP_MAXE's (the pull-request
# tier of kedge's own suite beside the whole ggml sweep in one call).
own_maxe() { local m=${OWN_MAXE-${SWEEP_MAXE:-}}; [ -n "$m" ] && printf '%s\n' --max-elements "$m"; }
own_sweep() { # NAME SWEEP-ARGS...
  local name=$1; shift
  run own-$name evsweep own-$name "$K" sweep default "$@" $(own_maxe) --max-time "${OWN_MAXTIME:-4m}" "$(fresh)" --out "$W/own-$name"
  mkdir -p "$OUT/baselines"
  "$K" gate --write-baseline "$OUT/baselines/kedge-h200-$name.jsonl" "$W/own-$name/results.jsonl" > "$W/own-$name-baseline.log" 2>&1
  say "    baseline kedge-h200-$name: $(tail -1 "$W/own-$name-baseline.log" | cut -c1-200)"
  run own-$name-gate "$K" gate --baseline "$OUT/baselines/kedge-h200-$name.jsonl" "$W/own-$name/results.jsonl" --expect "$W/own-$name/plan.jsonl"
}
part_own-native() { own_sweep native --alloc exact; }
part_own-guard() { own_sweep guard --alloc guard; }
# `own-memcheck@BIN`: the same with another kedge binary (an earlier build, to compare in one
# call), its sweep own-memcheck-BIN.
part_own-memcheck() {
  local K=${1:-$K} tag=${1:+-$(basename "${1:-}")}
  OWN_MAXTIME=${OWN_MEMCHECK_MAXTIME:-2m} own_sweep memcheck$tag --alloc exact --sanitize memcheck
}
# `own-memcheck-batch@N`: the same with N cases per sanitized worker (`--batch N`; 64 by
# default), its sweep own-memcheck-batch-N.
part_own-memcheck-batch() {
  local n=${1:?own-memcheck-batch@N: cases per worker}
  OWN_MAXTIME=${OWN_MEMCHECK_MAXTIME:-2m} own_sweep memcheck-batch-$n --alloc exact --sanitize memcheck --batch "$n"
}
# `own-memcheck-all-kernels`: the same with kedge's own kernels (draws, scans) instrumented
# too: a kernel filter no kernel matches in place of kedge's `kns=kedge_`, to measure what
# leaving them out saves. Its sweep own-memcheck-all-kernels.
part_own-memcheck-all-kernels() {
  OWN_MAXTIME=${OWN_MEMCHECK_MAXTIME:-2m} own_sweep memcheck-all-kernels --alloc exact --sanitize memcheck \
    --sanitizer-args "--kernel-name-exclude kns=no_kernel_is_named_this"
}

# The same default suite natively with an earlier build of kedge (KEDGE_BEFORE, a binary of
# another commit carried beside .bin/kedge) and with this one: every case both have must get the
# same verdict, detector and output digests (scripts/compare-results.py). Cases only one build
# plans (a suite that grew) are counted, not failed.
part_before-after() {
  local B=${KEDGE_BEFORE:-$PWD/.bin/kedge-before}
  [ -x "$B" ] || { say "before-after: no KEDGE_BEFORE binary at $B"; return 0; }
  run before-after-before "$B" sweep default --alloc exact --max-elements $MAXE --force --out "$W/before-after-before"
  # This build runs the cases the earlier one ran, as this build plans them (a suite that grew
  # since has many more): its plan's lines whose ids the earlier results have.
  "$K" plan --suite default --json 2>/dev/null | python3 -c '
import json, sys
ran = {json.loads(l)["id"] for l in open(sys.argv[1]) if l.strip()}
for l in sys.stdin:
    r = json.loads(l)
    if r.get("id") in ran:
        print(json.dumps(r["case"]))' "$W/before-after-before/results.jsonl" > "$W/before-after-cases.jsonl"
  say "    before-after: $(wc -l < "$W/before-after-cases.jsonl") cases of this build's plan the earlier one ran"
  run before-after-after "$K" sweep --corpus "$W/before-after-cases.jsonl" --force --out "$W/before-after-after"
  local after="$W/before-after-after/results.jsonl"
  python3 scripts/compare-results.py --ignore-only "$W/before-after-before/results.jsonl" \
    "$after" > "$W/before-after.txt" 2>&1
  say "before-after: rc=$? $(sed -n 3p "$W/before-after.txt")"
}

# Kernels compiled ahead, measured: kedge's default suite natively (the pull-request tier) with
# an earlier build that compiles each kernel inside a worker's first case that launches it
# (KEDGE_BEFORE) and with this one, each on an empty kernel cache of its own and then again on
# the cache it filled: wall, workers' setup and case time (fresh-cache.txt).
part_fresh-cache() {
  local B=${KEDGE_BEFORE:-$PWD/.bin/kedge-before} bin name round
  [ -x "$B" ] || { say "fresh-cache: no KEDGE_BEFORE binary at $B"; return 0; }
  for round in empty filled; do
    for name in before this; do
      bin=$K; [ "$name" = before ] && bin=$B
      [ "$round" = empty ] && rm -rf "/tmp/kedge-cache-$name"
      KEDGE_CACHE_DIR=/tmp/kedge-cache-$name run fresh-cache-$name-$round "$bin" sweep default --alloc exact \
        --max-elements $MAXE --force --out "$W/fresh-cache-$name-$round"
      python3 - "$W/fresh-cache-$name-$round/sweep-summary.json" "$name" "$round" <<'PY' | tee -a "$W/fresh-cache.txt" "$SUM"
import json, sys
s = json.load(open(sys.argv[1]))[0]
t = s["time"]
print(f"    fresh-cache {sys.argv[2]:6} {sys.argv[3]:6}: {s['ran_now']} cases, wall {s['wall_s']:.1f} s, "
      f"{s['workers']} workers, case time {t['cases_s']:.1f} s (setup {t['setup_s']:.1f}, run {t['run_s']:.1f})")
PY
      grep -m1 -i 'compiled' "$W/fresh-cache-$name-$round.log" | cut -c1-200 | sed 's/^/      /' | tee -a "$SUM" > /dev/null
    done
  done
}

# Sampled judging against whole judging, case by case, on the cases small enough for both
# (up to JUDGING_MAXE elements, 2^26 by default: every size `--judge auto` samples below the
# big cases, from 2^20): kedge's row ops natively, and (after
# ggml-wait) the build's ops sliced by rows, planes, batches and gathered rows
# (JUDGING_GGML_OPS). Every case must get the same verdict and detector. JUDGING_MAXTIME bounds
# each of the two sweeps (the cases both ran are compared).
judging_pair() { # NAME SWEEP-ARGS...
  local name=$1; shift
  for j in full sampled; do
    run judging-$name-$j "$K" sweep default "$@" --judge $j --max-elements "${JUDGING_MAXE:-67108864}" \
      ${JUDGING_MAXTIME:+--max-time "$JUDGING_MAXTIME"} --force --out "$W/judging-$name-$j"
  done
  python3 - "$W/judging-$name-full/results.jsonl" "$W/judging-$name-sampled/results.jsonl" <<'PY' | sed "s/^/    judging-$name: /" | tee -a "$SUM"
import json, sys
def load(p):
    d = {}
    for l in open(p):
        r = json.loads(l); d[r["id"]] = r
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
both = [k for k in a if k in b]
diff = [k for k in both if (a[k]["verdict"], a[k]["detector"]) != (b[k]["verdict"], b[k]["detector"])]
sampled = sum(1 for k in both if "judged_on" in (b[k].get("facts") or {}))
print(f"{len(both)} cases both ways, {sampled} of them judged on sampled slices: {len(diff)} with another verdict or detector")
for k in diff[:20]:
    print(f"DIFFERS {a[k]['case']['op']} {a[k]['case']['dtype']} {a[k]['case']['ne']}: full {a[k]['verdict']} ({a[k]['detector']}), sampled {b[k]['verdict']} ({b[k]['detector']})")
PY
}
part_judging-own() { judging_pair own -o rms_norm,rms_norm_mul_add,norm,l2_norm,softmax,cumsum,tri; }
# JUDGING_GGML_OPS=all: every op of the build (the whole default suite up to JUDGING_MAXE).
part_judging-ggml() {
  local ops=(-o "${JUDGING_GGML_OPS:-argsort,top_k,argmax,soft_max_back,concat,pad,repeat,repeat_back,upscale,interpolate,rope,rope_back,rms_norm_mul_rope,timestep_embedding,tri,diag_mask_inf,diag,pool_2d,ssm_conv,solve_tri,conv_2d_dw,conv_2d,group_norm,im2col,lightning_indexer,get_rows,set_rows,cont,gelu,add,sum_rows,cpy,scale,mean}")
  [ "${JUDGING_GGML_OPS:-}" = all ] && ops=()
  judging_pair ggml --ggml "$(abspath "$GGML_CUDA_DIR")" -b CUDA0 "${ops[@]}"
}

# The build's whole space natively: every op kedge has, every dtype the backend takes, every
# generated boundary, the big cases judged on sampled rows. A baseline of it, the gate, the
# upstream suite's coverage on the same build, and each failure shown with upstream's tools.
# kedge's own ops run through the build in f32, the only dtype ggml computes them in (its
# kernels assert f32 while supports_op accepts f16 and bf16), the build's other ops in every
# type: one sweep, the CI workflow's, so its baseline gates the workflow's results.
part_ggml-native() { ggml_native ggml-native "${SWEEP_MAXE:-}"; }
# ggml-tier: the pull-request tier alone (268435456 elements, the shipped baseline's suite), its
# sweep ggml-tier, the shipped baseline brought up to it: beside a ggml-native of the whole suite
# in one call.
part_ggml-tier() { GGML_MAXTIME=${GGML_TIER_MAXTIME:-${GGML_MAXTIME:-8m}} ggml_native ggml-tier 268435456; }
ggml_native() { # NAME MAXE (empty: no element limit)
  local G name=$1 m=$2 base=corpora/baselines/ggml-cuda0-h200-native.jsonl; G=$(abspath "$GGML_CUDA_DIR")
  run "$name" evsweep "$name" "$K" sweep default --ggml "$G" -b CUDA0 ${m:+--max-elements "$m"} --max-time "${GGML_MAXTIME:-8m}" "$(fresh)" --out "$W/$name"
  # The shipped baseline is of the pull-request tier: a sweep of another tier (no element
  # limit: the whole default suite) is not gated against it here, since a baseline updated
  # from its own results would gate nothing.
  if [ -s "$base" ] && [ "$m" != 268435456 ]; then
    say "    $name: not gated (the shipped baseline is of the tier 268435456; this sweep's limit: ${m:-none})"
    return 0
  fi
  # The shipped baseline brought up to these results (--update keeps what it marks intermittent
  # and prints what changed); written anew where there is none or it is of another suite.
  mkdir -p "$OUT/baselines"
  if [ -s "$base" ]; then
    cp "$base" "$OUT/baselines/"
    "$K" gate --update "$OUT/baselines/$(basename "$base")" "$W/$name/results.jsonl" > "$W/$name-baseline.log" 2>&1 \
      || "$K" gate --write-baseline "$OUT/baselines/$(basename "$base")" "$W/$name/results.jsonl" >> "$W/$name-baseline.log" 2>&1
  else
    "$K" gate --write-baseline "$OUT/baselines/$(basename "$base")" "$W/$name/results.jsonl" > "$W/$name-baseline.log" 2>&1
  fi
  say "    baseline $(basename "$base" .jsonl): $(tail -1 "$W/$name-baseline.log" | cut -c1-200)"
  run "$name-gate" "$K" gate --baseline "$OUT/baselines/$(basename "$base")" "$W/$name/results.jsonl" --expect "$W/$name/plan.jsonl"
}
part_coverage() {
  local G; G=$(abspath "$GGML_CUDA_DIR")
  "$G/bin/test-backend-ops" support -b CUDA0 --output csv > "$W/upstream-support-cuda0.csv" 2> "$W/upstream-support.err"
  say "upstream support -b CUDA0 rc=$? ($(wc -l < "$W/upstream-support-cuda0.csv") lines)"
  "$K" plan --suite default --json --ggml "$G" -b CUDA0 > "$W/ggml-plan.jsonl" 2> "$W/ggml-plan.err"
  python3 scripts/compare-coverage.py "$W/upstream-support-cuda0.csv" "$W/ggml-plan.jsonl" CUDA0 > "$W/coverage.txt" 2>&1
  say "coverage rc=$?"; head -4 "$W/coverage.txt" | sed 's/^/    /' | cut -c1-300 | tee -a "$SUM" > /dev/null
}
# confirm: each failure of ggml-native (or, where that part did not run, of the unchanged
# build's CI workflow, pr-gate's ci-ggml-base shards) and its passing side with upstream's
# tools, CONFIRM_MAX failures at most (default 400: every one of the tier's), CONFIRM_JOBS at
# a time (default 8), no upstream run started after CONFIRM_MAXTIME seconds (default: none);
# CONFIRM_FROM=scheduled: the scheduled tier's failures only; CONFIRM_ONLY (OP or OP/DTYPE, comma
# separated): those ops' failures only; CONFIRM_PER_OP: each op's first N failures; CONFIRM_EXTRA:
# more results files (an earlier run's, carried), their failures confirmed too; CONFIRM_C_REPRO=always:
# the C program too on every row, not only where the line cannot express the case (a defect
# test-backend-ops' NMSE bound is too coarse to see at the case's size).
# What memcheck found is confirmed first (CONFIRM_MEMCHECK_RESULTS), for at most
# CONFIRM_MEMCHECK_MAXTIME seconds (default: none; run 33's 3 failures and their passing sides took
# 1,339 s under the tool, and the rest never started). Its rows reach confirm/confirm.jsonl as
# each finishes, so --collect brings back a part cut off.
part_confirm() {
  local G src; G=$(abspath "$GGML_CUDA_DIR")
  src=("$W"/ggml-native/results.jsonl)
  [ -s "${src[0]}" ] || src=("$W"/ci-ggml-base/artifacts/kedge-shard-*/results.jsonl)
  # The scheduled tier's after the pull-request tier's (scheduled); CONFIRM_FROM=scheduled
  # confirms the scheduled tier's alone, where the other tier's were confirmed before.
  [ "${CONFIRM_FROM:-all}" = scheduled ] && src=()
  [ -s "$W/ggml-scheduled/results.jsonl" ] && src+=("$W/ggml-scheduled/results.jsonl")
  [ -s "$W/ggml-scheduled-rest/results.jsonl" ] && src+=("$W/ggml-scheduled-rest/results.jsonl")
  src+=(${CONFIRM_EXTRA:-})
  cat "${src[@]}" > "$W/ggml-all.jsonl" 2>/dev/null
  # What memcheck found first (ggml-memcheck's results, or CONFIRM_MEMCHECK_RESULTS): few cases,
  # each a read or write no native run sees. Each failure and its passing side under memcheck,
  # upstream's test-backend-ops and the C repro both.
  local mc=${CONFIRM_MEMCHECK_RESULTS:-$W/ggml-memcheck/results.jsonl}
  if [ -s "$mc" ]; then
    python3 scripts/confirm-upstream.py "$K" "$G" "$mc" "$W/confirm-memcheck" --backend CUDA0 \
      --max "${CONFIRM_MAX:-400}" --jobs "${CONFIRM_JOBS:-8}" ${CONFIRM_MEMCHECK_MAXTIME:+--max-time "$CONFIRM_MEMCHECK_MAXTIME"} \
      > "$W/confirm-memcheck.txt" 2>&1
    say "confirm-memcheck rc=$?"; grep -E "failing cases|^test-backend-ops with|memcheck\)" "$W/confirm-memcheck.txt" | head -20 | cut -c1-300 | sed 's/^/    /' | tee -a "$SUM" > /dev/null
  fi
  python3 scripts/confirm-upstream.py "$K" "$G" "$W/ggml-all.jsonl" "$W/confirm" --backend CUDA0 \
    --max "${CONFIRM_MAX:-400}" --jobs "${CONFIRM_JOBS:-8}" ${CONFIRM_MAXTIME:+--max-time "$CONFIRM_MAXTIME"} \
    ${CONFIRM_ONLY:+--only "$CONFIRM_ONLY"} ${CONFIRM_PER_OP:+--per-op "$CONFIRM_PER_OP"} ${CONFIRM_MEMCHECK:+--memcheck "$W/ggml-memcheck/results.jsonl"} \
    ${CONFIRM_C_REPRO:+--c-repro "$CONFIRM_C_REPRO"} > "$W/confirm.txt" 2>&1
  say "confirm rc=$?"; grep -E "failing cases|^test-backend-ops with" "$W/confirm.txt" | sed 's/^/    /' | tee -a "$SUM" > /dev/null
}
part_ggml-memcheck() {
  local G; G=$(abspath "$GGML_CUDA_DIR")
  # GGML_MEMCHECK_MAXE: its largest case in elements (default SWEEP_MAXE's). Memcheck runs a
  # case many times slower: a few ops (GGML_MEMCHECK_ARGS "-o ...") judged on sampled rows
  # ("--judge sampled") reach the big cases' device-side draws and gathers in bounded time.
  local maxe=(); [ -n "${GGML_MEMCHECK_MAXE:-${SWEEP_MAXE:-}}" ] && maxe=(--max-elements "${GGML_MEMCHECK_MAXE:-$SWEEP_MAXE}")
  run ggml-memcheck "$K" sweep default --ggml "$G" -b CUDA0 --sanitize memcheck "${maxe[@]}" ${GGML_MEMCHECK_ARGS:-} --max-time "${GGML_MEMCHECK_MAXTIME:-4m}" "$(fresh)" --out "$W/ggml-memcheck"
}

# The build's sweep under memcheck in bands of size (MEMCHECK_BANDS, the bands' upper bounds in
# elements, default "65536 262144 1048576"): each band its own sweep (ggml-memcheck-le-N), so
# every case up to the last bound runs and what each band took is seen (MEMCHECK_BAND_MAXTIME,
# default 4m, bounds each). MEMCHECK_OVER: the first band's lower bound (default none), to go
# on past bands an earlier run covered. MEMCHECK_ARGS: more sweep flags for each band
# ("--batch 64": more cases per sanitized worker, fewer starts under the tool).
part_memcheck-bands() {
  local G hi over=(); G=$(abspath "$GGML_CUDA_DIR")
  [ -n "${MEMCHECK_OVER:-}" ] && over=(--over-elements "$MEMCHECK_OVER")
  for hi in ${MEMCHECK_BANDS:-65536 262144 1048576}; do
    run ggml-memcheck-le-$hi "$K" sweep default --ggml "$G" -b CUDA0 --sanitize memcheck \
      "${over[@]}" --max-elements "$hi" ${MEMCHECK_ARGS:-} --max-time "${MEMCHECK_BAND_MAXTIME:-4m}" "$(fresh)" \
      --out "$W/ggml-memcheck-le-$hi"
    over=(--over-elements "$hi")
  done
}

# Sanitized workers sharing the GPU: run 30 measured concat's launches at about 85 µs each under
# memcheck alone and about 1.2 ms beside seven other sanitized workers (run 26). The same list
# under memcheck with -j N for each N in MEMCHECK_JOBS (default "1 2 4 8"), one case per worker
# (--batch 1: a worker's batch of 16 would hold every case and start one worker): by default the
# build's launch-bound cases, concat's with ne[3] of MEMCHECK_JOBS_NE3 (default 65536; ne[3] of
# 6144 took about 0.3 s a case alone) or more up to MEMCHECK_JOBS_COUNT of them (default 12),
# smallest first; MEMCHECK_JOBS_CASES, a case list, instead. Each sweep's wall and case time in
# memcheck-jobs.txt.
part_memcheck-jobs() {
  local G n list="$W/memcheck-jobs-cases.jsonl"; G=$(abspath "$GGML_CUDA_DIR")
  if [ -n "${MEMCHECK_JOBS_CASES:-}" ]; then
    cp "$MEMCHECK_JOBS_CASES" "$list"
  else
    "$K" plan --suite default --json --ggml "$G" -b CUDA0 -o concat 2> "$W/memcheck-jobs-plan.err" \
      | python3 -c '
import json, math, sys
ne3, count = int(sys.argv[1]), int(sys.argv[2])
cases = [r["case"] for r in map(json.loads, sys.stdin) if "case" in r and r["case"]["ne"][3] >= ne3]
cases.sort(key=lambda c: (math.prod(c["ne"]), json.dumps(c, sort_keys=True)))
for c in cases[:count]:
    print(json.dumps(c))' "${MEMCHECK_JOBS_NE3:-65536}" "${MEMCHECK_JOBS_COUNT:-12}" > "$list"
  fi
  say "memcheck-jobs: $(wc -l < "$list") cases"
  for n in ${MEMCHECK_JOBS:-1 2 4 8}; do
    run memcheck-jobs-$n "$K" sweep --corpus "$list" --ggml "$G" -b CUDA0 --sanitize memcheck -j "$n" --batch 1 \
      --max-time "${MEMCHECK_JOBS_MAXTIME:-3m}" --force --out "$W/memcheck-jobs-$n"
    python3 - "$W/memcheck-jobs-$n/sweep-summary.json" "$n" <<'PY' | tee -a "$W/memcheck-jobs.txt" "$SUM"
import json, sys
s = json.load(open(sys.argv[1]))[0]
t = s["time"]
print(f"    memcheck-jobs -j {sys.argv[2]:>2}: {s['ran_now']} cases, wall {s['wall_s']:.1f} s, case time {t['cases_s']:.1f} s (run {t['run_s']:.1f}), {s['workers']} workers")
PY
  done
}

# kedge's default suite natively is host work on the GPU box (run 30: compare, reference and
# setup are most of its case time), and the default worker count is half the cores, at most 8.
# The same suite (the pull-request tier, MAXE) with -j N for each N in OWN_JOBS (default
# "8 12 16"), on the kernel cache the first sweep fills: each sweep's wall and case time in
# own-jobs.txt. `own-jobs@BIN`: the same with another kedge binary (another build, to compare in
# one call), its sweeps own-jobs-BIN-N.
part_own-jobs() {
  local n bin=${1:-$K} tag=${1:+-$(basename "${1:-}")}
  for n in ${OWN_JOBS:-8 12 16}; do
    run own-jobs$tag-$n "$bin" sweep default --alloc exact --max-elements $MAXE -j "$n" --force --out "$W/own-jobs$tag-$n"
    python3 - "$W/own-jobs$tag-$n/sweep-summary.json" "$n$tag" <<'PY' | tee -a "$W/own-jobs.txt" "$SUM"
import json, sys
s = json.load(open(sys.argv[1]))[0]
t = s["time"]
print(f"    own-jobs -j {sys.argv[2]:>2}: {s['ran_now']} cases, wall {s['wall_s']:.1f} s, {s['workers']} workers, "
      f"case time {t['cases_s']:.1f} s (setup {t['setup_s']:.1f}, reference {t.get('reference_s', 0):.1f}, compare {t.get('compare_s', 0):.1f})")
PY
  done
}

# ggml-big: the default ggml sweep's cases over BIG_OVER elements (default 4294967296: those
# past 2^32, one per GPU on an H100), within BIG_MAXTIME (default 4m): to compare the big tiers'
# walls, replacements and waits of two builds in one call. `ggml-big@BIN` runs it with another
# kedge binary, its sweep ggml-big-BIN (this build's: ggml-big). BIG_ARGS: more sweep flags, one
# op's cases of some types for an A/B of its reference ("-o set_rows -p type_dst=q4_0,").
part_ggml-big() {
  local G bin=${1:-$K} tag=${1:+-$(basename "${1:-}")}; G=$(abspath "$GGML_CUDA_DIR")
  run ggml-big$tag evsweep ggml-big$tag "$bin" sweep default --ggml "$G" -b CUDA0 --over-elements "${BIG_OVER:-4294967296}" \
    ${BIG_ARGS:-} --max-time "${BIG_MAXTIME:-4m}" --force --out "$W/ggml-big$tag"
  grep -E "at a time per GPU|have results" "$W/ggml-big$tag.log" | cut -c1-300 | sed 's/^/    /' | tee -a "$SUM"
}

# Cases that run out of device memory beside others are run again alone on their GPU (the
# `alone-again` event; each such verdict says so), not reported with a verdict their neighbours
# caused. Shown on a GPU shared with another process: scripts/hold-device-memory.py holds all
# but ALONE_LEAVE_GIB of its memory (default 24), and kedge runs cases of 16 GiB each
# (ALONE_CASES, a case list; default: rms_norm's clamped f32 cases of 2^30 to 2^31 elements)
# with -j ALONE_JOBS (default 4). Admission counts the card's whole memory, so several start
# side by side (judged on sampled rows, each holds nothing on the host: two per GPU on an H100)
# and all but one run out. alone-again.txt: the event, and the verdicts by how they were
# reached. (Run 32, before admission counted kedge's own cases as sampled: one per GPU, so
# none ran out beside another.) `alone-again-memcheck`: the same under memcheck, on the first
# ALONE_MEMCHECK_COUNT of the cases (default 4), in alone-again-memcheck.txt.
part_alone-again() { alone_again alone-again 0; }
# A sanitized slot pulls an even share of the cases over the slots (run 33, before it did, gave
# one worker all 4 cases, so none ran out of memory beside another).
part_alone-again-memcheck() { alone_again alone-again-memcheck "${ALONE_MEMCHECK_COUNT:-4}" --sanitize memcheck; }
alone_again() { # alone_again NAME COUNT [SWEEP FLAGS...]: COUNT 0 runs every case
  local name=$1 count=$2; shift 2
  local list="$W/$name-cases.jsonl" held="$W/$name-held.txt" hp i
  if [ -n "${ALONE_CASES:-}" ]; then
    cp "$ALONE_CASES" "$list"
  else
    "$K" plan --suite default --json -o rms_norm --impl clamped --dtype f32 2> "$W/alone-again-plan.err" \
      | python3 -c '
import json, math, sys
for l in sys.stdin:
    c = json.loads(l).get("case")
    if c and (1 << 30) < math.prod(c["ne"]) <= (1 << 31) + (1 << 20):
        print(json.dumps(c))' > "$list"
  fi
  if [ "$count" -gt 0 ]; then head -n "$count" "$list" > "$list.part" && mv "$list.part" "$list"; fi
  rm -f "$held"
  python3 scripts/hold-device-memory.py --leave-gib "${ALONE_LEAVE_GIB:-24}" --ready "$held" --seconds 900 \
    > "$W/$name-hold.log" 2>&1 &
  hp=$!
  for i in $(seq 120); do [ -s "$held" ] && break; kill -0 "$hp" 2>/dev/null || break; sleep 1; done
  say "$name: $(wc -l < "$list") cases; $(cat "$held" 2>/dev/null || tail -n 1 "$W/$name-hold.log")"
  if [ -s "$held" ]; then
    run "$name" "$K" sweep --corpus "$list" -j "${ALONE_JOBS:-4}" "$@" --format json --force --out "$W/$name"
  fi
  kill "$hp" 2>/dev/null; wait "$hp" 2>/dev/null
  python3 - "$W/$name.log" "$W/$name/results.jsonl" <<'PY' | tee "$W/$name.txt" | sed 's/^/    /' | tee -a "$SUM" > /dev/null
import json, sys
from collections import Counter
events = []
try:
    lines = open(sys.argv[1], errors="replace").readlines()
except OSError:
    lines = []
for l in lines:
    if l.startswith("{"):
        try:
            e = json.loads(l)
        except ValueError:
            continue
        if e.get("event") == "alone-again":
            events.append(e)
print(f"alone-again events: {len(events)} {[e.get('cases') for e in events]}")
try:
    rs = [json.loads(l) for l in open(sys.argv[2])]
except OSError:
    rs = []
alone = Counter(r["verdict"] for r in rs if "run alone on its GPU" in r.get("detail", ""))
beside = Counter(r["verdict"] for r in rs if "run alone on its GPU" not in r.get("detail", ""))
print(f"results: {len(rs)}; run alone again: {dict(alone)}; beside others: {dict(beside)}")
PY
}

# kedge's block pools under memcheck: an input of a block format past 2^24 elements holds rows
# of a pool, laid out on the device by kedge_pool_rows, which the capped ggml-memcheck never
# reaches. One get_rows case per type (POOL_MEMCHECK_TYPES), its table 256 x 131073 values.
part_pool-memcheck() {
  local G t; G=$(abspath "$GGML_CUDA_DIR")
  for t in ${POOL_MEMCHECK_TYPES:-q4_0 q4_K iq2_xs mxfp4}; do
    run pool-memcheck-$t "$K" sweep -o get_rows --dtype "$t" --ne 256,131073,1,1 --ggml "$G" -b CUDA0 \
      --sanitize memcheck --judge sampled --force --out "$W/pool-memcheck-$t"
  done
}

# Cases an earlier run left when its time ran out (its not-run.jsonl files, or any case lines,
# carried as LEFTOVER_DIR/NAME.jsonl): each file its own sweep, leftover-NAME. A NAME starting
# ggml- runs through the build on CUDA0; one with memcheck in it, under memcheck; a NAME.args
# beside it holds more sweep flags, one per line ("--sanitizer-args" and its value on two).
# LEFTOVER_TIMES ("NAME=DURATION ...", default 5m each) bounds each. `leftover@DIR` reads DIR
# instead of LEFTOVER_DIR (a lane's lists beside the foreground's).
part_leftover() {
  local G f name t args dir=${1:-${LEFTOVER_DIR:-}}; G=$(abspath "$GGML_CUDA_DIR")
  for f in "${dir:?LEFTOVER_DIR: a folder of NAME.jsonl case lists}"/*.jsonl; do
    name=$(basename "$f" .jsonl); args=()
    case $name in ggml-*) args+=(--ggml "$G" -b CUDA0) ;; esac
    case $name in *memcheck*) args+=(--sanitize memcheck) ;; esac
    [ -f "${f%.jsonl}.args" ] && mapfile -t -O "${#args[@]}" args < "${f%.jsonl}.args"
    t=$(printf '%s\n' ${LEFTOVER_TIMES:-} | sed -n "s/^$name=//p" | head -1)
    run leftover-$name "$K" sweep --corpus "$f" "${args[@]}" --max-time "${t:-5m}" --force --out "$W/leftover-$name"
  done
}

# A pull request's build gated against its base's baseline, through the CI workflow's own
# commands (two shards, merge, report, gate) on the ops PR_OPS names (default
# rms_norm,rms_norm_mul_add, the ops the patch touches; empty: the whole suite). The base's
# baseline is PR_BASELINE, by default the shipped one of that suite:
# corpora/baselines/ggml-cuda0-h200-native-rms-norm.jsonl (no element limit: SWEEP_MAXE= ) or,
# for the whole suite, corpora/baselines/ggml-cuda0-h200-native.jsonl (the workflow's tier).
# The unchanged build is gated against it first (it must pass). Without it, or with
# PR_BASE_UPDATE=1, the base build's sweep makes it (a copy in OUTDIR/baselines/ to ship). Then
# the patch (examples/ci/pull-request-breaks-rms-norm.patch) is applied to the same source and
# only what it changes rebuilt (the CMake tree is kept), and the gate must fail naming the cases
# the patch breaks. With GGML_PR_PREBUILT=1 and a build already in GGML_PR_DIR (made the same way
# on another machine and carried), that build is the pull request's.
pr_ops() { local o=${PR_OPS-rms_norm,rms_norm_mul_add}; [ -n "$o" ] && echo "-o $o"; }
part_pr-gate() {
  local G P SRC base update=0; G=$(abspath "$GGML_CUDA_DIR"); P=$(abspath "$GGML_PR_DIR")
  SRC=$(head -1 "$G/.build/config" 2>/dev/null)
  if [ -n "$(pr_ops)" ]; then base=corpora/baselines/ggml-cuda0-h200-native-rms-norm.jsonl
  else base=corpora/baselines/ggml-cuda0-h200-native.jsonl; fi
  base=$(abspath "${PR_BASELINE:-$base}")
  if [ "${PR_BASE_UPDATE:-0}" = 1 ] || [ ! -f "$base" ]; then
    base="$W/ggml-cuda0-h200-native$([ -n "$(pr_ops)" ] && echo -rms-norm).jsonl"; update=1
  fi
  CI_UPDATE=$update CI_SWEEP_ARGS="$(pr_ops)" ci_workflow ggml-base "$base" pass --env KEDGE_BACKEND=CUDA0 --restore "ggml-build=$G"
  if [ "${GGML_PR_PREBUILT:-0}" = 1 ] && [ -f "$P/lib/.kedge-ggml-stamp" ]; then
    # Built elsewhere the same way (the patch on the same source, libggml-cuda rebuilt).
    say "pr-build: prebuilt at $P ($(ls "$P"/lib/libggml-cuda.so* | head -1 | xargs sha256sum | cut -c1-16))"
  else
    rm -rf "$P"; cp -a "$G" "$P"
    patch -d "$SRC" -p1 < examples/ci/pull-request-breaks-rms-norm.patch > "$W/pr-patch.log" 2>&1 \
      && cmake --build "$G/.build/cmake" --target ggml-cuda -j "$(nproc)" > "$W/pr-build.log" 2>&1 \
      && find "$G/.build/cmake" -name 'libggml-cuda.so*' -type f -exec cp {} "$P/lib/" \;
    say "pr-build rc=$? (patch applied to $SRC, libggml-cuda rebuilt into $P)"
    patch -R -d "$SRC" -p1 < examples/ci/pull-request-breaks-rms-norm.patch > /dev/null 2>&1
  fi
  CI_UPDATE=0 CI_SWEEP_ARGS="$(pr_ops)" ci_workflow ggml-pr "$base" fail --env KEDGE_BACKEND=CUDA0 --restore "ggml-build=$P"
}

# The scheduled tier: only the cases past the pull-request tier (--over-elements, default
# 268435456: what SWEEP_MAXE=268435456 leaves out), kedge's own suite (SCHED_OWN_MAXTIME, default
# 2m) and the ggml build's (SCHED_MAXTIME, default 5m), each with its wall time per case by size.
# `own-scheduled` and `ggml-scheduled` run one side each.
part_scheduled() { part_own-scheduled; part_ggml-scheduled; }
part_own-scheduled() {
  run own-scheduled "$K" sweep default --over-elements "${SCHED_OVER:-268435456}" --max-time "${SCHED_OWN_MAXTIME:-2m}" "$(fresh)" --out "$W/own-scheduled"
  sizes own-scheduled
}
part_ggml-scheduled() {
  local G over=${SCHED_OVER:-268435456}; G=$(abspath "$GGML_CUDA_DIR")
  run ggml-scheduled "$K" sweep default --ggml "$G" -b CUDA0 --over-elements "$over" --max-time "${SCHED_MAXTIME:-5m}" "$(fresh)" --out "$W/ggml-scheduled"
  sizes ggml-scheduled
}
# The cases the scheduled tier's time limit left (its not-run.jsonl), for SCHED_REST_MAXTIME more
# (default 4m): ggml-scheduled-rest, so the tier's 5 minutes stay what they measured.
part_scheduled-rest() {
  local G nr="$W/ggml-scheduled/not-run.jsonl"; G=$(abspath "$GGML_CUDA_DIR")
  if [ -s "$nr" ]; then
    run ggml-scheduled-rest "$K" sweep --corpus "$nr" --ggml "$G" -b CUDA0 --max-time "${SCHED_REST_MAXTIME:-4m}" --force --out "$W/ggml-scheduled-rest"
    sizes ggml-scheduled-rest
  else
    say "scheduled-rest: the scheduled tier left no case"
  fi
}
sizes() { # NAME: results by the case's element count (the product of ne): cases, ms median and max, failing
  python3 - "$W/$1/results.jsonl" <<'PY' > "$W/$1-sizes.txt" 2>&1
import json, math, statistics, sys
from collections import defaultdict
OK = {"pass", "unsupported", "skipped"}
by = defaultdict(list)
for l in open(sys.argv[1]):
    r = json.loads(l)
    n = math.prod(r["case"]["ne"])
    k = "<= 2^30" if n <= 1 << 30 else "<= 2^31" if n <= 1 << 31 else "<= 2^32" if n <= 1 << 32 else "> 2^32"
    by[k].append(r)
print("elements  cases  median_ms  max_ms  failing")
for k in ["<= 2^30", "<= 2^31", "<= 2^32", "> 2^32"]:
    rs = by.get(k, [])
    if rs:
        ms = [r.get("ms", 0) for r in rs]
        print(f"{k:8} {len(rs):6} {statistics.median(ms):10.0f} {max(ms):7.0f} {sum(r['verdict'] not in OK for r in rs):8}")
PY
  sed 's/^/    /' "$W/$1-sizes.txt" | tee -a "$SUM" > /dev/null
}

# What a reader needs, small: the summary, each sweep's summaries and compressed results.
part_pack() {
  local keep; keep=$(cd "$W" && ls -d own-* judging-* ggml-native ggml-tier ggml-scheduled* ggml-memcheck ggml-memcheck-le-* confirm confirm-memcheck ci-* pool-memcheck-* leftover-* 2>/dev/null)
  ( cd "$W" && tar cf - --exclude='workers' --exclude='*.xml' --exclude='c-*' $keep \
      coverage.txt confirm.txt upstream-support-cuda0.csv ggml-build.log *.log env.txt 2>/dev/null ) | xz -T0 -6 > "$OUT/results.tar.xz"
  say "packed $(du -h "$OUT/results.tar.xz" | cut -f1)"
}

# The parts, in the order given.
for p in $PARTS; do
  if [[ $p == lane:*:* ]]; then
    l=${p#lane:}; say "lane ${l%%:*}: ${l#*:} (summary-${l%%:*}.txt)"
    lp=${l#*:}; LANE=${l%%:*} "$0" "$OUT" ${lp//,/ } &
  elif [ "$p" = wait ]; then
    wait; say "lanes done"
  elif [[ $p == *@* ]] && declare -F "part_${p%%@*}" > /dev/null; then
    "part_${p%%@*}" "${p#*@}"
  elif declare -F "part_$p" > /dev/null; then
    "part_$p"
  else
    say "unknown part $p"
  fi
done
wait
[ -n "${LANE:-}" ] && exit 0
for d in native guard memcheck; do
  [ -f "$W/$d/results.jsonl" ] && "$K" report "$W/$d/results.jsonl" --out "$W/$d" > /dev/null 2>&1
done

tar czf "$OUT/kedge-gpu.tar.gz" -C "$W" . 2>/dev/null
trap - EXIT
say "archive: $(du -h "$OUT/kedge-gpu.tar.gz" | cut -f1)"

