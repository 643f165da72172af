// CUDA matvec against the CPU scalar reference over shapes, types, bit widths and group sizes.
// Skips (saying why) where no CUDA device is usable, e.g. in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda_test_util.h"
#include "base/bf16.h"

namespace rw {
namespace {

using test::HostWeight;
using test::RandomWeight;

TEST(CudaMatVec, MatchesTheCpuReference) {
  REQUIRE_CUDA();
  std::printf("device: %s\n", cuda::DeviceName().c_str());
  std::mt19937 rng(7);
  struct Case {
    WeightType type;
    int64_t rows, cols;
    int bits, group;
  };
  std::vector<Case> cases;
  for (int64_t rows : {1, 7, 33, 257, 704, 2816})
    for (int64_t cols : {64, 128, 704, 2816}) {
      cases.push_back({WeightType::kAffine, rows, cols, 4, 64});
      cases.push_back({WeightType::kAffine, rows, cols, 8, 64});
      cases.push_back({WeightType::kAffine, rows, cols, 4, 32});
      if (cols % 128 == 0) cases.push_back({WeightType::kAffine, rows, cols, 4, 128});
      cases.push_back({WeightType::kBf16, rows, cols, 0, 0});
      cases.push_back({WeightType::kF32, rows, cols + 3, 0, 0});  // odd widths too
    }
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("type {} rows {} cols {} bits {} group {}", static_cast<int>(c.type),
                             c.rows, c.cols, c.bits, c.group));
    HostWeight h = RandomWeight(c.type, c.rows, c.cols, c.bits, c.group, rng);
    std::vector<float> x(c.cols), want(c.rows), got(c.rows);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    cpu::ref::MatVec(h.view, x.data(), want.data());
    auto dw = cuda::DeviceWeight::Upload(h.view);
    ASSERT_TRUE(dw.ok()) << dw.status().ToString();
    auto dx = cuda::DeviceBuffer::Alloc(x.size() * 4);
    auto dy = cuda::DeviceBuffer::Alloc(got.size() * 4);
    ASSERT_TRUE(dx.ok() && dy.ok());
    ASSERT_TRUE(dx->CopyFromHost(x.data(), x.size() * 4).ok());
    Status st = cuda::MatVec(dw->view(), static_cast<const float*>(dx->data()),
                             static_cast<float*>(dy->data()));
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(dy->CopyToHost(got.data(), got.size() * 4).ok());
    // Whole-vector relative error, and per row a bound from the magnitudes summed (fp32
    // rounding of a sum grows with Σ|w·x|, not with the result, which may cancel to ~0).
    double num = 0, den = 0;
    std::vector<float> row(c.cols);
    for (int64_t r = 0; r < c.rows; ++r) {
      num += (double(got[r]) - want[r]) * (double(got[r]) - want[r]);
      den += double(want[r]) * want[r];
      cpu::ref::DequantRow(h.view, r, row.data());
      double mag = 0;
      for (int64_t k = 0; k < c.cols; ++k) mag += std::abs(double(row[k]) * x[k]);
      ASSERT_LE(std::abs(double(got[r]) - want[r]), 1e-6 * mag + 1e-30) << "row " << r;
    }
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-5);
  }
}

TEST(CudaMatVec, RejectsWhatItCannotRun) {
  REQUIRE_CUDA();
  std::mt19937 rng(1);
  HostWeight h = RandomWeight(WeightType::kAffine, 4, 96, 4, 32, rng);
  h.view.bits = 3;
  auto dw = cuda::DeviceWeight::Upload(h.view);
  ASSERT_TRUE(dw.ok());
  auto buf = cuda::DeviceBuffer::Alloc(4096);
  ASSERT_TRUE(buf.ok());
  Status st = cuda::MatVec(dw->view(), static_cast<const float*>(buf->data()),
                           static_cast<float*>(buf->data()) + 512);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("3-bit"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace rw
