// The end of a MoE layer on the GPU: the routed experts' outputs summed per token in ascending
// expert order (so the sum does not depend on what the expert cache held), then the post-FF norms,
// the residual and the layer scalar, optionally with the next layer's input norm, in
// shared-memory and register-row forms. Arithmetic as the CPU reference (backend/cpu/ops_ref.cpp).
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_math.cuh"

namespace rw::cuda {
namespace {

__global__ void MoeCombineKernel(const int* idx, const float* w, const int* rows, const float* y,
                                 int k, int n, float* out) {
  PdlEnter();
  const int64_t t = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  // Ascending expert order (each expert appears once per token).
  int order[32];
  for (int j = 0; j < k; ++j) {
    int q = j;
    while (q > 0 && idx[t * k + order[q - 1]] > idx[t * k + j]) {
      order[q] = order[q - 1];
      --q;
    }
    order[q] = j;
  }
  float acc = 0.0f;
  for (int q = 0; q < k; ++q) {
    const int j = order[q];
    const int64_t r = rows != nullptr ? rows[t * k + j] : t * k + j;
    acc += w[t * k + j] * y[r * n + c];
  }
  out[t * n + c] = acc;
}

// Per token: moe = Σ_j w_j·y_j (ascending expert order); m2 = RmsNorm(moe)·post2;
// m1 += m2; x = (x + RmsNorm(m1)·post)·scalar. Dynamic shared memory: n floats.
__global__ void MoeFinishKernel(const int* idx, const float* w, const int* rows, const float* y,
                                int k, int n, const float* post1, const float* post2, float* m1,
                                const float* post, float* x, float eps, float scalar,
                                const float* next_w, float* next_out) {
  PdlEnter();
  extern __shared__ float moe[];
  __shared__ double smem[32];
  const int64_t t = blockIdx.x;
  int order[32];
  for (int j = 0; j < k; ++j) {
    int q = j;
    while (q > 0 && idx[t * k + order[q - 1]] > idx[t * k + j]) {
      order[q] = order[q - 1];
      --q;
    }
    order[q] = j;
  }
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    float acc = 0.0f;
    for (int q = 0; q < k; ++q) {
      const int j = order[q];
      const int64_t rr = rows != nullptr ? rows[t * k + j] : t * k + j;
      acc += w[t * k + j] * y[rr * n + c];
    }
    moe[c] = acc;
  }
  __syncthreads();
  const float inv2 = RowInvRms(moe, n, eps, smem);
  float* m1r = m1 + t * n;
  // m1 = RmsNorm(dense)·post1 (when given) + RmsNorm(moe)·post2.
  const float inv1 = post1 != nullptr ? RowInvRms(m1r, n, eps, smem) : 1.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const float d = post1 != nullptr ? m1r[c] * inv1 * post1[c] : m1r[c];
    m1r[c] = d + moe[c] * inv2 * post2[c];
  }
  __syncthreads();
  const float inv = RowInvRms(m1r, n, eps, smem);
  float* xr = x + t * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x)
    xr[c] = (xr[c] + m1r[c] * inv * post[c]) * scalar;
  if (next_w == nullptr) return;
  // The next layer's input norm (RmsNormKernel's arithmetic) on the new x.
  __syncthreads();
  const float rn = RowInvRms(xr, n, eps, smem);
  float* out = next_out + t * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) out[c] = xr[c] * rn * next_w[c];
}

