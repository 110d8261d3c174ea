#!/usr/bin/env bash
# The H200, first call: what a GPU fault costs (fault_cost.cu, outside kedge); the host side
# of 2^31-element cases op by op (host_phases); the default suite natively (8 workers and 1)
# and in guard mode; the 35 cases of 2^31 elements with this binary and with run 15's.
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
B=.bin/run16/c1; mkdir -p /tmp/bin && for f in kedge kedge-before host_phases; do xz -dc $B/$f.xz > /tmp/bin/$f; done; chmod +x /tmp/bin/*
K=/tmp/bin/kedge; KB=/tmp/bin/kedge-before
{ echo "kedge $(cat $B/COMMIT), before: $(cat $B/COMMIT-before) ($(file -b $K | grep -o 'not stripped\|stripped'))"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nvcc --version | tail -2; nproc; free -g | head -2; } >> $S 2>&1
clean() { pkill -9 -f '/tmp/bin/' 2>/dev/null; sleep 1; }
step() { local name=$1 dl=$2; shift 2; local t=$(date +%s); timeout $dl "$@" > $W/$name.log 2>&1; local rc=$?; clean; say "$name rc=$rc $(( $(date +%s) - t ))s (deadline ${dl}s): $(grep -E 'cases have results' $W/$name.log | tail -1 | cut -c1-380)"; grep -E 'time went|workers \(start' $W/$name.log | cut -c1-700 >> $S; }
# 1. A fault's cost, outside kedge.
FC=/tmp/bin/fault_cost
if nvcc -O2 -o $FC $B/fault_cost.cu -lcuda > $W/fault-build.log 2>&1; then
  fc() { local name=$1 dl=$2; shift 2; local t=$(date +%s.%N); timeout $dl bash -c "$*" > $W/$name.log 2>&1; local rc=$?; say "$name rc=$rc $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t}") s"; head -c 3000 $W/$name.log >> $S; }
  fc twoctx 20 "$FC twoctx"
  fc one-ok 20 "$FC child ok"
  fc one-fault 20 "$FC child fault"
  fc serial-ok-43 60 "for i in \$(seq 43); do $FC child ok | tail -1; done | tail -3"
  fc serial-fault-43 60 "for i in \$(seq 43); do $FC child fault; done | tail -3"
  fc par8-ok-43 60 "seq 43 | xargs -P8 -I{} $FC child ok | tail -3"
  fc par8-fault-43 60 "seq 43 | xargs -P8 -I{} $FC child fault | tail -3"
  fc bystander-alone 20 "$FC bystander 5"
  fc bystander-with-faults 60 "$FC bystander 14 & sleep 1; for i in \$(seq 20); do $FC child fault > /dev/null; done; wait"
  fc bystander-with-oks 60 "$FC bystander 14 & sleep 1; for i in \$(seq 20); do $FC child ok > /dev/null; done; wait"
else
  say "fault_cost did not build"; cat $W/fault-build.log >> $S
fi
# 2. The host side of a 2^31-element case, op by op.
step host-phases-31 80 /tmp/bin/host_phases 31
cat $W/host-phases-31.log >> $S
# 3. The default suite.
step native 30 $K sweep default --out $W/native
step native-j1 40 $K sweep default --jobs 1 --out $W/native-j1
step guard 45 $K sweep default --alloc guard --out $W/guard
# 4. The 35 cases of 2^31 elements.
step big31 200 $K sweep --corpus $B/big31.jsonl --max-elements 0 --out $W/big31
step big31-before $(( $(left) - 5 )) $KB sweep --corpus $B/big31.jsonl --max-elements 0 --out $W/big31-before
kill $CK 2>/dev/null
for d in native native-j1 guard big31 big31-before; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results"; done
