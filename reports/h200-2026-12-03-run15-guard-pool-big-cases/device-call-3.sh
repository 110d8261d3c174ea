#!/usr/bin/env bash
# The H200, third call: workers that report their start-up, with (b) and without (a) a ready
# worker lowering its CPU priority; guard mode alternated a, b, a, b; then natively and
# under memcheck with b.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-300}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='*.xml' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=.bin/run15/c3; mkdir -p /tmp/bin && for f in kedge-a kedge-b; do xz -dc $B/$f.xz > /tmp/bin/$f; done; chmod +x /tmp/bin/*; KA=/tmp/bin/kedge-a; KB=/tmp/bin/kedge-b
{ echo "kedge a: $(cat $B/COMMIT-a), b: $(cat $B/COMMIT-b) ($(file -b $KB | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-380)"; grep -E 'time went' $W/$name.log | cut -c1-600 >> $S; }
step native-b 30 $KB sweep default --out $W/native-b
step guard-a 45 $KA sweep default --alloc guard --out $W/guard-a
step guard-b 45 $KB sweep default --alloc guard --out $W/guard-b
step guard-a2 45 $KA sweep default --alloc guard --out $W/guard-a2
step guard-b2 45 $KB sweep default --alloc guard --out $W/guard-b2
step guard-b-j4 45 $KB sweep default --alloc guard --jobs 4 --out $W/guard-b-j4
step memcheck-b $(( $(left) - 5 )) $KB sweep default --sanitize memcheck --timeout 60 --out $W/memcheck-b
kill $CK 2>/dev/null
for d in native-b guard-a guard-b guard-a2 guard-b2 guard-b-j4 memcheck-b; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
