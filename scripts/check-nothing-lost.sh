#!/usr/bin/env bash
# Nothing lost, whatever the input: replays, against a kedge binary, each way a careless or
# hostile input once lost data or ended kedge without a word, and checks for each the exit
# status, the message, and that no file outside the command's output directory changed.
# Then an endless fuzz run under a 2 GB address-space limit: its memory stays flat, and
# Ctrl-C ends it with its finds written. No GPU needed.
#
#   scripts/check-nothing-lost.sh [KEDGE] [WORKDIR]
#
# KEDGE: the binary (default target/release/kedge); WORKDIR: scratch (default: a new
# temporary directory, removed at the end). NL_FUZZ_SECONDS: how long the fuzz run goes on
# (default 30). KEDGE_GGML_DIR: a ggml build, for the truncated-library row (skipped
# without it). Prints one PASS/FAIL/SKIP line per row; exits 1 if any row failed.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
K=$(realpath "${1:-$ROOT/target/release/kedge}")
[ -x "$K" ] || { echo "no kedge binary at $K (cargo build --release -p kedge)"; exit 2; }
if [ -n "${2:-}" ]; then W=$(mkdir -p "$2" && cd "$2" && pwd); KEEP=1; else W=$(mktemp -d); KEEP=0; fi
FUZZ_S=${NL_FUZZ_SECONDS:-30}
PASS=0 FAIL=0 SKIP=0
INCIDENT='{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}'
VICTIM="a file outside the output directory"

REPO_BEFORE=$(git -C "$ROOT" status --porcelain 2>/dev/null)
echo "kedge: $K ($("$K" --version 2>&1))"
echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "machine: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo

# Files under $1 (hashes; links as their target), except the directory $2 (relative) and
# lock files: what a row must not change.
snapshot() {
  (cd "$1" && find . -mindepth 1 \( -path "./$2" -o -name .kedge.lock \) -prune -o \
     \( -type f -exec sha256sum {} + \) -o \( ! -type f -printf '%y %p -> %l\n' \)) | sort
}

# row NAME STATUS TEXT OUTDIR CMD...: run CMD in the sandbox $S (made by the caller), expect
# STATUS and TEXT, and no change outside OUTDIR (relative to $S; "-" for none).
row() {
  local name=$1 want=$2 text=$3 outdir=$4; shift 4
  local before after rc
  before=$(snapshot "$S" "$outdir")
  (cd "$S" && timeout 600 "$@") > "$S.log" 2>&1; rc=$?
  after=$(snapshot "$S" "$outdir")
  local said; said=$(grep -m1 -F -- "$text" "$S.log" | sed 's/^kedge: //' | cut -c1-200)
  local why=""
  [ "$rc" = "$want" ] || why="status $rc, expected $want"
  [ -n "$said" ] || why="${why:+$why; }no \"$text\" in its output"
  [ "$before" = "$after" ] || why="${why:+$why; }files outside $outdir changed: $(diff <(echo "$before") <(echo "$after") | head -4 | tr '\n' ' ')"
  if [ -f "$S/victim.txt" ] && [ "$(cat "$S/victim.txt")" != "$VICTIM" ]; then why="${why:+$why; }victim.txt changed"; fi
  if grep -q "panicked" "$S.log"; then why="${why:+$why; }kedge panicked"; fi
  if [ -z "$why" ]; then
    PASS=$((PASS + 1)); printf 'PASS %-34s status %s: %s\n' "$name" "$rc" "$said"
  else
    FAIL=$((FAIL + 1)); printf 'FAIL %-34s %s\n' "$name" "$why"; sed 's/^/     | /' "$S.log" | tail -5
  fi
}
skip() { SKIP=$((SKIP + 1)); printf 'SKIP %-34s %s\n' "$1" "$2"; }

# A fresh sandbox $S with a victim file, a CPU sweep's results and an out/ directory.
RESULTS="$W/fixture/results.jsonl"
"$K" sweep --cpu boundary -o rms_norm --out "$W/fixture" > "$W/fixture.log" 2>&1
fresh() {
  S="$W/$1"; rm -rf "$S"; mkdir -p "$S/out"
  echo "$VICTIM" > "$S/victim.txt"
  cp "$RESULTS" "$S/results.jsonl"
}

