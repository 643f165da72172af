// Norms, activations, softmax, softcap, RoPE, TopK and the small vector helpers: fast against
// reference (and the reference against double precision where it computes something nontrivial).
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "backend_test_util.h"

namespace rw::cpu {
namespace {

using testing::Buffer;
using testing::FillUniform;
using testing::Uniform;

const int64_t kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 64, 255, 704, 2816};

double MaxRelErr(const float* a, const float* b, int64_t n, double floor) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst =
        std::max(worst, std::fabs(double(a[i]) - b[i]) / std::max(std::fabs(double(b[i])), floor));
  return worst;
}

TEST(RmsNorm, MatchesReference) {
  for (int64_t n : kLengths) {
    std::vector<float> wf(static_cast<size_t>(n));
    std::vector<uint16_t> wb(static_cast<size_t>(n));
    FillUniform(wf.data(), n, -2.0f, 2.0f);
    for (auto& b : wb) b = F32ToBf16(Uniform(-2.0f, 2.0f));
    const WeightView w32 = F32Weight(wf.data(), 1, n), w16 = Bf16Weight(wb.data(), 1, n);
    for (const WeightView* w : {static_cast<const WeightView*>(nullptr), &w32, &w16}) {
      for (int off : {0, 1, 3}) {
        Buffer x(n, off), y(n, (off + 2) % 4);
        FillUniform(x.data(), n, -30.0f, 30.0f);
        std::vector<float> ref_y(static_cast<size_t>(n));
        ref::RmsNorm(x.data(), ref_y.data(), n, w, 1e-6f);
        RmsNorm(x.data(), y.data(), n, w, 1e-6f);
        // Only the sum of squares differs (8 fp32 lanes vs a double sum): ~√(n/8)·eps/2.
        EXPECT_LE(MaxRelErr(y.data(), ref_y.data(), n, 1e-30), 2e-6) << n;
        RmsNorm(x.data(), x.data(), n, w, 1e-6f);  // in place
        EXPECT_EQ(x.ToVector(), y.ToVector());
      }
    }
  }
}

TEST(RmsNorm, RowsAndReferenceFormula) {
  const int64_t rows = 5, n = 256;
  std::vector<float> x(rows * n), y(rows * n), wv(n);
  FillUniform(x.data(), rows * n);
  FillUniform(wv.data(), n);
  const WeightView w = F32Weight(wv.data(), 1, n);
  RmsNormRows(x.data(), y.data(), rows, n, &w, 1e-6f);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[r * n + i], x[r * n + i] * inv * wv[i],
                  1e-6 * std::fabs(x[r * n + i] * inv * wv[i]) + 1e-12);
  }
  std::vector<float> ref_y(rows * n);
  ref::RmsNormRows(x.data(), ref_y.data(), rows, n, &w, 1e-6f);
  EXPECT_LE(MaxRelErr(y.data(), ref_y.data(), rows * n, 1e-30), 2e-6);
}

double GeluDouble(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ScalarMatchesDoubleFormula) {
  for (float x = -12.0f; x <= 12.0f; x += 0.01f) {
    const double want = GeluDouble(x);
    EXPECT_NEAR(GeluTanh(x), want, 2e-7 * (std::fabs(x) + 1.0)) << x;
  }
  EXPECT_EQ(GeluTanh(0.0f), 0.0f);
}

// tanh through Softcap with cap 1, against double precision, over a dense sweep including
// large |x| (saturation), tiny |x| (relative accuracy) and the polynomial/exp switch at 0.5.
TEST(Tanh, VectorAccuracy) {
  std::vector<float> xs;
  for (float x = -20.0f; x <= 20.0f; x += 0.000731f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-20f, 1e-7f, 0.4999999f, 0.5f, 0.5000001f, 8.9f, 9.0f,
                  9.1f, 30.0f, -1e10f, 1e30f, 88.0f, 100.0f, -1000.0f})
    xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> y = xs;
  Softcap(y.data(), n, 1.0f);
  double max_abs = 0, max_rel = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = std::tanh(double(xs[i]));
    max_abs = std::max(max_abs, std::fabs(y[i] - want));
    if (std::fabs(want) > 0) max_rel = std::max(max_rel, std::fabs(y[i] - want) / std::fabs(want));
  }
  EXPECT_LE(max_abs, 2e-7);
  EXPECT_LE(max_rel, 3e-7);  // a few ulp everywhere, including near 0
  std::printf("tanh: max abs err %.3g, max rel err %.3g over %lld points\n", max_abs, max_rel,
              static_cast<long long>(n));
}

