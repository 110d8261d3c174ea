#!/usr/bin/env bash
# Builds ggml as shared libraries for kedge-ggml (which loads them at run time) and, with --cuda or
# --tests, ggml's own test-backend-ops, so a finding can be replayed with upstream's harness.
#
#   scripts/build-ggml.sh [--cuda] [--tests] [--dl] [--tarball PATH | --src DIR] [--print-key] OUTDIR
#
#   --cuda          also build the CUDA backend (CUDA_ARCHS, default 90) and test-backend-ops
#   --tests         also build test-backend-ops (without --cuda: CPU only)
#   --dl            GGML_BACKEND_DL: backends as loadable modules next to libggml.so, the layout
#                   llama.cpp releases ship (one CPU module, no per-ISA variants)
#   --tarball PATH  a source archive (also $KEDGE_GGML_TARBALL); an archive of the pinned commit
#                   is checked against its tree hash (scripts/ggml-source.sh)
#   --src DIR       build this source tree (a ggml checkout, yours)
#   --print-key     print the cache key of this source and these flags (what a CI cache is keyed
#                   by) and build nothing
#
# Without --tarball or --src: the pinned snapshot, commit d99724f of github.com/ggml-org/ggml,
# fetched by its public URL into OUTDIR/.build/download and checked (scripts/ggml-source.sh).
#
# Results: OUTDIR/lib/ (every shared library, sonames kept as symlinks), OUTDIR/include/ (the
# public headers, for the C programs `kedge repro` writes), OUTDIR/bin/ (test-backend-ops when
# built), OUTDIR/.build/ (the CMake tree, kept so a rebuild is incremental). A stamp in
# OUTDIR/lib records the source (its commit and tree hash) and the flags; a second run with the
# same ones does nothing. Flags that would make the libraries depend on the build machine
# (GGML_NATIVE) are off: the libraries are meant to be copied to the machine that runs them.
set -euo pipefail

usage() { sed -n '5,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CUDA=0
TESTS=0
DL=0
TARBALL=
SRC=
OUTDIR=
PRINT_KEY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) CUDA=1 ;;
    --tests) TESTS=1 ;;
    --dl) DL=1 ;;
    --tarball) TARBALL=${2:?--tarball needs a path}; shift ;;
    --src) SRC=${2:?--src needs a directory}; shift ;;
    --print-key) PRINT_KEY=1 ;;
    -h|--help) usage ;;
    -*) echo "build-ggml.sh: unknown flag $1" >&2; usage ;;
    *) [ -z "$OUTDIR" ] || { echo "build-ggml.sh: one OUTDIR only" >&2; usage; }; OUTDIR=$1 ;;
  esac
  shift
done
[ -n "$OUTDIR" ] || usage

need_cmake() {
if ! command -v cmake >/dev/null 2>&1; then
  echo "build-ggml.sh: cmake missing; installing it with apt-get" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null
fi
}

mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$OUTDIR/.build

# ggml's CMake asks git for the commit it reports through ggml_commit(). An archive is not a
# checkout (and may sit inside another repository, whose commit git would report), so a stand-in
# git answers with the commit the archive records; a source tree that is not the top of a
# checkout gets "unknown" the same way.
FAKE_GIT=$WORK/git-commit.sh
write_fake_git() { # $1: short commit, or empty for "unknown"
  mkdir -p "$WORK"
  if [ -n "$1" ]; then
    printf '#!/bin/sh\ncase "$1" in rev-parse) echo %s ;; diff-index) exit 0 ;; *) exit 1 ;; esac\n' "$1" > "$FAKE_GIT"
  else
    printf '#!/bin/sh\ncase "$1" in diff-index) exit 0 ;; *) exit 1 ;; esac\n' > "$FAKE_GIT"
  fi
  chmod +x "$FAKE_GIT"
}

