#!/usr/bin/env bash
# Alternates `redwing bench` and llama.cpp (tools/compare/llama_cpp_bench.mjs) on the same
# machine, PAIRS times, each run after re-reading its own model's files so both start with the
# whole model in the page cache. On a host whose bandwidth moves from minute to minute only
# alternated runs can be compared.
#
# usage: tools/compare/side_by_side.sh REDWING_BIN MODEL_DIR GGUF NODE_DIR [PAIRS]
#   NODE_DIR: a folder where `npm install node-llama-cpp` was run
# Environment: PROMPTS (default 128,512), DECODE (32), THREADS (2).
set -euo pipefail

if [[ $# -lt 4 || $# -gt 5 ]]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
redwing=$(realpath "$1")
model=$(realpath "$2")
gguf=$(realpath "$3")
node_dir=$(realpath "$4")
pairs=${5:-3}
here=$(dirname "$(realpath "$0")")
prompts=${PROMPTS:-128,512}
decode=${DECODE:-32}
threads=${THREADS:-2}

[[ -x $redwing ]] || { echo "side_by_side.sh: $redwing is not an executable" >&2; exit 2; }
[[ -f $model/manifest.json ]] || { echo "side_by_side.sh: $model has no manifest.json" >&2; exit 2; }
[[ -f $gguf ]] || { echo "side_by_side.sh: no GGUF file at $gguf" >&2; exit 2; }
[[ -d $node_dir/node_modules/node-llama-cpp ]] ||
  { echo "side_by_side.sh: $node_dir has no node_modules/node-llama-cpp" >&2; exit 2; }

for i in $(seq "$pairs"); do
  echo "=== pair $i, $(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  find "$model" -name '*.bin' -exec cat {} + >/dev/null
  "$redwing" bench --model "$model" --prompt-tokens "$prompts" --decode-tokens "$decode" \
    --threads "$threads" --no-disk-probe 2>/dev/null
  cat "$gguf" >/dev/null
  (cd "$node_dir" && node "$here/llama_cpp_bench.mjs" "$gguf" --prompt-tokens "$prompts" \
    --decode-tokens "$decode" --threads "$threads")
done
