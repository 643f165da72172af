#!/usr/bin/env bash
# Keeps a copy of a build's redwing binary under a name, for scripts/bench-ab.sh:
#
#   scripts/bench-snapshot.sh NAME [BUILD_DIR]      (BUILD_DIR: build/release)
#
# writes build/bench-snapshots/NAME/ (REDWING_SNAPSHOTS overrides the parent folder):
#   redwing      the binary, copied (a later rebuild does not change it)
#   commit       the source's commit ("git describe --always --dirty" and the full id)
#   info.txt     when, from which build folder, its build type, and the uncommitted diff's stat
# An existing snapshot of that name is replaced.
set -euo pipefail
prog=bench-snapshot.sh
die() {
  echo "$prog: $*" >&2
  exit 2
}
[[ $# -ge 1 && $# -le 2 && "$1" != -h && "$1" != --help ]] ||
  die "usage: $prog NAME [BUILD_DIR]   (BUILD_DIR defaults to build/release)"
name=$1
build=${2:-build/release}
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "NAME may hold letters, digits, '.', '_' and '-' only: '$name'"
bin="$build/bin/redwing"
[[ -x "$bin" ]] || die "no redwing binary at $bin (build first, or name the build folder)"
root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
dir="${REDWING_SNAPSHOTS:-$root/build/bench-snapshots}/$name"
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
cp "$bin" "$dir.tmp/redwing"
# The commit of the tree the binary was built from: the build folder's source (its CMakeCache),
# else this checkout.
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
[[ -n "$src" && -d "$src" ]] || src=$root
{
  git -C "$src" describe --always --dirty 2>/dev/null || echo unknown
  git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown
} >"$dir.tmp/commit"
{
  echo "snapshot: $name"
  echo "taken: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "build folder: $(cd "$build" && pwd)"
  echo "build type: $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt" 2>/dev/null)"
  echo "cuda: $(grep -q '^CMAKE_CUDA_COMPILER:FILEPATH=.\+' "$build/CMakeCache.txt" 2>/dev/null && echo yes || echo no)"
  echo "uncommitted changes:"
  git -C "$src" diff --stat HEAD 2>/dev/null || true
} >"$dir.tmp/info.txt"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$prog: $name = $(head -1 "$dir/commit") -> $dir"
