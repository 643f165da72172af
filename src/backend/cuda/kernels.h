// Kernel launchers with a plain interface (raw pointers, cudaError_t): the .cu files include
// nothing that nvcc's front end cannot digest (fmt's compile-time format checks), and the
// Status-returning API in the .cpp files wraps them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rw::cuda {

// y[rows] = W·x, W affine (bits 4 or 8) in the MLX layout (see backend/weight_view.h).
cudaError_t LaunchMatVecAffine(int bits, const uint32_t* data, const uint16_t* scales,
                               const uint16_t* biases, const float* x, float* y, int64_t rows,
                               int64_t words_per_row, int64_t groups_per_row, int words_per_group,
                               cudaStream_t stream);
cudaError_t LaunchMatVecF32(const float* data, const float* x, float* y, int64_t rows, int64_t cols,
                            cudaStream_t stream);
cudaError_t LaunchMatVecBf16(const uint16_t* data, const float* x, float* y, int64_t rows,
                             int64_t cols, cudaStream_t stream);

}  // namespace rw::cuda
