#!/usr/bin/env bash
# A/B of the ways experts reach the GPU under --vram-budget (issue 7), from binaries carried in
# .rwdev/ (or RWDEV): the CUDA tests and ceilings (device_check.sh tests), then the full-size
# model with uniform routing (/tmp/g4) and with --routing-skew 1.0 (/tmp/g4s), benched at 4G on
# the copy path and on the mapped path (promotion limits, overlap off, prefill by copies), and
# resident with and without the expert/dense overlap; with CPU_EXPERTS=1 also the CPU backend's
# time for the routed experts on this machine's cores (the CPU-hybrid estimate).
#
#   tools/cuda/expert_paths.sh [OUT_DIR] [all|bench]
set -u
out=${1:-${OUT:-/tmp/rwdev_out}}
what=${2:-all}
mkdir -p "$out"
root=$(pwd)
bin="$root/${RWDEV:-.rwdev}/bin"
export LD_LIBRARY_PATH="$root/${RWDEV:-.rwdev}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
log="$out/expert_paths.txt"
: >"$log"

synth() {  # model dir, extra flags
  [ -e "$1/manifest.json" ] && return 0
  "$bin/redwing" synth --geometry gemma4-26b-a4b --seed 1 --out "$1" "${@:2}" >/dev/null
}
( synth /tmp/g4 && synth /tmp/g4s --routing-skew 1.0 ) 2>&1 | tee "$out/synth.txt" &
synth_pid=$!
if [ "$what" = all ]; then
  bash "$root/tools/cuda/device_check.sh" tests "$out" >/dev/null 2>&1
  grep -hE "^\[  (PASSED|FAILED) |FAILED|\[cuda (mapped|copy|auto|eviction)" \
    "$out/backend_cuda_test.txt" "$out/cuda_parity_test.txt" | tee -a "$log"
  tee -a "$log" <"$out/ceiling.txt"
fi
wait "$synth_pid"

bench() {  # label, model, env..., then -- bench flags
  local label=$1 model=$2
  shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  echo "=== $label: ${envs[*]} bench --model $model $*" | tee -a "$log"
  env "${envs[@]}" timeout 150 "$bin/redwing" bench --model "$model" --quiet --no-disk-probe \
    --backend cuda "$@" 2>&1 | grep -vE "^(warm|core pages|decode stream)" | tee -a "$log"
}
b4=(--max-context 2048 --prefill-chunk 128 --prompt-tokens 512 --decode-tokens 128 --vram-budget 4G)
bench "copy 4G uniform" /tmp/g4 REDWING_CUDA_EXPERTS=copy -- "${b4[@]}"
bench "mapped 4G uniform" /tmp/g4 REDWING_CUDA_EXPERTS=mapped -- "${b4[@]}"
for p in 8 32 64; do
  bench "mapped 4G uniform, $p promotions" /tmp/g4 REDWING_CUDA_PROMOTIONS=$p -- "${b4[@]}"
done
bench "mapped 4G uniform, no overlap" /tmp/g4 REDWING_CUDA_OVERLAP=0 -- "${b4[@]}"
bench "mapped 4G uniform, prefill in place" /tmp/g4 REDWING_CUDA_PREFILL_EXPERTS=mapped -- "${b4[@]}"
bench "copy 4G skew 1.0" /tmp/g4s REDWING_CUDA_EXPERTS=copy -- "${b4[@]}"
bench "mapped 4G skew 1.0" /tmp/g4s REDWING_CUDA_EXPERTS=mapped -- "${b4[@]}"
# Longer decode: where promotions have settled.
l4=(--max-context 2048 --prefill-chunk 128 --prompt-tokens 512 --decode-tokens 512 --vram-budget 4G)
bench "copy 4G uniform, 512 decoded" /tmp/g4 REDWING_CUDA_EXPERTS=copy -- "${l4[@]}"
bench "mapped 4G uniform, 512 decoded" /tmp/g4 REDWING_CUDA_EXPERTS=mapped -- "${l4[@]}"
r=(--max-context 4096 --prefill-chunk 512 --prompt-tokens 512 --decode-tokens 256)
bench "resident" /tmp/g4 -- "${r[@]}"
bench "resident, overlap" /tmp/g4 REDWING_CUDA_OVERLAP=1 -- "${r[@]}"
if [ "${CPU_EXPERTS:-0}" = 1 ]; then
  echo "=== cpu backend (experts' share of a decode step on $(nproc) cores)" | tee -a "$log"
  timeout 120 "$bin/redwing" bench --model /tmp/g4 --quiet --no-disk-probe --backend cpu \
    --prompt-tokens 16 --decode-tokens 16 2>&1 | tee -a "$log"
fi
