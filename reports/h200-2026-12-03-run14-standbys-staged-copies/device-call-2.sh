#!/usr/bin/env bash
# The H200, second call: the default suite natively with 8 workers and with 1 (units now
# spread by op), guard mode three times (twice with kernel warm-ups, once with a build whose
# FP8 standbys load cuBLASLt's handle only), memcheck, then every case past --max-elements.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-540}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
min() { [ $1 -lt $2 ] && echo $1 || echo $2; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='*.xml' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=.bin/run14; mkdir -p /tmp/bin && xz -dc $B/kedge.xz > /tmp/bin/kedge && xz -dc $B/kedge-nowarm.xz > /tmp/bin/kedge-nowarm && chmod +x /tmp/bin/*; K=/tmp/bin/kedge
{ echo "kedge commit $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-330)"; grep -E 'time went' $W/$name.log | cut -c1-900 >> $S; }
step warm 30 $K sweep smoke --out $W/warm
step native 30 $K sweep default --out $W/native
step native-j1 40 $K sweep default --jobs 1 --out $W/native-j1
step guard 50 $K sweep default --alloc guard --out $W/guard
step guard-nowarm 50 /tmp/bin/kedge-nowarm sweep default --alloc guard --out $W/guard-nowarm
step guard-2 50 $K sweep default --alloc guard --out $W/guard-2
step memcheck $(min 120 $(( $(left) - 60 ))) $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck
grep -c 'stopped by kedge' $W/memcheck/results.jsonl >> $S
( while sleep 10; do echo "--- t=$(( $(date +%s) - T0 ))"; top -b -n1 -w 160 | head -22; free -g | head -2; done ) > $W/big-top.txt 2>&1 & TP=$!
step big $(( $(left) - 6 )) $K sweep default --max-elements 0 --out $W/big
kill $TP $CK 2>/dev/null
for d in warm native native-j1 guard guard-nowarm guard-2 memcheck big; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
