#!/usr/bin/env bash
# The H200: kedge-core's GPU tests (guard mappings reused, staged copies); the default suite
# natively, in guard mode with the run-14 binary and with this one (8 workers twice, then 1),
# under memcheck; tri, add_id and rms_norm past --max-elements.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-560}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='*.xml' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=.bin/run15; mkdir -p /tmp/bin && for f in kedge kedge-before core_tests; do xz -dc $B/$f.xz > /tmp/bin/$f; done; chmod +x /tmp/bin/*; K=/tmp/bin/kedge; KB=/tmp/bin/kedge-before
{ echo "kedge commit $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped')); before: $(cat $B/COMMIT-before)"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-330)"; grep -E 'time went' $W/$name.log | cut -c1-900 >> $S; }
step coretest 60 /tmp/bin/core_tests --ignored --test-threads 1; tail -6 $W/coretest.log >> $S
step native 30 $K sweep default --out $W/native
step guard-before 45 $KB sweep default --alloc guard --out $W/guard-before
step guard 45 $K sweep default --alloc guard --out $W/guard
step guard-2 45 $K sweep default --alloc guard --out $W/guard-2
step guard-j1 120 $K sweep default --alloc guard --jobs 1 --out $W/guard-j1
step memcheck 100 $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck
step big $(( $(left) - 5 )) $K sweep default --max-elements 0 -o tri,add_id,rms_norm --out $W/big
kill $CK 2>/dev/null
for d in native guard-before guard guard-2 guard-j1 memcheck big; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
