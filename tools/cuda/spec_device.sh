#!/usr/bin/env bash
# On a GPU machine (the device tool), from a folder made by tools/cuda/pack_spec.sh: speculative
# decoding on CUDA with the full-size synthetic model. `tests`: the CUDA tests a verify's
# arithmetic depends on (the multi-row matvec against one-row launches, the kernel and parity
# suites, speculative_test). `bench`: what a verify of k tokens costs (`--verify-costs`, with
# REDWING_CUDA_MATVEC_ROWS at its default and at 1, the one-row-per-block kernel), plain decoding
# of this build against the base build's alternated A-B-B-A, and speculative against plain
# decoding in the same process for several drafters, resident and at --vram-budget 4G.
# Everything lands in $OUT (log.txt, the bench outputs).
#   cd <pack folder> && bash tools/cuda/spec_device.sh [tests|bench|all] [REPEATS]
set -u
what=${1:-all}
repeats=${2:-2}
R=$(pwd)
out=${OUT:-/tmp/spec_out}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export LD_LIBRARY_PATH="$R/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck source=/dev/null
. "$R/paths.env"
# The tests find fixtures and the CLI under the paths compiled into them.
if [ -L "$REDWING_SOURCE_DIR_ON_BUILD" ] || [ ! -e "$REDWING_SOURCE_DIR_ON_BUILD" ]; then
  mkdir -p "$(dirname "$REDWING_SOURCE_DIR_ON_BUILD")" && ln -sfn "${SOURCE_TREE:-$R}" "$REDWING_SOURCE_DIR_ON_BUILD"
fi
mkdir -p "$REDWING_BUILD_DIR_ON_BUILD/bin" "$REDWING_BUILD_DIR_ON_BUILD/test_tmp"
ln -sfn "$R/bin/redwing" "$REDWING_BUILD_DIR_ON_BUILD/bin/redwing"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cat "$R/commit-head" "$R/commit-base" 2>/dev/null

model=/tmp/g4
synth_pid=
if [ "$what" != tests ] && [ ! -f "$model.done" ]; then
  rm -rf "$model"
  ("$R/bin/redwing" synth --geometry gemma4-26b-a4b --seed 1 --out "$model" >/dev/null &&
    touch "$model.done") &
  synth_pid=$!
fi

gtest() {  # gtest NAME LIMIT_S BINARY [ARGS...]
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  echo "exit $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|Expected|Which is|FAILED  \]" "$out/$name.txt" | head -30
}
if [ "$what" = tests ] || [ "$what" = all ]; then
  gtest matvec_rows 240 "$R/bin/backend_cuda_test" \
    --gtest_filter='CudaMatVecRows.*:CudaMatVec.*:CudaOps.*:CudaTuning.*'
  gtest speculative 300 "$R/bin/speculative_test"
  gtest parity 300 "$R/bin/cuda_parity_test"
fi
[ "$what" = tests ] && exit 0

[ -n "$synth_pid" ] && { wait "$synth_pid" || { echo "synth failed"; exit 1; }; }
common=(--backend cuda --model "$model" --prompt-tokens 512 --decode-tokens 128 --no-disk-probe)
bench() {  # bench LABEL BINARY [FLAGS...]: one run, its speculative and decode lines
  local label=$1 bin=$2
  shift 2
  timeout 240 "$bin" bench "${common[@]}" "$@" >"$out/$label.txt" 2>&1
  echo "-- $label (exit $?)"
  grep -E "speculative|decode .*tok/s|verify|^ *k |^ *[0-9]+ +[0-9.]+" "$out/$label.txt" | head -40
}
echo "== verify costs: rows shared per block (default), and one row per block"
bench costs-rows8 "$R/bin/redwing" --verify-costs
REDWING_CUDA_MATVEC_ROWS=1 bench costs-rows1 "$R/bin/redwing" --verify-costs
echo "== plain decode: base, head, head, base"
for i in $(seq 1 "$repeats"); do
  bench "plain-base-$i-a" "$R/bin/redwing-base"
  bench "plain-head-$i-a" "$R/bin/redwing"
  bench "plain-head-$i-b" "$R/bin/redwing"
  bench "plain-base-$i-b" "$R/bin/redwing-base"
done
echo "== speculative against plain in the same process"
for i in $(seq 1 "$repeats"); do
  for cfg in "oracle:0.8 8" "oracle:0.8 4" "oracle:0.8 auto" "oracle:0 auto"; do
    set -- $cfg
    bench "spec-${1/:/}-k$2-$i" "$R/bin/redwing" --drafter "$1" --draft-tokens "$2"
  done
  for cfg in "oracle:0.8 8" "oracle:0.8 auto" "oracle:0 auto"; do
    set -- $cfg
    bench "spec4g-${1/:/}-k$2-$i" "$R/bin/redwing" --vram-budget 4G --max-context 2048 \
      --drafter "$1" --draft-tokens "$2"
  done
done