// MoeFinishKernel with the row in registers (decode; see row_math.cuh): bit-identical to it.
__global__ void __launch_bounds__(kRowThreads)
    MoeFinishRegKernel(const int* idx, const float* w, const int* rows, const float* y, int k,
                       int n, const float* post1, const float* post2, float* m1, const float* post,
                       float* x, float eps, float scalar, const float* next_w, float* next_out) {
  PdlLaunchDependents();
  __shared__ double2 smem[32];
  __shared__ int s_row[32];
  __shared__ float s_w[32];
  const int64_t t = blockIdx.x;
  float p1[kRowPer], p2[kRowPer], pp[kRowPer], nw[kRowPer];
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      p1[u] = post1 != nullptr ? post1[c] : 0.0f;
      p2[u] = post2[c];
      pp[u] = post[c];
      nw[u] = next_w != nullptr ? next_w[c] : 0.0f;
    }
  }
  PdlWait();
  // The experts in ascending index order (each appears once): thread j places its own by rank.
  if (threadIdx.x < k) {
    const int j = threadIdx.x, e = idx[t * k + j];
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += idx[t * k + i] < e;
    s_row[rank] = rows != nullptr ? rows[t * k + j] : static_cast<int>(t * k + j);
    s_w[rank] = w[t * k + j];
  }
  float* m1r = m1 + t * n;
  float* xr = x + t * n;
  float dv[kRowPer], xv[kRowPer], mo[kRowPer];
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      dv[u] = m1r[c];
      xv[u] = xr[c];
    }
  }
  __syncthreads();
  // Expert by expert (each weight and row read from shared memory once), every element's sum in
  // the same order as MoeFinishKernel's.
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) mo[u] = 0.0f;
#pragma unroll 8
  for (int q = 0; q < k; ++q) {
    const float wq = s_w[q];
    const float* yq = y + static_cast<int64_t>(s_row[q]) * n;
#pragma unroll
    for (int u = 0; u < kRowPer; ++u) {
      const int c = threadIdx.x + u * kRowThreads;
      if (c < n) mo[u] += wq * yq[c];
    }
  }
  // RmsNorm(moe) and RmsNorm(dense) in one pass.
  double ss2 = 0.0, ss1 = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    if (threadIdx.x + u * kRowThreads < n) {
      ss2 += static_cast<double>(mo[u]) * mo[u];
      ss1 += static_cast<double>(dv[u]) * dv[u];
    }
  }
  BlockSum2D(ss2, ss1, smem);
  const float inv2 = InvRms(ss2, n, eps);
  const float inv1 = post1 != nullptr ? InvRms(ss1, n, eps) : 1.0f;
  double ssm = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      const float d = post1 != nullptr ? dv[u] * inv1 * p1[u] : dv[u];
      dv[u] = d + mo[u] * inv2 * p2[u];
      m1r[c] = dv[u];
      ssm += static_cast<double>(dv[u]) * dv[u];
    }
  }
  ssm = BlockSumD(ssm, reinterpret_cast<double*>(smem));
  const float inv = InvRms(ssm, n, eps);
  double ssx = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      xv[u] = (xv[u] + dv[u] * inv * pp[u]) * scalar;
      xr[c] = xv[u];
      ssx += static_cast<double>(xv[u]) * xv[u];
    }
  }
  if (next_w == nullptr) return;
  // The next layer's input norm (RmsNormKernel's arithmetic) on the new x.
  ssx = BlockSumD(ssx, reinterpret_cast<double*>(smem));
  const float rn = InvRms(ssx, n, eps);
  float* out = next_out + t * n;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) out[c] = xv[u] * rn * nw[u];
  }
}

// Either MoE-finish kernel (next_w null: without the next layer's input norm).
cudaError_t MoeFinishLaunch(const int* idx, const float* w, const int* rows, const float* y,
                            int64_t m, int k, int n, const float* post1, const float* post2,
                            float* m1, const float* post, float* x, float eps, float scalar,
                            const float* next_w, float* next_out, cudaStream_t s) {
  if (RegRows(n))
    return LaunchKernel(MoeFinishRegKernel, static_cast<unsigned>(m), kRowThreads, 0, s, idx, w,
                        rows, y, k, n, post1, post2, m1, post, x, eps, scalar, next_w, next_out);
  LaunchKernel(MoeFinishKernel, static_cast<unsigned>(m), kRowThreads, static_cast<size_t>(n) * 4,
               s, idx, w, rows, y, k, n, post1, post2, m1, post, x, eps, scalar, next_w, next_out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchMoeCombine(const int* idx, const float* w, const int* rows, const float* y,
                             int64_t m, int k, int n, float* out, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 32) return cudaErrorInvalidValue;
  const dim3 grid(Grid(n), static_cast<unsigned>(m));
  LaunchKernel(MoeCombineKernel, grid, kThreads, 0, s, idx, w, rows, y, k, n, out);
  return cudaGetLastError();
}

cudaError_t LaunchMoeFinish(const int* idx, const float* w, const int* rows, const float* y,
                            int64_t m, int k, int n, const float* post_ff1, const float* post_ff2,
                            float* m1, const float* post_ff, float* x, float eps, float scalar,
                            cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 32 || n > 12 * 1024) return cudaErrorInvalidValue;  // the row lives in shared memory
  return MoeFinishLaunch(idx, w, rows, y, m, k, n, post_ff1, post_ff2, m1, post_ff, x, eps, scalar,
                         nullptr, nullptr, s);
}

cudaError_t LaunchMoeFinishNorm(const int* idx, const float* w, const int* rows, const float* y,
                                int64_t m, int k, int n, const float* post_ff1,
                                const float* post_ff2, float* m1, const float* post_ff, float* x,
                                float eps, float scalar, const float* next_norm, float* next_out,
                                cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 32 || n > 12 * 1024 || next_norm == nullptr || next_out == nullptr)
    return cudaErrorInvalidValue;
  CountPath(Path::kFusedRows);
  return MoeFinishLaunch(idx, w, rows, y, m, k, n, post_ff1, post_ff2, m1, post_ff, x, eps, scalar,
                         next_norm, next_out, s);
}

}  // namespace rw::cuda
