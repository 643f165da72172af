// RoPE and the KV cache on the GPU: the cos/sin tables (through double, so each entry is the
// correctly rounded value), NeoX rotation, the store into the ring/linear cache, and the fused
// step after the q/k/v projections (q/k norms, RMS_0(v), RoPE, KV store in one launch).
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_math.cuh"

namespace rw::cuda {
namespace {

__global__ void RopeTableKernel(const int64_t* pos0, int64_t m, const float* inv_freq, int half,
                                float* cos_out, float* sin_out) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * half) return;
  const int64_t t = i / half;
  const float angle = static_cast<float>(*pos0 + t) * inv_freq[i % half];
  // Through double so the table is the correctly rounded value, as close to libm's as can be.
  cos_out[i] = static_cast<float>(cos(static_cast<double>(angle)));
  sin_out[i] = static_cast<float>(sin(static_cast<double>(angle)));
}

__global__ void RopeKernel(float* x, int64_t m, int n_heads, int head_dim, const float* cos_t,
                           const float* sin_t) {
  PdlEnter();
  const int half = head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * n_heads * half) return;
  const int64_t t = i / (static_cast<int64_t>(n_heads) * half);
  const int64_t h = (i / half) % n_heads;
  const int j = static_cast<int>(i % half);
  float* xh = x + (t * n_heads + h) * head_dim;
  const float c = cos_t[t * half + j], s = sin_t[t * half + j];
  const float a = xh[j], b = xh[j + half];
  xh[j] = a * c - b * s;
  xh[j + half] = b * c + a * s;
}

__global__ void KvStoreKernel(const float* k, const float* v, float* kc, float* vc, int64_t m,
                              int n_kv, int head_dim, int64_t capacity, const int64_t* pos0) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * n_kv * head_dim) return;
  const int64_t t = i / (static_cast<int64_t>(n_kv) * head_dim);
  const int64_t h = (i / head_dim) % n_kv;
  const int64_t d = i % head_dim;
  const int64_t slot = (*pos0 + t) % capacity;
  const int64_t dst = (h * capacity + slot) * head_dim + d;
  kc[dst] = k[i];
  if (v != nullptr) vc[dst] = v[i];
}

// One block per (token, head row): q heads, then k heads, then v heads.
__global__ void QkvPostKernel(float* q, float* k, float* v, int n_heads, int n_kv, int hd,
                              const float* q_norm, const float* k_norm, const float* cos_t,
                              const float* sin_t, float* kc, float* vc, int64_t capacity,
                              const int64_t* pos0, float eps) {
  PdlEnter();
  __shared__ double smem[32];
  __shared__ float row[512];
  const int rows = n_heads + 2 * n_kv;
  const int64_t t = blockIdx.x / rows;
  const int r = blockIdx.x % rows;
  float* x;
  const float* w;
  int kind;  // 0 q, 1 k, 2 v
  if (r < n_heads) {
    x = q + (t * n_heads + r) * hd, w = q_norm, kind = 0;
  } else if (r < n_heads + n_kv) {
    x = k + (t * n_kv + (r - n_heads)) * hd, w = k_norm, kind = 1;
  } else {
    x = v + (t * n_kv + (r - n_heads - n_kv)) * hd, w = nullptr, kind = 2;
  }
  const float inv = RowInvRms(x, hd, eps, smem);
  for (int i = threadIdx.x; i < hd; i += blockDim.x) row[i] = x[i] * inv * (w ? w[i] : 1.0f);
  __syncthreads();
  const int half = hd / 2;
  if (kind < 2) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float c = cos_t[t * half + i], sn = sin_t[t * half + i];
      const float a = row[i], b = row[i + half];
      x[i] = a * c - b * sn;
      x[i + half] = b * c + a * sn;
    }
  } else {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) x[i] = row[i];
  }
  if (kind == 0) return;
  __syncthreads();
  const int h = kind == 1 ? r - n_heads : r - n_heads - n_kv;
  float* cache = kind == 1 ? kc : vc;
  const int64_t slot = (*pos0 + t) % capacity;
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    cache[(static_cast<int64_t>(h) * capacity + slot) * hd + i] = x[i];
}

}  // namespace

cudaError_t LaunchRopeTable(const int64_t* pos0, int64_t m, const float* inv_freq, int half,
                            float* cos, float* sin, cudaStream_t s) {
  if (m * half <= 0) return cudaSuccess;
  LaunchKernel(RopeTableKernel, Grid(m * half), kThreads, 0, s, pos0, m, inv_freq, half, cos, sin);
  return cudaGetLastError();
}

cudaError_t LaunchRopeNeox(float* x, int64_t m, int n_heads, int head_dim, const float* cos,
                           const float* sin, cudaStream_t s) {
  const int64_t n = m * n_heads * (head_dim / 2);
  if (n <= 0) return cudaSuccess;
  LaunchKernel(RopeKernel, Grid(n), kThreads, 0, s, x, m, n_heads, head_dim, cos, sin);
  return cudaGetLastError();
}

cudaError_t LaunchKvStore(const float* k, const float* v, float* k_cache, float* v_cache, int64_t m,
                          int n_kv, int head_dim, int64_t capacity, const int64_t* pos0,
                          cudaStream_t s) {
  const int64_t n = m * n_kv * head_dim;
  if (n <= 0) return cudaSuccess;
  LaunchKernel(KvStoreKernel, Grid(n), kThreads, 0, s, k, v, k_cache, v_cache, m, n_kv, head_dim,
               capacity, pos0);
  return cudaGetLastError();
}

cudaError_t LaunchQkvPost(float* q, float* k, float* v, int64_t m, int n_heads, int n_kv,
                          int head_dim, const float* q_norm, const float* k_norm, const float* cos,
                          const float* sin, float* k_cache, float* v_cache, int64_t capacity,
                          const int64_t* pos0, float eps, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (head_dim > 512) return cudaErrorInvalidValue;
  const int64_t blocks = m * (n_heads + 2 * n_kv);
  LaunchKernel(QkvPostKernel, static_cast<unsigned>(blocks), 128, 0, s, q, k, v, n_heads, n_kv,
               head_dim, q_norm, k_norm, cos, sin, k_cache, v_cache, capacity, pos0, eps);
  return cudaGetLastError();
}

}  // namespace rw::cuda
