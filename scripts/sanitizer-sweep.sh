#!/usr/bin/env bash
# The sanitizer sweep a user runs on a GPU box: the default suite under memcheck (exact
# allocations, --padding 512), then initcheck and racecheck on the smoke suite, with reports.
#   scripts/sanitizer-sweep.sh [OUTDIR] [KEDGE-FLAGS...]      (KEDGE=path/to/kedge)
# The flags go to both sweeps (-o OP,..., --filter REGEX, ...). Into an OUTDIR that holds a
# previous run, pass --resume to continue it or --force to start over.
set -u
OUT=${1:-kedge-sanitize}; shift || true
K=${KEDGE:-kedge}
"$K" sweep default --alloc exact --sanitize memcheck --out "$OUT/memcheck" "$@"; m=$?
"$K" sweep smoke --alloc exact --sanitize initcheck,racecheck --out "$OUT/init-race" "$@"; r=$?
echo "memcheck: exit $m; initcheck+racecheck: exit $r; reports in $OUT/*/report.md"
[ $m -le 1 ] && [ $r -le 1 ]
