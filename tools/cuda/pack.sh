#!/usr/bin/env bash
# Copies the CUDA test and benchmark binaries of a build tree, and the shared libraries they
# need that a bare GPU machine may lack, into .rwdev/ (git-ignored) for tools/cuda/device_check.sh.
#   tools/cuda/pack.sh [BUILD_DIR] [DEST]
# DEST (default .rwdev) may name another ignored folder, e.g. one per build tree; the device
# scripts then take it as RWDEV=DEST.
set -eu
build=${1:-build/hcuda}
dest=${2:-.rwdev}
mkdir -p "$dest/bin" "$dest/lib"

for b in redwing backend_cuda_test cuda_parity_test cuda_fault_test cuda_tuning_forward_test backend_test \
  speculative_test backend_cpu_test; do
  cp "$build/bin/$b" "$dest/bin/"
  strip --strip-debug "$dest/bin/$b"
done
/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -o "$dest/bin/copy_ceiling" tools/cuda/copy_ceiling.cu
for b in "$dest"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux)[.-]' |
    while read -r lib; do cp -Lu "$lib" "$dest/lib/"; done
done
# The tests find their fixtures under the source and build paths compiled into them;
# device_check.sh recreates those paths on the GPU machine.
{
  echo "REDWING_SOURCE_DIR_ON_BUILD=$(pwd)"
  echo "REDWING_BUILD_DIR_ON_BUILD=$(cd "$build" && pwd)"
} >"$dest/paths.env"
du -sh "$dest"
