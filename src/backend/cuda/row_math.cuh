// Shared by the row and elementwise kernel files (ops_norm.cu, ops_rope_kv.cu, ops_moe_finish.cu,
// ops_elementwise.cu): block sizes, a row's 1/RMS computed as the CPU reference does (sum of
// squares in double), and the register-row helpers of decode's fused row kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/tuning.h"

namespace rw::cuda {

constexpr int kThreads = 256;
// Row kernels run one block per row; a decode step has one row, so a block must cover it with
// few loads per thread (latency, not bandwidth, bounds them).
constexpr int kRowThreads = 1024;

// 1 / sqrt(mean of squares + eps) of one row, computed by the whole block.
inline __device__ float RowInvRms(const float* x, int n, float eps, double* smem32) {
  double ss = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
  ss = BlockSumD(ss, smem32);
  return 1.0f / sqrtf(static_cast<float>(ss) / static_cast<float>(n) + eps);
}

// ---- Decode's fused row kernels with the row in registers ------------------------------------
// (ops_norm.cu's ResidualFfnInputsRegKernel, ops_moe_finish.cu's MoeFinishRegKernel.) The same
// arithmetic as the shared-memory kernels (same threads per row, the same elements per thread,
// the same reduction order: bit-identical), restructured for latency, which is all a one-row
// launch has: the norm weights are loaded before waiting on the previous kernel, every other
// load of the row is issued at once into registers, and reductions that do not depend on each
// other share one pass. Rows up to kRowThreads·kRowPer wide.
constexpr int kRowPer = 4;

__device__ __forceinline__ float InvRms(double ss, int n, float eps) {
  return 1.0f / sqrtf(static_cast<float>(ss) / static_cast<float>(n) + eps);
}

// BlockSumD for two values at once (each summed exactly as BlockSumD would).
__device__ __forceinline__ void BlockSum2D(double& a, double& b, double2* smem32) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = WarpAllSumD(a);
  b = WarpAllSumD(b);
  __syncthreads();
  if (lane == 0) smem32[warp] = make_double2(a, b);
  __syncthreads();
  const double2 v = lane < warps ? smem32[lane] : make_double2(0.0, 0.0);
  a = WarpAllSumD(v.x);
  b = WarpAllSumD(v.y);
}

// Whether a row of n takes the register kernels (REDWING_CUDA_ROWS=shared: never, for comparison).
// Counts the path it picks.
inline bool RegRows(int n) {
  const bool on = CurrentTuning().register_rows && n <= kRowThreads * kRowPer;
  CountPath(on ? Path::kRowsRegisters : Path::kRowsShared);
  return on;
}

// Blocks of kThreads for n elements.
inline unsigned Grid(int64_t n) {
  return Blocks(n, kThreads);
}

}  // namespace rw::cuda
