// A build without CUDA: the CUDA backend's factories say so.
#include "runtime/forward_backend.h"

namespace rw {

Status CudaBackendAvailable() {
  return Error(ErrorCode::kUnsupported,
               "this redwing was built without CUDA (no nvcc found at build time)");
}

Result<std::unique_ptr<DeviceModel>> UploadCudaModel(const RuntimeModel& model,
                                                     const CudaBackendOptions& options,
                                                     ThreadPool* pool) {
  (void)model, (void)options, (void)pool;
  return CudaBackendAvailable().Annotate("--backend cuda");
}

}  // namespace rw
