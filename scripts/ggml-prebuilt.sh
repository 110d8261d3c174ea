#!/usr/bin/env bash
# A ggml CUDA build made on a machine without a GPU, packed as the one archive the GPU box's
# `ggml-unpack` part takes (scripts/device-check.sh, GGML_PREBUILT): base/ holds the build's
# lib/, bin/ and include/; pr/lib/ the pull request's libggml-cuda (PATCH applied to the same
# source, only what it changes rebuilt in the same CMake tree, the patch then taken back out).
#
#   scripts/ggml-prebuilt.sh BUILDDIR ARCHIVE [PATCH]
#
#   BUILDDIR  where scripts/build-ggml.sh --cuda builds (a build already there with the same
#             source and flags is kept: its stamp says so)
#   ARCHIVE   the .tar.xz to write
#   PATCH     the pull request (default examples/ci/pull-request-breaks-rms-norm.patch)
#
# Needs nvcc and the CUDA headers and libraries on PATH and in CUDAToolkit_ROOT (a machine with
# none: scripts/cuda-toolkit-from-wheels.sh DIR, then the exports it prints). On 2 cores the
# base build takes about 17 minutes, the pull request's rebuild about a minute.
# Exit status: 0 ok; 1 a build, the patch or the packing failed; 2 usage.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
B=$1 ARCHIVE=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PATCH=${3:-$ROOT/examples/ci/pull-request-breaks-rms-norm.patch}
[ -f "$PATCH" ] || { echo "ggml-prebuilt.sh: no patch at $PATCH" >&2; exit 2; }
"$ROOT/scripts/build-ggml.sh" --cuda "$B" || exit 1
SRC=$(head -1 "$B/.build/config")
STAGE=$(mktemp -d)
trap 'patch -R -s -d "$SRC" -p1 < "$PATCH" > /dev/null 2>&1 || true; rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/base" "$STAGE/pr/lib"
cp -a "$B/lib" "$B/bin" "$B/include" "$STAGE/base/"
patch -s -d "$SRC" -p1 < "$PATCH" || { echo "ggml-prebuilt.sh: $PATCH does not apply to $SRC" >&2; exit 1; }
cmake --build "$B/.build/cmake" --target ggml-cuda -j "$(nproc)" > "$STAGE/pr-build.log" 2>&1 \
  || { tail -20 "$STAGE/pr-build.log" >&2; echo "ggml-prebuilt.sh: the pull request's libggml-cuda did not build" >&2; exit 1; }
find "$B/.build/cmake" -name 'libggml-cuda.so*' -type f -exec cp {} "$STAGE/pr/lib/" \;
# The tree back as the base: its next build (or confirm's) is the base's.
patch -R -s -d "$SRC" -p1 < "$PATCH"
trap 'rm -rf "$STAGE"' EXIT
cmake --build "$B/.build/cmake" --target ggml-cuda -j "$(nproc)" > /dev/null 2>&1 || true
rm -f "$STAGE/pr-build.log"
# One stream with a window over both: the two libggml-cuda differ in one file's code.
tar cf - -C "$STAGE" base pr | xz -T1 --lzma2=preset=6,dict=192MiB > "$ARCHIVE.part" && mv "$ARCHIVE.part" "$ARCHIVE"
echo "ggml-prebuilt.sh: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): base libggml-cuda $(sha256sum "$STAGE"/base/lib/libggml-cuda.so.0.* | cut -c1-16), pull request's $(sha256sum "$STAGE"/pr/lib/libggml-cuda.so.0.* | cut -c1-16)"
