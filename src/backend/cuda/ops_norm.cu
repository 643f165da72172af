// RMS norms on the GPU: plain rows, the residual updates (x += RmsNorm(y)·w), the router's input,
// and the fused feed-forward inputs (one read of the residual gives the three normalized copies
// the feed-forward half reads, with the post-attention residual before them), in shared-memory
// and register-row forms. Each follows its CPU reference's arithmetic (backend/cpu/ops_ref.cpp):
// sums of squares in double, the same multiplication order.
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/row_math.cuh"

namespace rw::cuda {
namespace {

__global__ void RmsNormKernel(const float* x, float* y, int n, const float* w, float eps) {
  PdlEnter();
  __shared__ double smem[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  const float r = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * r * (w ? w[i] : 1.0f);
}

__global__ void AddRmsNormKernel(float* x, const float* y, int n, const float* w, float eps,
                                 float scalar) {
  PdlEnter();
  __shared__ double smem[32];
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  const float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  const float r = RowInvRms(yr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = (xr[i] + yr[i] * r * w[i]) * scalar;
}

__global__ void RouterInputKernel(const float* x, float* out, int n, const float* scale, float root,
                                  float eps) {
  PdlEnter();
  __shared__ double smem[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* o = out + static_cast<int64_t>(blockIdx.x) * n;
  const float r = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * r * 1.0f * scale[i] * root;
}

// The three normalized copies of the residual the feed-forward half reads.
__global__ void FfnInputsKernel(const float* x, int n, const float* pre_ff, const float* pre_ff2,
                                const float* router_scale, float root, float eps, float* a,
                                float* a2, float* r) {
  PdlEnter();
  __shared__ double smem[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  const float* xr = x + off;
  const float inv = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i];
    a[off + i] = v * inv * pre_ff[i];
    if (a2 != nullptr) a2[off + i] = v * inv * pre_ff2[i];
    if (r != nullptr) r[off + i] = v * inv * 1.0f * router_scale[i] * root;
  }
}

// The post-attention residual (x += RmsNorm(o)·post_attn, as AddRmsNormKernel with scalar 1)
// and then FfnInputsKernel's three copies of the new x, in one launch: decode's row kernels
// are latency-bound, and a launch costs more than the reductions.
__global__ void ResidualFfnInputsKernel(float* x, const float* o, int n, const float* post_attn,
                                        const float* pre_ff, const float* pre_ff2,
                                        const float* router_scale, float root, float eps, float* a,
                                        float* a2, float* r) {
  PdlEnter();
  __shared__ double smem[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  float* xr = x + off;
  const float* orow = o + off;
  const float ro = RowInvRms(orow, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    xr[i] = (xr[i] + orow[i] * ro * post_attn[i]) * 1.0f;
  __syncthreads();  // the block's writes of x are visible to its threads after the barrier
  const float inv = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i];
    a[off + i] = v * inv * pre_ff[i];
    if (a2 != nullptr) a2[off + i] = v * inv * pre_ff2[i];
    if (r != nullptr) r[off + i] = v * inv * 1.0f * router_scale[i] * root;
  }
}

// ResidualFfnInputsKernel with the row in registers (decode; see row_math.cuh): bit-identical to
// it.
__global__ void __launch_bounds__(kRowThreads)
    ResidualFfnInputsRegKernel(float* x, const float* o, int n, const float* post_attn,
                               const float* pre_ff, const float* pre_ff2, const float* router_scale,
                               float root, float eps, float* a, float* a2, float* r) {
  PdlLaunchDependents();
  __shared__ double smem[32];
  float pa[kRowPer], f1[kRowPer], f2[kRowPer], rs[kRowPer];
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      pa[u] = post_attn[c];
      f1[u] = pre_ff[c];
      f2[u] = a2 != nullptr ? pre_ff2[c] : 0.0f;
      rs[u] = r != nullptr ? router_scale[c] : 0.0f;
    }
  }
  PdlWait();
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  float* xr = x + off;
  const float* orow = o + off;
  float ov[kRowPer], xv[kRowPer];
  double sso = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      ov[u] = orow[c];
      xv[u] = xr[c];
    }
  }
#pragma unroll
  for (int u = 0; u < kRowPer; ++u)
    if (threadIdx.x + u * kRowThreads < n) sso += static_cast<double>(ov[u]) * ov[u];
  const float ro = InvRms(BlockSumD(sso, smem), n, eps);
  double ssx = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      xv[u] = (xv[u] + ov[u] * ro * pa[u]) * 1.0f;
      xr[c] = xv[u];
      ssx += static_cast<double>(xv[u]) * xv[u];
    }
  }
  const float inv = InvRms(BlockSumD(ssx, smem), n, eps);
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      const float v = xv[u];
      a[off + c] = v * inv * f1[u];
      if (a2 != nullptr) a2[off + c] = v * inv * f2[u];
      if (r != nullptr) r[off + c] = v * inv * 1.0f * rs[u] * root;
    }
  }
}

}  // namespace

cudaError_t LaunchRmsNormRows(const float* x, float* y, int64_t rows, int n, const float* w,
                              float eps, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(RmsNormKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, y, n, w, eps);
  return cudaGetLastError();
}

cudaError_t LaunchAddRmsNorm(float* x, const float* y, int64_t rows, int n, const float* w,
                             float eps, float scalar, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(AddRmsNormKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, y, n, w, eps,
               scalar);
  return cudaGetLastError();
}

cudaError_t LaunchRouterInput(const float* x, float* r, int64_t rows, int n, const float* scale,
                              float root, float eps, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(RouterInputKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, r, n, scale,
               root, eps);
  return cudaGetLastError();
}

cudaError_t LaunchFfnInputs(const float* x, int64_t rows, int n, const float* pre_ff,
                            const float* pre_ff2, const float* router_scale, float root, float eps,
                            float* a, float* a2, float* r, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(FfnInputsKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, n, pre_ff,
               pre_ff2, router_scale, root, eps, a, a2, r);
  return cudaGetLastError();
}

cudaError_t LaunchResidualFfnInputs(float* x, const float* o, int64_t rows, int n,
                                    const float* post_attn, const float* pre_ff,
                                    const float* pre_ff2, const float* router_scale, float root,
                                    float eps, float* a, float* a2, float* r, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  CountPath(Path::kFusedRows);
  if (RegRows(n))
    return LaunchKernel(ResidualFfnInputsRegKernel, static_cast<unsigned>(rows), kRowThreads, 0, s,
                        x, o, n, post_attn, pre_ff, pre_ff2, router_scale, root, eps, a, a2, r);
  LaunchKernel(ResidualFfnInputsKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, o, n,
               post_attn, pre_ff, pre_ff2, router_scale, root, eps, a, a2, r);
  return cudaGetLastError();
}

}  // namespace rw::cuda
