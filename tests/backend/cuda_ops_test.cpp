// The CUDA forward pass's op set (backend/cuda/ops.h) against the CPU scalar reference, over
// shapes that include odd sizes and counts that are not multiples of a block or a tile. Skips
// (saying why) where no CUDA device is usable, e.g. in CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/matmul.h"
#include "backend/cuda/ops.h"
#include "backend/cuda_device_util.h"
#include "backend/cuda_test_util.h"
#include "base/bf16.h"
#include "runtime/cuda_model.h"
#include "runtime/forward.h"
#include "runtime/model.h"

namespace rw {
namespace {

using test::Dev;
using test::HostWeight;
using test::Randn;
using test::RandomWeight;
using test::RelErr;

struct Shape {
  WeightType type;
  int64_t rows, cols;
  int bits, group;
};

std::vector<Shape> LinearShapes() {
  std::vector<Shape> out;
  for (int64_t rows : {1, 7, 65, 130})
    for (int64_t cols : {64, 192, 704}) {
      out.push_back({WeightType::kAffine, rows, cols, 4, 64});
      out.push_back({WeightType::kAffine, rows, cols, 8, 64});
      out.push_back({WeightType::kAffine, rows, cols, 4, 32});
      out.push_back({WeightType::kBf16, rows, cols + 5, 0, 0});
      out.push_back({WeightType::kF32, rows, cols - 31, 0, 0});
    }
  return out;
}

TEST(CudaOps, MatVecAndMatMul) {
  REQUIRE_CUDA();
  std::printf("device: %s\n", cuda::DeviceName().c_str());
  std::mt19937 rng(11);
  for (const Shape& s : LinearShapes()) {
    SCOPED_TRACE(fmt::format("type {} {}x{} bits {} group {}", static_cast<int>(s.type), s.rows,
                             s.cols, s.bits, s.group));
    HostWeight h = RandomWeight(s.type, s.rows, s.cols, s.bits, s.group, rng);
    auto dw = cuda::DeviceWeight::Upload(h.view);
    ASSERT_TRUE(dw.ok());
    for (int64_t m : {1, 3, 33, 70, 200}) {  // 200: the 128-row tiles of dense prefill
      const std::vector<float> x = Randn(m * s.cols, rng);
      std::vector<float> want(m * s.rows);
      cpu::ref::MatMul(h.view, x.data(), m, want.data());
      Dev<float> dx(x), dy(want.size());
      if (m == 1)
        ASSERT_EQ(cuda::LaunchMatVec(ToDevMat(dw->view()), dx.p(), dy.p(), nullptr), cudaSuccess);
      else
        ASSERT_EQ(cuda::LaunchMatMul(ToDevMat(dw->view()), dx.p(), m, dy.p(), nullptr),
                  cudaSuccess);
      // m >= 16 runs on tensor cores (3xTF32, which drops the small·small term): fp32-level
      // (seen up to 6e-6 here), not the reference's rounding.
      EXPECT_LT(RelErr(dy.Get(), want), m == 1 ? 2e-6 : 1.5e-5) << "m " << m;
    }
  }
}

// More row tiles than one launch holds at once (the LM head's case): blocks stride over them.
TEST(CudaOps, MatVecStridesOverManyRows) {
  REQUIRE_CUDA();
  std::mt19937 rng(13);
  for (int group : {32, 64}) {
    HostWeight h = RandomWeight(WeightType::kAffine, 70001, 128, 4, group, rng);
    auto dw = cuda::DeviceWeight::Upload(h.view);
    ASSERT_TRUE(dw.ok());
    const std::vector<float> x = Randn(128, rng);
    std::vector<float> want(70001);
    cpu::ref::MatVec(h.view, x.data(), want.data());
    Dev<float> dx(x), dy(want.size());
    ASSERT_EQ(cuda::LaunchMatVec(ToDevMat(dw->view()), dx.p(), dy.p(), nullptr), cudaSuccess);
    EXPECT_LT(RelErr(dy.Get(), want), 2e-6) << "group " << group;
  }
}

// The affine prefill matmul cases both bf16 tensor-core kernels are held to, against the
// reference: 4/8-bit, groups 32/64/128, row counts odd or not a multiple of the tile, outputs not
// a multiple of 128, K an odd multiple of 32 (half a 64-column step), long K, inputs with a
// large common offset (then b·Σx carries most of each sum). run(w, x, m, k) returns the product
// computed on the device (x there already); the worst relative error is returned.
template <typename Run>
double SweepAffineMatMul(std::mt19937& rng, Run run) {
  struct Case {
    int bits, group;
    int64_t n, k;
    float offset;
  };
  const Case cases[] = {{4, 64, 200, 704, 0.f},  {8, 64, 130, 320, 3.f},  {4, 32, 7, 224, 0.f},
                        {8, 32, 65, 96, 0.f},    {4, 128, 129, 384, 3.f}, {8, 128, 64, 256, 0.f},
                        {4, 64, 300, 2816, 0.f}, {8, 64, 257, 2112, 1.f}, {4, 32, 33, 160, 0.f}};
  double worst = 0;
  for (const Case& c : cases) {
    HostWeight h = RandomWeight(WeightType::kAffine, c.n, c.k, c.bits, c.group, rng);
    auto dw = cuda::DeviceWeight::Upload(h.view);
    EXPECT_TRUE(dw.ok());
    if (!dw.ok()) return 1.0;
    const cuda::DevMat w = ToDevMat(dw->view());
    for (int64_t m : {1, 17, 64, 133}) {
      SCOPED_TRACE(fmt::format("bits {} group {} {}x{} m {}", c.bits, c.group, c.n, c.k, m));
      std::vector<float> x = Randn(m * c.k, rng);
      for (float& v : x) v += c.offset;
      std::vector<float> want(m * c.n);
      cpu::ref::MatMul(h.view, x.data(), m, want.data());
      Dev<float> dx(x);
      const double err = RelErr(run(w, dx, m, c.k), want);
      EXPECT_LT(err, 1.5e-5);
      worst = std::max(worst, err);
    }
  }
  return worst;
}

// The bf16 tensor-core prefill matmul that splits x itself (x in bf16 parts, the codes exact in
// bf16), both dense tiles; outputs poisoned first. Gathered expert rows go through it in
// ExpertKernels.
TEST(CudaOps, AffineMatMulBf16) {
  REQUIRE_CUDA();
  std::mt19937 rng(31);
  const double worst =
      SweepAffineMatMul(rng, [](const cuda::DevMat& w, const Dev<float>& dx, int64_t m, int64_t) {
        Dev<float> dy(std::vector<float>(m * w.rows, std::nanf("")));
        EXPECT_EQ(cuda::LaunchAffineMatMulBf16(w, nullptr, 1, nullptr, nullptr, m, m, nullptr,
                                               dx.p(), dy.p(), nullptr),
                  cudaSuccess);
        return dy.Get();
      });
  std::printf("bf16 matmul: worst relative error %.3g\n", worst);
  // x not 16-byte aligned: not taken, so LaunchMatMul falls back to the simple kernel.
  HostWeight h = RandomWeight(WeightType::kAffine, 70, 192, 4, 64, rng);
  auto dw = cuda::DeviceWeight::Upload(h.view);
  ASSERT_TRUE(dw.ok());
  const int64_t m = 40;
  const std::vector<float> x = Randn(m * 192 + 1, rng);
  std::vector<float> want(m * 70);
  cpu::ref::MatMul(h.view, x.data() + 1, m, want.data());
  Dev<float> dx(x), dy(std::vector<float>(want.size(), std::nanf("")));
  EXPECT_EQ(cuda::LaunchAffineMatMulBf16(ToDevMat(dw->view()), nullptr, 1, nullptr, nullptr, m, m,
                                         nullptr, dx.p() + 1, dy.p(), nullptr),
            cudaErrorNotSupported);
  ASSERT_EQ(cuda::LaunchMatMul(ToDevMat(dw->view()), dx.p() + 1, m, dy.p(), nullptr), cudaSuccess);
  EXPECT_LT(RelErr(dy.Get(), want), 1.5e-5);
}

// The split of x for the planes matmul: per 32-column block, column 8·tig + v + 4e sits at
// position 8v + 2·tig + e, and the three parts add up to x exactly (values
// of every magnitude, zeros, negatives); the sums are the 32-column sums.
// Where column c of x sits in its 32-column block of a plane (the fragments' order).
int64_t PlanePos(int64_t c) {
  const int in = static_cast<int>(c % 32), tig = in / 8, v = in % 4, e = (in / 4) % 2;
  return c / 32 * 32 + 8 * v + 2 * tig + e;
}

// x with zeros, signed zeros and values spread over ~40 binades, and one row entirely zero.
std::vector<float> SplitInput(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<float> x = Randn(rows * cols, rng);
  for (size_t i = 0; i < x.size(); i += 7) x[i] *= std::ldexp(1.0f, static_cast<int>(i % 41) - 20);
  x[5] = 0.0f;
  x[6] = -0.0f;
  for (int64_t c = 0; c < cols; ++c) x[3 * cols + c] = 0.0f;
  return x;
}

TEST(CudaOps, SplitXBf16IsExact) {
  REQUIRE_CUDA();
  std::mt19937 rng(41);
  const int64_t rows = 37, cols = 96;
  const std::vector<float> x = SplitInput(rows, cols, rng);
  Dev<float> dx(x);
  Dev<uint8_t> scratch(std::vector<uint8_t>(cuda::SplitXBytes(rows, cols), 0xAB));
  cuda::XPlanes xp;
  ASSERT_EQ(cuda::LaunchSplitX(dx.p(), rows, cols, scratch.p(), cuda::SplitXBytes(rows, cols), &xp,
                               nullptr, 3),
            cudaSuccess);
  ASSERT_EQ(xp.rows, rows);
  ASSERT_EQ(xp.parts, 3);
  const std::vector<uint8_t> bytes = scratch.Get();
  const auto* planes = reinterpret_cast<const uint16_t*>(bytes.data());
  const auto* sums = reinterpret_cast<const float*>(planes + 3 * rows * cols);
  auto bf = [](uint16_t b) {
    float f;
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t at = r * cols + PlanePos(c);
      const double sum = static_cast<double>(bf(planes[at])) + bf(planes[rows * cols + at]) +
                         bf(planes[2 * rows * cols + at]);
      ASSERT_EQ(sum, static_cast<double>(x[r * cols + c])) << r << " " << c;
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      double want = 0;
      for (int i = 0; i < 32; ++i) want += x[r * cols + b * 32 + i];
      EXPECT_NEAR(sums[r * (cols / 32) + b], want, 1e-4 * (1 + std::abs(want)));
    }
  // Not a multiple of 32 columns, misaligned x, too little scratch, no such split.
  EXPECT_EQ(cuda::LaunchSplitX(dx.p(), 3, 40, scratch.p(), 1 << 20, &xp, nullptr),
            cudaErrorNotSupported);
  EXPECT_EQ(cuda::LaunchSplitX(dx.p() + 1, 3, 32, scratch.p(), 1 << 20, &xp, nullptr),
            cudaErrorNotSupported);
  EXPECT_EQ(cuda::LaunchSplitX(dx.p(), rows, cols, scratch.p(), 100, &xp, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::LaunchSplitX(dx.p(), rows, cols, scratch.p(), 1 << 20, &xp, nullptr, 4),
            cudaErrorInvalidValue);
}

// The fp16 split: per row a power of two 2^s puts the largest |x·2^s| in [2^14, 2^15); hi + lo
// is x·2^s to ~22 bits (bounded here by 2^-21 of the element plus 2^-38 of the row's largest),
// and the sums are of x·2^s.
TEST(CudaOps, SplitXFp16KeepsFp32Accuracy) {
  REQUIRE_CUDA();
  std::mt19937 rng(43);
  for (const int64_t cols : {int64_t{96}, int64_t{2816}, int64_t{8192}}) {
    const int64_t rows = 37;
    const std::vector<float> x = SplitInput(rows, cols, rng);
    Dev<float> dx(x);
    Dev<uint8_t> scratch(std::vector<uint8_t>(cuda::SplitXBytes(rows, cols), 0xAB));
    cuda::XPlanes xp;
    ASSERT_EQ(cuda::LaunchSplitX(dx.p(), rows, cols, scratch.p(), cuda::SplitXBytes(rows, cols),
                                 &xp, nullptr, 2),
              cudaSuccess);
    ASSERT_EQ(xp.parts, 2);
    const std::vector<uint8_t> bytes = scratch.Get();
    const auto* planes = reinterpret_cast<const uint16_t*>(bytes.data());
    const auto* sums = reinterpret_cast<const float*>(planes + 2 * rows * cols);
    const auto* down = sums + rows * (cols / 32);
    ASSERT_EQ(reinterpret_cast<const uint8_t*>(xp.row_down) - scratch.p(),
              reinterpret_cast<const uint8_t*>(down) - bytes.data());
    for (int64_t r = 0; r < rows; ++r) {
      double mx = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, std::abs(double{x[r * cols + c]}));
      const double up = 1.0 / down[r];
      if (mx == 0) {
        EXPECT_EQ(down[r], 1.0f) << r;
      } else {
        EXPECT_GE(mx * up, 16384.0) << r;
        EXPECT_LT(mx * up, 32768.0) << r;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at = r * cols + PlanePos(c);
        const double v =
            static_cast<double>(F16ToF32(planes[at])) + F16ToF32(planes[rows * cols + at]);
        const double want = static_cast<double>(x[r * cols + c]) * up;
        ASSERT_LE(std::abs(v - want), std::ldexp(std::abs(want), -21) + std::ldexp(mx * up, -38))
            << r << " " << c;
      }
      for (int64_t b = 0; b < cols / 32; ++b) {
        double want = 0;
        for (int i = 0; i < 32; ++i) want += x[r * cols + b * 32 + i];
        EXPECT_NEAR(sums[r * (cols / 32) + b] / up, want, 1e-4 * (1 + std::abs(want)));
      }
    }
  }
  // Rows wider than the fp16 split holds in registers take the exact bf16 split.
  const int64_t wide = 8192 + 32;
  Dev<float> dx(Randn(2 * wide, rng));
  Dev<uint8_t> scratch(cuda::SplitXBytes(2, wide));
  cuda::XPlanes xp;
  ASSERT_EQ(
      cuda::LaunchSplitX(dx.p(), 2, wide, scratch.p(), cuda::SplitXBytes(2, wide), &xp, nullptr, 2),
      cudaSuccess);
  EXPECT_EQ(xp.parts, 3);
  EXPECT_EQ(xp.row_down, nullptr);
}

// The planes matmul (x split once by LaunchSplitX) on the same cases, directly and through
// LaunchMatMul (which takes it from 16 rows on, and the simple kernel below); outputs poisoned
// first. Gathered expert rows go through it in ExpertKernels.
TEST(CudaOps, AffineMatMulPlanes) {
  REQUIRE_CUDA();
  std::mt19937 rng(33);
  for (const int parts : {2, 3}) {
    const double worst = SweepAffineMatMul(
        rng, [parts](const cuda::DevMat& w, const Dev<float>& dx, int64_t m, int64_t k) {
          Dev<uint8_t> scratch(cuda::SplitXBytes(m, k));
          cuda::XPlanes xp;
          EXPECT_EQ(cuda::LaunchSplitX(dx.p(), m, k, scratch.p(), cuda::SplitXBytes(m, k), &xp,
                                       nullptr, parts),
                    cudaSuccess);
          Dev<float> dy(std::vector<float>(m * w.rows, std::nanf("")));
          EXPECT_EQ(cuda::LaunchAffineMatMulPlanes(w, nullptr, 1, nullptr, nullptr, m, m, nullptr,
                                                   xp, dy.p(), nullptr),
                    cudaSuccess);
          Dev<float> dz(std::vector<float>(m * w.rows, std::nanf("")));
          EXPECT_EQ(cuda::LaunchMatMul(w, dx.p(), m, dz.p(), nullptr, &xp), cudaSuccess);
          const std::vector<float> y = dy.Get(), z = dz.Get();
          EXPECT_LT(RelErr(z, y), 1.5e-5);  // both near the reference (the sweep checks y)
          return y;
        });
    std::printf("planes matmul, %d-part split: worst relative error %.3g\n", parts, worst);
  }
  // Planes of another width: not taken.
  HostWeight h = RandomWeight(WeightType::kAffine, 70, 192, 4, 64, rng);
  auto dw = cuda::DeviceWeight::Upload(h.view);
  ASSERT_TRUE(dw.ok());
  Dev<float> dx(Randn(20 * 224, rng)), dy(20 * 70);
  Dev<uint8_t> scratch(cuda::SplitXBytes(20, 224));
  cuda::XPlanes xp;
  ASSERT_EQ(
      cuda::LaunchSplitX(dx.p(), 20, 224, scratch.p(), cuda::SplitXBytes(20, 224), &xp, nullptr),
      cudaSuccess);
  EXPECT_EQ(cuda::LaunchAffineMatMulPlanes(ToDevMat(dw->view()), nullptr, 1, nullptr, nullptr, 20,
                                           20, nullptr, xp, dy.p(), nullptr),
            cudaErrorNotSupported);
}

// The warpgroup-MMA matmul (compute capability 9.0 only) on the same cases, each token tile, and
// on weights whose groups' scales span ~50 binades with zeros among them: the scaled codes of the
// smallest groups turn subnormal in fp16, which must cost nothing measurable.
TEST(CudaOps, AffineMatMulWgmma) {
  REQUIRE_CUDA();
  std::mt19937 rng(35);
  auto run = [](const cuda::DevMat& w, const Dev<float>& dx, int64_t m, int64_t k,
                cudaError_t* status) {
    Dev<uint8_t> scratch(cuda::SplitXBytes(m, k));
    cuda::XPlanes xp;
    EXPECT_EQ(
        cuda::LaunchSplitX(dx.p(), m, k, scratch.p(), cuda::SplitXBytes(m, k), &xp, nullptr, 2),
        cudaSuccess);
    Dev<float> dy(std::vector<float>(m * w.rows, std::nanf("")));
    *status = cuda::LaunchAffineMatMulWgmma(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, xp,
                                            dy.p(), nullptr);
    return dy.Get();
  };
  {
    HostWeight h = RandomWeight(WeightType::kAffine, 64, 128, 4, 64, rng);
    auto dw = cuda::DeviceWeight::Upload(h.view);
    ASSERT_TRUE(dw.ok());
    Dev<float> dx(Randn(16 * 128, rng));
    cudaError_t st = cudaSuccess;
    run(ToDevMat(dw->view()), dx, 16, 128, &st);
    if (st == cudaErrorNotSupported)
      GTEST_SKIP() << "the warpgroup MMA needs compute capability 9.0";
    ASSERT_EQ(st, cudaSuccess);
  }
  const double worst = SweepAffineMatMul(
      rng, [&run](const cuda::DevMat& w, const Dev<float>& dx, int64_t m, int64_t k) {
        cudaError_t st = cudaSuccess;
        std::vector<float> y = run(w, dx, m, k, &st);
        EXPECT_EQ(st, cudaSuccess);
        return y;
      });
  std::printf("wgmma matmul: worst relative error %.3g\n", worst);
  for (const int bits : {4, 8}) {
    HostWeight h = RandomWeight(WeightType::kAffine, 150, 1024, bits, 64, rng);
    for (size_t i = 0; i < h.scales.size(); ++i) {
      const float s = Bf16ToF32(h.scales[i]) * std::ldexp(1.0f, -static_cast<int>(i * 7 % 50));
      h.scales[i] = i % 13 == 5 ? 0 : F32ToBf16(s);
    }
    auto dw = cuda::DeviceWeight::Upload(h.view);
    ASSERT_TRUE(dw.ok());
    const int64_t m = 70;
    const std::vector<float> x = Randn(m * 1024, rng);
    std::vector<float> want(m * 150);
    cpu::ref::MatMul(h.view, x.data(), m, want.data());
    Dev<float> dx(x);
    cudaError_t st = cudaSuccess;
    const double err = RelErr(run(ToDevMat(dw->view()), dx, m, 1024, &st), want);
    EXPECT_EQ(st, cudaSuccess);
    EXPECT_LT(err, 1.5e-5) << bits << "-bit, scales over 50 binades";
    std::printf("wgmma matmul, %d-bit, scales over 50 binades: relative error %.3g\n", bits, err);
  }
}

TEST(CudaOps, MatVecMultiSharesTheInput) {
  REQUIRE_CUDA();
  std::mt19937 rng(21);
  for (int bits : {4, 8}) {
    const int64_t K = 576;
    std::vector<HostWeight> hw;
    for (int64_t rows : {130, 64, 7})
      hw.push_back(RandomWeight(WeightType::kAffine, rows, K, bits, 64, rng));
    std::vector<cuda::DeviceWeight> dws;
    for (const HostWeight& h : hw) {
      auto d = cuda::DeviceWeight::Upload(h.view);
      ASSERT_TRUE(d.ok());
      dws.push_back(std::move(*d));
    }
    const std::vector<float> x = Randn(K, rng);
    Dev<float> dx(x), y0(130), y1(64), y2(7);
    const cuda::DevMat w[3] = {ToDevMat(dws[0].view()), ToDevMat(dws[1].view()),
                               ToDevMat(dws[2].view())};
    float* const y[3] = {y0.p(), y1.p(), y2.p()};
    ASSERT_EQ(cuda::LaunchMatVecMulti(w, y, 3, dx.p(), nullptr), cudaSuccess);
    const Dev<float>* outs[3] = {&y0, &y1, &y2};
    for (int i = 0; i < 3; ++i) {
      std::vector<float> want(hw[i].view.rows);
      cpu::ref::MatVec(hw[i].view, x.data(), want.data());
      EXPECT_LT(RelErr(outs[i]->Get(), want), 2e-6) << i;
    }
  }
}

TEST(CudaOps, MatMulMultiStacksTheRows) {
  // Several matrices over one input in one launch (q/k/v, gate/up): row counts that split a
  // block and a warpgroup between matrices, 4- and 8-bit, a ragged K and an odd token count.
  REQUIRE_CUDA();
  std::mt19937 rng(36);
  for (const int bits : {4, 8})
    for (const int64_t K : {576, 2816, 96}) {
      const int group = K % 64 == 0 ? 64 : 32;
      std::vector<HostWeight> hw;
      for (const int64_t rows : {136, 72, 9})
        hw.push_back(RandomWeight(WeightType::kAffine, rows, K, bits, group, rng));
      std::vector<cuda::DeviceWeight> dws;
      for (const HostWeight& h : hw) {
        auto d = cuda::DeviceWeight::Upload(h.view);
        ASSERT_TRUE(d.ok());
        dws.push_back(std::move(*d));
      }
      const int64_t m = 45;
      const std::vector<float> x = Randn(m * K, rng);
      Dev<float> dx(x);
      Dev<uint8_t> scratch(cuda::SplitXBytes(m, K));
      cuda::XPlanes xp;
      ASSERT_EQ(
          cuda::LaunchSplitX(dx.p(), m, K, scratch.p(), cuda::SplitXBytes(m, K), &xp, nullptr, 2),
          cudaSuccess);
      const cuda::DevMat w[3] = {ToDevMat(dws[0].view()), ToDevMat(dws[1].view()),
                                 ToDevMat(dws[2].view())};
      std::vector<Dev<float>> ys;
      for (const HostWeight& h : hw)
        ys.emplace_back(std::vector<float>(m * h.view.rows, std::nanf("")));
      float* const y[3] = {ys[0].p(), ys[1].p(), ys[2].p()};
      ASSERT_EQ(cuda::LaunchMatMulMulti(w, y, 3, dx.p(), m, nullptr, &xp), cudaSuccess);
      for (int i = 0; i < 3; ++i) {
        std::vector<float> want(m * hw[i].view.rows);
        cpu::ref::MatMul(hw[i].view, x.data(), m, want.data());
        EXPECT_LT(RelErr(ys[i].Get(), want), 1.5e-5) << bits << "-bit, K " << K << ", matrix " << i;
      }
    }
}

// Three experts' blobs back to back, gate/up [I, H] and down [H, I] at 256-byte aligned offsets.
struct Blobs {
  std::vector<uint8_t> bytes;
  cuda::ExpertMats mats;
  std::vector<HostWeight> parts;  // [expert·3 + which]
  uint64_t stride = 0;
};

Blobs MakeBlobs(int n, int64_t I, int64_t H, int bits, std::mt19937& rng) {
  Blobs b;
  uint64_t off = 0;
  auto place = [&](const HostWeight& h, cuda::DevMat* m, uint64_t at, bool write,
                   std::vector<uint8_t>& out) {
    uint64_t o = at;
    auto put = [&](const void* src, size_t len) {
      const uint64_t here = (o + 255) / 256 * 256;
      if (write) std::memcpy(out.data() + here, src, len);
      o = here + len;
      return here;
    };
    const uint64_t d = put(h.words.data(), h.words.size() * 4);
    const uint64_t sc = put(h.scales.data(), h.scales.size() * 2);
    const uint64_t bi = put(h.biases.data(), h.biases.size() * 2);
    if (m != nullptr) {
      *m = ToDevMat(h.view);
      m->data = reinterpret_cast<const void*>(d);
      m->scales = reinterpret_cast<const uint16_t*>(sc);
      m->biases = reinterpret_cast<const uint16_t*>(bi);
    }
    return o;
  };
  for (int e = 0; e < n; ++e) {
    b.parts.push_back(RandomWeight(WeightType::kAffine, I, H, bits, 64, rng));
    b.parts.push_back(RandomWeight(WeightType::kAffine, I, H, bits, 64, rng));
    b.parts.push_back(RandomWeight(WeightType::kAffine, H, I, bits, 64, rng));
  }
  std::vector<uint8_t> none;
  off = place(b.parts[0], &b.mats.gate, 0, false, none);
  off = place(b.parts[1], &b.mats.up, off, false, none);
  off = place(b.parts[2], &b.mats.down, off, false, none);
  b.stride = (off + 255) / 256 * 256;
  b.bytes.resize(b.stride * n);
  for (int e = 0; e < n; ++e) {
    uint64_t o = 0;
    for (int w = 0; w < 3; ++w) {
      std::vector<uint8_t> tmp(b.stride);
      o = place(b.parts[e * 3 + w], nullptr, o, true, tmp);
      for (uint64_t i = 0; i < b.stride; ++i) b.bytes[e * b.stride + i] |= tmp[i];
    }
  }
  return b;
}

TEST(CudaOps, ExpertKernels) {
  REQUIRE_CUDA();
  std::mt19937 rng(5);
  for (int bits : {4, 8}) {
    const int n = 3;
    const int64_t I = 192, H = 320;
    Blobs b = MakeBlobs(n, I, H, bits, rng);
    Dev<uint8_t> blob(b.bytes);
    std::vector<const uint8_t*> ptrs;
    for (int order : {2, 0, 1}) ptrs.push_back(blob.p() + order * b.stride);  // any order
    Dev<const uint8_t*> dptrs(ptrs);
    // Decode: one input for all slots; blob addresses given per slot, or as a table indexed by
    // the router's choice.
    const std::vector<float> x = Randn(H, rng);
    const int order[3] = {2, 0, 1};
    std::vector<const uint8_t*> table;
    for (int e = 0; e < n; ++e) table.push_back(blob.p() + e * b.stride);
    Dev<const uint8_t*> dtable(table);
    Dev<int> didx(std::vector<int>(order, order + 3));
    for (bool indexed : {false, true}) {
      SCOPED_TRACE(indexed);
      Dev<float> dx(x), dh(n * I), dy(n * H);
      const uint8_t* const* src = indexed ? dtable.p() : dptrs.p();
      const int* idx = indexed ? didx.p() : nullptr;
      ASSERT_EQ(cuda::LaunchExpertGateUp(b.mats, src, idx, n, dx.p(), 0, dh.p(), nullptr),
                cudaSuccess);
      const std::vector<float> h = dh.Get();
      ASSERT_EQ(cuda::LaunchExpertDown(b.mats, src, idx, n, dh.p(), dy.p(), nullptr), cudaSuccess);
      const std::vector<float> y = dy.Get();
      for (int j = 0; j < n; ++j) {
        std::vector<float> wg(I), wu(I), wy(H);
        cpu::ref::MatVec(b.parts[order[j] * 3 + 0].view, x.data(), wg.data());
        cpu::ref::MatVec(b.parts[order[j] * 3 + 1].view, x.data(), wu.data());
        cpu::ref::GegluInPlace(wg.data(), wu.data(), I);
        cpu::ref::MatVec(b.parts[order[j] * 3 + 2].view, &h[j * I], wy.data());
        EXPECT_LT(RelErr({h.begin() + j * I, h.begin() + (j + 1) * I}, wg), 2e-6);
        EXPECT_LT(RelErr({y.begin() + j * H, y.begin() + (j + 1) * H}, wy), 2e-6);
      }
    }
    // The dense MLP's fused gate/up/GeGLU on expert 0's matrices.
    {
      auto dg = cuda::DeviceWeight::Upload(b.parts[0].view);
      auto du = cuda::DeviceWeight::Upload(b.parts[1].view);
      ASSERT_TRUE(dg.ok() && du.ok());
      Dev<float> dx(x), dh(I);
      ASSERT_EQ(cuda::LaunchGateUpGeglu(ToDevMat(dg->view()), ToDevMat(du->view()), dx.p(), dh.p(),
                                        nullptr),
                cudaSuccess);
      std::vector<float> wg(I), wu(I);
      cpu::ref::MatVec(b.parts[0].view, x.data(), wg.data());
      cpu::ref::MatVec(b.parts[1].view, x.data(), wu.data());
      cpu::ref::GegluInPlace(wg.data(), wu.data(), I);
      EXPECT_LT(RelErr(dh.Get(), wg), 2e-6);
    }
    // Prefill: groups of 5, 1 and 37 rows gathered from 40 tokens; x read directly, or split
    // once (LaunchSplitX) for the planes kernel.
    const int64_t T = 40;
    const std::vector<float> xt = Randn(T * H, rng);
    std::vector<int> rows = {5, 1, 37}, row0 = {0, 5, 6}, gather(43);
    for (int r = 0; r < 43; ++r) gather[r] = (r * 7) % T;
    Dev<int> drows(rows), drow0(row0), dgather(gather);
    // (Split, the kernels may also size their grid by the 43 rows in all: a tile list.)
    for (int variant : {0, 1, 2}) {
      const bool split = variant > 0;
      const int64_t total = variant == 2 ? 43 : 0;
      SCOPED_TRACE(variant == 0 ? "direct" : variant == 1 ? "split" : "split, tile list");
      Dev<float> dxt(xt), dgate(43 * I), dout(43 * I), ddown(43 * H);
      Dev<uint8_t> scratch(cuda::SplitXBytes(T, H) + cuda::SplitXBytes(43, I));
      cuda::XPlanes xp, hp;
      if (split) {
        ASSERT_EQ(
            cuda::LaunchSplitX(dxt.p(), T, H, scratch.p(), cuda::SplitXBytes(T, H), &xp, nullptr),
            cudaSuccess);
      }
      // Gate and up in one launch where the kernel stacks them (their rows split a block).
      ASSERT_EQ(cuda::LaunchExpertGateUpMatMul(b.mats, dptrs.p(), n, drow0.p(), drows.p(), 37,
                                               dgather.p(), dxt.p(), dgate.p(), dout.p(), nullptr,
                                               split ? &xp : nullptr, total),
                cudaSuccess);
      if (split) {
        ASSERT_EQ(cuda::LaunchSplitX(dout.p(), 43, I, scratch.p() + cuda::SplitXBytes(T, H),
                                     cuda::SplitXBytes(43, I), &hp, nullptr),
                  cudaSuccess);
      }
      ASSERT_EQ(
          cuda::LaunchExpertMatMul(b.mats, 2, dptrs.p(), n, drow0.p(), drows.p(), 37, nullptr,
                                   dout.p(), ddown.p(), nullptr, split ? &hp : nullptr, total),
          cudaSuccess);
      const std::vector<float> gate = dgate.Get(), up = dout.Get(), down = ddown.Get();
      for (int grp = 0; grp < n; ++grp)
        for (int r = row0[grp]; r < row0[grp] + rows[grp]; ++r) {
          std::vector<float> wg(I), wu(I), wd(H);
          cpu::ref::MatVec(b.parts[order[grp] * 3 + 0].view, &xt[gather[r] * H], wg.data());
          cpu::ref::MatVec(b.parts[order[grp] * 3 + 1].view, &xt[gather[r] * H], wu.data());
          EXPECT_LT(RelErr({gate.begin() + r * I, gate.begin() + (r + 1) * I}, wg), 1.5e-5) << r;
          cpu::ref::MatVec(b.parts[order[grp] * 3 + 2].view, &up[r * I], wd.data());
          EXPECT_LT(RelErr({up.begin() + r * I, up.begin() + (r + 1) * I}, wu), 1.5e-5) << r;
          EXPECT_LT(RelErr({down.begin() + r * H, down.begin() + (r + 1) * H}, wd), 1.5e-5) << r;
        }
    }
  }
}

// Prefill expert groups large enough for the kernel's wider token tiles (a tile list of 64-row
// tiles on the warpgroup MMA), gate and up stacked, 4- and 8-bit.
TEST(CudaOps, ExpertGateUpLargeGroups) {
  REQUIRE_CUDA();
  std::mt19937 rng(41);
  for (const int bits : {4, 8}) {
    const int n = 3;
    const int64_t I = 192, H = 320, T = 70;
    Blobs b = MakeBlobs(n, I, H, bits, rng);
    Dev<uint8_t> blob(b.bytes);
    std::vector<const uint8_t*> ptrs;
    for (int e = 0; e < n; ++e) ptrs.push_back(blob.p() + e * b.stride);
    Dev<const uint8_t*> dptrs(ptrs);
    const std::vector<int> rows = {30, 70, 45}, row0 = {0, 30, 100};
    const int total = 145;
    std::vector<int> gather(total);
    for (int r = 0; r < total; ++r) gather[r] = (r * 11) % T;
    Dev<int> drows(rows), drow0(row0), dgather(gather);
    const std::vector<float> xt = Randn(T * H, rng);
    Dev<float> dxt(xt), dgate(total * I), dup(total * I);
    Dev<uint8_t> scratch(cuda::SplitXBytes(T, H));
    cuda::XPlanes xp;
    ASSERT_EQ(cuda::LaunchSplitX(dxt.p(), T, H, scratch.p(), cuda::SplitXBytes(T, H), &xp, nullptr),
              cudaSuccess);
    ASSERT_EQ(
        cuda::LaunchExpertGateUpMatMul(b.mats, dptrs.p(), n, drow0.p(), drows.p(), 70, dgather.p(),
                                       dxt.p(), dgate.p(), dup.p(), nullptr, &xp, total),
        cudaSuccess);
    const std::vector<float> gate = dgate.Get(), up = dup.Get();
    for (int grp = 0; grp < n; ++grp)
      for (int r = row0[grp]; r < row0[grp] + rows[grp]; ++r) {
        std::vector<float> wg(I), wu(I);
        cpu::ref::MatVec(b.parts[grp * 3 + 0].view, &xt[gather[r] * H], wg.data());
        cpu::ref::MatVec(b.parts[grp * 3 + 1].view, &xt[gather[r] * H], wu.data());
        EXPECT_LT(RelErr({gate.begin() + r * I, gate.begin() + (r + 1) * I}, wg), 1.5e-5)
            << bits << "-bit, row " << r;
        EXPECT_LT(RelErr({up.begin() + r * I, up.begin() + (r + 1) * I}, wu), 1.5e-5)
            << bits << "-bit, row " << r;
      }
  }
}

// The decode expert kernels at the model's shapes (8 of 128 experts, 704 × 2816, 4-bit g64),
// which take the register-tiled fast kernels: gate/up three chunks per lane, down one.
TEST(CudaOps, ExpertKernelsAtModelShapes) {
  REQUIRE_CUDA();
  std::mt19937 rng(9);
  const int n = 8;
  const int64_t I = 704, H = 2816;
  Blobs b = MakeBlobs(n, I, H, 4, rng);
  Dev<uint8_t> blob(b.bytes);
  std::vector<const uint8_t*> table;
  for (int e = 0; e < n; ++e) table.push_back(blob.p() + e * b.stride);
  Dev<const uint8_t*> dtable(table);
  const std::vector<int> order = {5, 0, 7, 2, 1, 6, 3, 4};
  Dev<int> didx(order);
  const std::vector<float> x = Randn(H, rng);
  Dev<float> dx(x), dh(n * I), dy(n * H);
  ASSERT_EQ(cuda::LaunchExpertGateUp(b.mats, dtable.p(), didx.p(), n, dx.p(), 0, dh.p(), nullptr),
            cudaSuccess);
  const std::vector<float> h = dh.Get();
  ASSERT_EQ(cuda::LaunchExpertDown(b.mats, dtable.p(), didx.p(), n, dh.p(), dy.p(), nullptr),
            cudaSuccess);
  const std::vector<float> y = dy.Get();
  for (int j = 0; j < n; ++j) {
    std::vector<float> wg(I), wu(I), wy(H);
    cpu::ref::MatVec(b.parts[order[j] * 3 + 0].view, x.data(), wg.data());
    cpu::ref::MatVec(b.parts[order[j] * 3 + 1].view, x.data(), wu.data());
    cpu::ref::GegluInPlace(wg.data(), wu.data(), I);
    cpu::ref::MatVec(b.parts[order[j] * 3 + 2].view, &h[j * I], wy.data());
    EXPECT_LT(RelErr({h.begin() + j * I, h.begin() + (j + 1) * I}, wg), 2e-6) << j;
    EXPECT_LT(RelErr({y.begin() + j * H, y.begin() + (j + 1) * H}, wy), 2e-6) << j;
  }
}

// The fused decode row kernels give exactly what their two separate launches give.
TEST(CudaOps, FusedRowKernelsMatchTheirParts) {
  REQUIRE_CUDA();
  std::mt19937 rng(13);
  const float eps = 1e-6f;
  for (int n : {64, 333, 2816}) {
    SCOPED_TRACE(n);
    const int64_t m = 3;
    const int k = 4;
    const std::vector<float> x = Randn(m * n, rng), o = Randn(m * n, rng), wa = Randn(n, rng),
                             w1 = Randn(n, rng), w2 = Randn(n, rng), rs = Randn(n, rng);
    Dev<float> dwa(wa), dw1(w1), dw2(w2), drs(rs), dox(o);
    // Post-attention residual, then the feed-forward inputs.
    Dev<float> x1(x), a1(m * n), a21(m * n), r1(m * n), x2(x), a2(m * n), a22(m * n), r2(m * n);
    ASSERT_EQ(cuda::LaunchAddRmsNorm(x1.p(), dox.p(), m, n, dwa.p(), eps, 1.0f, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::LaunchFfnInputs(x1.p(), m, n, dw1.p(), dw2.p(), drs.p(), 0.0625f, eps, a1.p(),
                                    a21.p(), r1.p(), nullptr),
              cudaSuccess);
    ASSERT_EQ(
        cuda::LaunchResidualFfnInputs(x2.p(), dox.p(), m, n, dwa.p(), dw1.p(), dw2.p(), drs.p(),
                                      0.0625f, eps, a2.p(), a22.p(), r2.p(), nullptr),
        cudaSuccess);
    EXPECT_EQ(x1.Get(), x2.Get());
    EXPECT_EQ(a1.Get(), a2.Get());
    EXPECT_EQ(a21.Get(), a22.Get());
    EXPECT_EQ(r1.Get(), r2.Get());
    // The end of a MoE layer, then the next layer's input norm.
    const std::vector<int> idx = {3, 0, 2, 1, 7, 5, 6, 4, 9, 8, 11, 10};
    const std::vector<float> wts = Randn(m * k, rng), y = Randn(m * k * n, rng),
                             m1 = Randn(m * n, rng);
    Dev<int> di(idx);
    Dev<float> dwts(wts), dy(y), m1a(m1), m1b(m1), xa(x), xb(x), na(m * n), nb(m * n);
    ASSERT_EQ(cuda::LaunchMoeFinish(di.p(), dwts.p(), nullptr, dy.p(), m, k, n, drs.p(), dw2.p(),
                                    m1a.p(), dw1.p(), xa.p(), eps, 0.5f, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::LaunchRmsNormRows(xa.p(), na.p(), m, n, dwa.p(), eps, nullptr), cudaSuccess);
    ASSERT_EQ(
        cuda::LaunchMoeFinishNorm(di.p(), dwts.p(), nullptr, dy.p(), m, k, n, drs.p(), dw2.p(),
                                  m1b.p(), dw1.p(), xb.p(), eps, 0.5f, dwa.p(), nb.p(), nullptr),
        cudaSuccess);
    EXPECT_EQ(m1a.Get(), m1b.Get());
    EXPECT_EQ(xa.Get(), xb.Get());
    EXPECT_EQ(na.Get(), nb.Get());
  }
}

TEST(CudaOps, NormsAndElementwise) {
  REQUIRE_CUDA();
  std::mt19937 rng(3);
  const float eps = 1e-6f;
  for (int64_t rows : {1, 3, 17})
    for (int n : {1, 33, 128, 257, 2816}) {
      SCOPED_TRACE(fmt::format("rows {} n {}", rows, n));
      const std::vector<float> x = Randn(rows * n, rng), w = Randn(n, rng),
                               y = Randn(rows * n, rng);
      const WeightView wv = F32Weight(w.data(), 1, n);
      for (bool weighted : {true, false}) {
        std::vector<float> want(x.size());
        cpu::ref::RmsNormRows(x.data(), want.data(), rows, n, weighted ? &wv : nullptr, eps);
        Dev<float> dx(x), dw(w), dout(x.size());
        ASSERT_EQ(cuda::LaunchRmsNormRows(dx.p(), dout.p(), rows, n, weighted ? dw.p() : nullptr,
                                          eps, nullptr),
                  cudaSuccess);
        EXPECT_LT(RelErr(dout.Get(), want), 1e-6);
      }
      // x = (x + RmsNorm(y)·w)·s.
      std::vector<float> want = x, ny(y.size());
      cpu::ref::RmsNormRows(y.data(), ny.data(), rows, n, &wv, eps);
      cpu::ref::Add(want.data(), ny.data(), rows * n);
      cpu::ref::Scale(want.data(), 0.75f, rows * n);
      Dev<float> dx(x), dy(y), dw(w);
      ASSERT_EQ(cuda::LaunchAddRmsNorm(dx.p(), dy.p(), rows, n, dw.p(), eps, 0.75f, nullptr),
                cudaSuccess);
      EXPECT_LT(RelErr(dx.Get(), want), 1e-6);
      // Router input: RmsNorm_0(x) ⊙ scale · root.
      std::vector<float> r(x.size());
      cpu::ref::RmsNormRows(x.data(), r.data(), rows, n, nullptr, eps);
      for (int64_t t = 0; t < rows; ++t) {
        cpu::ref::Mul(&r[t * n], w.data(), n);
        cpu::ref::Scale(&r[t * n], 0.125f, n);
      }
      Dev<float> dx2(x), dr(x.size());
      ASSERT_EQ(cuda::LaunchRouterInput(dx2.p(), dr.p(), rows, n, dw.p(), 0.125f, eps, nullptr),
                cudaSuccess);
      EXPECT_LT(RelErr(dr.Get(), r), 1e-6);
    }
  for (int64_t n : {1, 31, 1000, 4099}) {
    SCOPED_TRACE(n);
    const std::vector<float> a = Randn(n, rng, 3.0f), b = Randn(n, rng);
    std::vector<float> want = a;
    cpu::ref::GegluInPlace(want.data(), b.data(), n);
    Dev<float> da(a), db(b);
    ASSERT_EQ(cuda::LaunchGeglu(da.p(), db.p(), n, nullptr), cudaSuccess);
    EXPECT_LT(RelErr(da.Get(), want), 1e-6);
    want = a;
    cpu::ref::Softcap(want.data(), n, 30.0f);
    std::vector<float> big = a;
    for (float& v : big) v *= 20;
    std::vector<float> want_big = big;
    cpu::ref::Softcap(want_big.data(), n, 30.0f);
    Dev<float> dbig(big);
    ASSERT_EQ(cuda::LaunchSoftcap(dbig.p(), n, 30.0f, nullptr), cudaSuccess);
    EXPECT_LT(RelErr(dbig.Get(), want_big), 1e-6);
    want = a;
    cpu::ref::Axpy(want.data(), 0.3f, b.data(), n);
    Dev<float> dc(a);
    ASSERT_EQ(cuda::LaunchAxpy(dc.p(), 0.3f, db.p(), n, nullptr), cudaSuccess);
    EXPECT_LT(RelErr(dc.Get(), want), 1e-6);
    want = a;
    cpu::ref::Add(want.data(), b.data(), n);
    cpu::ref::Scale(want.data(), -1.5f, n);
    Dev<float> dd(a);
    ASSERT_EQ(cuda::LaunchAdd(dd.p(), db.p(), n, nullptr), cudaSuccess);
    ASSERT_EQ(cuda::LaunchScale(dd.p(), -1.5f, n, nullptr), cudaSuccess);
    EXPECT_EQ(dd.Get(), want);
  }
}

TEST(CudaOps, EmbeddingRows) {
  REQUIRE_CUDA();
  std::mt19937 rng(9);
  for (const Shape& s : LinearShapes()) {
    if (s.rows < 7) continue;
    HostWeight h = RandomWeight(s.type, s.rows, s.cols, s.bits, s.group, rng);
    auto dw = cuda::DeviceWeight::Upload(h.view);
    ASSERT_TRUE(dw.ok());
    const std::vector<int> ids = {0, static_cast<int>(s.rows) - 1, 3, 3, 5};
    std::vector<float> want(ids.size() * s.cols);
    for (size_t t = 0; t < ids.size(); ++t) {
      cpu::ref::DequantRow(h.view, ids[t], &want[t * s.cols]);
      cpu::ref::Scale(&want[t * s.cols], 53.0f, s.cols);
    }
    Dev<int> did(ids);
    Dev<float> dout(want.size());
    ASSERT_EQ(cuda::LaunchEmbed(ToDevMat(dw->view()), did.p(), static_cast<int64_t>(ids.size()),
                                53.0f, dout.p(), nullptr),
              cudaSuccess);
    EXPECT_LT(RelErr(dout.Get(), want), 1e-6);
  }
}

TEST(CudaOps, RopeAndKvStore) {
  REQUIRE_CUDA();
  std::mt19937 rng(4);
  for (int hd : {32, 256, 512})
    for (int64_t pos0 : {0, 5, 4093}) {
      SCOPED_TRACE(fmt::format("hd {} pos0 {}", hd, pos0));
      AttentionGeometry g;
      g.head_dim = hd;
      g.rope_theta = hd == 512 ? 1e6 : 1e4;
      if (hd == 512) {
        g.rope_type = "proportional";
        g.partial_rotary_factor = 0.25;
      }
      const std::vector<float> inv = RopeInvFreq(g);
      const int half = hd / 2, heads = 3;
      const int64_t m = 6;
      std::vector<float> cw(m * half), sw(m * half);
      for (int64_t t = 0; t < m; ++t)
        cpu::ref::RopeTable(pos0 + t, inv.data(), half, &cw[t * half], &sw[t * half]);
      Dev<int64_t> dpos(std::vector<int64_t>{pos0});
      Dev<float> dinv(inv), dc(m * half), ds(m * half);
      ASSERT_EQ(cuda::LaunchRopeTable(dpos.p(), m, dinv.p(), half, dc.p(), ds.p(), nullptr),
                cudaSuccess);
      EXPECT_LT(RelErr(dc.Get(), cw), 1e-6);
      EXPECT_LT(RelErr(ds.Get(), sw), 1e-6);
      const std::vector<float> x = Randn(m * heads * hd, rng);
      std::vector<float> want = x;
      for (int64_t t = 0; t < m; ++t)
        cpu::ref::RopeNeox(&want[t * heads * hd], heads, hd, &cw[t * half], &sw[t * half]);
      Dev<float> dx(x), dcw(cw), dsw(sw);
      ASSERT_EQ(cuda::LaunchRopeNeox(dx.p(), m, heads, hd, dcw.p(), dsw.p(), nullptr), cudaSuccess);
      EXPECT_LT(RelErr(dx.Get(), want), 1e-6);
      // KV store into a ring of 7 slots (wraps).
      const int64_t cap = 7;
      const int nkv = 2;
      const std::vector<float> k = Randn(m * nkv * hd, rng), v = Randn(m * nkv * hd, rng);
      std::vector<float> kc(nkv * cap * hd, 0.0f), vc = kc;
      for (int64_t t = 0; t < m; ++t)
        cpu::KvStore(kc.data(), vc.data(), nkv, hd, cap, pos0 + t, &k[t * nkv * hd],
                     &v[t * nkv * hd]);
      Dev<float> dk(k), dv(v), dkc(std::vector<float>(kc.size(), 0.0f)),
          dvc(std::vector<float>(kc.size(), 0.0f));
      ASSERT_EQ(
          cuda::LaunchKvStore(dk.p(), dv.p(), dkc.p(), dvc.p(), m, nkv, hd, cap, dpos.p(), nullptr),
          cudaSuccess);
      EXPECT_EQ(dkc.Get(), kc);
      EXPECT_EQ(dvc.Get(), vc);
    }
}

TEST(CudaOps, AttentionDecodeAndPrefill) {
  REQUIRE_CUDA();
  std::mt19937 rng(8);
  struct Case {
    int nh, nkv, hd;
    int64_t window, m, pos0, cap;
  };
  const std::vector<Case> cases = {
      {4, 2, 32, 16, 1, 0, 16},      {4, 2, 32, 16, 1, 40, 16},
      {4, 1, 64, 0, 1, 300, 512},    {16, 8, 256, 1024, 1, 1500, 1151},
      {16, 2, 512, 0, 1, 777, 2048}, {4, 2, 32, 16, 7, 0, 22},
      {4, 2, 32, 16, 7, 30, 22},     {4, 1, 64, 0, 33, 20, 512},
      {8, 2, 128, 64, 64, 100, 127},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("nh {} nkv {} hd {} window {} m {} pos0 {} cap {}", c.nh, c.nkv, c.hd,
                             c.window, c.m, c.pos0, c.cap));
    // Fill the cache with positions [0, pos0 + m), as the model would have.
    std::vector<float> kc(int64_t{c.nkv} * c.cap * c.hd, 0.0f), vc = kc;
    for (int64_t p = 0; p < c.pos0 + c.m; ++p) {
      const std::vector<float> k = Randn(c.nkv * c.hd, rng), v = Randn(c.nkv * c.hd, rng);
      cpu::KvStore(kc.data(), vc.data(), c.nkv, c.hd, c.cap, p, k.data(), v.data());
    }
    const std::vector<float> q = Randn(c.m * c.nh * c.hd, rng, 0.3f);
    const cpu::KvCacheView view{kc.data(), vc.data(), c.nkv, c.hd, c.cap};
    std::vector<float> want(q.size());
    cpu::ref::AttendBlock(q.data(), c.m, c.pos0, c.nh, view, c.window, 1.0f, want.data());
    for (int splits : {1, 3, 8, 64}) {
      if (c.m > 1 && splits > 1) continue;
      Dev<float> dq(q), dk(kc), dv(vc), dout(q.size()),
          dpart(cuda::AttentionPartialFloats(c.m, c.nh, c.hd, splits));
      Dev<int64_t> dpos(std::vector<int64_t>{c.pos0});
      ASSERT_EQ(
          cuda::LaunchAttention(dq.p(), c.m, c.nh, dk.p(), dv.p(), c.nkv, c.hd, c.cap, dpos.p(),
                                c.window, 1.0f, splits, dpart.p(), dout.p(), nullptr),
          cudaSuccess);
      // Over 1,000+ keys the reference's sequential fp32 sums and ours differ by ~2.5e-6.
      EXPECT_LT(RelErr(dout.Get(), want), 1e-5) << "splits " << splits;
    }
  }
}

// The tiled prefill kernel (32 queries a block, key tiles of 32) against the reference, directly
// and through LaunchAttention: query counts that are not multiples of the tile, chunks after
// earlier chunks, windows the chunk crosses, rings the chunk wraps, GQA 1/2/8, head dims padded
// to 128/256/512. Slots no position reached hold NaN and the output starts as NaN, so a read of
// an unwritten key or an unwritten output fails the comparison.
TEST(CudaOps, PrefillAttentionTiles) {
  REQUIRE_CUDA();
  std::mt19937 rng(9);
  struct Case {
    int nh, nkv, hd;
    int64_t window, m, pos0, cap;
  };
  const std::vector<Case> cases = {
      {2, 2, 32, 0, 1, 0, 64},         {4, 2, 32, 16, 7, 30, 22},
      {4, 4, 64, 16, 45, 0, 60},       {8, 1, 96, 0, 70, 13, 128},
      {4, 2, 128, 64, 100, 200, 163},  {2, 2, 36, 16, 50, 5, 65},
      {4, 2, 256, 1024, 600, 0, 1623}, {2, 1, 256, 1024, 600, 1500, 1623},
      {2, 2, 256, 16, 33, 3000, 48},   {8, 1, 512, 0, 257, 300, 1024},
      {16, 2, 512, 0, 33, 0, 64},      {2, 2, 512, 1024, 97, 1100, 1120},
      {2, 1, 30, 0, 9, 3, 32},  // hd not a multiple of 4: LaunchAttention's split kernel
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("nh {} nkv {} hd {} window {} m {} pos0 {} cap {}", c.nh, c.nkv, c.hd,
                             c.window, c.m, c.pos0, c.cap));
    std::vector<float> kc(int64_t{c.nkv} * c.cap * c.hd, std::nanf("")), vc = kc;
    for (int64_t p = 0; p < c.pos0 + c.m; ++p) {
      const std::vector<float> k = Randn(c.nkv * c.hd, rng), v = Randn(c.nkv * c.hd, rng);
      cpu::KvStore(kc.data(), vc.data(), c.nkv, c.hd, c.cap, p, k.data(), v.data());
    }
    const std::vector<float> q = Randn(c.m * c.nh * c.hd, rng, 0.3f);
    const cpu::KvCacheView view{kc.data(), vc.data(), c.nkv, c.hd, c.cap};
    std::vector<float> want(q.size());
    cpu::ref::AttendBlock(q.data(), c.m, c.pos0, c.nh, view, c.window, 1.0f, want.data());
    const std::vector<float> poison(q.size(), std::nanf(""));
    Dev<float> dq(q), dk(kc), dv(vc), dout(poison), dout2(poison),
        dpart(cuda::AttentionPartialFloats(c.m, c.nh, c.hd, 1));
    Dev<int64_t> dpos(std::vector<int64_t>{c.pos0});
    const cudaError_t e =
        cuda::LaunchPrefillAttention(dq.p(), c.m, c.nh, dk.p(), dv.p(), c.nkv, c.hd, c.cap,
                                     dpos.p(), c.window, 1.0f, dout.p(), nullptr);
    if (c.hd % 4 != 0) {
      EXPECT_EQ(e, cudaErrorNotSupported);
    } else {
      ASSERT_EQ(e, cudaSuccess);
      EXPECT_LT(RelErr(dout.Get(), want), 1e-5);
    }
    ASSERT_EQ(cuda::LaunchAttention(dq.p(), c.m, c.nh, dk.p(), dv.p(), c.nkv, c.hd, c.cap, dpos.p(),
                                    c.window, 1.0f, 1, dpart.p(), dout2.p(), nullptr),
              cudaSuccess);
    EXPECT_LT(RelErr(dout2.Get(), want), 1e-5) << "LaunchAttention";
  }
}

TEST(CudaOps, RouterTopKAndMoeSum) {
  REQUIRE_CUDA();
  std::mt19937 rng(6);
  for (int E : {8, 37, 128, 300})
    for (int k : {1, 2, 8}) {
      if (k > E) continue;
      SCOPED_TRACE(fmt::format("E {} k {}", E, k));
      const int64_t m = 5;
      std::vector<float> logits = Randn(m * E, rng, 2.0f);
      // Ties: token 1 has runs of equal logits, token 2 all equal.
      for (int e = 0; e < E; ++e) logits[E + e] = static_cast<float>(e % 3);
      for (int e = 0; e < E; ++e) logits[2 * E + e] = 0.5f;
      const std::vector<float> pes = Randn(E, rng);
      std::vector<float> probs = logits, want_w(m * k);
      std::vector<int> want_idx(m * k);
      for (int64_t t = 0; t < m; ++t)
        RouteTopK(&probs[t * E], E, k, pes.data(), &want_idx[t * k], &want_w[t * k]);
      Dev<float> dl(logits), dp(m * E), dpes(pes), dw(m * k);
      Dev<int> di(m * k);
      ASSERT_EQ(cuda::LaunchRouteTopK(dl.p(), dp.p(), m, E, k, dpes.p(), di.p(), dw.p(), nullptr),
                cudaSuccess);
      EXPECT_EQ(di.Get(), want_idx);
      EXPECT_LT(RelErr(dw.Get(), want_w), 1e-6);
      EXPECT_LT(RelErr(dp.Get(), probs), 1e-6);
      // One token at a time (decode's kernel for up to 256 experts): the same bits as the chunk,
      // also for a row with a NaN logit (NaN ranks first).
      {
        std::vector<float> rows_in = logits;
        rows_in.resize((m + 1) * E);
        std::copy_n(logits.begin(), E, rows_in.begin() + m * E);
        rows_in[m * E + E / 2] = std::nanf("");
        Dev<float> dl1(rows_in), dp1((m + 1) * E), dw1((m + 1) * k), dwc((m + 1) * k),
            dpc((m + 1) * E);
        Dev<int> di1((m + 1) * k), dic((m + 1) * k);
        ASSERT_EQ(cuda::LaunchRouteTopK(dl1.p(), dpc.p(), m + 1, E, k, dpes.p(), dic.p(), dwc.p(),
                                        nullptr),
                  cudaSuccess);
        for (int64_t t = 0; t <= m; ++t)
          ASSERT_EQ(cuda::LaunchRouteTopK(dl1.p() + t * E, dp1.p() + t * E, 1, E, k, dpes.p(),
                                          di1.p() + t * k, dw1.p() + t * k, nullptr),
                    cudaSuccess);
        EXPECT_EQ(di1.Get(), dic.Get());
        const std::vector<float> w1 = dw1.Get(), wc = dwc.Get(), p1 = dp1.Get(), pc = dpc.Get();
        EXPECT_EQ(std::memcmp(w1.data(), wc.data(), w1.size() * 4), 0);
        EXPECT_EQ(std::memcmp(p1.data(), pc.data(), p1.size() * 4), 0);
      }
      // The sum in ascending expert order, with and without a row map.
      const int n = 77;
      const std::vector<float> y = Randn(m * k * n, rng);
      std::vector<float> want(m * n, 0.0f);
      for (int64_t t = 0; t < m; ++t) {
        std::vector<int> order(k);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(),
                  [&](int a, int b) { return want_idx[t * k + a] < want_idx[t * k + b]; });
        for (int j : order) cpu::ref::Axpy(&want[t * n], want_w[t * k + j], &y[(t * k + j) * n], n);
      }
      std::vector<int> rows(m * k);
      std::iota(rows.begin(), rows.end(), 0);
      std::reverse(rows.begin(), rows.end());
      std::vector<float> yrev(y.size());
      for (int64_t r = 0; r < m * k; ++r) std::copy_n(&y[r * n], n, &yrev[rows[r] * n]);
      Dev<float> dy(y), dyrev(yrev), dout(m * n), dout2(m * n);
      Dev<int> drows(rows);
      ASSERT_EQ(cuda::LaunchMoeCombine(di.p(), dw.p(), nullptr, dy.p(), m, k, n, dout.p(), nullptr),
                cudaSuccess);
      ASSERT_EQ(
          cuda::LaunchMoeCombine(di.p(), dw.p(), drows.p(), dyrev.p(), m, k, n, dout2.p(), nullptr),
          cudaSuccess);
      EXPECT_LT(RelErr(dout.Get(), want), 1e-6);
      EXPECT_EQ(dout.Get(), dout2.Get());
    }
}

// The GPU's expert plan against the host's: pairs grouped by expert in pair order, every
// expert's first row and count (unchosen experts included), across chunk sizes that do and do
// not fill the kernel's 32 segments evenly.
TEST(CudaOps, ExpertPlanMatchesTheHostPlan) {
  REQUIRE_CUDA();
  std::mt19937 rng(17);
  for (const int E : {8, 37, 128, 256})
    for (const int k : {1, 2, 8})
      for (const int64_t m : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{509}}) {
        if (k > E) continue;
        SCOPED_TRACE(fmt::format("E {} k {} m {}", E, k, m));
        std::vector<int> idx(m * k);
        for (int64_t t = 0; t < m; ++t) {  // k distinct experts per token, skewed to low ids
          std::vector<int> pick;
          while (static_cast<int>(pick.size()) < k) {
            const int e = static_cast<int>(rng() % (rng() % 2 ? E : std::max(1, E / 4)));
            if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
          }
          std::copy(pick.begin(), pick.end(), idx.begin() + t * k);
        }
        std::vector<int> want_gather(m * k), want_row_of(m * k), want_row0(E), want_rows(E, 0);
        for (int e : idx) ++want_rows[e];
        for (int e = 0, run = 0; e < E; ++e) {
          want_row0[e] = run;
          run += want_rows[e];
        }
        std::vector<int> next = want_row0;
        for (int64_t i = 0; i < m * k; ++i) {
          const int r = next[idx[i]]++;
          want_gather[r] = static_cast<int>(i / k);
          want_row_of[i] = r;
        }
        Dev<int> didx(idx), dg(std::vector<int>(m * k, -1)), dr(std::vector<int>(m * k, -1)),
            d0(std::vector<int>(E, -1)), dn(std::vector<int>(E, -1));
        ASSERT_EQ(
            cuda::LaunchExpertPlan(didx.p(), m, k, E, dg.p(), dr.p(), d0.p(), dn.p(), nullptr),
            cudaSuccess);
        EXPECT_EQ(dg.Get(), want_gather);
        EXPECT_EQ(dr.Get(), want_row_of);
        EXPECT_EQ(d0.Get(), want_row0);
        EXPECT_EQ(dn.Get(), want_rows);
      }
  Dev<int> d(std::vector<int>(8, 0));
  EXPECT_EQ(cuda::LaunchExpertPlan(d.p(), 1, 1, cuda::kMaxPlanExperts + 1, d.p(), d.p(), d.p(),
                                   d.p(), nullptr),
            cudaErrorInvalidValue);
}

