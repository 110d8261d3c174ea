#!/usr/bin/env bash
# Compares the case ids of two case lists: a plan (`kedge sweep`'s plan.jsonl, `kedge plan
# --json`, any file of case lines) or a results file (results.jsonl: verdict lines, each with its
# id). Typical use: the CPU plan against a GPU sweep's results, which must list the same cases.
#
#   scripts/compare-case-ids.sh A B
#
# Prints how many cases each has and how many both, then every id in only one of them with its
# case. Exit status: 0 the same ids; 1 they differ; 2 usage or a file that cannot be read.
set -euo pipefail

usage() { sed -n '6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -eq 2 ] || usage
for f in "$1" "$2"; do
  [ -r "$f" ] || { echo "compare-case-ids.sh: cannot read $f" >&2; exit 2; }
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# One "ID<TAB>CASE" line per case of $1 into $2, sorted and unique. A verdict line names its id
# and case; a case line is its own canonical form, whose id is the first 12 hex digits of its
# SHA-256 (Case::id).
ids() {
  local line id c
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in ''|'#'*) continue ;; esac
    if [[ "$line" == '{"id":"'* ]]; then
      id=${line:7:12}
      c=$(printf '%s' "$line" | sed -n 's/.*"case":\({[^}]*}\(}\)\{0,1\}[^}]*}\).*/\1/p' | head -c 300)
      [ -n "$c" ] || c=$(printf '%s' "$line" | head -c 200)
    else
      id=$(printf '%s' "$line" | sha256sum | cut -c1-12)
      c=$line
    fi
    printf '%s\t%s\n' "$id" "$c"
  done < "$1" | sort -t$'\t' -k1,1 -u > "$2"
  cut -f1 "$2" > "$2.ids"
}

ids "$1" "$TMP/a"
ids "$2" "$TMP/b"
na=$(wc -l < "$TMP/a.ids"); nb=$(wc -l < "$TMP/b.ids")
both=$(comm -12 "$TMP/a.ids" "$TMP/b.ids" | wc -l)
echo "A: $1: $na cases"
echo "B: $2: $nb cases"
echo "in both: $both"
comm -23 "$TMP/a.ids" "$TMP/b.ids" > "$TMP/only-a"
comm -13 "$TMP/a.ids" "$TMP/b.ids" > "$TMP/only-b"
status=0
for side in a b; do
  n=$(wc -l < "$TMP/only-$side")
  [ "$n" -gt 0 ] || continue
  status=1
  echo "only in ${side^^} ($n):"
  join -t$'\t' "$TMP/only-$side" "$TMP/$side" | sed 's/^/  /'
done
if [ "$status" = 0 ]; then
  echo "the same $na case ids"
fi
exit "$status"