GIT_FLAG=()
PINNED=$("$REPO_ROOT/scripts/ggml-source.sh" --commit)
PINNED_TREE=$(sed -n 's/^TREE_HASH=//p' "$REPO_ROOT/scripts/ggml-source.sh")
# The environment's archive stands in for --tarball, never for --src.
if [ -z "$SRC" ] && [ -z "$TARBALL" ]; then TARBALL=${KEDGE_GGML_TARBALL:-}; fi
[ -z "$SRC" ] || [ -z "$TARBALL" ] || { echo "build-ggml.sh: give --src or --tarball, not both" >&2; exit 2; }
if [ -n "$SRC" ]; then
  [ -f "$SRC/CMakeLists.txt" ] || { echo "build-ggml.sh: $SRC has no CMakeLists.txt" >&2; exit 2; }
  SRC=$(cd "$SRC" && pwd)
  TOP=$(git -C "$SRC" rev-parse --show-toplevel 2>/dev/null || true)
  if [ "$TOP" = "$SRC" ]; then
    COMMIT=$(git -C "$SRC" rev-parse HEAD)
    # A tree with local changes is never taken as already built.
    if ! git -C "$SRC" diff-index --quiet HEAD -- .; then COMMIT="$COMMIT-dirty-$(date +%s)"; fi
    SOURCE_ID="commit:$COMMIT"
  else
    write_fake_git ""
    GIT_FLAG=(-DGIT_EXE="$FAKE_GIT")
    SOURCE_ID="tree:$("$REPO_ROOT/scripts/ggml-source.sh" --tree-hash "$SRC")"
    COMMIT=
  fi
elif [ -n "$TARBALL" ]; then
  [ -f "$TARBALL" ] || { echo "build-ggml.sh: no source archive at $TARBALL (give --tarball, --src or KEDGE_GGML_TARBALL)" >&2; exit 2; }
  TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")
  # `git archive` (and GitHub's archives) write the commit into the archive's first (pax) header.
  COMMIT=$(gzip -dc "$TARBALL" | head -c 4096 | grep -a -o 'comment=[0-9a-f]\{40\}' | head -n1 | cut -d= -f2 || true)
  SOURCE_ID=
else
  COMMIT=$PINNED
  SOURCE_ID="commit:$PINNED tree:$PINNED_TREE"
fi

FLAGS=(-DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DCMAKE_BUILD_TYPE=Release
       -DGGML_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON "-DCMAKE_BUILD_RPATH=\$ORIGIN/../lib")
TARGETS=(ggml)
if [ "$CUDA" = 1 ]; then
  FLAGS+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}" -DGGML_BUILD_TESTS=ON)
  TARGETS+=(test-backend-ops)
elif [ "$TESTS" = 1 ]; then
  FLAGS+=(-DGGML_BUILD_TESTS=ON)
  TARGETS+=(test-backend-ops)
else
  FLAGS+=(-DGGML_BUILD_TESTS=OFF)
fi
if [ "$DL" = 1 ]; then
  FLAGS+=(-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=OFF)
fi

if [ "$PRINT_KEY" = 1 ] && [ -z "$SOURCE_ID" ]; then
  # An archive's key is its tree's hash: extract it to see.
  K_STAGE=$(mktemp -d)
  tar xzf "$TARBALL" -C "$K_STAGE"
  K_TOP=$(find "$K_STAGE" -mindepth 2 -maxdepth 2 -name CMakeLists.txt -printf '%h\n' | head -n1)
  SOURCE_ID="${COMMIT:+commit:$COMMIT }tree:$("$REPO_ROOT/scripts/ggml-source.sh" --tree-hash "$K_TOP")"
  rm -rf "$K_STAGE"
fi
if [ "$PRINT_KEY" = 1 ]; then
  # Short enough for a cache key; the same source and flags give the same key on any machine.
  echo "ggml-$(printf '%s\n%s' "$SOURCE_ID" "${FLAGS[*]}" | sha256sum | cut -c1-16)"
  exit 0
fi

