// The CUDA backend's host-facing API, in plain C++ (no CUDA headers), so the rest of the project
// builds the same with or without CUDA. Device pointers are opaque `void*`/`float*` here.
//
// Numerics match the CPU backend: weights dequantized exactly as WeightView documents (bf16
// scales and biases widened to fp32), fp32 activations and fp32 accumulation; only the order
// of the additions differs (a tree across lanes instead of a row sweep).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/weight_view.h"
#include "base/status.h"

namespace rw::cuda {

// Ok when a CUDA device can run our kernels; otherwise why not (no driver, no device, ...).
Status DeviceStatus();
std::string DeviceName();

// Owning device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  static Result<DeviceBuffer> Alloc(size_t bytes);
  Status CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  Status CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;
  void* data() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// A weight matrix copied to the device; view() points at device memory.
class DeviceWeight {
 public:
  static Result<DeviceWeight> Upload(const WeightView& host);
  const WeightView& view() const { return view_; }

 private:
  WeightView view_;
  DeviceBuffer data_, scales_, biases_;
};

// y[rows] = W · x for one vector (decode). x: cols floats, y: rows floats, device memory.
// Returns when y is ready.
Status MatVec(const WeightView& w, const float* x, float* y);

}  // namespace rw::cuda
