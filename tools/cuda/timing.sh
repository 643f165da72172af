#!/usr/bin/env bash
# GPU time per op of the CUDA forward pass (REDWING_CUDA_TIMING=1: events between launches, in
# the decode graph too), for a 512-token prefill and 64 decode steps of MODEL_DIR.
#   tools/cuda/timing.sh MODEL_DIR [extra bench flags]
set -u
model=$1
shift
export LD_LIBRARY_PATH="$(pwd)/${RWDEV:-.rwdev}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
REDWING_CUDA_TIMING=1 timeout 200 "$(pwd)/${RWDEV:-.rwdev}/bin/redwing" bench --model "$model" \
  --backend cuda --max-context 4096 --prefill-chunk 512 --prompt-tokens 512 --decode-tokens 64 \
  --quiet "$@" 2>&1 | grep -E "cuda timing|^ +512 "
