#!/usr/bin/env bash
# Packs what tools/cuda/ab_trace_device.sh needs on a bare GPU machine into DEST (an ignored
# folder that the device tool carries): two builds' redwing (HEAD_BUILD's and BASE_BUILD's, and
# MAIN_BUILD's when given: the "tracing off" baseline), the
# CUDA trace test, the shared libraries they need (CUPTI too, which redwing loads at run time),
# the A-B scripts and the trace summary.
#   tools/cuda/pack_ab.sh HEAD_BUILD BASE_BUILD DEST [MAIN_BUILD]
set -eu
head_build=${1:?HEAD_BUILD}
base_build=${2:?BASE_BUILD}
dest=${3:?DEST}
main_build=${4:-}
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/scripts" "$dest/tools/cuda"
cp "$head_build/bin/redwing" "$dest/bin/redwing"
cp "$base_build/bin/redwing" "$dest/bin/redwing-base"
[ -n "$main_build" ] && cp "$main_build/bin/redwing" "$dest/bin/redwing-main"
cp "$head_build/bin/trace_format_cuda_test" "$dest/bin/"
for b in "$dest"/bin/*; do strip --strip-debug "$b"; done
cp scripts/bench-ab.sh scripts/bench-snapshot.sh scripts/with-memory-limit.sh "$dest/scripts/"
cp tools/bench_ab_report.py tools/trace_summary.py "$dest/tools/"
cp tools/cuda/ab_trace_device.sh "$dest/tools/cuda/"
for b in "$dest"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux)[.-]' |
    while read -r lib; do cp -Lu "$lib" "$dest/lib/"; done
done
cupti=$(sed -n 's/^REDWING_CUPTI_LIB:FILEPATH=//p' "$head_build/CMakeCache.txt")
if [ -n "$cupti" ] && [ -e "$cupti" ]; then
  cp -L "$cupti" "$dest/lib/libcupti.so"
  cp -L "$cupti" "$dest/lib/$(basename "$(readlink -f "$cupti")" | sed 's/\(\.so\.[0-9]*\).*/\1/')"
fi
for which in head base main; do
  b=$head_build
  [ $which = base ] && b=$base_build
  if [ $which = main ]; then
    [ -n "$main_build" ] || continue
    b=$main_build
  fi
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$b/CMakeCache.txt")
  { git -C "$src" describe --always --dirty; git -C "$src" rev-parse HEAD; } >"$dest/commit-$which"
done
{
  echo "REDWING_SOURCE_DIR_ON_BUILD=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$head_build/CMakeCache.txt")"
  echo "REDWING_BUILD_DIR_ON_BUILD=$(cd "$head_build" && pwd)"
} >"$dest/paths.env"
du -sh "$dest"
