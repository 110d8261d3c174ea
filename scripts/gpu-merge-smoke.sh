K=.bin/kedge; O=$1; mkdir -p $O; export KEDGE_CACHE_DIR=/tmp/kc
{ echo "commit: $(cat .bin/COMMIT)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; compute-sanitizer --version | tail -1; } > $O/env.txt
t() { local n=$1; shift; local s=$(date +%s); "$@" > $O/$n.log 2>&1; echo "$n rc=$? $(( $(date +%s)-s ))s" >> $O/summary.txt; tail -3 $O/$n.log >> $O/summary.txt; }
t default-3ops timeout 150 $K sweep default -o rms_norm,softmax,fp8_gemm --out $O/default
t memcheck-smoke timeout 120 $K sweep smoke -o rms_norm,cumsum,zoo_rows --include-planted --sanitize memcheck --out $O/memcheck
t devices-0-guard timeout 60 $K sweep smoke -o rms_norm --devices 0 --alloc guard --out $O/dev0
t devices-0-1 timeout 60 $K sweep smoke -o rms_norm --devices 0,1 --out $O/dev01
tar czf $O/../merge.tar.gz -C $O . ; cat $O/summary.txt
