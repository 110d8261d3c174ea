#!/usr/bin/env bash
# The H200, second call: natively; guard mode with a standby from the start against the
# first call's binary; guard mode with 4 and 16 workers (is the wall time bounded by the
# workers' replacements?); then every case past --max-elements, resuming the first call's
# directory (tri, add_id and rms_norm done there).
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
B=.bin/run15/c2; mkdir -p /tmp/bin && for f in kedge kedge-call1; do xz -dc $B/$f.xz > /tmp/bin/$f; done; chmod +x /tmp/bin/*; K=/tmp/bin/kedge; K1=/tmp/bin/kedge-call1
{ echo "kedge commit $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped')); call 1's: $(cat $B/COMMIT-call1)"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/kedge' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-330)"; grep -E 'time went' $W/$name.log | cut -c1-900 >> $S; }
step native 30 $K sweep default --out $W/native
step guard 45 $K sweep default --alloc guard --out $W/guard
step guard-call1 45 $K1 sweep default --alloc guard --out $W/guard-call1
step guard-2 45 $K sweep default --alloc guard --out $W/guard-2
step guard-j4 60 $K sweep default --alloc guard --jobs 4 --out $W/guard-j4
step guard-j16 45 $K sweep default --alloc guard --jobs 16 --out $W/guard-j16
cp -r $B/big-resume $W/big && echo "big: $(wc -l < $W/big/results.jsonl) results before resuming" >> $S
step big $(( $(left) - 5 )) $K sweep default --max-elements 0 --resume --out $W/big
kill $CK 2>/dev/null
for d in native guard guard-call1 guard-2 guard-j4 guard-j16 big; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