STAMP=$OUTDIR/lib/.kedge-ggml-stamp
# The same source and flags as the build already there: nothing to do (a CI cache hit).
already_built() {
  [ -n "$SOURCE_ID" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SOURCE_ID
${FLAGS[*]}" ] && [ -f "$OUTDIR/include/ggml.h" ]
}
if already_built; then
  echo "build-ggml.sh: $OUTDIR/lib already holds this build ($SOURCE_ID); nothing to do"
  exit 0
fi

need_cmake
if [ -z "$SRC" ]; then
  # The archive (or the pinned commit, fetched) extracted; the pinned commit checked by its tree
  # hash, any other archive recorded by its own.
  if [ -z "$TARBALL" ] || [ "$COMMIT" = "$PINNED" ]; then
    SRC=$("$REPO_ROOT/scripts/ggml-source.sh" ${TARBALL:+--tarball "$TARBALL"} "$WORK/download")
    SOURCE_ID="commit:$PINNED tree:$PINNED_TREE"
  else
    rm -rf "$WORK/src"
    mkdir -p "$WORK/src"
    tar xzf "$TARBALL" -C "$WORK/src"
    SRC=$(find "$WORK/src" -mindepth 2 -maxdepth 2 -name CMakeLists.txt -printf '%h\n' | head -n1)
    [ -n "$SRC" ] || { echo "build-ggml.sh: $TARBALL holds no CMake project" >&2; exit 2; }
    SOURCE_ID="${COMMIT:+commit:$COMMIT }tree:$("$REPO_ROOT/scripts/ggml-source.sh" --tree-hash "$SRC")"
  fi
  write_fake_git "${COMMIT:0:7}"
  GIT_FLAG=(-DGIT_EXE="$FAKE_GIT")
fi

STAMP_TEXT="$SOURCE_ID
${FLAGS[*]}"
if already_built; then
  echo "build-ggml.sh: $OUTDIR/lib already holds this build ($SOURCE_ID); nothing to do"
  exit 0
fi

JOBS=$(nproc 2>/dev/null || echo 2)
START=$(date +%s)
# A CMake tree made from another source tree or other flags is stale: start it afresh rather
# than half-reconfigure. The same source and flags reuse it (an incremental build).
CONFIG_TEXT="$SRC
${FLAGS[*]}"
if [ -f "$WORK/cmake/CMakeCache.txt" ] && [ "$(cat "$WORK/config" 2>/dev/null)" != "$CONFIG_TEXT" ]; then
  rm -rf "$WORK/cmake"
fi
mkdir -p "$WORK"
echo "build-ggml.sh: configuring $SRC with ${FLAGS[*]}"
cmake -S "$SRC" -B "$WORK/cmake" "${FLAGS[@]}" "${GIT_FLAG[@]}" > "$WORK/configure.log" 2>&1 \
  || { tail -n 40 "$WORK/configure.log" >&2; echo "build-ggml.sh: configure failed (log: $WORK/configure.log)" >&2; exit 1; }
printf '%s' "$CONFIG_TEXT" > "$WORK/config"
echo "build-ggml.sh: building ${TARGETS[*]} with -j$JOBS"
cmake --build "$WORK/cmake" --target "${TARGETS[@]}" -j"$JOBS" > "$WORK/build.log" 2>&1 \
  || { tail -n 60 "$WORK/build.log" >&2; echo "build-ggml.sh: build failed (log: $WORK/build.log)" >&2; exit 1; }

rm -rf "$OUTDIR/lib" "$OUTDIR/bin" "$OUTDIR/include"
mkdir -p "$OUTDIR/lib" "$OUTDIR/include"
cp "$SRC"/include/*.h "$OUTDIR/include/"
# Every shared object the build made, as regular files and version symlinks alike (cp -P keeps
# a symlink a symlink, so libggml.so -> libggml.so.0 -> libggml.so.0.21.0 survives).
while IFS= read -r -d '' f; do
  cp -P "$f" "$OUTDIR/lib/"
done < <(find "$WORK/cmake" -path "$WORK/cmake/CMakeFiles" -prune -o \( -type f -o -type l \) -name '*.so*' -print0)
# A symlink whose target was not copied would dangle: replace it with the file it names.
for l in "$OUTDIR"/lib/*; do
  if [ -L "$l" ] && [ ! -e "$l" ]; then
    t=$(find "$WORK/cmake" -name "$(basename "$l")" | head -n1)
    rm "$l"; cp -L "$t" "$l"
  fi
done
if [ -x "$WORK/cmake/bin/test-backend-ops" ]; then
  mkdir -p "$OUTDIR/bin"
  cp "$WORK/cmake/bin/test-backend-ops" "$OUTDIR/bin/"
  # test-backend-ops of a --dl build looks for backend modules beside itself.
  if [ "$DL" = 1 ]; then
    for m in "$OUTDIR"/lib/libggml-*.so; do
      case "$(basename "$m")" in libggml-base.so) ;; *) ln -sf "../lib/$(basename "$m")" "$OUTDIR/bin/" ;; esac
    done
  fi
fi
printf '%s' "$STAMP_TEXT" > "$STAMP"
END=$(date +%s)

echo "build-ggml.sh: built $SOURCE_ID in $((END - START)) s"
echo "build-ggml.sh: flags ${FLAGS[*]}"
(cd "$OUTDIR" && if [ -d bin ]; then ls -l lib/ bin/; else ls -l lib/; fi | sed 's/^/  /')
echo "build-ggml.sh: headers in $OUTDIR/include"
echo "build-ggml.sh: use it with KEDGE_GGML_DIR=$OUTDIR"
