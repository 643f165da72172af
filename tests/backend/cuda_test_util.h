// Shared by the CUDA tests: a skip when no usable GPU is present, and random weight matrices in
// every stored layout (f32, bf16, affine 4/8-bit) owned on the host.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/weight_view.h"
#include "base/bf16.h"

namespace rw::test {

// Skips the test (with the reason) where CUDA cannot run.
#define REQUIRE_CUDA()                                      \
  do {                                                      \
    ::rw::Status st = ::rw::cuda::DeviceStatus();           \
    if (!st.ok()) GTEST_SKIP() << "CUDA: " << st.message(); \
  } while (0)

// A random matrix: normal(0, 0.05) values, or random codes with small positive scales.
struct HostWeight {
  WeightView view;
  std::vector<uint32_t> words;
  std::vector<float> f32;
  std::vector<uint16_t> bf16, scales, biases;
};

inline HostWeight RandomWeight(WeightType type, int64_t rows, int64_t cols, int bits, int group,
                               std::mt19937& rng) {
  HostWeight h;
  std::normal_distribution<float> nd(0.0f, 0.05f);
  h.view.type = type;
  h.view.rows = rows;
  h.view.cols = cols;
  if (type == WeightType::kF32) {
    h.f32.resize(rows * cols);
    for (float& v : h.f32) v = nd(rng);
    h.view.data = h.f32.data();
  } else if (type == WeightType::kBf16) {
    h.bf16.resize(rows * cols);
    for (uint16_t& v : h.bf16) v = F32ToBf16(nd(rng));
    h.view.data = h.bf16.data();
  } else {
    h.view.bits = bits;
    h.view.group = group;
    h.words.resize(rows * h.view.RowWords());
    for (uint32_t& w : h.words) w = static_cast<uint32_t>(rng());
    h.scales.resize(rows * h.view.RowGroups());
    h.biases.resize(rows * h.view.RowGroups());
    for (uint16_t& v : h.scales) v = F32ToBf16(std::abs(nd(rng)) * 0.2f);
    for (uint16_t& v : h.biases) v = F32ToBf16(nd(rng));
    h.view.data = h.words.data();
    h.view.scales = h.scales.data();
    h.view.biases = h.biases.data();
  }
  return h;
}

}  // namespace rw::test
