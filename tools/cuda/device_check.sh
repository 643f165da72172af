#!/usr/bin/env bash
# Runs every CUDA test and the CUDA benchmarks on a GPU machine, from binaries built elsewhere
# and carried in .rwdev/ (bin/: redwing, backend_cuda_test, cuda_parity_test, cuda_fault_test,
# cuda_tuning_forward_test, backend_test, speculative_test, copy_ceiling;
# lib/: the shared libraries they need, see tools/cuda/pack.sh).
#
#   tools/cuda/device_check.sh [tests|bench|all] [OUT_DIR]
#
# The tests look for fixtures under the source and build paths compiled into them
# (REDWING_SOURCE_DIR, REDWING_BUILD_DIR); when those do not exist here the repository root is
# linked there. The benchmark synthesizes the full-size model (14.5 GB) into /tmp/g4 first.
#
# With the tests, it writes a dated record, docs/cuda-results/YYYY-MM-DD-<commit>.md (and a copy
# in OUT_DIR/cuda-results/, which is what comes back from a remote GPU machine): the commit the
# binaries were built from (REDWING_COMMIT if set, else `redwing --version`), the GPU, and each
# test binary's passed/skipped/failed counts and exit status. Commit it with the change it tested.
set -u
what=${1:-all}
out=${2:-${OUT:-/tmp/rwdev_out}}
mkdir -p "$out"
root=$(pwd)
export LD_LIBRARY_PATH="$root/${RWDEV:-.rwdev}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin="$root/${RWDEV:-.rwdev}/bin"
# Written by tools/cuda/pack.sh: where the binaries were built.
# shellcheck source=/dev/null
[ -f "$root/${RWDEV:-.rwdev}/paths.env" ] && . "$root/${RWDEV:-.rwdev}/paths.env"
src_dir=${REDWING_SOURCE_DIR_ON_BUILD:?run tools/cuda/pack.sh first (it records the build paths)}
build_dir=${REDWING_BUILD_DIR_ON_BUILD:?run tools/cuda/pack.sh first (it records the build paths)}
# A link left by an earlier run on a machine still warm may point at that run's copy: replace it.
if [ -L "$src_dir" ] || [ ! -e "$src_dir" ]; then
  mkdir -p "$(dirname "$src_dir")" && ln -sfn "$root" "$src_dir"
fi
mkdir -p "$build_dir/test_tmp" "$build_dir/bin"
# Tests that run the CLI find it at the build path (REDWING_BINARY).
if [ -L "$build_dir/bin/redwing" ] || [ ! -e "$build_dir/bin/redwing" ]; then
  ln -sfn "$bin/redwing" "$build_dir/bin/redwing"
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv

model=/tmp/g4
synth_pid=
if { [ "$what" = bench ] || [ "$what" = all ]; } && [ ! -e "$model/manifest.json" ]; then
  # The full-size model (1–4 min) is written while the tests run.
  ( /usr/bin/time -v "$bin/redwing" synth --geometry gemma4-26b-a4b --seed 1 --out "$model" \
      > /dev/null 2> "$out/synth_time.txt" ) &
  synth_pid=$!
fi

# One GoogleTest binary run: its whole output in $out/<log>.txt, the lines matching <filter>
# (at most <lines>) on the terminal, and a row for the results file.
rows=()
# gtest's closing lines: "[  PASSED  ] 12 tests.", "[  SKIPPED ] 3 tests, listed below:",
# "[  FAILED  ] 1 test, listed below:"; absent when the binary crashed or timed out.
gtest_count() {  # gtest_count FILE PASSED|SKIPPED|FAILED
  grep -E "^\[  $2 *\] [0-9]+ tests?[,.]" "$1" | tail -1 | grep -oE "[0-9]+" | head -1
}
run_gtest() {  # run_gtest LOG LIMIT_S FILTER LINES COMMAND...
  local log=$1 limit=$2 filter=$3 lines=$4 rc=0 p s f note=""
  shift 4
  timeout "$limit" "$@" > "$out/$log.txt" 2>&1 || rc=$?
  grep -E "$filter" "$out/$log.txt" | sed -n "1,${lines}p"
  p=$(gtest_count "$out/$log.txt" PASSED)
  s=$(gtest_count "$out/$log.txt" SKIPPED)
  f=$(gtest_count "$out/$log.txt" FAILED)
  [ -z "$p$s$f" ] && note="no gtest summary (crashed?)"
  [ "$rc" = 124 ] && note="timed out after ${limit} s"
  rows+=("| $log | ${p:-0} | ${s:-0} | ${f:-0} | $rc | $note |")
  total_p=$((total_p + ${p:-0})) total_s=$((total_s + ${s:-0})) total_f=$((total_f + ${f:-0}))
}
total_p=0 total_s=0 total_f=0

