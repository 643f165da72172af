#!/usr/bin/env bash
# The whole side-by-side comparison on a machine that has nothing yet: builds llama.cpp from a
# source tree (build_llama_cpp.sh) while it synthesizes the full-size model and writes its Q4_0
# twin (gguf_twin.py, all CPUs), then runs llama_bench.sh. Everything goes under WORK_DIR
# (~30 GB: the model, the twin, the llama.cpp build); the results under WORK_DIR/out.
#
#   tools/compare/from_scratch.sh REDWING_BIN LLAMA_SRC WORK_DIR [PAIRS]
#
# Environment: what llama_bench.sh takes (THREADS defaults to every CPU here, PROMPT, DECODE,
# REDWING_FLAGS, CAP); GEOMETRY (gemma4-26b-a4b) picks the synthetic model.
set -euo pipefail
if [[ $# -lt 3 || $# -gt 4 ]]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
redwing=$(realpath "$1")
src=$(realpath "$2")
work=$(realpath -m "$3")
pairs=${4:-3}
here=$(dirname "$(realpath "$0")")
py=/usr/bin/python3
[[ -x $py ]] || py=python3
[[ -x $redwing ]] || { echo "from_scratch.sh: $redwing is not an executable" >&2; exit 2; }
mkdir -p "$work"
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

bash "$here/build_llama_cpp.sh" "$src" "$work/llama-build" >"$work/llama-build.log" 2>&1 &
build_pid=$!
if [[ ! -f $work/g4/manifest.json ]]; then
  "$redwing" synth --geometry "${GEOMETRY:-gemma4-26b-a4b}" --seed 1 --out "$work/g4" --quiet
fi
echo "model ready after $(elapsed)"
if [[ ! -f $work/g4-q4_0.gguf ]]; then
  "$py" "$here/gguf_twin.py" "$work/g4" "$work/g4-q4_0.gguf" --q4 q4_0
fi
echo "twin ready after $(elapsed)"
wait "$build_pid" || { echo "from_scratch.sh: the llama.cpp build failed:" >&2; tail -20 "$work/llama-build.log" >&2; exit 1; }
echo "llama.cpp built after $(elapsed)"
tail -n 8 "$work/llama-build.log"
THREADS=${THREADS:-$(nproc)} bash "$here/llama_bench.sh" "$redwing" "$work/g4" "$work/g4-q4_0.gguf" \
  "$work/llama-build" "$pairs" "$work/out"
