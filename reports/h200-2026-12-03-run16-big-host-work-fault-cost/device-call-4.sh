#!/usr/bin/env bash
# The H200, fourth call: the 35 cases of 2^31 elements with a new key's inputs drawn into the
# last key's buffers (this binary) and without (the second call's), alternated; the default
# suite natively.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-540}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='*.xml' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 45; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=.bin/run16/c4; mkdir -p /tmp/bin && for f in kedge kedge-c2; do xz -dc $B/$f.xz > /tmp/bin/$f; done; chmod +x /tmp/bin/*
K=/tmp/bin/kedge; K2=/tmp/bin/kedge-c2
{ echo "kedge $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results|test result' $W/$name.log | tail -1 | cut -c1-380)"; grep -E 'time went|references' $W/$name.log | cut -c1-700 >> $S; }
step big31-a 110 $K sweep --corpus $B/big31.jsonl --max-elements 0 --out $W/big31-a
step big31-c2 110 $K2 sweep --corpus $B/big31.jsonl --max-elements 0 --out $W/big31-c2
step big31-a2 $(( $(left) - 25 )) $K sweep --corpus $B/big31.jsonl --max-elements 0 --out $W/big31-a2
step native 20 $K sweep default --out $W/native
kill $CK 2>/dev/null
for d in big31-a big31-c2 big31-a2 native; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