TEST(Geglu, MatchesReference) {
  for (int64_t n : kLengths) {
    for (int off : {0, 1, 3}) {
      Buffer gate(n, off), up(n, (off + 1) % 4);
      FillUniform(gate.data(), n, -12.0f, 12.0f);
      FillUniform(up.data(), n, -3.0f, 3.0f);
      std::vector<float> ref_g = gate.ToVector();
      ref::GegluInPlace(ref_g.data(), up.data(), n);
      std::vector<float> x = gate.ToVector();
      GegluInPlace(gate.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        // The tanh error (≤ ~1e-7 absolute for both) is scaled by 0.5·|x|·|up|; then rounding.
        const double tol = 2e-7 * std::fabs(x[i] * up[i]) + 4e-7 * std::fabs(ref_g[i]) + 1e-30;
        EXPECT_NEAR(gate[i], ref_g[i], tol) << "x " << x[i];
      }
    }
  }
}

TEST(Softmax, MatchesDoubleAndReference) {
  for (int64_t n : {1, 2, 5, 8, 13, 128, 1000, 262144}) {
    for (float spread : {1.0f, 30.0f, 200.0f}) {
      Buffer x(n, n % 3);
      FillUniform(x.data(), n, -spread, spread);
      std::vector<double> want(static_cast<size_t>(n));
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(x[i]));
      for (int64_t i = 0; i < n; ++i) sum += want[i] = std::exp(double(x[i]) - mx);
      const std::vector<float> in = x.ToVector();
      std::vector<float> ref_x = in;
      ref::Softmax(ref_x.data(), n);
      Softmax(x.data(), n);
      double fsum = 0;
      int bad = 0, bad_ref = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double w = want[i] / sum;
        // A few ulp, plus the rounding of x − max in fp32 (ulp(|x − max|) of relative error in
        // e^(x−max), inherent to any fp32 softmax); below e^-88 relative to the max, 0.
        const double tol = w * (2e-6 + 1.2e-7 * (mx - in[i])) + 1e-37;
        bad += std::fabs(x[i] - w) > tol;
        bad_ref += std::fabs(ref_x[i] - w) > tol;
        fsum += x[i];
      }
      EXPECT_EQ(bad, 0) << n << " " << spread;
      EXPECT_EQ(bad_ref, 0) << n << " " << spread;
      EXPECT_NEAR(fsum, 1.0, 1e-5);
    }
  }
}

TEST(Softcap, MatchesReference) {
  for (int64_t n : {1, 7, 8, 100, 262147}) {
    Buffer x(n, 1);
    FillUniform(x.data(), n, -200.0f, 200.0f);
    x[0] = 0.01f;
    std::vector<float> ref_x = x.ToVector();
    ref::Softcap(ref_x.data(), n, 30.0f);
    Softcap(x.data(), n, 30.0f);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(x[i], ref_x[i], 1e-6 * std::max(1.0f, std::fabs(ref_x[i])));
  }
}

TEST(Rope, MatchesReferenceExactly) {
  for (int hd : {2, 6, 16, 18, 64, 256, 512}) {
    for (int heads : {1, 3, 16}) {
      const int half = hd / 2;
      std::vector<float> inv(half), c(half), s(half);
      for (int i = 0; i < half; ++i)
        inv[i] = i < half / 2 ? std::pow(10000.0f, -2.0f * i / hd) : 0.0f;
      RopeTable(1234, inv.data(), half, c.data(), s.data());
      Buffer x(heads * hd, hd % 3);
      FillUniform(x.data(), heads * hd);
      std::vector<float> ref_x = x.ToVector();
      ref::RopeNeox(ref_x.data(), heads, hd, c.data(), s.data());
      RopeNeox(x.data(), heads, hd, c.data(), s.data());
      EXPECT_EQ(x.ToVector(), ref_x) << hd;
    }
  }
}

