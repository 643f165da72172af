// Device helpers shared by the .cu files: bf16 widening, warp/block reductions and the weight
// formats of DevMat (see backend/weight_view.h for the layout).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace rw::cuda {

__device__ __forceinline__ float Bf16Bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// cp.async: 16 (4) bytes global → shared without passing through registers, zero-filled when
// !ok; a thread's copies form a group at CpAsyncCommit, and CpAsyncWait<N> waits until at most
// N of its groups are in flight (other threads' copies need a barrier after).
// The *Shared forms take a shared-space address.
__device__ __forceinline__ void CpAsync16Shared(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}
// size bytes of 16 copied, the rest zero-filled (0: all zeros, src unread but a valid address).
__device__ __forceinline__ void CpAsync16Sized(uint32_t dst, const void* src, uint32_t size) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(size)
               : "memory");
}
__device__ __forceinline__ void CpAsync4Shared(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool ok) {
  CpAsync16Shared(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, ok);
}
__device__ __forceinline__ void CpAsync4(void* dst, const void* src, bool ok) {
  CpAsync4Shared(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, ok);
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kN>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kN) : "memory");
}

__device__ __forceinline__ float WarpAllSum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ double WarpAllSumD(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result,
// the same bits in every thread and every run (a butterfly gives all lanes the same value: each
// step adds the same two numbers in either order). The warps' partials are summed by a butterfly
// in every warp rather than by a loop in every thread: a 1,024-thread row kernel on one SM is
// issue-bound, and the loop was ~100 of each warp's instructions per sum.
__device__ __forceinline__ double BlockSumD(double v, double* smem32) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = WarpAllSumD(v);
  __syncthreads();
  if (lane == 0) smem32[warp] = v;
  __syncthreads();
  return WarpAllSumD(lane < warps ? smem32[lane] : 0.0);
}

// Element (row, col) of a weight (the reference formula: s·q + b, two roundings).
__device__ __forceinline__ float MatAt(const DevMat& w, int64_t row, int64_t col) {
  switch (w.type) {
    case DevMat::kF32:
      return static_cast<const float*>(w.data)[row * w.cols + col];
    case DevMat::kBf16:
      return Bf16Bits(static_cast<const uint16_t*>(w.data)[row * w.cols + col]);
    default: {
      const int per = 32 / w.bits;
      const uint32_t word = static_cast<const uint32_t*>(w.data)[row * (w.cols / per) + col / per];
      const uint32_t q = (word >> ((col % per) * w.bits)) & ((1u << w.bits) - 1u);
      const int64_t g = row * (w.cols / w.group) + col / w.group;
      return Bf16Bits(w.scales[g]) * static_cast<float>(q) + Bf16Bits(w.biases[g]);
    }
  }
}

// An expert matrix with its offsets resolved against the blob's device address.
__device__ __forceinline__ DevMat Resolve(DevMat m, const uint8_t* blob) {
  m.data = blob + reinterpret_cast<uintptr_t>(m.data);
  m.scales = reinterpret_cast<const uint16_t*>(blob + reinterpret_cast<uintptr_t>(m.scales));
  m.biases = reinterpret_cast<const uint16_t*>(blob + reinterpret_cast<uintptr_t>(m.biases));
  return m;
}

// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as the CPU's GeluTanh.
__device__ __forceinline__ float GeluTanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// A warp's 32×32 corner of mma.m16n8 accumulators (2 row tiles of 16 × 4 column tiles of 8;
// c0, c1 row gid, c2, c3 row gid + 8, columns 2·tig, 2·tig + 1) into y: rows row0 + r for
// r = r_base + … < rows, columns n_base + … < N.
__device__ __forceinline__ void StoreWarpTile(const float (&acc)[2][4][4], int64_t r_base,
                                              int64_t n_base, int gid, int tig, int64_t rows,
                                              int64_t N, int64_t row0, float* y) {
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t r = r_base + i * 16 + gid + (q >= 2 ? 8 : 0);
        const int64_t n = n_base + j * 8 + tig * 2 + (q & 1);
        if (r < rows && n < N) y[(row0 + r) * N + n] = acc[i][j][q];
      }
}

inline unsigned Blocks(int64_t n, int per) {
  return static_cast<unsigned>((n + per - 1) / per);
}

}  // namespace rw::cuda
