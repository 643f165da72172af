#!/usr/bin/env bash
# On a GPU machine (the device tool), from a folder made by tools/cuda/pack_ab.sh: the CUDA
# trace test, a CUDA decode trace of the small synthetic model and its summary, and A-B reports
# (a real change, a build against itself, tracing and profiling against none) on CUDA and on
# the CPU (small); or (full) the same change, self and tracing comparisons on CUDA with the
# full-size synthetic model. trace-full and profile-full measure what --trace (sampled, and
# every call with REDWING_TRACE_GPU_EVERY=1) and --profile cost on the full-size model with PAIRS
# pairs, and (trace-full) write a decode trace's summary; each fits one device call, and the
# second reuses the first's synthesized model. Everything lands in $OUT/ab.tar.gz and $OUT/log.txt.
#   cd <pack folder> && bash tools/cuda/ab_trace_device.sh [small|full|trace-full|profile-full] [PAIRS]
set -u
what=${1:-small}
pairs=${2:-3}
R=$(pwd)
out=${OUT:-/tmp/ab_out}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export LD_LIBRARY_PATH="$R/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck source=/dev/null
. "$R/paths.env"
# The test binary finds the CLI and tools/ under the paths compiled into it.
if [ -L "$REDWING_SOURCE_DIR_ON_BUILD" ] || [ ! -e "$REDWING_SOURCE_DIR_ON_BUILD" ]; then
  mkdir -p "$(dirname "$REDWING_SOURCE_DIR_ON_BUILD")" && ln -sfn "$R" "$REDWING_SOURCE_DIR_ON_BUILD"
