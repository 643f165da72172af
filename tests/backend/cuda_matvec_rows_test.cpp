// The decode products over m input rows at once (a speculative verify's: LaunchMatVecRows,
// LaunchMatVecMultiRows, LaunchGateUpGegluRows) against one-row launches of the same products:
// bit for bit, for every batch size up to 17 (chunks of rows that do not divide evenly), each
// block shape of the integer kernel, rows past a tile, the LM head's strided launch, and inputs
// too wide for eight rows in shared memory (4-bit: four a block); with REDWING_CUDA_MATVEC_ROWS
// at 8, 3 and 1. Skips (saying why) where no CUDA device is usable, e.g. in CI.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda_device_util.h"
#include "backend/cuda_test_util.h"
#include "runtime/cuda_model.h"

namespace rw {
namespace {

using test::Dev;
using test::HostWeight;
using test::Randn;
using test::RandomWeight;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The integer kernel (and so the multi-row path) runs on sm_80+.
bool IntegerKernelRuns() {
  int dev = 0, major = 0;
  return cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         major >= 8;
}

struct Uploaded {
  HostWeight host;
  cuda::DeviceWeight dev;
  cuda::DevMat mat() const { return ToDevMat(dev.view()); }
};

Uploaded Make(int64_t rows, int64_t cols, int bits, std::mt19937& rng) {
  Uploaded u;
  u.host = RandomWeight(WeightType::kAffine, rows, cols, bits, 64, rng);
  auto d = cuda::DeviceWeight::Upload(u.host.view);
  EXPECT_TRUE(d.ok());
  if (d.ok()) u.dev = std::move(*d);
  return u;
}

// x[m][cols] with rows of different magnitudes (each row's integers are scaled on their own).
std::vector<float> Inputs(int m, int64_t cols, std::mt19937& rng) {
  std::vector<float> x;
  for (int b = 0; b < m; ++b) {
    std::vector<float> r = Randn(static_cast<size_t>(cols), rng, 0.1f * float(1 + b % 5));
    x.insert(x.end(), r.begin(), r.end());
  }
  return x;
}

const int kBatches[] = {2, 3, 5, 8, 9, 16, 17};

TEST(CudaMatVecRows, PlainRowsEqualOneRowLaunches) {
  REQUIRE_CUDA();
  std::mt19937 rng(41);
  struct Shape {
    int64_t rows, cols;
  };
  // cols 704: the short-row block (11 groups); 2816 and 576: one 16-row tile of 8 slices;
  // 20000 rows: more blocks than stay resident (the LM head's strided, double-buffered launch);
  // 8192: eight rows of x do not fit shared memory (the launch takes fewer a block).
  const Shape shapes[] = {{37, 704}, {130, 2816}, {20000, 576}, {48, 8192}};
  for (const int rows_max : {8, 3, 1}) {
    cuda::Tuning t = cuda::CurrentTuning();
    t.matvec_rows = rows_max;
    cuda::ScopedTuning scoped(t);
    for (const int bits : {4, 8})
      for (const Shape& sh : shapes) {
        const Uploaded w = Make(sh.rows, sh.cols, bits, rng);
        for (const int m : kBatches) {
          SCOPED_TRACE(
              fmt::format("rows_max {} bits {} {}x{} m {}", rows_max, bits, sh.rows, sh.cols, m));
          const std::vector<float> x = Inputs(m, sh.cols, rng);
          Dev<float> dx(x), y(static_cast<size_t>(m * sh.rows)), y1(static_cast<size_t>(sh.rows));
          // Whether one row takes the integer kernel (8-bit rows of 8,192 take the generic
          // SIMT kernel): the batch shares blocks exactly when it does and rows_max > 1.
          const uint64_t int8_before = cuda::PathCount(cuda::Path::kMatVecInt8);
          ASSERT_EQ(cuda::LaunchMatVec(w.mat(), dx.p(), y1.p(), nullptr), cudaSuccess);
          const bool int8 = cuda::PathCount(cuda::Path::kMatVecInt8) > int8_before;
          const uint64_t before = cuda::PathCount(cuda::Path::kMatVecInt8Rows);
          ASSERT_EQ(cuda::LaunchMatVecRows(w.mat(), dx.p(), m, y.p(), nullptr), cudaSuccess);
          const std::vector<float> got = y.Get();
          EXPECT_EQ(cuda::PathCount(cuda::Path::kMatVecInt8Rows) > before, int8 && rows_max > 1);
          if (IntegerKernelRuns() && bits == 4) {
            EXPECT_TRUE(int8);
          }
          for (int b = 0; b < m; ++b) {
            ASSERT_EQ(cuda::LaunchMatVec(w.mat(), dx.p() + b * sh.cols, y1.p(), nullptr),
                      cudaSuccess);
            const std::vector<float> want = y1.Get();
            const std::vector<float> row(got.begin() + b * sh.rows,
                                         got.begin() + (b + 1) * sh.rows);
            ASSERT_TRUE(SameBits(row, want)) << "input row " << b;
          }
        }
      }
  }
}

TEST(CudaMatVecRows, SharedInputAndGateUpRowsEqualOneRowLaunches) {
  REQUIRE_CUDA();
  std::mt19937 rng(43);
  for (const int bits : {4, 8}) {
    const int64_t K = 2816;
    // q/k/v: three matrices on one input, rows that end mid-tile.
    const Uploaded q = Make(130, K, bits, rng), k = Make(64, K, bits, rng),
                   v = Make(7, K, bits, rng);
    const cuda::DevMat w3[3] = {q.mat(), k.mat(), v.mat()};
    // gate/up with GeGLU: 2112 rows (the dense MLP's), and 37.
    for (const int64_t gu_rows : {2112, 37}) {
      const Uploaded gate = Make(gu_rows, K, bits, rng), up = Make(gu_rows, K, bits, rng);
      for (const int m : kBatches) {
        SCOPED_TRACE(fmt::format("bits {} gate/up rows {} m {}", bits, gu_rows, m));
        const std::vector<float> x = Inputs(m, K, rng);
        Dev<float> dx(x);
        Dev<float> h(static_cast<size_t>(m * gu_rows)), h1(static_cast<size_t>(gu_rows));
        ASSERT_EQ(cuda::LaunchGateUpGegluRows(gate.mat(), up.mat(), dx.p(), m, h.p(), nullptr),
                  cudaSuccess);
        const std::vector<float> got_h = h.Get();
        Dev<float> yq(static_cast<size_t>(m * 130)), yk(static_cast<size_t>(m * 64)),
            yv(static_cast<size_t>(m * 7));
        float* const ys[3] = {yq.p(), yk.p(), yv.p()};
        ASSERT_EQ(cuda::LaunchMatVecMultiRows(w3, ys, 3, dx.p(), m, nullptr), cudaSuccess);
        const std::vector<float> got[3] = {yq.Get(), yk.Get(), yv.Get()};
        for (int b = 0; b < m; ++b) {
          const float* xb = dx.p() + b * K;
          ASSERT_EQ(cuda::LaunchGateUpGeglu(gate.mat(), up.mat(), xb, h1.p(), nullptr),
                    cudaSuccess);
          const std::vector<float> want_h = h1.Get();
          ASSERT_TRUE(SameBits(
              std::vector<float>(got_h.begin() + b * gu_rows, got_h.begin() + (b + 1) * gu_rows),
              want_h))
              << "gate/up, input row " << b;
          Dev<float> o0(130), o1(64), o2(7);
          float* const os[3] = {o0.p(), o1.p(), o2.p()};
          ASSERT_EQ(cuda::LaunchMatVecMulti(w3, os, 3, xb, nullptr), cudaSuccess);
          const std::vector<float> want[3] = {o0.Get(), o1.Get(), o2.Get()};
          const int64_t n[3] = {130, 64, 7};
          for (int i = 0; i < 3; ++i)
            ASSERT_TRUE(SameBits(
                std::vector<float>(got[i].begin() + b * n[i], got[i].begin() + (b + 1) * n[i]),
                want[i]))
                << "matrix " << i << ", input row " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rw