TEST(Rope, TableAndIdentityPairs) {
  const int half = 8;
  float inv[half] = {1.0f, 0.5f, 0.1f, 1e-3f, 1e-6f, 0.0f, 0.0f, 0.0f};
  for (int64_t pos : {0, 1, 17, 1000, 262143}) {
    float c[half], s[half];
    RopeTable(pos, inv, half, c, s);
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv[i];  // the fp32 product, as torch does
      EXPECT_NEAR(c[i], std::cos(double(angle)), 1e-7);
      EXPECT_NEAR(s[i], std::sin(double(angle)), 1e-7);
    }
    EXPECT_EQ(c[5], 1.0f);
    EXPECT_EQ(s[7], 0.0f);
  }
  // A zero frequency leaves its pair untouched.
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f}, c[2], s[2], f[2] = {0.0f, 0.0f};
  RopeTable(99, f, 2, c, s);
  RopeNeox(x, 1, 4, c, s);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[3], 4.0f);
}

TEST(TopK, MatchesReferenceWithTiesAndNaN) {
  for (int n : {1, 5, 128, 1000, 262144}) {
    std::vector<float> x(static_cast<size_t>(n));
    // Few distinct values: many ties, broken by lower index.
    for (auto& v : x) v = std::floor(Uniform(0.0f, 20.0f));
    if (n > 3) x[2] = NAN;
    for (int k : {0, 1, 8, 64, 65, 200}) {
      if (k > n) continue;
      std::vector<int> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
      TopK(x.data(), n, k, a.data());
      ref::TopK(x.data(), n, k, b.data());
      EXPECT_EQ(a, b) << n << " " << k;
      if (n > 3 && k > 0) {
        EXPECT_EQ(a[0], 2);  // NaN ranks first
      }
      for (int i = 1; i < k; ++i) {
        if (std::isnan(x[a[i - 1]])) continue;
        EXPECT_TRUE(x[a[i - 1]] > x[a[i]] || (x[a[i - 1]] == x[a[i]] && a[i - 1] < a[i]));
      }
    }
  }
  const float v[5] = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  int idx[3];
  TopK(v, 5, 3, idx);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
  EXPECT_EQ(idx[2], 4);
}

TEST(VectorHelpers, MatchReference) {
  for (int64_t n : kLengths) {
    for (int off : {0, 1, 3}) {
      Buffer y(n, off), x(n, (off + 1) % 4);
      FillUniform(y.data(), n);
      FillUniform(x.data(), n);
      auto check = [&](auto fast_op, auto ref_op, double tol, const char* name) {
        std::vector<float> a = y.ToVector(), b = y.ToVector();
        fast_op(a.data());
        ref_op(b.data());
        for (int64_t i = 0; i < n; ++i)
          EXPECT_NEAR(a[i], b[i], tol * std::fabs(b[i]) + 1e-7 * tol) << name;
      };
      check([&](float* p) { Add(p, x.data(), n); }, [&](float* p) { ref::Add(p, x.data(), n); }, 0,
            "add");
      check([&](float* p) { Mul(p, x.data(), n); }, [&](float* p) { ref::Mul(p, x.data(), n); }, 0,
            "mul");
      check([&](float* p) { Scale(p, 0.37f, n); }, [&](float* p) { ref::Scale(p, 0.37f, n); }, 0,
            "scale");
      // Axpy may fuse the multiply-add: one rounding fewer.
      std::vector<float> a = y.ToVector(), b = y.ToVector();
      Axpy(a.data(), -1.7f, x.data(), n);
      ref::Axpy(b.data(), -1.7f, x.data(), n);
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(a[i], b[i], 2e-7 * (std::fabs(y[i]) + std::fabs(1.7f * x[i])));
      double scale = 0;
      for (int64_t i = 0; i < n; ++i) scale += std::fabs(double(x[i]) * y[i]);
      EXPECT_NEAR(Dot(x.data(), y.data(), n), ref::Dot(x.data(), y.data(), n), 1e-6 * scale);
    }
  }
}

}  // namespace
}  // namespace rw::cpu
