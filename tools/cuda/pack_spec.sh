#!/usr/bin/env bash
# Packs what tools/cuda/spec_device.sh needs on a bare GPU machine into DEST (an ignored folder
# that the device tool carries): HEAD_BUILD's redwing and the CUDA tests a verify depends on,
# BASE's redwing (a build folder, or a binary kept by scripts/bench-snapshot.sh), the shared
# libraries they need, and the device script.
#   tools/cuda/pack_spec.sh HEAD_BUILD BASE DEST
set -eu
head_build=${1:?HEAD_BUILD}
base=${2:?BASE (a build folder or a redwing binary)}
dest=${3:?DEST}
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/tools/cuda"
for b in redwing backend_cuda_test speculative_test cuda_parity_test; do
  cp "$head_build/bin/$b" "$dest/bin/"
done
if [ -d "$base" ]; then cp "$base/bin/redwing" "$dest/bin/redwing-base"; else cp "$base" "$dest/bin/redwing-base"; fi
for b in "$dest"/bin/*; do strip --strip-debug "$b"; done
cp tools/cuda/spec_device.sh "$dest/tools/cuda/"
for b in "$dest"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux)[.-]' |
    while read -r lib; do cp -Lu "$lib" "$dest/lib/"; done
done
{ git describe --always --dirty; git rev-parse HEAD; } >"$dest/commit-head"
"$dest/bin/redwing-base" --version >"$dest/commit-base" 2>&1 || true
{
  echo "REDWING_SOURCE_DIR_ON_BUILD=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$head_build/CMakeCache.txt")"
  echo "REDWING_BUILD_DIR_ON_BUILD=$(cd "$head_build" && pwd)"
} >"$dest/paths.env"
du -sh "$dest"
