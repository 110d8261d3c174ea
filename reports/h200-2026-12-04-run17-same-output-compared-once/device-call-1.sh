#!/usr/bin/env bash
# The H200, first call: kedge-core's GPU tests for the staged copies and the kept download
# buffer; the 35 cases of 2^31 elements with this binary (a: the reference computed ahead
# starts once the inputs are on the device) and with b (the same code, the reference started
# before the upload, as before), alternated; the default suite natively, in guard mode and
# under memcheck; the 35 cases of 2^32 elements.
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
B=.bin/run17; K=$B/kedge; KB=$B/kedge-b
{ echo "kedge $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f "$B/" 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results|test result' $W/$name.log | tail -1 | cut -c1-380)"; grep -E 'time went|references' $W/$name.log | cut -c1-700 >> $S; }
step core-gpu-tests 60 $B/core-tests --ignored --test-threads 1 staged_copies a_handed_back a_download_the_same
step big31-a 110 $K sweep --corpus $R/cases-2e31.jsonl --max-elements 0 --out $W/big31-a
step big31-b 110 $KB sweep --corpus $R/cases-2e31.jsonl --max-elements 0 --out $W/big31-b
step big31-a2 110 $K sweep --corpus $R/cases-2e31.jsonl --max-elements 0 --out $W/big31-a2
step native 20 $K sweep default --out $W/native
step guard 45 $K sweep default --alloc guard --out $W/guard
step memcheck 130 $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck
step big32 $(( $(left) - 15 )) $K sweep --corpus $R/cases-2e32.jsonl --max-elements 0 --out $W/big32
kill $CK 2>/dev/null
for d in big31-a big31-b big31-a2 native guard memcheck big32; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
