#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "install/quantize.h"

namespace rw {
namespace {

constexpr MlxQuantKernel kGpu = MlxQuantKernel::kGpu;
constexpr MlxQuantKernel kCpu = MlxQuantKernel::kCpu;

struct Quantized {
  std::vector<uint32_t> q;
  std::vector<uint16_t> scales, biases;
  std::vector<uint8_t> values;  // unpacked q
  std::vector<float> deq;
};

Quantized QuantizeAll(const std::vector<float>& w, int64_t rows, int64_t cols, int bits, int group,
                      MlxQuantKernel k) {
  Quantized out;
  out.q.assign(rows * cols * bits / 32, 0xdeadbeef);
  out.scales.assign(rows * cols / group, 0xffff);
  out.biases.assign(rows * cols / group, 0xffff);
  Status st = QuantizeAffine(w.data(), rows, cols, bits, group, out.q.data(), out.scales.data(),
                             out.biases.data(), k);
  EXPECT_TRUE(st.ok()) << st.ToString();
  out.values.resize(rows * cols);
  UnpackBits(out.q.data(), rows * cols, bits, out.values.data());
  out.deq.resize(rows * cols);
  st = DequantizeAffine(out.q.data(), out.scales.data(), out.biases.data(), rows, cols, bits, group,
                        out.deq.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

// A group whose values sit exactly on the grid scale 0.25, bias -2: q = i % 16.
std::vector<float> GridGroup() {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = 0.25f * static_cast<float>(i % 16 - 8);
  return w;
}

TEST(QuantizeAffine, GridValuesAreExactOnBothKernels) {
  for (MlxQuantKernel k : {kGpu, kCpu}) {
    Quantized r = QuantizeAll(GridGroup(), 1, 32, 4, 32, k);
    // max 1.75, min -2: |min| wins, scale = 3.75/15 = 0.25, q0 = round(-2/0.25) = -8,
    // scale = -2/-8 = 0.25, bias = -2.
    EXPECT_EQ(r.scales[0], F32ToBf16(0.25f));
    EXPECT_EQ(r.biases[0], F32ToBf16(-2.0f));
    EXPECT_EQ(r.q[0], 0x76543210u);
    EXPECT_EQ(r.q[1], 0xfedcba98u);
    EXPECT_EQ(r.q[2], 0x76543210u);
    EXPECT_EQ(r.q[3], 0xfedcba98u);
    EXPECT_EQ(r.deq, GridGroup());
  }
}

TEST(QuantizeAffine, EightBitGrid) {
  // k/128 - 1 for k = 0, 2, ..., 252 and 255: min -1, max 255/128 - 1, so
  // scale = (255/128)/255 = 2^-7 exactly; |min| wins, q0 = -128, scale = -1/-128, bias = -1.
  std::vector<float> w(128);
  for (int i = 0; i < 128; ++i) w[i] = static_cast<float>(i < 127 ? 2 * i : 255) / 128.0f - 1.0f;
  for (MlxQuantKernel k : {kGpu, kCpu}) {
    Quantized r = QuantizeAll(w, 1, 128, 8, 128, k);
    EXPECT_EQ(r.scales[0], F32ToBf16(1.0f / 128.0f));
    EXPECT_EQ(r.biases[0], F32ToBf16(-1.0f));
    for (int i = 0; i < 128; ++i) EXPECT_EQ(r.values[i], i < 127 ? 2 * i : 255) << i;
    EXPECT_EQ(r.q[0], 0x06040200u);  // byte j of word k is element 4k+j
    EXPECT_EQ(r.deq, w);
  }
}

TEST(QuantizeAffine, TiesRoundAwayFromZeroOnGpuAndToEvenOnCpu) {
  std::vector<float> w = GridGroup();
  // Same grid (min -2 and max 1.75 stay), so (w + 2) / 0.25 lands exactly on .5 here.
  w[16] = -1.875f;  // 0.5
  w[17] = -1.625f;  // 1.5
  w[18] = -1.375f;  // 2.5
  w[19] = 1.625f;   // 14.5
  Quantized gpu = QuantizeAll(w, 1, 32, 4, 32, kGpu);
  Quantized cpu = QuantizeAll(w, 1, 32, 4, 32, kCpu);
  EXPECT_EQ(gpu.scales[0], cpu.scales[0]);
  EXPECT_EQ(gpu.biases[0], cpu.biases[0]);
  EXPECT_EQ(std::vector<int>(gpu.values.begin() + 16, gpu.values.begin() + 20),
            (std::vector<int>{1, 2, 3, 15}));
  EXPECT_EQ(std::vector<int>(cpu.values.begin() + 16, cpu.values.begin() + 20),
            (std::vector<int>{0, 2, 2, 14}));
}

TEST(QuantizeAffine, AllNegativeGroupDiffersBetweenKernels) {
  // The GPU kernel starts w_max at 0, so an all-negative group uses [min, 0].
  std::vector<float> w(32);
  const float vals[4] = {-1.875f, -1.0f, -0.5f, -0.25f};
  for (int i = 0; i < 32; ++i) w[i] = vals[i % 4];
  Quantized gpu = QuantizeAll(w, 1, 32, 4, 32, kGpu);
  // range 1.875 / 15 = 0.125 exactly; edge -1.875, q0 = -15, scale = 0.125, bias = -1.875.
  EXPECT_EQ(gpu.scales[0], F32ToBf16(0.125f));
  EXPECT_EQ(gpu.biases[0], F32ToBf16(-1.875f));
  EXPECT_EQ(std::vector<int>(gpu.values.begin(), gpu.values.begin() + 4),
            (std::vector<int>{0, 7, 11, 13}));
  Quantized cpu = QuantizeAll(w, 1, 32, 4, 32, kCpu);
  // range 1.625 / 15; edge -1.875 / 0.108333 = -17.3 -> q0 = -17, scale = -1.875 / -17.
  EXPECT_EQ(cpu.scales[0], F32ToBf16(-1.875f / -17.0f));
  EXPECT_EQ(cpu.biases[0], F32ToBf16(-1.875f));
  EXPECT_EQ(std::vector<int>(cpu.values.begin(), cpu.values.begin() + 4),
            (std::vector<int>{0, 8, 12, 15}));
}

TEST(QuantizeAffine, ZeroAndTinyGroups) {
  // All zeros: scale = -eps (q0 = 0 keeps the negated eps), bias 0, q 0; dequantizes to 0,
  // as MLX's own test requires.
  for (MlxQuantKernel k : {kGpu, kCpu}) {
    std::vector<float> zeros(64, 0.0f);
    zeros[5] = -0.0f;
    Quantized r = QuantizeAll(zeros, 1, 64, 4, 64, k);
    EXPECT_EQ(r.scales[0], 0xb3d7);  // bf16(-1e-7)
    EXPECT_EQ(r.biases[0], 0x0000);
    for (uint32_t word : r.q) EXPECT_EQ(word, 0u);
    for (float d : r.deq) EXPECT_EQ(d, 0.0f);
  }
  // Constant tiny values: q0 = round(1e-8 / -1e-7) = 0, so bias stays 0 and q = 0.
  std::vector<float> tiny(32, 1e-8f);
  Quantized r = QuantizeAll(tiny, 1, 32, 2, 32, kGpu);
  EXPECT_EQ(r.scales[0], 0xb3d7);
  EXPECT_EQ(r.biases[0], 0x0000);
  EXPECT_EQ(r.q[0], 0u);
  // A constant positive group: edge = c, q0 huge, bias = c, so c comes back exactly.
  std::vector<float> c(32, 0.375f);
  for (MlxQuantKernel k : {kGpu, kCpu}) {
    Quantized rc = QuantizeAll(c, 1, 32, 4, 32, k);
    EXPECT_EQ(rc.biases[0], F32ToBf16(0.375f));
    for (float d : rc.deq) EXPECT_EQ(d, 0.375f);
  }
}

std::vector<float> RandomBf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> w(n);
  for (auto& x : w) x = RoundToBf16(nd(rng));
  // Some groups of one sign and some outliers, as real weights have.
  for (size_t i = 0; i < std::min<size_t>(n, 128); ++i) w[i] = RoundToBf16(std::abs(w[i]) + 1e-3f);
  for (size_t i = 128; i < std::min<size_t>(n, 256); ++i) w[i] = -RoundToBf16(std::abs(w[i]));
  for (size_t i = 300; i < n; i += 997) w[i] = RoundToBf16(w[i] * 40.0f);
  return w;
}

TEST(QuantizeAffine, RoundTripErrorBoundsAllConfigs) {
  const int64_t rows = 6, cols = 512;
  std::vector<float> w = RandomBf16(rows * cols, 7);
  for (MlxQuantKernel k : {kGpu, kCpu}) {
    for (int bits : {2, 4, 8}) {
      for (int group : {32, 64, 128}) {
        SCOPED_TRACE(testing::Message()
                     << "bits " << bits << " group " << group << " kernel " << static_cast<int>(k));
        Quantized r = QuantizeAll(w, rows, cols, bits, group, k);
        const int n_bins = (1 << bits) - 1;
        for (int64_t i = 0; i < rows * cols; ++i) {
          const int64_t g = i / group;
          const float s = std::abs(Bf16ToF32(r.scales[g]));
          const float b = std::abs(Bf16ToF32(r.biases[g]));
          const int q = r.values[i];
          // bf16 rounding of scale and bias (relative 2^-8) plus fp32 arithmetic.
          const float slack =
              (q * s + b) * std::ldexp(1.0f, -8) + 8 * FLT_EPSILON * (std::abs(w[i]) + b + q * s);
          const float err = std::abs(w[i] - r.deq[i]);
          // The edge opposite the exact one may need q = n_bins + 1 and is clamped (MLX's test
          // allows one step); everything else is within half a step.
          const float bound = (q == n_bins ? 1.0f : 0.5f) * s + slack;
          ASSERT_LE(err, bound) << "element " << i << " w " << w[i] << " q " << q;
        }
      }
    }
  }
}

TEST(QuantizeAffine, LargerMagnitudeEdgeIsExact) {
  const int64_t rows = 4, cols = 256;
  std::vector<float> w = RandomBf16(rows * cols, 11);
  for (MlxQuantKernel k : {kGpu, kCpu}) {
    for (int group : {32, 64, 128}) {
      Quantized r = QuantizeAll(w, rows, cols, 4, group, k);
      for (int64_t g = 0; g < rows * cols / group; ++g) {
        float edge = 0.0f;
        for (int i = 0; i < group; ++i) {
          float v = w[g * group + i];
          if (std::abs(v) > std::abs(edge) || (std::abs(v) == std::abs(edge) && v > edge)) edge = v;
        }
        EXPECT_EQ(Bf16ToF32(r.biases[g]), edge) << "group " << g;
        for (int i = 0; i < group; ++i) {
          if (w[g * group + i] == edge) {
            EXPECT_EQ(r.deq[g * group + i], edge);
          }
        }
      }
    }
  }
}

TEST(QuantizeAffine, Bf16InputMatchesFloatInputAndStaysInBounds) {
  const int64_t rows = 3, cols = 384;
  std::vector<float> w = RandomBf16(rows * cols, 3);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = F32ToBf16(w[i]);
  for (int bits : {2, 4, 8}) {
    Quantized ref = QuantizeAll(w, rows, cols, bits, 64, kGpu);
    const size_t nq = rows * cols * bits / 32, ng = rows * cols / 64;
    std::vector<uint32_t> q(nq + 1, 0x12345678);  // one sentinel past the end
    std::vector<uint16_t> s(ng + 1, 0x1234), b(ng + 1, 0x1234);
    ASSERT_TRUE(
        QuantizeAffineBf16(wb.data(), rows, cols, bits, 64, q.data(), s.data(), b.data()).ok());
    EXPECT_EQ(q.back(), 0x12345678u);
    EXPECT_EQ(s.back(), 0x1234);
    EXPECT_EQ(b.back(), 0x1234);
    q.pop_back();
    s.pop_back();
    b.pop_back();
    EXPECT_EQ(q, ref.q);
    EXPECT_EQ(s, ref.scales);
    EXPECT_EQ(b, ref.biases);
  }
  EXPECT_EQ(AffinePackedCols(2816, 4), 352);
  EXPECT_EQ(AffineGroups(2816, 64), 44);
  EXPECT_EQ(AffinePackedCols(704, 8), 176);
}

TEST(QuantizeAffine, RejectsBadArguments) {
  std::vector<float> w(256, 1.0f);
  std::vector<uint32_t> q(256);
  std::vector<uint16_t> s(16), b(16);
  auto quant = [&](int64_t rows, int64_t cols, int bits, int group) {
    return QuantizeAffine(w.data(), rows, cols, bits, group, q.data(), s.data(), b.data());
  };
  EXPECT_EQ(quant(1, 64, 3, 64).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quant(1, 64, 4, 16).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quant(1, 96, 4, 64).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quant(1, 0, 4, 64).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quant(-1, 64, 4, 64).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(quant(0, 64, 4, 64).ok());
  w[70] = NAN;
  Status st = quant(2, 128, 4, 64);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("row 0, column 70"), std::string::npos) << st.message();
  w[70] = INFINITY;
  EXPECT_EQ(quant(2, 128, 4, 64).code(), ErrorCode::kInvalidArgument);
  std::vector<float> out(64);
  EXPECT_EQ(DequantizeAffine(q.data(), s.data(), b.data(), 1, 64, 5, 64, out.data()).code(),
            ErrorCode::kInvalidArgument);
}

TEST(PackBits, LsbFirstLayout) {
  uint8_t v4[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  uint32_t word = 0;
  PackBits(v4, 8, 4, &word);
  EXPECT_EQ(word, 0x76543210u);
  uint8_t v8[4] = {1, 2, 3, 0xff};
  PackBits(v8, 4, 8, &word);
  EXPECT_EQ(word, 0xff030201u);
  uint8_t v2[16] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3};
  PackBits(v2, 16, 2, &word);
  EXPECT_EQ(word, 0xe0000001u);
  uint8_t back[16];
  UnpackBits(&word, 16, 2, back);
  EXPECT_TRUE(std::equal(back, back + 16, v2));
}

TEST(PackBits, RandomRoundTrip) {
  std::mt19937 rng(5);
  for (int bits : {1, 2, 4, 8}) {
    const int n = 32 * 17;
    std::vector<uint8_t> v(n), back(n);
    for (auto& x : v) x = rng() & ((1u << bits) - 1);
    std::vector<uint32_t> words(n * bits / 32);
    PackBits(v.data(), n, bits, words.data());
    UnpackBits(words.data(), n, bits, back.data());
    EXPECT_EQ(v, back) << bits;
  }
}

}  // namespace
}  // namespace rw