elif [ "$(cd "$REDWING_SOURCE_DIR_ON_BUILD" && pwd -P)" != "$(pwd -P)" ]; then
  # Another checkout sits there (the one the device tool sent): give it our tools.
  mkdir -p "$REDWING_SOURCE_DIR_ON_BUILD/tools" && cp "$R"/tools/*.py "$REDWING_SOURCE_DIR_ON_BUILD/tools/"
fi
mkdir -p "$REDWING_BUILD_DIR_ON_BUILD/bin" "$REDWING_BUILD_DIR_ON_BUILD/test_tmp"
ln -sfn "$R/bin/redwing" "$REDWING_BUILD_DIR_ON_BUILD/bin/redwing"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
work=/tmp/abwork
full_model=0
case $what in full | trace-full | profile-full) full_model=1 ;; esac
if [ "$what" = profile-full ] && [ -f "$work/g4.done" ]; then
  rm -rf "$work/ab" "$work/trace" && mkdir -p "$work/ab" "$work/trace"  # keep the model
else
  rm -rf "$work" && mkdir -p "$work/ab" "$work/trace"
fi
[ -d "$work/small" ] || "$R/bin/redwing" synth --geometry small --seed 1 --out "$work/small" >/dev/null || exit 1
if [ $full_model = 1 ] && [ ! -f "$work/g4.done" ]; then
  # The full-size geometry (14.5 GB): long kernels, the case the kernel commits were made for.
  time timeout 300 "$R/bin/redwing" synth --geometry gemma4-26b-a4b --seed 1 --out "$work/g4" \
    >/dev/null || exit 1
  touch "$work/g4.done"
fi

if [ "$what" = small ]; then
echo "== cuda-labelled test"
timeout 240 "$R/bin/trace_format_cuda_test" 2>&1 | tail -60

echo "== a CUDA decode trace"
for pdl in 1 0; do
  REDWING_CUDA_PDL=$pdl "$R/bin/redwing" bench --backend cuda --model "$work/small" --prompt-tokens 512 \
    --decode-tokens 64 --quiet --format json --json "$work/trace/bench_pdl$pdl.json" \
    --trace "$work/trace/cuda_decode_pdl$pdl.trace.json" \
    --profile "$work/trace/cuda_decode_pdl$pdl.profile.json" >/dev/null
  python3 "$R/tools/trace_summary.py" "$work/trace/cuda_decode_pdl$pdl.trace.json" --window decode \
    --top 25 | tee "$work/trace/summary_decode_pdl$pdl.txt"
done
fi

# Snapshots as bench-ab.sh expects them: head (this branch), base (head with the kernel commits
# reverted), main (the branch's parent: no issue-29 scopes, the "tracing off" baseline).
for s in head base main; do
  mkdir -p "$R/snaps/$s"
  b="$R/bin/redwing"
  [ $s != head ] && b="$R/bin/redwing-$s"
  [ -x "$b" ] || continue
  cp "$b" "$R/snaps/$s/redwing"
  cp "$R/commit-$s" "$R/snaps/$s/commit"
done
save() { tar czf "$out/ab.tar.gz" -C "$work" ab trace; }
ab() {
  local name=$1
  shift
  echo "== $name"
  REDWING_SNAPSHOTS="$R/snaps" timeout 300 bash "$R/scripts/bench-ab.sh" --out "$work/ab/$name" "$@"
  save  # after each report, in case the call runs out of time
}
if [ "$what" = trace-full ] || [ "$what" = profile-full ]; then
  full=(--backend cuda --model "$work/g4" --prompt-tokens 512 --decode-tokens 256 --no-disk-probe)
  export BENCH_AB_PREPARE=none
  if [ "$what" = trace-full ]; then
    echo "== cuda-labelled test"
    timeout 120 "$R/bin/trace_format_cuda_test" >"$work/trace/trace_test.txt" 2>&1; grep -E "Failure|Expected|Which is|OK \]|FAILED|call [0-9]" "$work/trace/trace_test.txt" | head -30
    echo "== a CUDA decode trace of the full-size model (default sampling)"
    "$R/bin/redwing" bench "${full[@]}" --quiet --format json --json "$work/trace/bench.json" \
      --trace "$work/trace/full_decode.trace.json" >/dev/null
    python3 "$R/tools/trace_summary.py" "$work/trace/full_decode.trace.json" --window decode \
      --top 25 | tee "$work/trace/summary_full_decode.txt"
    rm -f "$work/trace/full_decode.trace.json"
    ab full-trace --try-flags "--trace $work/t.json" head head "$pairs" -- "${full[@]}"
    [ "${EVERY_CALL:-1}" = 1 ] && REDWING_TRACE_GPU_EVERY=1 ab full-trace-every-call --try-flags "--trace $work/t.json" head head 2 -- "${full[@]}"
  else
    ab full-profile --try-flags "--profile $work/p.json" head head "$pairs" -- "${full[@]}"
    small=(--backend cuda --model "$work/small" --prompt-tokens 128 --decode-tokens 1024)
    ab small-trace --try-flags "--trace $work/t.json" head head "$pairs" -- "${small[@]}"
    # A drafter that never hits, under --draft-tokens auto: what speculation costs when it
    # cannot pay (the issue-26 measure: 512-token prompt, 128 decoded).
    spec=(--backend cuda --model "$work/g4" --prompt-tokens 512 --decode-tokens 128 --no-disk-probe)
    ab full-oracle0-auto --try-flags "--drafter oracle:0 --draft-tokens auto" head head "$pairs" -- "${spec[@]}"
  fi
  rm -f "$work/t.json" "$work/p.json"
  save
  exit 0
fi
if [ "$what" = full ]; then
  full=(--backend cuda --model "$work/g4" --prompt-tokens 512 --decode-tokens 256 --no-disk-probe)
  export BENCH_AB_PREPARE=none  # the synthesized files are in the page cache for every run
  ab full-change base head 3 -- "${full[@]}"
  ab full-self head head 3 -- "${full[@]}"
  ab full-trace --try-flags "--trace $work/t.json" head head 3 -- "${full[@]}"
  ab full-profile --try-flags "--profile $work/p.json" head head 3 -- "${full[@]}"
  save
  exit 0
fi
cuda=(--backend cuda --model "$work/small" --prompt-tokens 128,1024 --decode-tokens 1024)
cpu=(--model "$work/small" --threads 8 --prompt-tokens 512,4000 --decode-tokens 256)
ab cuda-change base head 3 -- "${cuda[@]}"
ab cuda-self head head 3 -- "${cuda[@]}"
ab cuda-off main head 3 -- "${cuda[@]}"
ab cuda-profile --try-flags "--profile $work/p.json" head head 3 -- "${cuda[@]}"
ab cuda-trace --try-flags "--trace $work/t.json" head head 3 -- "${cuda[@]}"
ab cpu-change base head 3 -- "${cpu[@]}"
ab cpu-self head head 3 -- "${cpu[@]}"
ab cpu-off main head 3 -- "${cpu[@]}"
ab cpu-profile --try-flags "--profile $work/p.json" head head 3 -- "${cpu[@]}"
ab cpu-trace --try-flags "--trace $work/t.json" head head 3 -- "${cpu[@]}"
rm -f "$work/t.json" "$work/p.json"
save
ls -la "$out"
