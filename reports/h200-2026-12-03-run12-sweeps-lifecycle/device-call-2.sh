#!/usr/bin/env bash
# One call on the H200: every ggml op kedge can check, against upstream d99724f's CUDA backend,
# natively and under memcheck; upstream's test-backend-ops on the same ops; worker lifecycle
# (kill -9 then --resume, Ctrl-C, SIGTERM, temporary directories); fp8 verdicts with one
# worker and with eight; then the default suite's cases past --max-elements, resumed.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-565}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
min() { [ $1 -lt $2 ] && echo $1 || echo $2; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='./tmp' . 2>/dev/null; tar czf $OUT/workers.tgz $(find . -path '*/workers/*' \( -name '*.log' -o -name '*.xml' \) -size -1M 2>/dev/null | head -300) 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bin /tmp/gg && xz -dc .bin/kedge-stripped.xz > /tmp/bin/kedge && chmod +x /tmp/bin/kedge; K=/tmp/bin/kedge
xz -dc -T16 .bin/ggml-cuda.tar.xz | tar xf - -C /tmp/gg; GG=/tmp/gg; TBO=$GG/bin/test-backend-ops
{ echo "kedge commit $(cat .bin/COMMIT) (stripped: $(file -b $K | grep -o 'stripped\|not stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-260)"; }
step warm 60 $K sweep smoke --out $W/warm
$K list --ggml $GG > $W/ggml-list.txt 2>&1
python3 - $W/ggml-list.txt > $W/tbo-ops.txt <<'PY'
import sys
ops=[]; up=None; has=False
def flush():
    if up and has and up not in ops: ops.append(up)
for l in open(sys.argv[1]):
    if l and not l.startswith(' '):
        flush(); up=None; has=False
    elif l.strip().startswith('upstream:'): up=l.split(':',1)[1].strip().split()[0]
    elif 'impl ggml:CUDA0' in l: has=True
flush(); print('\n'.join(ops))
PY
say "ggml ops with a CUDA0 impl and an upstream name: $(wc -l < $W/tbo-ops.txt)"
step ggml-all 110 $K sweep default --ggml $GG --impl ggml:CUDA0 --timeout 60 --out $W/ggml-all
# upstream's own suite on the same ops, one op at a time so a slow one cannot hide the rest
t=$(date +%s); : > $W/tbo-per-op.tsv; mkdir -p $W/tbo
while read -r op; do
  [ $(( $(date +%s) - t )) -gt 110 ] && { echo -e "$op\tnot-run\t-\t-" >> $W/tbo-per-op.tsv; continue; }
  s=$(date +%s.%N); timeout 20 $TBO test -b CUDA0 -o $op > $W/tbo/$op.log 2>&1; rc=$?; e=$(date +%s.%N)
  echo -e "$op\t$rc\t$(awk "BEGIN{printf \"%.1f\", $e-$s}")\t$(grep -Eo '[0-9]+/[0-9]+ tests passed' $W/tbo/$op.log | tail -1)" >> $W/tbo-per-op.tsv
done < $W/tbo-ops.txt
say "tbo per op done $(( $(date +%s) - t ))s"
step ggml-memcheck $(min 210 $(( $(left) - 170 ))) $K sweep default --ggml $GG --impl ggml:CUDA0 --sanitize memcheck --timeout 90 --out $W/ggml-memcheck
# ---- lifecycle ----
L=$W/lifecycle; mkdir -p $L $W/tmp; export TMPDIR=$W/tmp
OPS=rms_norm,softmax,cumsum,tri,add_id
( $K sweep default -o $OPS --out $W/k9 > $L/k9-first.log 2>&1 & echo $! > $L/k9.pid; wait ) &
sleep 7; P=$(cat $L/k9.pid); kill -9 $P; sleep 1.5
{ echo "killed kedge pid $P with SIGKILL after 7 s"; echo "results lines then: $(wc -l < $W/k9/results.jsonl)"; echo "kedge processes 1.5 s later:"; pgrep -af '/tmp/bin/kedge' || echo none; echo "compute-sanitizer processes:"; pgrep -af compute-sanitizer || echo none; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | sed 's/^/gpu app: /'; } > $L/k9.txt 2>&1
cp $W/k9/results.jsonl $L/k9-before-resume.jsonl
$K sweep default -o $OPS --resume --out $W/k9 > $L/k9-resume.log 2>&1; echo "resume rc=$?" >> $L/k9.txt
# Ctrl-C as a terminal sends it: SIGINT to the foreground process group
setsid bash -c "exec $K sweep default -o $OPS --out $W/cc" > $L/cc.log 2>&1 & P=$!; sleep 5
kill -INT -- -$P; sleep 0.2; wait $P; rc=$?
sleep 1; { echo "Ctrl-C (SIGINT to the group) after 5 s: kedge exit $rc"; echo "results lines: $(wc -l < $W/cc/results.jsonl)"; echo "kedge processes after:"; pgrep -af '/tmp/bin/kedge' || echo none; echo "kedge temporary directories in TMPDIR:"; ls $W/tmp | grep kedge || echo none; } > $L/cc.txt 2>&1
# SIGTERM to kedge alone, mid `kedge run` (workers and a temporary directory of its own)
$K run -o sdpa_prefill --format json > $L/term.log 2>&1 & P=$!; sleep 6
echo "temporary directories while running: $(ls $W/tmp | grep kedge | tr '\n' ' ')" > $L/term.txt
kill -TERM $P; wait $P; rc=$?; sleep 1
{ echo "SIGTERM to kedge run after 6 s: exit $rc"; echo "kedge processes after:"; pgrep -af '/tmp/bin/kedge' || echo none; echo "kedge temporary directories after:"; ls $W/tmp | grep kedge || echo none; } >> $L/term.txt 2>&1
# normal ends: a passing run removes its directory, a failing one keeps and names it
$K run -o rms_norm --impl clamped > $L/run-pass.log 2>&1; echo "passing run exit $?; temporary directories after: $(ls $W/tmp | grep kedge | tr '\n' ' ')" > $L/normal.txt
$K run -o rms_norm --impl ggml > $L/run-fail.log 2>&1; echo "failing run exit $?; temporary directories after: $(ls $W/tmp | grep kedge | tr '\n' ' '); kedge said: $(grep -i 'kept in' $L/run-fail.log)" >> $L/normal.txt
unset TMPDIR; clean; say "lifecycle done"
# ---- fp8 verdicts with one worker and with eight, exact and guard ----
for m in exact guard; do for j in 1 8; do step fp8-$m-j$j 60 $K sweep default -o fp8_gemm --alloc $m --jobs $j --out $W/fp8-$m-j$j; done; done
# ---- the default suite's cases past --max-elements, resumed from the earlier native run ----
mkdir -p $W/native-big && cp .bin/c1-native/* $W/native-big/
step big $(( $(left) - 6 )) $K sweep default --max-elements 0 --resume --out $W/native-big
kill $CK 2>/dev/null
for d in ggml-all ggml-memcheck k9 cc native-big; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
