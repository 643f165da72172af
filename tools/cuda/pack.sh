#!/usr/bin/env bash
# Copies the CUDA test and benchmark binaries of a build tree, and the shared libraries they
# need that a bare GPU machine may lack, into .rwdev/ (git-ignored) for tools/cuda/device_check.sh.
#   tools/cuda/pack.sh [BUILD_DIR]
set -eu
build=${1:-build/hcuda}
mkdir -p .rwdev/bin .rwdev/lib
for b in redwing backend_cuda_test cuda_parity_test; do
  cp "$build/bin/$b" .rwdev/bin/
  strip --strip-debug .rwdev/bin/$b
done
/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -o .rwdev/bin/copy_ceiling tools/cuda/copy_ceiling.cu
for b in .rwdev/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux)[.-]' |
    while read -r lib; do cp -Lu "$lib" .rwdev/lib/; done
done
# The tests find their fixtures under the source and build paths compiled into them;
# device_check.sh recreates those paths on the GPU machine.
{
  echo "REDWING_SOURCE_DIR_ON_BUILD=$(pwd)"
  echo "REDWING_BUILD_DIR_ON_BUILD=$(cd "$build" && pwd)"
} >.rwdev/paths.env
du -sh .rwdev