echo "== 1. writes do not follow links"
fresh lock-link; ln -s ../victim.txt "$S/out/.kedge.lock"
row sweep-through-lock-link 5 "out/.kedge.lock is a symbolic link" - "$K" sweep --cpu smoke --out out
row report-through-lock-link 5 "out/.kedge.lock is a symbolic link" - "$K" report results.jsonl --out out
fresh results-link; ln -s ../victim.txt "$S/out/results.jsonl"
row force-through-results-link 5 "out/results.jsonl is a symbolic link" - "$K" sweep --cpu smoke --out out --force
fresh report-link; ln -s ../victim.txt "$S/out/report.md"
row report-through-report-link 5 "out/report.md is a symbolic link" - "$K" report results.jsonl --out out
fresh hard-link; ln "$S/results.jsonl" "$S/out/results.jsonl"
row force-through-hard-link 5 "has 2 hard links" - "$K" sweep --cpu smoke --out out --force
fresh workers-link; mkdir "$S/elsewhere"; ln -s ../elsewhere "$S/out/workers"
row workers-tree-link 5 "out/workers is a symbolic link" - "$K" sweep --cpu smoke -o rms_norm --out out
fresh linked-out; rmdir "$S/out"; mkdir "$S/real"; ln -s real "$S/out"
row linked-output-dir-allowed 4 "GPU checks skipped" real "$K" sweep --cpu smoke -o rms_norm --out out

echo "== 2. every writer: the lock, its inputs, the target's kind"
fresh own-input
row baseline-over-its-input 2 "is one of this command's inputs" - "$K" gate --write-baseline results.jsonl results.jsonl
cp "$RESULTS" "$S/out/other.jsonl"
row baseline-over-results 2 "is a results file (kedge verdict lines), not a gate baseline" - "$K" gate --write-baseline out/other.jsonl results.jsonl
row finds-into-results 2 "not a fuzz finds corpus" - "$K" fuzz --cpu -o rms_norm --cases 60 --finds results.jsonl
head -c 300 "$RESULTS" > "$S/torn.jsonl"; : > "$S/empty.jsonl"
row baseline-from-torn 2 "cut off mid-write, which the gate rejects" - "$K" gate --write-baseline out/known.jsonl torn.jsonl
row baseline-from-empty 2 "no results in them, which the gate rejects" - "$K" gate --write-baseline out/known.jsonl empty.jsonl
echo "$INCIDENT" > "$S/out/plan.jsonl"
row sweep-over-its-corpus 2 "plan.jsonl is one of this command's inputs" - "$K" sweep --cpu --corpus out/plan.jsonl --out out --force
# A running sweep's results: the writer is refused, the sweep finishes whole.
fresh running; "$K" sweep --cpu --out "$S/run" > "$S.sweep.log" 2>&1 & SWEEP=$!
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
for _ in $(seq 1 600); do [ "$(lines "$S/run/results.jsonl")" -ge 20 ] && break; sleep 0.1; done
if kill -0 $SWEEP 2>/dev/null; then
  row baseline-over-running-sweep 5 "is in use by another kedge" run "$K" gate --write-baseline run/results.jsonl results.jsonl
  row finds-into-running-sweep 5 "is in use by another kedge" run "$K" fuzz --cpu -o rms_norm --cases 60 --finds run/finds.jsonl
else
  skip writers-into-running-sweep "the sweep ended before the writers were tried"
fi
wait $SWEEP; rc=$?
row running-sweep-whole-after 0 "gate: PASS" run "$K" gate --baseline "$ROOT/corpora/known-failures.jsonl" run/results.jsonl --expect run/plan.jsonl
echo "     (the sweep itself ended with status $rc and $(wc -l < "$S/run/results.jsonl") results)"

echo "== 3. fuzzing streams: --cases 0 (the bounded run is section 8)"
fresh fuzz-zero
row fuzz-cases-zero 2 "0 is below 1, the smallest value allowed" - "$K" fuzz --cpu --cases 0 --finds out/f.jsonl

