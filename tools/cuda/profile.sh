#!/usr/bin/env bash
# Per-kernel GPU time of 4 decode steps (a 1-token prompt, 3 decoded) of a model on CUDA under Nsight Compute (one metric,
# clocks left alone), summed by kernel name, and decode with CUDA graphs off (REDWING_CUDA_GRAPHS=0) for comparison.
#   tools/cuda/profile.sh MODEL_DIR OUT_DIR
set -u
model=$1
out=$2
bin=$(pwd)/${RWDEV:-.rwdev}/bin
export LD_LIBRARY_PATH="$(pwd)/${RWDEV:-.rwdev}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
args=(bench --model "$model" --backend cuda --max-context 1024 --prefill-chunk 64 --quiet)
timeout 300 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$bin/redwing" "${args[@]}" --prompt-tokens 1 --decode-tokens 3 > "$out/ncu.csv" 2> "$out/ncu.err"
python3 "$(dirname "$0")/ncu_summary.py" "$out/ncu.csv" 4
timeout 120 env REDWING_CUDA_GRAPHS=0 "$bin/redwing" "${args[@]}" --prompt-tokens 512 \
  --decode-tokens 128 2>&1 | grep -E "^ +512 "
