#!/usr/bin/env bash
# Runs every CUDA test and the CUDA benchmarks on a GPU machine, from binaries built elsewhere
# and carried in .rwdev/ (bin/: redwing, backend_cuda_test, cuda_parity_test, cuda_fault_test,
# copy_ceiling;
# lib/: the shared libraries they need, see tools/cuda/pack.sh).
#
#   tools/cuda/device_check.sh [tests|bench|all] [OUT_DIR]
#
# The tests look for fixtures under the source and build paths compiled into them
# (REDWING_SOURCE_DIR, REDWING_BUILD_DIR); when those do not exist here the repository root is
# linked there. The benchmark synthesizes the full-size model (14.5 GB) into /tmp/g4 first.
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

if [ "$what" = tests ] || [ "$what" = all ]; then
  "$bin/copy_ceiling" 2>&1 | tee "$out/ceiling.txt"
  timeout 240 "$bin/backend_cuda_test" 2>&1 | tee "$out/backend_cuda_test.txt" | grep -E "^\[  |FAIL|Failure|device" | sed -n '1,80p'
  # The other decode matvec kernels over every kernel test: SIMT (REDWING_CUDA_MATVEC=simt);
  # the default is the integer tensor-core kernel. (backend_cuda_test's CudaTuning.* run each
  # override in-process.)
  REDWING_CUDA_MATVEC=simt timeout 240 "$bin/backend_cuda_test" 2>&1 |
    tee "$out/backend_cuda_test_simt.txt" | grep -E "^\[  (PASSED|FAILED)|FAIL|Failure" | sed -n '1,40p'
  timeout 300 "$bin/cuda_parity_test" 2>&1 | tee "$out/cuda_parity_test.txt" | grep -E "^\[  |FAIL|parity|cuda|Failure" | sed -n '1,80p'
  timeout 120 "$bin/cuda_fault_test" 2>&1 | tee "$out/cuda_fault_test.txt" | grep -E "^\[  |FAIL|fault|Failure" | sed -n '1,40p'
  timeout 180 "$bin/cuda_tuning_forward_test" 2>&1 | tee "$out/cuda_tuning_forward_test.txt" | grep -E "^\[  |FAIL|tuning|Failure" | sed -n '1,40p'
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
