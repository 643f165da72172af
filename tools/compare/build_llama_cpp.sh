#!/usr/bin/env bash
# Builds llama.cpp from a source tree the user points at, into a build directory outside this
# repository, with llama.cpp's own defaults (Release, GGML_NATIVE on, CPU repack on). Nothing of
# llama.cpp is committed here: the comparison is against whatever tree the user has.
#
#   build_llama_cpp.sh SRC_DIR BUILD_DIR [--cuda] [--jobs N]
#
# Builds llama-bench, llama-completion and llama_logits (tools/compare/llama_logits.cpp, our
# program against libllama that dumps every position's logits for the twin check), then prints
# the version of the tree and the build flags so that a record can name them.
set -euo pipefail

usage() {
  echo "usage: $0 SRC_DIR BUILD_DIR [--cuda] [--jobs N]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
src=$(realpath "$1")
build=$(realpath -m "$2")
shift 2
cuda=0
jobs=$(nproc)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cuda) cuda=1 ;;
    --jobs) jobs="$2"; shift ;;
    *) usage ;;
  esac
  shift
done
[[ -f "$src/CMakeLists.txt" && -d "$src/ggml" && -f "$src/include/llama.h" ]] ||
  { echo "error: $src does not look like a llama.cpp source tree (no include/llama.h)" >&2; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
repo_root=$(cd "$here/../.." && pwd)
case "$build/" in
  "$repo_root"/*) echo "error: BUILD_DIR must be outside this repository" >&2; exit 1 ;;
esac

# Only what a user of llama.cpp gets by default, plus switches that skip parts we do not run
# (tests, server, web UI); none of them changes how the CPU kernels are compiled.
flags=(-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF)
if [[ $cuda == 1 ]]; then
  flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
fi
cmake -S "$src" -B "$build" -G Ninja "${flags[@]}"
cmake --build "$build" -j "$jobs" --target llama-bench llama-completion llama

# The logits dumper is ours; it links the libllama just built (rpath, so no LD_LIBRARY_PATH).
libdir=$(dirname "$(find "$build" -name 'libllama.so' -print -quit)")
g++ -std=c++17 -O2 -o "$build/bin/llama_logits" "$here/llama_logits.cpp" \
  -I "$src/include" -I "$src/ggml/include" -L "$libdir" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$libdir"

echo "== llama.cpp version"
if git -C "$src" rev-parse HEAD >/dev/null 2>&1; then
  echo "tree: $(git -C "$src" describe --tags --always 2>/dev/null) commit $(git -C "$src" rev-parse HEAD)"
else
  echo "tree: $src (not a git tree; version unknown)"
fi
grep -E '^(CMAKE_BUILD_TYPE|GGML_NATIVE|GGML_CPU_REPACK|GGML_CUDA|CMAKE_CUDA_ARCHITECTURES|BUILD_SHARED_LIBS):' \
  "$build/CMakeCache.txt" || true
"$build/bin/llama-completion" --version 2>&1 | tail -n 2 || true
