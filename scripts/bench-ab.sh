#!/usr/bin/env bash
# Compares two snapshots (scripts/bench-snapshot.sh) with `redwing bench`, A-B-B-A in fresh
# processes, and writes an HTML report and its JSON:
#
#   scripts/bench-ab.sh [--memory-limit SIZE] [--out DIR] [--try-flags "FLAGS"] BASE TRY [PAIRS] \
#       -- --model DIR [bench flags]
#
# PAIRS (default 3) pairs of runs in the order A B B A A B ...: each pair has one run of each
# build, and their order alternates so a drift of the machine (heat, other work) falls on both
# alike. First, one uncounted run of each build (BENCH_AB_WARMUP=N for N each, 0 for none):
# the first process after a while pays for cold clocks, caches and driver state. Every run is a
# new process with the same flags; before each one the model's files are
# read once (the page cache then holds what fits, the same for both builds) unless the flags
# say --cold (then bench itself drops them before loading) or BENCH_AB_PREPARE=none. The bench's
# own warm-up (--warmup) runs inside each process.
#
# --try-flags adds flags to TRY's runs only: one snapshot under both names then measures a flag
# (e.g. --try-flags "--trace /tmp/t.json" measures what tracing costs).
# --memory-limit SIZE runs each bench under scripts/with-memory-limit.sh SIZE (a fresh cgroup per
# run, so one run's page cache is not charged to the next). Running this whole script under
# with-memory-limit.sh also works: every run then shares that cgroup.
#
# Output (--out, default build/bench-runs/<UTC time>/): report.html (opens offline: inline SVG),
# report.json (the same numbers), runs/NN-<build>.json (each bench's --json), runs/NN-<build>.log
# (its stderr), machine.json, commands.txt. Snapshots come from build/bench-snapshots/
# (REDWING_SNAPSHOTS overrides). tools/bench_ab_report.py does the statistics; see
# docs/PERFORMANCE.md ("A-B comparisons").
set -euo pipefail
prog=bench-ab.sh
die() {
  echo "$prog: $*" >&2
  exit 2
}
usage="usage: $prog [--memory-limit SIZE] [--out DIR] [--try-flags FLAGS] BASE TRY [PAIRS] -- --model DIR [bench flags]"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
limit=
out=
try_flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --memory-limit) limit=${2:?--memory-limit needs a size}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --try-flags) read -r -a try_flags <<<"${2:?--try-flags needs flags}"; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) break ;;
  esac
