// Decode matvec y = W·x on the GPU: one warp per output row. Lanes walk the row's packed words
// together (coalesced 128-byte loads), dequantize in registers (never expanding the matrix) and
// reduce across the warp with shuffles.
#include <cuda_runtime.h>

#include "backend/cuda/kernels.h"

namespace rw::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float Bf16ToF32(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

template <int kBits>
__global__ void MatVecAffineKernel(const uint32_t* __restrict__ data,
                                   const uint16_t* __restrict__ scales,
                                   const uint16_t* __restrict__ biases, const float* __restrict__ x,
                                   float* __restrict__ y, int64_t rows, int64_t words_per_row,
                                   int64_t groups_per_row, int words_per_group) {
  constexpr int kPer = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const uint32_t* wr = data + row * words_per_row;
  const uint16_t* sr = scales + row * groups_per_row;
  const uint16_t* br = biases + row * groups_per_row;
  float acc = 0.0f;
  for (int64_t w = lane; w < words_per_row; w += 32) {
    const uint32_t word = __ldg(wr + w);
    const int64_t g = w / words_per_group;
    const float s = Bf16ToF32(__ldg(sr + g)), b = Bf16ToF32(__ldg(br + g));
    const float* xk = x + w * kPer;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const float q = static_cast<float>((word >> (j * kBits)) & kMask);
      acc = fmaf(fmaf(s, q, b), __ldg(xk + j), acc);
    }
  }
  acc = WarpSum(acc);
  if (lane == 0) y[row] = acc;
}

template <typename T>
__device__ __forceinline__ float Load(const T* p);
template <>
__device__ __forceinline__ float Load<float>(const float* p) {
  return __ldg(p);
}
template <>
__device__ __forceinline__ float Load<uint16_t>(const uint16_t* p) {
  return Bf16ToF32(__ldg(p));
}

template <typename T>
__global__ void MatVecDenseKernel(const T* __restrict__ data, const float* __restrict__ x,
                                  float* __restrict__ y, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const T* wr = data + row * cols;
  float acc = 0.0f;
  for (int64_t k = lane; k < cols; k += 32) acc = fmaf(Load(wr + k), __ldg(x + k), acc);
  acc = WarpSum(acc);
  if (lane == 0) y[row] = acc;
}

}  // namespace

cudaError_t LaunchMatVecAffine(int bits, const uint32_t* data, const uint16_t* scales,
                               const uint16_t* biases, const float* x, float* y, int64_t rows,
                               int64_t words_per_row, int64_t groups_per_row, int words_per_group,
                               cudaStream_t stream) {
  const dim3 block(32 * kWarpsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (bits == 4)
    MatVecAffineKernel<4><<<grid, block, 0, stream>>>(
        data, scales, biases, x, y, rows, words_per_row, groups_per_row, words_per_group);
  else
    MatVecAffineKernel<8><<<grid, block, 0, stream>>>(
        data, scales, biases, x, y, rows, words_per_row, groups_per_row, words_per_group);
  return cudaGetLastError();
}

cudaError_t LaunchMatVecF32(const float* data, const float* x, float* y, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  const dim3 block(32 * kWarpsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  MatVecDenseKernel<float><<<grid, block, 0, stream>>>(data, x, y, rows, cols);
  return cudaGetLastError();
}

cudaError_t LaunchMatVecBf16(const uint16_t* data, const float* x, float* y, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  const dim3 block(32 * kWarpsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  MatVecDenseKernel<uint16_t><<<grid, block, 0, stream>>>(data, x, y, rows, cols);
  return cudaGetLastError();
}

}  // namespace rw::cuda
