// The prefill matmul launchers of ops.h: which kernel a product takes. Affine 4/8-bit weights with
// x split once (LaunchSplitX) take the warpgroup-MMA kernel on Hopper (ops_matmul_wgmma.cu, q/k/v,
// gate/up and expert gate/up stacked into one launch each), else the planes kernel
// (ops_matmul_planes.cu); with x not split, the bf16 kernel that splits it (ops_matmul_bf16.cu);
// everything else, and chunks under 16 rows, the simple kernels (ops_matmul_simple.cu: 3xTF32 on
// sm_80+, fp32 FMAs before).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/matmul.h"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

// REDWING_CUDA_MATMUL=tf32: the simple 3xTF32 kernel (ops_matmul_simple.cu) for affine weights too,
// not the bf16 kernel of ops_matmul_bf16.cu (for comparison).
bool UseBf16Kernel() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    return e == nullptr || std::strcmp(e, "tf32") != 0;
  }();
  return on;
}

// REDWING_CUDA_MATMUL=bf16: the bf16 kernel that splits x itself even where the caller split it
// once (for comparison).
bool UsePlanes() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    return e == nullptr || std::strcmp(e, "planes") == 0;
  }();
  return on;
}

bool UseTensorCores() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    if (e != nullptr && std::strcmp(e, "simt") == 0) return false;
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major >= 8;
  }();
  return on;
}

// REDWING_CUDA_STACK=0: products that share an input launch one by one (for comparison).
bool UseStacks() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_STACK");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

}  // namespace

cudaError_t LaunchMatMul(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s,
                         const XPlanes* xp) {
  if (w.rows <= 0 || w.cols <= 0 || m <= 0) return cudaSuccess;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (UseTensorCores() && m >= 16) {
    if (xp != nullptr && xp->rows >= m && UsePlanes()) {
      cudaError_t e =
          LaunchAffineMatMulWgmma(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, y, s);
      if (e == cudaErrorNotSupported)
        e = LaunchAffineMatMulPlanes(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, y, s);
      if (e != cudaErrorNotSupported) return e;
    }
    const cudaError_t e = UseBf16Kernel() ? LaunchAffineMatMulBf16(w, nullptr, 1, nullptr, nullptr,
                                                                   m, m, nullptr, x, y, s)
                                          : cudaErrorNotSupported;
    if (e != cudaErrorNotSupported) return e;
    return LaunchMatMulTf32(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, x, y, s);
  }
  return LaunchMatMulSimt(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, x, y, s);
}

cudaError_t LaunchMatMulMulti(const DevMat* w, float* const* y, int n, const float* x, int64_t m,
                              cudaStream_t s, const XPlanes* xp) {
  if (n < 1 || n > 3) return cudaErrorInvalidValue;
  if (n > 1 && UseStacks() && m >= 16 && xp != nullptr && xp->rows >= m && UseTensorCores() &&
      UsePlanes()) {
    const cudaError_t e =
        LaunchAffineMatMulWgmmaStack(w, y, n, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, s);
    if (e != cudaErrorNotSupported) return e;
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
    if (err != cudaErrorNotSupported) return err;
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
      cudaError_t err = LaunchAffineMatMulWgmma(w, blobs, groups, row0, rows, 0, max_rows, gather,
                                                *xp, y, s, total_rows);
      if (err == cudaErrorNotSupported)
        err =
            LaunchAffineMatMulPlanes(w, blobs, groups, row0, rows, 0, max_rows, gather, *xp, y, s);
      if (err != cudaErrorNotSupported) return err;
    }
    const cudaError_t err = UseBf16Kernel() ? LaunchAffineMatMulBf16(w, blobs, groups, row0, rows,
                                                                     0, max_rows, gather, x, y, s)
                                            : cudaErrorNotSupported;
    if (err != cudaErrorNotSupported) return err;
    return LaunchMatMulTf32(w, blobs, groups, row0, rows, 0, max_rows, gather, x, y, s);
  }
  return LaunchMatMulSimt(w, blobs, groups, row0, rows, 0, max_rows, gather, x, y, s);
}

}  // namespace rw::cuda
