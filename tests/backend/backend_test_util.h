// Shared helpers for the CPU backend tests: deterministic random data, buffers at chosen
// misalignments, synthetic weights in the model's formats, and error measures.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/weight_view.h"
#include "base/bf16.h"
#include "base/thread_pool.h"

namespace rw::cpu::testing {

// A float buffer whose data() starts `offset` floats past a 64-byte boundary.
class Buffer {
 public:
  Buffer(int64_t n, int offset) : storage_(static_cast<size_t>(n + offset + 32), 0.0f) {
    auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    float* aligned = reinterpret_cast<float*>((addr + 63) & ~uintptr_t{63});
    data_ = aligned + offset;
    n_ = n;
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t size() const { return n_; }
  float& operator[](int64_t i) { return data_[i]; }
  float operator[](int64_t i) const { return data_[i]; }
  std::vector<float> ToVector() const { return std::vector<float>(data_, data_ + n_); }

 private:
  std::vector<float> storage_;
  float* data_;
  int64_t n_;
};

// Deterministic per test: reseeded from the test's name when a new test starts, so a test sees
// the same data whether the whole binary runs or CTest runs it alone.
inline std::mt19937& Rng() {
  static std::mt19937 rng;
  static std::string current;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name =
      info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "";
  if (name != current) {
    current = name;
    rng.seed(static_cast<uint32_t>(std::hash<std::string>{}(name)));
  }
  return rng;
}

inline float Uniform(float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(Rng());
}

inline void FillUniform(float* x, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  for (int64_t i = 0; i < n; ++i) x[i] = Uniform(lo, hi);
}

// Owns the storage behind a WeightView; `misalign` shifts every pointer off its natural
// alignment (data by one 4-byte word, scales/biases by one bf16) to test unaligned starts.
struct TestWeight {
  std::vector<uint32_t> words;
  std::vector<float> f32;
  std::vector<uint16_t> bf16, scales, biases;
  WeightView view;
};

inline std::unique_ptr<TestWeight> MakeAffine(int64_t n, int64_t k, int bits, int group,
                                              bool misalign = false) {
  auto t = std::make_unique<TestWeight>();
  const int off = misalign ? 1 : 0;
  const int64_t row_words = k * bits / 32, groups = k / group;
  t->words.resize(static_cast<size_t>(n * row_words + off));
  for (auto& w : t->words) w = static_cast<uint32_t>(Rng()());
  t->scales.resize(static_cast<size_t>(n * groups + off));
  t->biases.resize(t->scales.size());
  for (size_t i = 0; i < t->scales.size(); ++i) {
    // Negative scales, and an exact zero now and then, as real checkpoints can have.
    float s = i % 7 == 3 ? 0.0f : Uniform(-0.02f, 0.02f);
    t->scales[i] = F32ToBf16(s);
    t->biases[i] = F32ToBf16(Uniform(-0.1f, 0.1f));
  }
  t->view = AffineWeight(t->words.data() + off, n, k, bits, group, t->scales.data() + off,
                         t->biases.data() + off);
  return t;
}

inline std::unique_ptr<TestWeight> MakeDense(WeightType type, int64_t n, int64_t k,
                                             bool misalign = false) {
  auto t = std::make_unique<TestWeight>();
  const int off = misalign ? 1 : 0;
  if (type == WeightType::kF32) {
    t->f32.resize(static_cast<size_t>(n * k + off));
    FillUniform(t->f32.data(), static_cast<int64_t>(t->f32.size()), -0.5f, 0.5f);
    t->view = F32Weight(t->f32.data() + off, n, k);
  } else {
    t->bf16.resize(static_cast<size_t>(n * k + off));
    for (auto& b : t->bf16) b = F32ToBf16(Uniform(-0.5f, 0.5f));
    t->view = Bf16Weight(t->bf16.data() + off, n, k);
  }
  return t;
}

// ‖a − b‖ / ‖b‖ (0 when both are zero).
inline double RelL2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  if (den == 0) return num == 0 ? 0 : INFINITY;
  return std::sqrt(num / den);
}

// Σ_k |W[r,k]·x[k]| for each row: the scale of the rounding error a dot product can carry.
inline std::vector<double> AbsDotScale(const WeightView& w, const float* x) {
  std::vector<double> out(static_cast<size_t>(w.rows));
  for (int64_t r = 0; r < w.rows; ++r) {
    double s = 0;
    for (int64_t k = 0; k < w.cols; ++k) s += std::fabs(double(ref::WeightAt(w, r, k)) * x[k]);
    out[static_cast<size_t>(r)] = s;
  }
  return out;
}

// The pools the tests sweep: 1, 2 and 3 threads.
inline ThreadPool* Pool(int threads) {
  static ThreadPool p1(1), p2(2), p3(3);
  return threads == 1 ? &p1 : threads == 2 ? &p2 : &p3;
}

}  // namespace rw::cpu::testing
