#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz, built by the fuzz preset:
#   cmake --preset fuzz && cmake --build --preset fuzz
#   scripts/fuzz.sh [-t SECONDS] [-j JOBS] [TARGET...]   (default: 60 s each, 2 at a time, all)
# Each target starts from a scratch copy of its committed seed corpus (tests/fuzz/corpus/<target>),
# so the repository is never written to. Prints one line per target and exits non-zero when any
# target found a crash, a leak, a timeout or ran out of memory; the input that did it is kept
# (its path and a base64 copy are printed, so a CI log is enough to reproduce it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/build/fuzz/bin"
seconds=60
jobs=2
while getopts "t:j:" opt; do
  case "$opt" in
    t) seconds="$OPTARG" ;;
    j) jobs="$OPTARG" ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
if ((${#targets[@]} == 0)); then
  for d in "$root"/tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz: $bin/$t is missing: build the fuzz preset first" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/redwing-fuzz.XXXXXX")"
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, ${jobs} at a time, work dir $work"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_one() {
  local t="$1" dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/crash"
  cp "$root/tests/fuzz/corpus/$t/"* "$dir/corpus/"
  local dict=()
  [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
  local rc=0
  "$bin/$t" "$dir/corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/crash/" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
printf '%-22s %-6s %10s %8s %8s\n' target result execs cov corpus
for t in "${targets[@]}"; do
  dir="$work/$t"
  rc="$(cat "$dir/rc" 2>/dev/null || echo 99)"
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*' || true)"
  ncorpus="$(find "$dir/corpus" -type f | wc -l)"
  if [ "$rc" = 0 ]; then result=ok; else result=FAIL; failed=1; fi
  printf '%-22s %-6s %10s %8s %8s\n' "$t" "$result" "${execs:-?}" "${cov:-?}" "$ncorpus"
done
if ((failed)); then
  for t in "${targets[@]}"; do
    dir="$work/$t"
    [ "$(cat "$dir/rc" 2>/dev/null || echo 99)" = 0 ] && continue
    echo "---- $t (exit $(cat "$dir/rc" 2>/dev/null || echo '?')): end of its log"
    tail -n 60 "$dir/log"
    for f in "$dir"/crash/*; do
      [ -f "$f" ] || continue
      echo "---- $t: input $f (base64; reproduce: base64 -d > x && $bin/$t x)"
      base64 -w 0 "$f" | head -c 20000
      echo
    done
  done
  echo "fuzz: FAILED (work dir $work)"
  exit 1
fi
rm -rf "$work"
echo "fuzz: all ${#targets[@]} targets ran ${seconds} s without a finding"
