#!/usr/bin/env bash
# The H200, second call: this binary (707ab73: an output the same, byte for byte, as the last
# one of its key is judged by that one's comparison) beside the one before it (98faf11), in
# one call: the 35 cases of 2^31 elements (new, base, base, new), then the default suite
# natively, in guard mode and under memcheck with each.
set -u
R=$(dirname "$0")
T0=$(date +%s); DL=$((T0 + ${BUDGET:-560}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='*.xml' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=.bin/run17; K=$B/kedge; K0=$B/kedge-base
{ echo "kedge $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped')), base 98faf11"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f "$B/" 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results|test result' $W/$name.log | tail -1 | cut -c1-380)"; grep -E 'time went|references' $W/$name.log | cut -c1-700 >> $S; }
C=$R/cases-2e31.jsonl
step big31-new 110 $K sweep --corpus $C --max-elements 0 --out $W/big31-new
step big31-base 110 $K0 sweep --corpus $C --max-elements 0 --out $W/big31-base
step big31-base2 110 $K0 sweep --corpus $C --max-elements 0 --out $W/big31-base2
step big31-new2 110 $K sweep --corpus $C --max-elements 0 --out $W/big31-new2
step native-new 20 $K sweep default --out $W/native-new
step native-base 20 $K0 sweep default --out $W/native-base
step guard-new 45 $K sweep default --alloc guard --out $W/guard-new
step guard-base 45 $K0 sweep default --alloc guard --out $W/guard-base
step memcheck-new 120 $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck-new
step memcheck-base $(( $(left) - 10 )) $K0 sweep default --sanitize memcheck --timeout 60 --out $W/memcheck-base
kill $CK 2>/dev/null
for d in big31-new big31-base big31-base2 big31-new2 native-new native-base guard-new guard-base memcheck-new memcheck-base; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
