#!/usr/bin/env bash
# The sanitizer sweep a user runs on a GPU box: the default suite under memcheck (exact
# allocations, --padding 512), then initcheck and racecheck on the smoke suite, with reports.
#   scripts/sanitizer-sweep.sh [OUTDIR] [-o OP,...]      (KEDGE=path/to/kedge)
set -u
OUT=${1:-kedge-sanitize}; shift || true
K=${KEDGE:-kedge}
"$K" sweep default --alloc exact --sanitize memcheck --out "$OUT/memcheck" "$@"; m=$?
"$K" sweep smoke --alloc exact --sanitize initcheck,racecheck --out "$OUT/init-race" "$@"; r=$?
echo "memcheck: exit $m; initcheck+racecheck: exit $r; reports in $OUT/*/report.md"
[ $m -le 1 ] && [ $r -le 1 ]