echo "== 4. stored ids are rechecked"
fresh foreign
sed -E 's/"id":"([0-9a-f]+)"/"id":"old-\1"/' "$RESULTS" > "$S/foreign.jsonl"
cp "$S/foreign.jsonl" "$S/out/results.jsonl"
row resume-foreign-ids 2 "whose stored id is not the id of their case" - "$K" sweep --cpu boundary -o rms_norm --out out --resume
row gate-foreign-ids 2 "whose stored id is not the id of their case" - "$K" gate --baseline "$ROOT/corpora/known-failures.jsonl" foreign.jsonl
row report-foreign-ids 2 "whose stored id is not the id of their case" - "$K" report foreign.jsonl --out out2
echo "     (results from another profile, suite or kedge version on --resume: not replayed here)"

echo "== 5. libraries are opened in a child first"
fresh plugins
if command -v gcc > /dev/null; then
  for def in GOOD WILD_TABLE EXIT_ON_LOAD; do
    gcc -std=c99 -Wall -Werror -shared -fPIC -I "$ROOT/harness/include" -D$def \
      "$ROOT/harness/runner/tests/plugins/testplug.c" -o "$S/lib$def.so"
  done
  head -c 3000 "$S/libGOOD.so" > "$S/libTRUNCATED.so"
  row truncated-plugin-list 2 "libTRUNCATED.so: loading it killed the process with SIGBUS" - "$K" list --plugin ./libTRUNCATED.so
  row truncated-plugin-sweep 2 "libTRUNCATED.so: loading it killed the process with SIGBUS" out "$K" sweep --cpu smoke -o rms_norm --plugin ./libTRUNCATED.so --out out
  row wild-plugin-table-plan 2 "libWILD_TABLE.so: loading it killed the process with SIGSEGV" - "$K" plan -o rms_norm --plugin ./libWILD_TABLE.so
  row wild-plugin-table-list 2 "libWILD_TABLE.so: loading it killed the process with SIGSEGV" - "$K" list --plugin ./libWILD_TABLE.so
  row plugin-exits-on-load 2 "the library ended the process (exit status 0) while it was being loaded" - "$K" list --plugin ./libEXIT_ON_LOAD.so
  row good-plugin-loads 0 "plugin:testplug" - "$K" list -o rms_norm --plugin ./libGOOD.so
else
  skip plugins "gcc not found"
fi
if [ -n "${KEDGE_GGML_DIR:-}" ]; then
  L="$KEDGE_GGML_DIR"; [ -e "$L/libggml-base.so" ] || L="$L/lib"
  mkdir -p "$S/ggml"
  for f in "$L"/libggml*.so*; do cp -L "$f" "$S/ggml/"; done
  for f in "$S"/ggml/libggml-base.so*; do head -c 4096 "$f" > "$f.cut" && mv "$f.cut" "$f"; done
  row truncated-ggml-library 2 "libggml-base.so: loading it killed the process with SIGBUS" - "$K" list --ggml ggml
else
  skip truncated-ggml-library "KEDGE_GGML_DIR not set"
fi

echo "== 6. numbers have declared ranges"
fresh numbers
row jobs-zero 2 "0 is outside the range 1..=256" - "$K" sweep --cpu smoke --jobs 0 --out out
row batch-zero 2 "0 is outside the range 1..=4096" - "$K" sweep --cpu smoke --batch 0 --out out
row timeout-zero 2 "0 is outside the range 1..=604800" - "$K" sweep --cpu smoke --timeout 0 --out out
row minimize-budget-zero 2 "0 is outside the range 1..=1000000" - "$K" minimize --cpu --budget 0 "$INCIDENT"
row empty-shard 2 "shard 7/1000 holds none of the" out "$K" sweep --cpu smoke -o rms_norm --shard 7/1000 --out out
row negative-eps 2 "parameter 'eps': -1 is outside [0, inf)" - "$K" plan -o rms_norm --impl ggml --ne 64 --param eps=-1
row negative-eps-case 2 "is outside [0, inf)" - "$K" plan --case '{"op":"norm","impl":"ggml","dtype":"f32","ne":[64,1,1,1],"params":{"eps":-0.5}}'
row duplicate-key 2 "the key \"ne\" appears twice" - "$K" plan --case '{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"ne":[64,1,65536,1]}'
row duplicate-param 2 "the key \"eps\" appears twice" - "$K" plan --case '{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"params":{"eps":1,"eps":-1}}'
row rayon-threads-clamped 4 "RAYON_NUM_THREADS=100000 is more than the" out env RAYON_NUM_THREADS=100000 "$K" sweep --cpu smoke -o rms_norm --out out

