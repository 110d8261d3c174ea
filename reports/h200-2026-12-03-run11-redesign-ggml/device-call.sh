#!/usr/bin/env bash
# One call on the H200: kedge after the redesign, a ggml CUDA build under test, repros, memcheck,
# upstream's own test-backend-ops, kernel timing. Every step has a deadline; what finished comes back.
set -u
T0=$(date +%s); DL=$((T0 + ${BUDGET:-440}))
left() { local l=$((DL - $(date +%s))); [ $l -lt 1 ] && l=1; echo $l; }
W=/tmp/w; mkdir -p $W; S=$W/summary.txt; : > $S
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $S; }
pack() { (cd $W && tar czf $OUT/results.tgz --exclude='*/workers/*' --exclude='./repro/*/repro' --exclude='*.inputs' --exclude='*.cu' . 2>/dev/null; tar czf $OUT/workers.tgz $(find . -path '*/workers/*' \( -name '*.log' -o -name '*.xml' \) -size -2M 2>/dev/null | head -400) 2>/dev/null); cp $S $OUT/summary.txt; }
trap pack EXIT
( while sleep 40; do pack; done ) & CK=$!
export KEDGE_CACHE_DIR=/tmp/kedge-nvrtc-cache NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
B=$PWD/.bin; mkdir -p /tmp/bin
xz -dc $B/kedge.xz > /tmp/bin/kedge; xz -dc $B/kedge-stripped.xz > /tmp/bin/kedge-stripped; xz -dc $B/tbo-kedge.xz > /tmp/bin/tbo-kedge; chmod +x /tmp/bin/*
mkdir -p /tmp/gg && xz -dc -T16 $B/ggml-cuda.tar.xz | tar xf - -C /tmp/gg && cp /tmp/bin/tbo-kedge /tmp/gg/bin/
K=/tmp/bin/kedge; KS=/tmp/bin/kedge-stripped; GG=/tmp/gg
{ echo "kedge commit $(cat $B/COMMIT)"; date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; compute-sanitizer --version | tail -1; nvcc --version | tail -1; nproc; } >> $S 2>&1
$K limits > $W/limits.txt 2>&1; $K list --ggml $GG -o rms_norm > $W/ggml-list.txt 2>&1; say "ggml load: $(grep -c 'ggml:CUDA0' $W/ggml-list.txt) CUDA0 impl lines; $(head -c 300 $W/ggml-list.txt | tail -c 200)"
ROW="rms_norm,rms_norm_mul_add,norm,l2_norm,softmax,cumsum,tri,add_id"
# ---- phase 1, in parallel ----
( t=$(date +%s); timeout $(( $(left) - 200 )) $K sweep default --jobs 4 --max-elements 268435456 --out $W/native > $W/native.log 2>&1; echo "A native rc=$? $(( $(date +%s) - t ))s" >> $S ) &
PA=$!
( t=$(date +%s); timeout $(( $(left) - 200 )) $K sweep default --ggml $GG --impl ggml:CUDA0 -o $ROW --jobs 4 --timeout 60 --max-elements 268435456 --out $W/ggml-kedge-ops > $W/ggml-kedge-ops.log 2>&1; echo "B1 ggml kedge ops rc=$? $(( $(date +%s) - t ))s" >> $S
  t=$(date +%s); timeout $(( $(left) - 170 )) $K sweep default --ggml $GG --impl ggml:CUDA0 --jobs 6 --timeout 60 --max-elements 268435456 --out $W/ggml-all > $W/ggml-all.log 2>&1; echo "B2 ggml all ops rc=$? $(( $(date +%s) - t ))s" >> $S ) &
PB=$!
( mkdir -p $W/repro; i=0; while IFS=$'\t' read -r exp line; do i=$((i+1)); d=$W/repro/$i; mkdir -p $d; echo "$exp	$line" > $d/case.tsv; $K repro --out $d "$line" > $d/repro.txt 2>&1; done < $B/repro-cases.tsv
  ls -d $W/repro/*/ | xargs -P 8 -I{} sh -c 'cd {} && [ -f repro.cu ] && nvcc -arch=sm_90 -o repro repro.cu > build.log 2>&1; echo $? > build.rc'
  for d in $W/repro/*/; do (cd $d; [ -x repro ] || continue; timeout 30 ./repro > run.out 2>&1; echo $? > run.rc; exp=$(cut -f1 case.tsv); t=memcheck; case $exp in fail:initcheck) t=initcheck;; fail:racecheck) t=racecheck;; esac; timeout 60 compute-sanitizer --tool $t --padding 512 --error-exitcode 9 ./repro > san.out 2>&1; echo "$t $?" > san.rc); done
  echo "C repros done" >> $S ) &
PC=$!
( t=$(date +%s); timeout $(( $(left) - 200 )) $K sweep boundary --ggml $GG --impl ggml:CUDA0 -o mul_mat,interpolate,flash_attn_ext --filter 'm=52454[4],n=1,k=4096|m=524288,n=1,k=4096|ne=\[512,512,204[89],1\],ne_tgt|nh=3[23],nr23=\[1,1\],kv=131072' --max-elements 0 --jobs 2 --timeout 150 --out $W/big > $W/big.log 2>&1; echo "H big rc=$? $(( $(date +%s) - t ))s" >> $S ) &
PH=$!
wait $PA $PC; say "phase 1a done"; wait $PB $PH; say "phase 1 done"
# ---- phase 2: memcheck (stripped binary), ggml failures under memcheck, upstream confirmations ----
python3 - $W <<'PY' > $W/ggml-failures.jsonl 2>$W/py.err
import json,sys,os
W=sys.argv[1]; res=[]
for d in ['ggml-kedge-ops','ggml-all','big']:
    p=os.path.join(W,d,'results.jsonl')
    if os.path.exists(p): res+= [json.loads(l) for l in open(p) if l.strip()]
plan=[]
for d in ['ggml-kedge-ops','ggml-all','big']:
    p=os.path.join(W,d,'plan.jsonl')
    if os.path.exists(p): plan+= [json.loads(l) for l in open(p) if l.strip()]
fail=[r for r in res if r['verdict'] not in ('pass','unsupported','skipped')]
out={}
for r in fail:
    c=r['case']; out[json.dumps(c,sort_keys=True)]=c
    for p in plan:
        if p['op']==c['op'] and p['params']==c['params'] and p['dtype']==c['dtype'] and sum(a!=b for a,b in zip(p['ne'],c['ne']))==1:
            out[json.dumps(p,sort_keys=True)]=p
for c in out.values(): print(json.dumps(c))
PY
say "ggml failing cases + neighbours: $(wc -l < $W/ggml-failures.jsonl)"
( t=$(date +%s); timeout $(( $(left) - 100 )) $KS sweep default --sanitize memcheck --jobs 8 --timeout 60 --max-elements 268435456 --out $W/memcheck > $W/memcheck.log 2>&1; echo "E2 memcheck (stripped) rc=$? $(( $(date +%s) - t ))s" >> $S ) &
PE=$!
( t=$(date +%s); head -n 60 $W/ggml-failures.jsonl > $W/mc-ggml-cases.jsonl; [ -s $W/mc-ggml-cases.jsonl ] && timeout $(( $(left) - 100 )) $K sweep --ggml $GG --corpus $W/mc-ggml-cases.jsonl --sanitize memcheck --batch 1 --jobs 6 --timeout 90 --max-elements 0 --out $W/memcheck-ggml > $W/memcheck-ggml.log 2>&1; echo "E1 ggml memcheck rc=$? $(( $(date +%s) - t ))s" >> $S ) &
PE1=$!
( mkdir -p $W/tbo; n=0; while IFS= read -r c; do n=$((n+1)); $K repro --ggml $GG "$c" > $W/tbo/$n.repro 2>&1; cmd=$(grep -m1 '^test-backend-ops test' $W/tbo/$n.repro); [ -n "$cmd" ] || continue; echo "$c" > $W/tbo/$n.case; echo "$cmd" > $W/tbo/$n.cmd; done < $W/ggml-failures.jsonl
  ls $W/tbo/*.cmd 2>/dev/null | xargs -P 8 -I{} sh -c 'f={}; b=${f%.cmd}; cmd=$(cat $f | sed "s|^test-backend-ops|/tmp/gg/bin/tbo-kedge|"); timeout 60 sh -c "$cmd" > $b.out 2>&1; echo $? > $b.rc'
  t=$(date +%s); timeout 60 $GG/bin/test-backend-ops test -b CUDA0 -o RMS_NORM,RMS_NORM_MUL_ADD,NORM,L2_NORM,SOFT_MAX,CUMSUM,TRI,ADD_ID > $W/tbo-upstream-suite.log 2>&1; echo "G tbo upstream suite (8 ops) rc=$? $(( $(date +%s) - t ))s" >> $S
  echo "F tbo confirmations done: $(ls $W/tbo/*.rc 2>/dev/null | wc -l)" >> $S ) &
PF=$!
wait $PF $PE1; say "F/E1 done"; wait $PE; say "E2 done"
# ---- phase 3: kernel timing, the GPU to itself ----
t=$(date +%s); timeout $(( $(left) - 15 )) $K bench --ggml $GG --corpus $B/bench.jsonl --reps 30 --warmup 5 --out $W/bench > $W/bench.log 2>&1; say "D bench rc=$? $(( $(date +%s) - t ))s"
kill $CK 2>/dev/null
for d in native ggml-kedge-ops ggml-all big memcheck memcheck-ggml; do [ -f $W/$d/results.jsonl ] && say "$d: $(wc -l < $W/$d/results.jsonl) results; $(grep -c '"verdict":"pass"' $W/$d/results.jsonl) pass; $(tail -n 3 $W/$d.log | tr '\n' ' ' | cut -c1-300)"; done
say "repro builds ok: $(grep -l '^0' $W/repro/*/build.rc 2>/dev/null | wc -l)/$(ls $W/repro | wc -l)"
