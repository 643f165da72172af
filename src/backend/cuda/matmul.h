// The prefill matmul kernels' interface to their dispatcher (ops_matmul_dispatch.cu, which holds
// the public launchers of ops.h): the tensor-core matmuls for affine weights
// (ops_matmul_bf16.cu, ops_matmul_planes.cu, ops_matmul_wgmma.cu) and the simple kernels for
// every format (ops_matmul_simple.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace rw::cuda {

// Y[row0s[g] + r] = X[gather(row0s[g] + r)]·W_gᵀ for r < rowss[g] of each group g (blobs: the
// groups' expert blobs, w holding offsets); dense when blobs, row0s and rowss are null (rows =
// dense_rows), on bf16 tensor cores, x split into three bf16 parts (exact to fp32 rounding).
// cudaErrorNotSupported unless w is affine 4/8-bit with group 32 or a multiple of 64 and x is
// 16-byte aligned: the caller then takes the simple kernel.
cudaError_t LaunchAffineMatMulBf16(const DevMat& w, const uint8_t* const* blobs, int groups,
                                   const int* row0s, const int* rowss, int64_t dense_rows,
                                   int64_t max_rows, const int* gather, const float* x, float* y,
                                   cudaStream_t s);

// The same product over x split by LaunchSplitX (x.rows rows, gathered by gather): no split in
// the kernel. cudaErrorNotSupported unless w is affine 4/8-bit with group 32 or a multiple of
// 64, its codes 16-byte aligned and x.cols == w.cols.
cudaError_t LaunchAffineMatMulPlanes(const DevMat& w, const uint8_t* const* blobs, int groups,
                                     const int* row0s, const int* rowss, int64_t dense_rows,
                                     int64_t max_rows, const int* gather, const XPlanes& x,
                                     float* y, cudaStream_t s);

// The same product on Hopper's warpgroup MMA (ops_matmul_wgmma.cu): x split into two fp16 parts,
// a compute-capability-9.0 GPU and REDWING_CUDA_WGMMA not 0; else cudaErrorNotSupported (the
// planes kernel then runs). total_rows (groups only; 0: unknown) is the sum of rowss: given,
// the grid covers the groups' row tiles instead of max_rows for every group.
cudaError_t LaunchAffineMatMulWgmma(const DevMat& w, const uint8_t* const* blobs, int groups,
                                    const int* row0s, const int* rowss, int64_t dense_rows,
                                    int64_t max_rows, const int* gather, const XPlanes& x, float* y,
                                    cudaStream_t s, int64_t total_rows = 0);

// y[i] = X·w[i]ᵀ for i < n (1..3 matrices with the same K, bits and group, e.g. q/k/v, or an
// expert's gate and up with the groups of LaunchAffineMatMulWgmma): one warpgroup-MMA launch
// over their rows stacked, so the grid fills the GPU where each product alone would leave SMs
// idle. cudaErrorNotSupported as LaunchAffineMatMulWgmma.
cudaError_t LaunchAffineMatMulWgmmaStack(const DevMat* w, float* const* y, int n,
                                         const uint8_t* const* blobs, int groups, const int* row0s,
                                         const int* rowss, int64_t dense_rows, int64_t max_rows,
                                         const int* gather, const XPlanes& x, cudaStream_t s,
                                         int64_t total_rows = 0);

// The simple kernels, any weight format and shape, with the arguments above: 3xTF32 on tensor
// cores (sm_80+), or fp32 FMAs.
cudaError_t LaunchMatMulTf32(const DevMat& w, const uint8_t* const* blobs, int groups,
                             const int* row0s, const int* rowss, int64_t dense_rows,
                             int64_t max_rows, const int* gather, const float* x, float* y,
                             cudaStream_t s);
cudaError_t LaunchMatMulSimt(const DevMat& w, const uint8_t* const* blobs, int groups,
                             const int* row0s, const int* rowss, int64_t dense_rows,
                             int64_t max_rows, const int* gather, const float* x, float* y,
                             cudaStream_t s);

}  // namespace rw::cuda
