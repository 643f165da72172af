// The decode matvec kernels' interface to their dispatcher (ops_matvec_dispatch.cu, which holds
// the public launchers of ops.h): the integer tensor-core kernel (ops_matvec_i8.cu), the
// register-tiled SIMT kernels and the generic SIMT kernels (ops_matvec_simt.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace rw::cuda {

// One launch of the decode matvec family:
//   plain (gateup false): for each blockIdx.y = j < slots, y_j = W_j·x_j where, with blobs,
//     W_j is w[0] resolved against expert slot j's blob (table blobs[idx[j]] when idx is given,
//     else blobs[j]), x_j = x + j·cols and y_j = y[0] + j·rows; without blobs, W_j = w[j] and
//     y_j = y[j] (j < 3, shared x);
//   gateup: h_j = gelu_tanh(gate·x_j) ⊙ (up·x_j), x_j = x + (j / x_per)·x_stride,
//     h_j = h + j·rows (gate/up resolved against slot j's blob when blobs is given).
// Without blobs, `batch` inputs x[batch][cols] run as blockIdx.z = b, each as one decode row:
// x_b = x + b·cols, outputs y[i] + b·w[i].rows (gateup: h + b·rows). Every row's arithmetic is
// that of a one-row launch, so a k-token verify's products are bit-identical to k decode steps'.
// Only the integer tensor-core kernel takes batch > 1 or x_per > 1; the dispatcher splits such a
// launch into one-row launches for the others.
struct MatVecArgs {
  bool gateup = false;
  DevMat w[3];  // plain: the matrices (w[0] only with blobs); gateup: w[0] gate, w[1] up
  float* y[3] = {nullptr, nullptr, nullptr};
  int64_t rows = 0, cols = 0;  // rows: the largest of the matrices
  unsigned slots = 1;
  const uint8_t* const* blobs = nullptr;
  const int* idx = nullptr;
  const float* x = nullptr;
  int64_t x_stride = 0;
  float* h = nullptr;
  int batch = 1;  // without blobs: input rows (see above)
  int x_per = 1;  // gateup with blobs: slots sharing one input row
};

// The launch on the integer tensor cores (ops_matvec_i8.cu), for 4-bit and 8-bit weights with
// groups of 64: the default on sm_80+ (REDWING_CUDA_MATVEC=simt or generic turns it off).
// cudaErrorNotSupported where the shape, the addresses or the GPU do not fit.
cudaError_t LaunchAffineMatVecI8(const MatVecArgs& a, cudaStream_t s);

// The register-tiled SIMT kernels' shape for w with input x: bits and 16-byte chunks per lane
// (ku); ku 0 when they cannot take it (not affine 4/8-bit, columns or group not whole chunks,
// rows over the staged limit, unaligned) and the generic kernels must run.
struct FastShape {
  int bits = 0, ku = 0;
};
FastShape FastFor(const DevMat& w, const float* x);
// The register-tiled SIMT kernels for shape f (f.ku != 0).
cudaError_t LaunchMatVecTiled(FastShape f, const MatVecArgs& a, cudaStream_t s);
// The generic SIMT kernels: every format, any shape.
cudaError_t LaunchMatVecGeneric(const MatVecArgs& a, cudaStream_t s);

}  // namespace rw::cuda
