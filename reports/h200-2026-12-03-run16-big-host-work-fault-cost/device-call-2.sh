#!/usr/bin/env bash
# The H200, second call: kedge-core's GPU tests (a download buffer handed back and reused);
# the 35 cases of 2^31 elements with big references computed while the device has the case
# and download buffers reused; the default suite natively, in guard mode and under memcheck;
# the host side of three ops at 2^31 elements.
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
B=.bin/run16/c2; mkdir -p /tmp/bin && for f in kedge core_tests host_phases; do xz -dc $B/$f.xz > /tmp/bin/$f; done; chmod +x /tmp/bin/*
K=/tmp/bin/kedge
{ echo "kedge $(cat $B/COMMIT) ($(file -b $K | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/' 2>/dev/null; pkill -9 -f compute-sanitizer 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results|test result' $W/$name.log | tail -1 | cut -c1-380)"; grep -E 'time went|references' $W/$name.log | cut -c1-700 >> $S; }
step core-tests 90 /tmp/bin/core_tests --ignored --test-threads 1
grep -E '^test ' $W/core-tests.log >> $S
step big31 150 $K sweep --corpus $B/big31.jsonl --max-elements 0 --out $W/big31
step native 30 $K sweep default --out $W/native
step guard 45 $K sweep default --alloc guard --out $W/guard
step memcheck 100 $K sweep default --sanitize memcheck --timeout 60 --out $W/memcheck
step host-phases-31 $(( $(left) - 5 )) /tmp/bin/host_phases 31 rms_norm softmax cumsum
cat $W/host-phases-31.log >> $S
kill $CK 2>/dev/null
for d in big31 native guard memcheck; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
