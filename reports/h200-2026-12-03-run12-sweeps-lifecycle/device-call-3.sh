#!/usr/bin/env bash
# One call on the H200: how kedge ends. kill -9 mid-sweep then --resume; Ctrl-C mid-sweep
# (SIGINT to the foreground group, as a terminal sends it) then --resume; SIGTERM to
# `kedge run` alone; a passing and a failing `kedge run` and their temporary directories.
set -u
T0=$(date +%s); W=/tmp/w; L=$W/lifecycle; mkdir -p $L $W/tmp; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='./tmp' . 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache TMPDIR=$W/tmp
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/bin && xz -dc .bin/kedge-stripped.xz > /tmp/bin/kedge && chmod +x /tmp/bin/kedge; K=/tmp/bin/kedge
{ echo "kedge commit $(cat .bin/COMMIT)"; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> $S 2>&1
procs() { echo "kedge processes:"; pgrep -af '/tmp/bin/kedge' || echo "  none"; echo "compute-sanitizer processes:"; pgrep -af compute-sanitizer || echo "  none"; echo "GPU compute apps:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; echo "(end)"; echo "kedge temporary directories in TMPDIR:"; ls $W/tmp | grep kedge || echo "  none"; }
timeout 60 $K sweep smoke --out $W/warm > $W/warm.log 2>&1; say "warm rc=$?"
# kill -9 mid-sweep
$K sweep default --out $W/k9 > $L/k9-first.log 2>&1 & P=$!; sleep 8
n=$(wc -l < $W/k9/results.jsonl); kill -9 $P; wait $P 2>/dev/null; rc=$?; sleep 1
{ echo "SIGKILL to kedge (pid $P) after 8 s: exit $rc; results lines then: $n"; procs; } > $L/k9.txt 2>&1
cp $W/k9/results.jsonl $L/k9-before-resume.jsonl
t=$(date +%s); timeout 90 $K sweep default --resume --out $W/k9 > $L/k9-resume.log 2>&1; echo "resume exit $? in $(( $(date +%s) - t ))s; results lines after: $(wc -l < $W/k9/results.jsonl)" >> $L/k9.txt
say "kill -9 done: $(head -1 $L/k9.txt)"
# Ctrl-C mid-sweep
setsid bash -c "exec $K sweep default --out $W/cc" > $L/cc-first.log 2>&1 & P=$!; sleep 6
n=$(wc -l < $W/cc/results.jsonl); kill -INT -- -$P; wait $P; rc=$?; sleep 1
{ echo "SIGINT to kedge's process group (pid $P) after 6 s: exit $rc; results lines when sent: $n, after: $(wc -l < $W/cc/results.jsonl)"; procs; } > $L/cc.txt 2>&1
t=$(date +%s); timeout 90 $K sweep default --resume --out $W/cc > $L/cc-resume.log 2>&1; echo "resume exit $? in $(( $(date +%s) - t ))s; results lines after: $(wc -l < $W/cc/results.jsonl)" >> $L/cc.txt
say "Ctrl-C done: $(head -1 $L/cc.txt)"
# SIGTERM to `kedge run` alone (one worker on six SDPA limit cases)
$K run --corpus .bin/sdpa-limit.jsonl --jobs 1 > $L/term.log 2>&1 & P=$!; sleep 5
{ echo "while running:"; procs; } > $L/term.txt 2>&1
kill -TERM $P; wait $P; rc=$?; sleep 1
{ echo "SIGTERM to kedge run (pid $P) after 5 s: exit $rc"; procs; } >> $L/term.txt 2>&1
say "SIGTERM done: exit $rc"
# normal ends
$K run --case '{"op":"rms_norm","impl":"clamped","dtype":"f32","ne":[64,1,65536,1],"params":{"eps":1e-6,"row_pad":0},"seed":1,"alloc":"exact"}' > $L/run-pass.log 2>&1; rc=$?
{ echo "passing kedge run: exit $rc"; procs; } > $L/normal.txt 2>&1
$K run --case '{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1],"params":{"eps":1e-6,"row_pad":0},"seed":1,"alloc":"exact"}' > $L/run-fail.log 2>&1; rc=$?
{ echo "failing kedge run: exit $rc; it said: $(grep -i 'kept in' $L/run-fail.log)"; procs; } >> $L/normal.txt 2>&1
say "normal ends done"