TEST(CudaOps, FusedSteps) {
  REQUIRE_CUDA();
  std::mt19937 rng(12);
  const float eps = 1e-6f;
  // q/k/v norms, RoPE and the KV store.
  for (int hd : {16, 256, 512}) {
    SCOPED_TRACE(hd);
    const int nh = 4, nkv = 2, half = hd / 2;
    const int64_t m = 3, pos0 = 7, cap = 5;
    std::vector<float> q = Randn(m * nh * hd, rng), k = Randn(m * nkv * hd, rng),
                       v = Randn(m * nkv * hd, rng), qn = Randn(hd, rng), kn = Randn(hd, rng);
    std::vector<float> inv(half), cw(m * half), sw(m * half);
    for (int i = 0; i < half; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
    for (int64_t t = 0; t < m; ++t)
      cpu::ref::RopeTable(pos0 + t, inv.data(), half, &cw[t * half], &sw[t * half]);
    std::vector<float> wq = q, wk = k, wv = v, kc(nkv * cap * hd, 0.0f), vc = kc;
    const WeightView qv = F32Weight(qn.data(), 1, hd), kv = F32Weight(kn.data(), 1, hd);
    cpu::ref::RmsNormRows(wq.data(), wq.data(), m * nh, hd, &qv, eps);
    cpu::ref::RmsNormRows(wk.data(), wk.data(), m * nkv, hd, &kv, eps);
    cpu::ref::RmsNormRows(wv.data(), wv.data(), m * nkv, hd, nullptr, eps);
    for (int64_t t = 0; t < m; ++t) {
      cpu::ref::RopeNeox(&wq[t * nh * hd], nh, hd, &cw[t * half], &sw[t * half]);
      cpu::ref::RopeNeox(&wk[t * nkv * hd], nkv, hd, &cw[t * half], &sw[t * half]);
      cpu::KvStore(kc.data(), vc.data(), nkv, hd, cap, pos0 + t, &wk[t * nkv * hd],
                   &wv[t * nkv * hd]);
    }
    Dev<float> dq(q), dk(k), dv(v), dqn(qn), dkn(kn), dc(cw), ds(sw),
        dkc(std::vector<float>(kc.size(), 0.0f)), dvc(std::vector<float>(kc.size(), 0.0f));
    Dev<int64_t> dpos(std::vector<int64_t>{pos0});
    ASSERT_EQ(cuda::LaunchQkvPost(dq.p(), dk.p(), dv.p(), m, nh, nkv, hd, dqn.p(), dkn.p(), dc.p(),
                                  ds.p(), dkc.p(), dvc.p(), cap, dpos.p(), eps, nullptr),
              cudaSuccess);
    EXPECT_LT(RelErr(dq.Get(), wq), 1e-6);
    EXPECT_LT(RelErr(dk.Get(), wk), 1e-6);
    EXPECT_LT(RelErr(dv.Get(), wv), 1e-6);
    EXPECT_LT(RelErr(dkc.Get(), kc), 1e-6);
    EXPECT_LT(RelErr(dvc.Get(), vc), 1e-6);
  }
  // Feed-forward inputs and the end of a MoE layer.
  for (int n : {64, 333, 2816}) {
    SCOPED_TRACE(n);
    const int64_t m = 4;
    const int k = 3;
    const std::vector<float> x = Randn(m * n, rng), w1 = Randn(n, rng), w2 = Randn(n, rng),
                             rs = Randn(n, rng);
    const WeightView v1 = F32Weight(w1.data(), 1, n), v2 = F32Weight(w2.data(), 1, n);
    std::vector<float> a(x.size()), a2(x.size()), r(x.size());
    cpu::ref::RmsNormRows(x.data(), a.data(), m, n, &v1, eps);
    cpu::ref::RmsNormRows(x.data(), a2.data(), m, n, &v2, eps);
    cpu::ref::RmsNormRows(x.data(), r.data(), m, n, nullptr, eps);
    for (int64_t t = 0; t < m; ++t) {
      cpu::ref::Mul(&r[t * n], rs.data(), n);
      cpu::ref::Scale(&r[t * n], 0.0625f, n);
    }
    Dev<float> dx(x), dw1(w1), dw2(w2), drs(rs), da(x.size()), da2(x.size()), dr(x.size());
    ASSERT_EQ(cuda::LaunchFfnInputs(dx.p(), m, n, dw1.p(), dw2.p(), drs.p(), 0.0625f, eps, da.p(),
                                    da2.p(), dr.p(), nullptr),
              cudaSuccess);
    EXPECT_LT(RelErr(da.Get(), a), 1e-6);
    EXPECT_LT(RelErr(da2.Get(), a2), 1e-6);
    EXPECT_LT(RelErr(dr.Get(), r), 1e-6);
    // MoE finish.
    std::vector<int> idx = {5, 1, 3, 0, 2, 7, 6, 4, 1, 2, 9, 8};
    const std::vector<float> wts = Randn(m * k, rng), y = Randn(m * k * n, rng),
                             m1 = Randn(m * n, rng);
    std::vector<float> want_x = x, want_m1 = m1;
    for (int64_t t = 0; t < m; ++t) {
      std::vector<float> moe(n, 0.0f);
      std::vector<int> order = {0, 1, 2};
      std::sort(order.begin(), order.end(),
                [&](int p, int q) { return idx[t * k + p] < idx[t * k + q]; });
      for (int j : order) cpu::ref::Axpy(moe.data(), wts[t * k + j], &y[(t * k + j) * n], n);
      cpu::ref::RmsNorm(moe.data(), moe.data(), n, &v2, eps);
      cpu::ref::Add(&want_m1[t * n], moe.data(), n);
      std::vector<float> nm(n);
      cpu::ref::RmsNorm(&want_m1[t * n], nm.data(), n, &v1, eps);
      cpu::ref::Add(&want_x[t * n], nm.data(), n);
      cpu::ref::Scale(&want_x[t * n], 0.5f, n);
    }
    Dev<int> di(idx);
    Dev<float> dwts(wts), dy(y), dm1(m1), dx2(x);
    ASSERT_EQ(cuda::LaunchMoeFinish(di.p(), dwts.p(), nullptr, dy.p(), m, k, n, nullptr, dw2.p(),
                                    dm1.p(), dw1.p(), dx2.p(), eps, 0.5f, nullptr),
              cudaSuccess);
    EXPECT_LT(RelErr(dm1.Get(), want_m1), 1e-6);
    EXPECT_LT(RelErr(dx2.Get(), want_x), 1e-6);
    // With the dense output's own norm (post_ff1 = rs) applied first.
    std::vector<float> m1n = m1, want_x2 = x;
    const WeightView vr = F32Weight(rs.data(), 1, n);
    for (int64_t t = 0; t < m; ++t) cpu::ref::RmsNorm(&m1n[t * n], &m1n[t * n], n, &vr, eps);
    for (int64_t i = 0; i < m * n; ++i) m1n[i] += want_m1[i] - m1[i];  // + RmsNorm(moe)·post2
    for (int64_t t = 0; t < m; ++t) {
      std::vector<float> nm(n);
      cpu::ref::RmsNorm(&m1n[t * n], nm.data(), n, &v1, eps);
      cpu::ref::Add(&want_x2[t * n], nm.data(), n);
      cpu::ref::Scale(&want_x2[t * n], 0.5f, n);
    }
    Dev<float> dm1b(m1), dx3(x);
    ASSERT_EQ(cuda::LaunchMoeFinish(di.p(), dwts.p(), nullptr, dy.p(), m, k, n, drs.p(), dw2.p(),
                                    dm1b.p(), dw1.p(), dx3.p(), eps, 0.5f, nullptr),
              cudaSuccess);
    EXPECT_LT(RelErr(dm1b.Get(), m1n), 1e-5);
    EXPECT_LT(RelErr(dx3.Get(), want_x2), 1e-5);
  }
}

}  // namespace
}  // namespace rw
