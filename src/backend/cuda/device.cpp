#include <cuda_runtime.h>

#include <cstdlib>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_check.h"
#include "base/check.h"

namespace rw::cuda {

Status DeviceStatus() {
  // Load every kernel when the runtime starts, not at its first launch (the runtime's lazy
  // default): otherwise the first request pays for it, ~4 ms of a 512-token prefill measured on
  // the H200. Set before the first runtime call; a CUDA_MODULE_LOADING of the user's is kept.
  static const bool eager = setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0;
  (void)eager;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  // Without an NVIDIA driver the runtime calls it "insufficient"; say what a user can act on.
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
    return Error(ErrorCode::kUnsupported,
                 "no NVIDIA GPU with a working driver found (CUDA runtime: {}); use --backend cpu",
                 cudaGetErrorString(e));
  if (e != cudaSuccess)
    return Error(ErrorCode::kUnsupported, "no usable CUDA device: {}", cudaGetErrorString(e));
  if (n == 0) return Error(ErrorCode::kUnsupported, "no CUDA device present");
  return Status::Ok();
}

std::string DeviceName() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "?";
  return fmt::format("{} (sm_{}{}, {:.0f} GiB)", p.name, p.major, p.minor,
                     static_cast<double>(p.totalGlobalMem) / (1ull << 30));
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), size_(o.size_) {
  o.ptr_ = nullptr;
  o.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = o.ptr_;
    size_ = o.size_;
    o.ptr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

Result<DeviceBuffer> DeviceBuffer::Alloc(size_t bytes) {
  DeviceBuffer b;
  if (bytes > 0) RW_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.ptr_, bytes), "cudaMalloc({} bytes)", bytes);
  b.size_ = bytes;
  return b;
}

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes, size_t offset) {
  CHECK(offset + bytes <= size_);
  RW_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(static_cast<char*>(ptr_) + offset, src, bytes, cudaMemcpyHostToDevice),
      "copy of {} bytes to the device", bytes);
  return Status::Ok();
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes, size_t offset) const {
  CHECK(offset + bytes <= size_);
  RW_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dst, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost),
      "copy of {} bytes from the device", bytes);
  return Status::Ok();
}

Result<DeviceWeight> DeviceWeight::Upload(const WeightView& h) {
  DeviceWeight w;
  w.view_ = h;
  size_t data_bytes = 0;
  switch (h.type) {
    case WeightType::kF32:
      data_bytes = static_cast<size_t>(h.rows * h.cols) * 4;
      break;
    case WeightType::kBf16:
      data_bytes = static_cast<size_t>(h.rows * h.cols) * 2;
      break;
    case WeightType::kAffine:
      data_bytes = static_cast<size_t>(h.rows * h.RowWords()) * 4;
      break;
  }
  RW_ASSIGN_OR_RETURN(w.data_, DeviceBuffer::Alloc(data_bytes));
  RW_RETURN_IF_ERROR(w.data_.CopyFromHost(h.data, data_bytes));
  w.view_.data = w.data_.data();
  if (h.type == WeightType::kAffine) {
    const size_t sb = static_cast<size_t>(h.rows * h.RowGroups()) * 2;
    RW_ASSIGN_OR_RETURN(w.scales_, DeviceBuffer::Alloc(sb));
    RW_ASSIGN_OR_RETURN(w.biases_, DeviceBuffer::Alloc(sb));
    RW_RETURN_IF_ERROR(w.scales_.CopyFromHost(h.scales, sb));
    RW_RETURN_IF_ERROR(w.biases_.CopyFromHost(h.biases, sb));
    w.view_.scales = static_cast<const uint16_t*>(w.scales_.data());
    w.view_.biases = static_cast<const uint16_t*>(w.biases_.data());
  }
  return w;
}

}  // namespace rw::cuda
