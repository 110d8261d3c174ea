#!/usr/bin/env bash
# Checks the test-backend-ops lines kedge writes against upstream's own harness: builds
# test-backend-ops (CPU only) from a copy of a ggml source whose case list is exactly the
# constructors in CASES.txt, runs it in support mode (graphs are built, nothing is allocated, so
# huge cases cost nothing) and compares the `OP(vars)` it prints for each constructor with the one
# kedge wrote for it.
#
#   scripts/check-upstream-lines.sh GGML_SRC BUILD_DIR CASES.txt
#
#   GGML_SRC   a ggml source tree, or a source archive (.tar.gz) such as the pinned snapshot
#   BUILD_DIR  where the patched copy and its build live; kept, so a second run rebuilds only
#              test-backend-ops.cpp
#   CASES.txt  CONSTRUCTOR<TAB>OP<TAB>VARS per line, as kedge prints them:
#              cargo run -p kedge-ops --example upstream_lines > CASES.txt
#
# The copy differs from upstream's tests/test-backend-ops.cpp in two places: make_test_cases_eval()
# returns CASES.txt's constructors (an #include at its top), and support mode keeps the fused
# cases (run_whole_graph) it otherwise drops, so their lines are checked too.
#
# Exit status: 0 every line matches; 1 a mismatch (each printed with its constructor); 2 usage,
# patch or build failure.
set -euo pipefail

usage() { sed -n '8,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -eq 3 ] || usage
SRC_IN=$1
BUILD_DIR=$2
CASES=$3
[ -f "$CASES" ] || { echo "check-upstream-lines.sh: no cases file $CASES" >&2; exit 2; }
[ -s "$CASES" ] || { echo "check-upstream-lines.sh: $CASES is empty" >&2; exit 2; }
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$BUILD_DIR"
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
CASES=$(cd "$(dirname "$CASES")" && pwd)/$(basename "$CASES")
COPY=$BUILD_DIR/src

# The source copy, made again only when the source changes (its path and, for an archive, its
# checksum), so the CMake tree stays incremental.
if [ -d "$SRC_IN" ]; then
  [ -f "$SRC_IN/tests/test-backend-ops.cpp" ] || { echo "check-upstream-lines.sh: $SRC_IN has no tests/test-backend-ops.cpp" >&2; exit 2; }
  ORIGIN="dir:$(cd "$SRC_IN" && pwd)"
elif [ -f "$SRC_IN" ]; then
  ORIGIN="tarball:$(sha256sum "$SRC_IN" | cut -d' ' -f1)"
else
  echo "check-upstream-lines.sh: $SRC_IN is neither a source tree nor an archive" >&2; exit 2
fi
if [ "$(cat "$BUILD_DIR/source" 2>/dev/null)" != "$ORIGIN" ] || [ ! -f "$COPY/CMakeLists.txt" ]; then
  rm -rf "$COPY" "$BUILD_DIR/pristine"
  mkdir -p "$COPY"
  if [ -d "$SRC_IN" ]; then
    (cd "$SRC_IN" && tar cf - --exclude=.git .) | (cd "$COPY" && tar xf -)
  else
    tar xzf "$SRC_IN" -C "$COPY" --strip-components=1
  fi
  [ -f "$COPY/tests/test-backend-ops.cpp" ] || { echo "check-upstream-lines.sh: $SRC_IN holds no tests/test-backend-ops.cpp" >&2; exit 2; }
  cp "$COPY/tests/test-backend-ops.cpp" "$BUILD_DIR/pristine"
  printf '%s' "$ORIGIN" > "$BUILD_DIR/source"
fi

# Patch a fresh copy of upstream's file; write it (and the case list) only when it changes.
write_if_changed() { # $1: file, stdin: content
  local tmp; tmp=$(mktemp)
  cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm "$tmp"; else mv "$tmp" "$1"; fi
}
TBO=$COPY/tests/test-backend-ops.cpp
perl -0pe '
  $n += s/(static std::vector<std::unique_ptr<test_case>> make_test_cases_eval\(\) \{\n)/$1    {\n        std::vector<std::unique_ptr<test_case>> test_cases;\n#include "kedge-cases.inc"\n        return test_cases;\n    }\n/;
  $n += s/(if \(mode == MODE_SUPPORT\) \{\n\s*\/\/ Filter out fusion cases\n)(\s*)(test_cases\.erase\()/$1$2if (false) $3/;
  END { exit($n == 2 ? 0 : 3) }
' "$BUILD_DIR/pristine" > "$BUILD_DIR/patched" \
  || { echo "check-upstream-lines.sh: tests/test-backend-ops.cpp does not have the shape this script patches (make_test_cases_eval, support mode's fusion filter)" >&2; exit 2; }
write_if_changed "$TBO" < "$BUILD_DIR/patched"
cut -f1 "$CASES" | write_if_changed "$COPY/tests/kedge-cases.inc"

"$REPO_ROOT/scripts/build-ggml.sh" --tests --src "$COPY" "$BUILD_DIR/out" >&2 \
  || { echo "check-upstream-lines.sh: building test-backend-ops failed" >&2; exit 2; }
BIN=$BUILD_DIR/out/bin/test-backend-ops
[ -x "$BIN" ] || { echo "check-upstream-lines.sh: no $BIN after the build" >&2; exit 2; }

# Support mode prints `  OP(vars): SUPPORTED` (or NOT SUPPORTED) per case, in list order.
OUT=$BUILD_DIR/support.txt
"$BIN" support -b CPU > "$BUILD_DIR/support.raw" 2>"$BUILD_DIR/support.err" \
  || { tail -n 20 "$BUILD_DIR/support.err" >&2; echo "check-upstream-lines.sh: test-backend-ops support failed" >&2; exit 2; }
sed 's/\x1b\[[0-9;]*m//g' "$BUILD_DIR/support.raw" \
  | sed -n 's/^  \([A-Z0-9_]*(.*)\): \(NOT \)\{0,1\}SUPPORTED$/\1/p' > "$OUT"

want=$(wc -l < "$CASES")
got=$(wc -l < "$OUT")
status=0
if [ "$want" != "$got" ]; then
  echo "check-upstream-lines.sh: $want constructors, but test-backend-ops printed $got cases" >&2
  status=1
fi
mismatches=$(paste "$CASES" "$OUT" | awk -F'\t' '
  { kedge = $2 "(" $3 ")"; if (kedge != $4) { n++; printf "MISMATCH %s\n  kedge:    %s\n  upstream: %s\n", $1, kedge, $4 } }
  END { exit(n > 0) }') || status=1
[ -z "$mismatches" ] || echo "$mismatches"
if [ "$status" = 0 ]; then
  echo "check-upstream-lines.sh: all $want lines match test-backend-ops' vars() ($BIN)"
fi
exit "$status"
