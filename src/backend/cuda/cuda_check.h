// CUDA errors become Status values (ErrorCode::kDevice) naming the call that failed.
#pragma once

#include <cuda_runtime.h>

#include "base/status.h"

#define RW_CUDA_RETURN_IF_ERROR(expr, ...)                                     \
  do {                                                                         \
    const cudaError_t _rw_e = (expr);                                          \
    if (_rw_e != cudaSuccess)                                                  \
      return ::rw::Error(::rw::ErrorCode::kDevice, "CUDA error in {}: {}",     \
                         fmt::format(__VA_ARGS__), cudaGetErrorString(_rw_e)); \
  } while (0)