if [ "$what" = tests ] || [ "$what" = all ]; then
  "$bin/copy_ceiling" 2>&1 | tee "$out/ceiling.txt"
  run_gtest backend_cuda_test 240 "^\[  |FAIL|Failure|device" 80 "$bin/backend_cuda_test"
  # The other decode matvec kernel over every kernel test: SIMT (REDWING_CUDA_MATVEC=simt); the
  # default is the integer tensor-core kernel. (backend_cuda_test's CudaTuning.* run each
  # override in-process.)
  run_gtest backend_cuda_test_simt 240 "^\[  (PASSED|FAILED)|FAIL|Failure" 40 \
    env REDWING_CUDA_MATVEC=simt "$bin/backend_cuda_test"
  run_gtest cuda_parity_test 300 "^\[  |FAIL|parity|cuda|Failure" 80 "$bin/cuda_parity_test"
  run_gtest cuda_fault_test 120 "^\[  |FAIL|fault|Failure" 40 "$bin/cuda_fault_test"
  run_gtest cuda_tuning_forward_test 180 "^\[  |FAIL|tuning|Failure" 40 \
    "$bin/cuda_tuning_forward_test"
  run_gtest backend_test 180 "^\[  |FAIL|Failure" 40 "$bin/backend_test"
  run_gtest speculative_test 240 "^\[  |FAIL|Failure" 40 "$bin/speculative_test"

  # The dated record of this run.
  commit=${REDWING_COMMIT:-$("$bin/redwing" --version 2>/dev/null | sed -n 's/.*(\(.*\)).*/\1/p')}
  commit=${commit:-unknown}
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
    head -1)
  day=$(date -u +%Y-%m-%d)
  results_dir=${RESULTS_DIR:-$root/docs/cuda-results}
  record="$results_dir/$day-$commit.md"
  mkdir -p "$results_dir" "$out/cuda-results"
  {
    echo "# CUDA test results, $day"
    echo
    echo "- commit: \`$commit\` ($("$bin/redwing" --version 2>/dev/null || echo "redwing --version failed"))"
    echo "- GPU: ${gpu:-none found (nvidia-smi gave nothing)}"
    echo "- run: \`tools/cuda/device_check.sh $what\`, $(date -u +%H:%M) UTC"
    echo
    echo "| binary | passed | skipped | failed | exit | note |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo "| **total** | $total_p | $total_s | $total_f | | |"
    echo
    echo "Skipped tests and why:"
    echo
    skips=$(cd "$out" && grep -h -A1 ": Skipped$" backend_cuda_test*.txt cuda_*_test.txt backend_test.txt speculative_test.txt 2>/dev/null |
      grep -vE ": Skipped$|^--$" | sort | uniq -c | sed 's/^ *\([0-9]*\) /- \1 × /')
    echo "${skips:-- none}"
  } > "$record"
  cp "$record" "$out/cuda-results/"
  echo "results: $record (copy in $out/cuda-results/)"
  cat "$record"
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  if [ -n "$synth_pid" ]; then
    wait "$synth_pid"
    grep -E "Elapsed|Maximum resident|Exit" "$out/synth_time.txt"
  fi
  # No warm-up, so the figures compare with those recorded before the bench had one (the 4G
  # case would otherwise start with the warm-up's experts in its VRAM cache).
  common=(--model "$model" --max-context 4096 --prefill-chunk 512 --prompt-tokens 512
          --decode-tokens 256 --quiet --warmup 0)
  timeout 240 "$bin/redwing" bench "${common[@]}" --backend cuda --json "$out/bench_resident.json" \
    2>&1 | tee "$out/bench_resident.txt"
  # Under the budget a smaller context and chunk leave more of the 4 GB to the expert cache.
  timeout 240 "$bin/redwing" bench --model "$model" --max-context 2048 --prefill-chunk 128 \
    --prompt-tokens 512 --decode-tokens 128 --quiet --warmup 0 --backend cuda --vram-budget 4G \
    --json "$out/bench_4g.json" 2>&1 | tee "$out/bench_4g.txt"
fi
