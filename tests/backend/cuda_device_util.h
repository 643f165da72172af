// Shared by the CUDA kernel tests: device copies of host vectors, random inputs, and the relative
// error the kernel tests bound.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/cuda.h"

namespace rw::test {

// A device copy of a host vector (kept alive by the test).
template <typename T>
struct Dev {
  cuda::DeviceBuffer buf;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    auto b = cuda::DeviceBuffer::Alloc(std::max<size_t>(1, n) * sizeof(T));
    EXPECT_TRUE(b.ok());
    buf = std::move(*b);
    if (n > 0) {
      EXPECT_TRUE(buf.CopyFromHost(h.data(), n * sizeof(T)).ok());
    }
  }
  explicit Dev(size_t count) : Dev(std::vector<T>(count)) {}
  T* p() const { return static_cast<T*>(buf.data()); }
  std::vector<T> Get() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> h(n);
    if (n > 0) {
      EXPECT_TRUE(buf.CopyToHost(h.data(), n * sizeof(T)).ok());
    }
    return h;
  }
};

inline std::vector<float> Randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// ‖a − b‖ / ‖b‖.
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace rw::test
