#!/usr/bin/env bash
# One call on the H200: the default suite natively (several workers, then one), in guard mode,
# under memcheck, and its cases past --max-elements; stripped release binary; each step alone
# on the GPU, with a deadline; what finished comes back.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-565}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
min() { [ $1 -lt $2 ] && echo $1 || echo $2; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' . 2>/dev/null; tar czf $OUT/workers.tgz $(find . -path '*/workers/*' \( -name '*.log' -o -name '*.xml' \) -size -1M 2>/dev/null | head -300) 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bin && xz -dc .bin/kedge-stripped.xz > /tmp/bin/kedge && chmod +x /tmp/bin/kedge; K=/tmp/bin/kedge
{ echo "kedge commit $(cat .bin/COMMIT) (stripped: $(file -b $K | grep -o 'stripped\|not stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-260)"; }
step warm 60 $K sweep smoke --out $W/warm
step native 100 $K sweep default --out $W/native
step guard 100 $K sweep default --alloc guard --out $W/guard
step memcheck $(min 200 $(( $(left) - 220 ))) $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck
step native-j1 $(min 160 $(( $(left) - 60 ))) $K sweep default --jobs 1 --out $W/native-j1
cp -r $W/native $W/native-all
step big $(( $(left) - 6 )) $K sweep default --max-elements 0 --resume --out $W/native-all
kill $CK 2>/dev/null
for d in warm native guard memcheck native-j1 native-all; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
