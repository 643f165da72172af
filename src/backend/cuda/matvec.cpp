#include <cuda_runtime.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace rw::cuda {

Status MatVec(const WeightView& w, const float* x, float* y) {
  if (w.rows <= 0 || w.cols <= 0) return Status::Ok();
  cudaError_t e = cudaSuccess;
  switch (w.type) {
    case WeightType::kF32:
      e = LaunchMatVecF32(static_cast<const float*>(w.data), x, y, w.rows, w.cols, nullptr);
      break;
    case WeightType::kBf16:
      e = LaunchMatVecBf16(static_cast<const uint16_t*>(w.data), x, y, w.rows, w.cols, nullptr);
      break;
    case WeightType::kAffine:
      if (w.bits != 4 && w.bits != 8)
        return Error(ErrorCode::kUnsupported, "affine {}-bit weights on CUDA", w.bits);
      if (w.group % 32 != 0 || w.cols % w.group != 0)
        return Error(ErrorCode::kUnsupported, "affine group {} with {} columns on CUDA", w.group,
                     w.cols);
      e = LaunchMatVecAffine(w.bits, static_cast<const uint32_t*>(w.data), w.scales, w.biases, x, y,
                             w.rows, w.RowWords(), w.RowGroups(), w.group * w.bits / 32, nullptr);
      break;
  }
  RW_CUDA_RETURN_IF_ERROR(e, "matvec launch ({}x{})", w.rows, w.cols);
  RW_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "matvec ({}x{})", w.rows, w.cols);
  return Status::Ok();
}

}  // namespace rw::cuda
