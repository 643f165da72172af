// The prefill matmul launchers of ops.h: which kernel a product takes. Affine 4/8-bit weights with
// x split once (LaunchSplitX) take the warpgroup-MMA kernel on Hopper (ops_matmul_wgmma.cu, q/k/v,
// gate/up and expert gate/up stacked into one launch each), else the planes kernel
// (ops_matmul_planes.cu); with x not split, the bf16 kernel that splits it (ops_matmul_bf16.cu);
// everything else, and single rows (decode uses the matvec), the simple kernels
// (ops_matmul_simple.cu: 3xTF32 on sm_80+, fp32 FMAs before).
#include <cuda_runtime.h>

#include "backend/cuda/matmul.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

// Tensor cores for the product: sm_80+ and not REDWING_CUDA_MATMUL=simt.
bool UseTensorCores() {
  static const bool sm80 = [] {
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major >= 8;
  }();
  return sm80 && CurrentTuning().matmul != MatMulVariant::kSimt;
}

// x split once goes to the wgmma/planes kernels (REDWING_CUDA_MATMUL=bf16 or tf32: never).
bool UsePlanes() {
  return CurrentTuning().matmul == MatMulVariant::kPlanes;
}

// Affine weights may take the bf16 kernel (REDWING_CUDA_MATMUL=tf32: the simple 3xTF32 kernel of
// ops_matmul_simple.cu for them too).
bool UseBf16Kernel() {
  return CurrentTuning().matmul != MatMulVariant::kTf32;
}

// Products that share an input launch as one over their rows stacked (REDWING_CUDA_STACK=0: one
// by one).
bool UseStacks() {
  return CurrentTuning().stack;
}

// The planes kernels (warpgroup MMA, else planes) for x split once; cudaErrorNotSupported when
// neither takes the product.
cudaError_t PlanesMatMul(const DevMat& w, const uint8_t* const* blobs, int groups, const int* row0,
                         const int* rows, int64_t dense_rows, int64_t max_rows, const int* gather,
                         const XPlanes& xp, float* y, cudaStream_t s, int64_t total_rows) {
  cudaError_t e = LaunchAffineMatMulWgmma(w, blobs, groups, row0, rows, dense_rows, max_rows,
                                          gather, xp, y, s, total_rows);
  if (e != cudaErrorNotSupported) {
    CountPath(Path::kMatMulWgmma);
    return e;
  }
  e = LaunchAffineMatMulPlanes(w, blobs, groups, row0, rows, dense_rows, max_rows, gather, xp, y,
                               s);
  if (e != cudaErrorNotSupported) CountPath(Path::kMatMulPlanes);
  return e;
}

// The kernels for x as it is: bf16 for affine weights, else the simple 3xTF32 one.
cudaError_t UnsplitMatMul(const DevMat& w, const uint8_t* const* blobs, int groups, const int* row0,
                          const int* rows, int64_t dense_rows, int64_t max_rows, const int* gather,
                          const float* x, float* y, cudaStream_t s) {
  if (UseBf16Kernel()) {
    const cudaError_t e =
        LaunchAffineMatMulBf16(w, blobs, groups, row0, rows, dense_rows, max_rows, gather, x, y, s);
    if (e != cudaErrorNotSupported) {
      CountPath(Path::kMatMulBf16);
      return e;
    }
  }
  CountPath(Path::kMatMulTf32);
  return LaunchMatMulTf32(w, blobs, groups, row0, rows, dense_rows, max_rows, gather, x, y, s);
}

}  // namespace

cudaError_t LaunchMatMul(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s,
                         const XPlanes* xp) {
  if (w.rows <= 0 || w.cols <= 0 || m <= 0) return cudaSuccess;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (UseTensorCores() && m >= kMinTensorCoreRows) {
    if (xp != nullptr && xp->rows >= m && UsePlanes()) {
      const cudaError_t e =
          PlanesMatMul(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, y, s, 0);
      if (e != cudaErrorNotSupported) return e;
    }
    return UnsplitMatMul(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, x, y, s);
  }
  CountPath(Path::kMatMulSimt);
  return LaunchMatMulSimt(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, x, y, s);
}

cudaError_t LaunchMatMulMulti(const DevMat* w, float* const* y, int n, const float* x, int64_t m,
                              cudaStream_t s, const XPlanes* xp) {
  if (n < 1 || n > 3) return cudaErrorInvalidValue;
  if (n > 1 && UseStacks() && m >= kMinTensorCoreRows && xp != nullptr && xp->rows >= m &&
      UseTensorCores() && UsePlanes()) {
    const cudaError_t e =
        LaunchAffineMatMulWgmmaStack(w, y, n, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, s);
    if (e != cudaErrorNotSupported) {
      CountPath(Path::kMatMulWgmmaStacked);
      return e;
    }
  }
  for (int i = 0; i < n; ++i)
    if (cudaError_t e = LaunchMatMul(w[i], x, m, y[i], s, xp); e != cudaSuccess) return e;
  return cudaSuccess;
}

cudaError_t LaunchExpertGateUpMatMul(const ExpertMats& e, const uint8_t* const* blobs, int groups,
                                     const int* row0, const int* rows, int max_rows,
                                     const int* gather, const float* x, float* gate, float* up,
                                     cudaStream_t s, const XPlanes* xp, int64_t total_rows) {
  if (groups <= 0 || max_rows <= 0) return cudaSuccess;
  if (xp != nullptr && UseStacks() && UseTensorCores() && UsePlanes()) {
    const DevMat w[2] = {e.gate, e.up};
    float* const y[2] = {gate, up};
    const cudaError_t err = LaunchAffineMatMulWgmmaStack(w, y, 2, blobs, groups, row0, rows, 0,
                                                         max_rows, gather, *xp, s, total_rows);
    if (err != cudaErrorNotSupported) {
      CountPath(Path::kMatMulWgmmaStacked);
      return err;
    }
  }
  if (cudaError_t err = LaunchExpertMatMul(e, 0, blobs, groups, row0, rows, max_rows, gather, x,
                                           gate, s, xp, total_rows);
      err != cudaSuccess)
    return err;
  return LaunchExpertMatMul(e, 1, blobs, groups, row0, rows, max_rows, gather, x, up, s, xp,
                            total_rows);
}

cudaError_t LaunchExpertMatMul(const ExpertMats& e, int which, const uint8_t* const* blobs,
                               int groups, const int* row0, const int* rows, int max_rows,
                               const int* gather, const float* x, float* y, cudaStream_t s,
                               const XPlanes* xp, int64_t total_rows) {
  if (groups <= 0 || max_rows <= 0) return cudaSuccess;
  const DevMat& w = which == 0 ? e.gate : which == 1 ? e.up : e.down;
  if (cudaError_t err = CheckMat(w); err != cudaSuccess) return err;
  if (UseTensorCores()) {
    if (xp != nullptr && UsePlanes()) {
      const cudaError_t err =
          PlanesMatMul(w, blobs, groups, row0, rows, 0, max_rows, gather, *xp, y, s, total_rows);
      if (err != cudaErrorNotSupported) return err;
    }
    return UnsplitMatMul(w, blobs, groups, row0, rows, 0, max_rows, gather, x, y, s);
  }
  CountPath(Path::kMatMulSimt);
  return LaunchMatMulSimt(w, blobs, groups, row0, rows, 0, max_rows, gather, x, y, s);
}

}  // namespace rw::cuda