echo "== 7. the smaller ones"
fresh smaller; mkdir "$S/adir"
row minimize-a-directory 2 "adir is a directory, not a file" - "$K" minimize --cpu adir
row plugin-a-directory 2 "it is a directory, not a file" - "$K" plan --plugin adir
row report-a-directory 2 "Is a directory" - "$K" report adir --out out
row out-dev-null 5 "/dev/null: it is a character device, not a directory" - "$K" sweep --cpu smoke -o rms_norm --out /dev/null
# A file-size limit: a write error (exit 5), not SIGXFSZ (153); a report replaced whole or not.
row file-size-limit 5 "File too large" out bash -c "ulimit -f 1; exec \"$K\" sweep --cpu boundary -o rms_norm --out out"
echo "the report before" > "$S/out/report.md"
row report-whole-or-not-at-all 5 "File too large" - bash -c "ulimit -f 1; exec \"$K\" report results.jsonl --out out"

echo "== 8. an endless fuzz run: flat memory under ulimit -v 2000000, Ctrl-C keeps its finds"
fresh fuzz
# Job control on: a background job without it starts with SIGINT ignored, as shells do.
set -m
( cd "$S" && ulimit -v 2000000 && exec "$K" fuzz --cpu --cases 1000000000 --finds finds.jsonl > fuzz.out 2> fuzz.err ) &
FZ=$!
set +m
sleep 5
rss() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$FZ/status" 2>/dev/null; }
early=$(rss VmRSS)
for _ in $(seq 6 "$FUZZ_S"); do sleep 1; done
late=$(rss VmRSS); peak=$(rss VmHWM)
kill -INT $FZ; wait $FZ; rc=$?
ran=$(grep -o 'stopped after [0-9]* cases' "$S/fuzz.err" | grep -o '[0-9]*')
finds=$(wc -l < "$S/finds.jsonl" 2>/dev/null || echo 0)
whole=yes
[ -s "$S/finds.jsonl" ] && [ "$(tail -c1 "$S/finds.jsonl" | od -An -c | tr -d ' ')" != '\n' ] && whole=no
python3 - "$S/finds.jsonl" > /dev/null 2>&1 <<'EOF' || whole=no
import json, sys
for line in open(sys.argv[1]):
    v = json.loads(line); assert isinstance(v["case"], dict) and v["verdict"]
EOF
echo "     ${FUZZ_S} s: ${ran:-?} cases; VmRSS ${early:-?} kB at 5 s, ${late:-?} kB at ${FUZZ_S} s; peak (VmHWM) ${peak:-?} kB; $finds finds written"
why=""
[ "$rc" = 130 ] || why="status $rc, expected 130"
grep -q "new finds written to finds.jsonl" "$S/fuzz.err" || why="${why:+$why; }no 'new finds written' note"
[ "$whole" = yes ] && [ "$finds" -ge 1 ] || why="${why:+$why; }finds not written whole"
# Flat: a case held in memory per generated case would be gigabytes by now (2.8 KB each).
[ -n "$peak" ] && [ "$peak" -lt 262144 ] && [ "$late" -le $((early * 3 / 2 + 8192)) ] || why="${why:+$why; }memory grew: $early kB -> $late kB (peak $peak kB)"
if [ -z "$why" ]; then PASS=$((PASS + 1)); echo "PASS fuzz-bounded-and-interruptible      status 130: $(grep -m1 'stopped after' "$S/fuzz.err" | sed 's/^kedge: //')"
else FAIL=$((FAIL + 1)); echo "FAIL fuzz-bounded-and-interruptible      $why"; tail -5 "$S/fuzz.err" | sed 's/^/     | /'; fi

if [ "$(git -C "$ROOT" status --porcelain 2>/dev/null)" = "$REPO_BEFORE" ]; then
  echo "the repository's files are as they were"
else
  FAIL=$((FAIL + 1)); echo "FAIL the repository changed:"; git -C "$ROOT" status --porcelain | head
fi
echo
echo "$PASS passed, $FAIL failed, $SKIP skipped"
[ "$KEEP" = 1 ] || rm -rf "$W"
[ "$FAIL" = 0 ]