done
[[ $# -ge 2 ]] || die "$usage"
base=$1
try=$2
shift 2
pairs=3
if [[ $# -gt 0 && "$1" != -- ]]; then
  pairs=$1
  shift
fi
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || die "PAIRS must be a whole number >= 1, not '$pairs'"
[[ $# -gt 0 && "$1" == -- ]] || die "give the bench flags after --, at least --model DIR ($usage)"
shift
bench_flags=("$@")

snaps=${REDWING_SNAPSHOTS:-$root/build/bench-snapshots}
for s in "$base" "$try"; do
  [[ -x "$snaps/$s/redwing" ]] || die "no snapshot '$s' in $snaps (make it with scripts/bench-snapshot.sh $s)"
done
model=
cold=0
for ((i = 0; i < ${#bench_flags[@]}; ++i)); do
  case "${bench_flags[$i]}" in
    --model) model=${bench_flags[$((i + 1))]:-} ;;
    --model=*) model=${bench_flags[$i]#--model=} ;;
    --cold) cold=1 ;;
    --json | --json=* | --format | --format=*) die "bench-ab.sh sets --json and --format itself" ;;
  esac
done
[[ -n "$model" && -d "$model" ]] || die "the bench flags need --model DIR (an existing folder), got '${model}'"

out=${out:-$root/build/bench-runs/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out/runs"
wrap=()
[[ -n "$limit" ]] && wrap=("$root/scripts/with-memory-limit.sh" "$limit")

# The machine, once.
{
  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  mem=$(sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\) kB/\1/p' /proc/meminfo)
  gpu=
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -4 | paste -sd ';' || true)
  fi
  python3 - "$cpu" "$(nproc)" "$(nproc --all)" "$mem" "$(uname -srm)" "$gpu" "$(hostname)" "$limit" <<'PY'
import json, sys
cpu, cores, cores_all, mem_kb, kernel, gpu, host, limit = sys.argv[1:9]
print(json.dumps({"cpu": cpu, "cores_usable": int(cores), "cores": int(cores_all),
                  "memory_bytes": int(mem_kb or 0) * 1024, "kernel": kernel,
                  "gpu": gpu or None, "host": host, "memory_limit": limit or None}, indent=2))
PY
} >"$out/machine.json"

prepare() {
  [[ $cold == 1 || "${BENCH_AB_PREPARE:-read}" == none ]] && return 0
  # The same page-cache state before every run: the model's files read once.
  find "$model" -type f -exec cat {} + >/dev/null 2>&1 || true
}

: >"$out/commands.txt"
: >"$out/runs.tsv"
warmups=${BENCH_AB_WARMUP:-1}
[[ "$warmups" =~ ^[0-9]+$ ]] || die "BENCH_AB_WARMUP must be a whole number, not '$warmups'"
for ((w = 1; w <= warmups; ++w)); do
  for which in base try; do
    snap=$base
    extra=()
    if [[ $which == try ]]; then
      snap=$try
      extra=("${try_flags[@]}")
    fi
    tag="warmup$w-$which"
    cmd=("${wrap[@]}" "$snaps/$snap/redwing" bench "${bench_flags[@]}" "${extra[@]}" --format json --quiet --json "$out/runs/$tag.json")
    printf '(warm-up, not counted) %s\n' "${cmd[*]}" >>"$out/commands.txt"
    prepare
    echo "$prog: warm-up $w: $which ($snap)" >&2
    "${cmd[@]}" >/dev/null 2>"$out/runs/$tag.log" || echo "$prog: warm-up run of $snap failed (see runs/$tag.log)" >&2
  done
done
n=0
order=()
for ((p = 0; p < pairs; ++p)); do
  if ((p % 2 == 0)); then order+=(base try); else order+=(try base); fi
done
total=${#order[@]}
for which in "${order[@]}"; do
  n=$((n + 1))
  snap=$base
  extra=()
  if [[ $which == try ]]; then
    snap=$try
    extra=("${try_flags[@]}")
  fi
  tag=$(printf '%02d-%s' "$n" "$which")
  json="$out/runs/$tag.json"
  cmd=("${wrap[@]}" "$snaps/$snap/redwing" bench "${bench_flags[@]}" "${extra[@]}" --format json --quiet --json "$json")
  printf '%s\n' "${cmd[*]}" >>"$out/commands.txt"
  prepare
  echo "$prog: run $n/$total: $which ($snap)" >&2
  t0=$(date +%s.%N)
  set +e
  "${cmd[@]}" >/dev/null 2>"$out/runs/$tag.log"
  rc=$?
  set -e
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$which" "$snap" "$rc" "$(awk "BEGIN{printf \"%.3f\", $t1 - $t0}")" "runs/$tag.json" >>"$out/runs.tsv"
  if [[ $rc != 0 ]]; then
    echo "$prog: run $n ($snap) failed with status $rc; its stderr:" >&2
    tail -5 "$out/runs/$tag.log" >&2
  fi
done

set +e  # the report is written even when a run failed (the status then says so)
python3 "$root/tools/bench_ab_report.py" --dir "$out" --base "$base" --try "$try" \
  --snapshots "$snaps" --bench-flags "${bench_flags[*]}" --try-flags "${try_flags[*]}"
status=$?
echo "$prog: report: $out/report.html" >&2
exit $status
