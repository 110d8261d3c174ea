#!/usr/bin/env bash
# The ggml snapshot kedge is checked against: commit d99724f2b141fed9e1a9f402213506c081433465 of
# https://github.com/ggml-org/ggml, fetched by its public URL and checked by a hash over the
# extracted tree (every file's path and contents, every link's path and target), so an archive
# GitHub made and one `git archive` made elsewhere give the same hash where their bytes differ.
#
#   scripts/ggml-source.sh [--tarball PATH] DIR   the checked tree in DIR/ggml-d99724f (made once);
#                                                 prints its path
#   scripts/ggml-source.sh --tree-hash TREE       prints the hash of a source tree
#   scripts/ggml-source.sh --commit               prints the pinned commit
#
#   --tarball PATH  an archive of that commit to use instead of downloading it (offline use);
#                   also $KEDGE_GGML_TARBALL
#
# An archive that checked out is kept in ${XDG_CACHE_HOME:-~/.cache}/kedge/ (KEDGE_GGML_CACHE
# names another directory), and used before fetching: another clone on the same machine builds
# offline. It is checked by the same hash each time it is used.
#
# Exit status: 0 ok; 2 usage, an archive that is not the pinned commit, or no way to fetch it.
set -euo pipefail

COMMIT=d99724f2b141fed9e1a9f402213506c081433465
URL=https://github.com/ggml-org/ggml/archive/$COMMIT.tar.gz
# scripts/ggml-source.sh --tree-hash on the extracted archive of $COMMIT.
TREE_HASH=7e8f9b9393dc213dee308ec14daa37895c8b01b44e0ade5d250976a5dc6f048b

usage() { sed -n '7,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "ggml-source.sh: $*" >&2; exit 2; }

# The hash of a tree: sha256 over `sha256sum` of every file (sorted by path, bytewise) and then
# every symbolic link as `path -> target`. Directories count only through what they hold.
tree_hash() {
  (cd "$1" && {
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    find . -type l -printf '%p -> %l\n' | LC_ALL=C sort
  } | sha256sum | cut -d' ' -f1)
}

TARBALL=${KEDGE_GGML_TARBALL:-}
CACHE=${KEDGE_GGML_CACHE:-${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/kedge}/ggml-$COMMIT.tar.gz
DIR=
while [ $# -gt 0 ]; do
  case "$1" in
    --tree-hash) [ $# -eq 2 ] || usage; [ -d "$2" ] || die "$2 is not a directory"; tree_hash "$2"; exit 0 ;;
    --tarball) TARBALL=${2:?--tarball needs a path}; shift ;;
    --commit) echo "$COMMIT"; exit 0 ;;
    -h|--help) usage ;;
    -*) echo "ggml-source.sh: unknown flag $1" >&2; usage ;;
    *) [ -z "$DIR" ] || usage; DIR=$1 ;;
  esac
  shift
done
[ -n "$DIR" ] || usage

mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
TREE=$DIR/ggml-${COMMIT:0:7}
if [ -f "$TREE/.kedge-tree-hash" ] && [ "$(cat "$TREE/.kedge-tree-hash")" = "$TREE_HASH" ]; then
  echo "$TREE"
  exit 0
fi

if [ -z "$TARBALL" ] && [ -s "$CACHE" ]; then
  TARBALL=$CACHE
fi
if [ -z "$TARBALL" ]; then
  TARBALL=$DIR/ggml-$COMMIT.tar.gz
  if [ ! -s "$TARBALL" ]; then
    echo "ggml-source.sh: fetching $URL" >&2
    if command -v curl >/dev/null 2>&1; then
      curl -fsSL --retry 3 -o "$TARBALL.part" "$URL" || die "could not fetch $URL (offline? give --tarball PATH or KEDGE_GGML_TARBALL)"
    elif command -v wget >/dev/null 2>&1; then
      wget -q -O "$TARBALL.part" "$URL" || die "could not fetch $URL (offline? give --tarball PATH or KEDGE_GGML_TARBALL)"
    else
      die "neither curl nor wget to fetch $URL: install one, or give --tarball PATH or KEDGE_GGML_TARBALL"
    fi
    mv "$TARBALL.part" "$TARBALL"
  fi
fi
[ -f "$TARBALL" ] || die "no archive at $TARBALL"

STAGE=$DIR/.extract.$$
rm -rf "$STAGE"
mkdir -p "$STAGE"
trap 'rm -rf "$STAGE"' EXIT
tar xzf "$TARBALL" -C "$STAGE" || die "$TARBALL is not a .tar.gz archive"
TOP=$(find "$STAGE" -mindepth 2 -maxdepth 2 -name CMakeLists.txt -printf '%h\n' | head -n1)
[ -n "$TOP" ] || die "$TARBALL holds no CMake project"
GOT=$(tree_hash "$TOP")
if [ "$GOT" != "$TREE_HASH" ]; then
  die "$TARBALL is not ggml $COMMIT: its tree hashes to $GOT, the commit's to $TREE_HASH"
fi
if [ "$TARBALL" != "$CACHE" ] && [ ! -s "$CACHE" ]; then
  # Best effort: a cache that cannot be written costs only the next clone a download.
  mkdir -p "$(dirname "$CACHE")" 2>/dev/null && cp "$TARBALL" "$CACHE.part.$$" 2>/dev/null \
    && mv "$CACHE.part.$$" "$CACHE" 2>/dev/null || rm -f "$CACHE.part.$$" 2>/dev/null || true
fi
rm -rf "$TREE"
mv "$TOP" "$TREE"
printf '%s' "$TREE_HASH" > "$TREE/.kedge-tree-hash"
echo "$TREE"
