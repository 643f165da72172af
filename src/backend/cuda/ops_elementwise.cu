// Activations and elementwise ops on the GPU: GeGLU, the final softcap, add/scale/axpy, and the
// embedding's rows dequantized × scale. Arithmetic as the CPU reference (backend/cpu/ops_ref.cpp).
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_math.cuh"

namespace rw::cuda {
namespace {

__global__ void GegluKernel(float* gate, const float* up, int64_t n) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = GeluTanh(gate[i]) * up[i];
}

__global__ void SoftcapKernel(float* x, int64_t n, float cap) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void AxpyKernel(float* y, float a, const float* x, int64_t n, int mode) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (mode == 0)
    y[i] += x[i];
  else if (mode == 1)
    y[i] *= a;
  else
    y[i] += a * x[i];
}

__global__ void EmbedKernel(DevMat e, const int* ids, float scale, float* out) {
  PdlEnter();
  const int64_t t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < e.cols) out[t * e.cols + c] = MatAt(e, ids[t], c) * scale;
}

}  // namespace

cudaError_t LaunchGeglu(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(GegluKernel, Grid(n), kThreads, 0, s, gate, up, n);
  return cudaGetLastError();
}

cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(SoftcapKernel, Grid(n), kThreads, 0, s, x, n, cap);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(AxpyKernel, Grid(n), kThreads, 0, s, y, 1.0f, x, n, 0);
  return cudaGetLastError();
}

cudaError_t LaunchScale(float* y, float a, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(AxpyKernel, Grid(n), kThreads, 0, s, y, a, nullptr, n, 1);
  return cudaGetLastError();
}

cudaError_t LaunchAxpy(float* y, float a, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(AxpyKernel, Grid(n), kThreads, 0, s, y, a, x, n, 2);
  return cudaGetLastError();
}

cudaError_t LaunchEmbed(const DevMat& e, const int* ids, int64_t m, float scale, float* out,
                        cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  const dim3 grid(Grid(e.cols), static_cast<unsigned>(m));
  LaunchKernel(EmbedKernel, grid, kThreads, 0, s, e, ids, scale, out);
  return cudaGetLastError();
}

}  // namespace rw::cuda
