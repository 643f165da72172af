// Kernel launches with programmatic dependent launch (PDL, sm_90+). A decode step is ~400 short
// kernels, and between two of them the GPU otherwise drains the first grid before it starts
// launching the second. With PDL each kernel lets its successor launch as soon as it starts
// (PdlLaunchDependents), and the successor waits for it (PdlWait) only where it first touches
// what earlier kernels wrote: so launch, block scheduling and, in the matvec kernels, the loads
// of constant weights overlap the previous kernel's tail.
//
// The rule every kernel launched through LaunchKernel() follows: all of its threads call PdlWait()
// before reading activations or writing anything (a block that skips it could finish before
// the kernel it follows, and break the chain for the next one). Weights, which nothing writes
// during a forward pass, may be read before it. REDWING_CUDA_PDL=0 launches without the
// attribute (the waits are then no-ops), for comparison.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/tuning.h"

namespace rw::cuda {

__device__ __forceinline__ void PdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The start of a kernel with nothing to read before its predecessor is done.
__device__ __forceinline__ void PdlEnter() {
  PdlLaunchDependents();
  PdlWait();
}

// Whether launches carry the PDL attribute: compute capability 9.0 or newer, not turned off, and
// this thread has not turned it off (SetOverlappedLaunches in ops.h).
bool PdlEnabled();

// How many blocks of `kernel` (threads each, smem bytes of dynamic shared memory) the GPU holds
// at once: SMs × blocks per SM, at least 1 (a grid beyond it would run a second wave).
unsigned ResidentBlocks(const void* kernel, int threads, size_t smem);

template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  const bool pdl = PdlEnabled();
  cfg.numAttrs = pdl ? 1 : 0;
  if (pdl) CountPath(Path::kOverlappedLaunch);
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace rw::cuda
