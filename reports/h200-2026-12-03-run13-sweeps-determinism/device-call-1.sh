#!/usr/bin/env bash
# One call on the H200: what the host side of a big case costs; the default suite natively,
# in guard mode and under memcheck; one big case alone; the cases past --max-elements.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-570}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
min() { [ $1 -lt $2 ] && echo $1 || echo $2; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='*.xml' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=.bin/run13; mkdir -p /tmp/bin && xz -dc $B/kedge.xz > /tmp/bin/kedge && xz -dc $B/host_bench.xz > /tmp/bin/host_bench && chmod +x /tmp/bin/*; K=/tmp/bin/kedge
{ echo "kedge commit $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; uname -r; } >> $S 2>&1
compute-sanitizer --help 2>&1 | grep -i -A3 'show-backtrace' >> $S
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-300)"; grep -E 'time went' $W/$name.log | cut -c1-700 >> $S; }
step hostbench 60 /tmp/bin/host_bench 29; cat $W/hostbench.log >> $S
step warm 60 $K sweep smoke --out $W/warm
step native 60 $K sweep default --out $W/native
step guard 80 $K sweep default --alloc guard --out $W/guard
step memcheck $(min 180 $(( $(left) - 200 ))) $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck
step one-big 60 $K run -o rms_norm --impl clamped --ne 64,8388608,1,1 --format json
grep -o '"timings":{[^}]*}' $W/one-big.log >> $S
cp -r $W/native $W/native-all
step big $(( $(left) - 8 )) $K sweep default --max-elements 0 --resume --out $W/native-all
kill $CK 2>/dev/null
for d in warm native guard memcheck native-all; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
