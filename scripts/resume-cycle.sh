#!/usr/bin/env bash
# A sweep killed outright (kill -9) KILLS times part-way, continued each time with --resume,
# then finished: checks that every planned case has exactly one result, that no line was left
# cut off, and that no worker or compute-sanitizer process of a killed kedge outlives it.
#
#   scripts/resume-cycle.sh KEDGE OUTDIR KILLS SWEEP-ARGS...
#
# e.g. scripts/resume-cycle.sh .bin/kedge out/resume-guard 3 default --alloc guard
#      scripts/resume-cycle.sh .bin/kedge out/resume-memcheck 2 default -o rms_norm --sanitize memcheck
# Kill k of KILLS comes when the results file holds k/(KILLS+1) of the planned cases. Prints
# PASS/FAIL lines; exits 1 if any check failed.
set -u
K=${1:?usage: scripts/resume-cycle.sh KEDGE OUTDIR KILLS SWEEP-ARGS...}
OUT=${2:?OUTDIR}; KILLS=${3:?KILLS}; shift 3
mkdir -p "$OUT"; D="$OUT/sweep"; rm -rf "$D"
FAILED=0
say() { echo "$*"; }
check() { # check NAME CONDITION-STATUS DETAIL
  if [ "$2" = 0 ]; then say "PASS $1: $3"; else say "FAIL $1: $3"; FAILED=1; fi
}
lines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }

# Processes started by supervisor PID (workers, and compute-sanitizer around them: kedge marks
# each with KEDGE_SUPERVISOR_PID in its environment).
strays() {
  local pid=$1 p
  for p in /proc/[0-9]*; do
    { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qx "KEDGE_SUPERVISOR_PID=$pid" &&
      echo "${p#/proc/}:$({ tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null | cut -c1-80)"
  done
}

# Wait up to 10 s for PID's workers to end; print what is left.
left_after() {
  local pid=$1 s
  for _ in $(seq 1 100); do
    s=$(strays "$pid"); [ -z "$s" ] && return 0; sleep 0.1
  done
  echo "$s"
}

planned=0
for k in $(seq 1 "$KILLS"); do
  mode=--force; [ "$k" -gt 1 ] && mode=--resume
  "$K" sweep "$@" $mode --out "$D" > "$OUT/run-$k.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 3000); do [ -s "$D/plan.jsonl" ] && break; sleep 0.1; done
  planned=$(lines "$D/plan.jsonl")
  at=$(( planned * k / (KILLS + 1) ))
  for _ in $(seq 1 36000); do
    [ "$(lines "$D/results.jsonl")" -ge "$at" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  had=$(strays $pid | wc -l)
  if kill -0 $pid 2>/dev/null; then
    kill -9 $pid; wait $pid 2>/dev/null
    left=$(left_after $pid)
    check "kill-$k-no-strays" "$([ -z "$left" ]; echo $?)" \
      "kill -9 at $(lines "$D/results.jsonl") of $planned results ($had worker/sanitizer processes before); ${left:-none left after it}"
  else
    wait $pid
    say "NOTE kill-$k: the sweep ended (status $?) before $at results; nothing to kill"
  fi
done

"$K" sweep "$@" --resume --out "$D" > "$OUT/run-final.log" 2>&1 &
pid=$!; wait $pid; rc=$?
left=$(left_after $pid)
want="0 or 1"; [[ " $* " == *" --cpu "* ]] && want=4
check final-status "$([[ " $want " == *" $rc "* ]]; echo $?)" "the last --resume ended with status $rc ($want expected)"
check final-no-strays "$([ -z "$left" ]; echo $?)" "${left:-no worker or sanitizer process left}"
grep -h -E "cut off|already finished" "$OUT"/run-*.log | sed 's/^/     /'

# Every planned case exactly once per way it ran: ids are the first 12 hex digits of the
# SHA-256 of the plan's canonical case line.
python3 - "$D/plan.jsonl" "$D/results.jsonl" <<'EOF'
import collections, hashlib, json, sys
plan = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
ids = {hashlib.sha256(l.encode()).hexdigest()[:12] for l in plan}
text = open(sys.argv[2]).read()
torn = bool(text) and not text.endswith("\n")
seen = collections.Counter()
for l in text.splitlines():
    r = json.loads(l)
    seen[(r["id"], r["under"])] += 1
unders = sorted({u for _, u in seen})
bad = 0
for u in unders:
    got = {i for (i, uu) in seen if uu == u}
    twice = sum(1 for (i, uu), n in seen.items() if uu == u and n > 1)
    missing, extra = len(ids - got), len(got - ids)
    ok = not (twice or missing or extra)
    bad |= not ok
    print(f"{'PASS' if ok else 'FAIL'} exactly-once-{u}: {len(plan)} planned, {len(got)} with a result, "
          f"{twice} twice, {missing} missing, {extra} not planned")
print(f"{'FAIL' if torn else 'PASS'} no-cut-off-line: the results file ends {'mid-line' if torn else 'with a whole line'}")
sys.exit(1 if bad or torn or not unders else 0)
EOF
[ $? = 0 ] || FAILED=1
exit $FAILED
