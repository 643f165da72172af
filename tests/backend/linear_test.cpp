// MatVec / MatMul / DequantRow: the reference against the format definition, and the fast
// kernels against the reference over shapes, bit widths, group sizes, misalignments and threads.
#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend_test_util.h"

namespace rw::cpu {
namespace {

using testing::AbsDotScale;
using testing::Buffer;
using testing::FillUniform;
using testing::MakeAffine;
using testing::MakeDense;
using testing::Pool;
using testing::RelL2;

// Restores the active ISA when a test that switches it ends.
struct IsaGuard {
  Isa saved = ActiveIsa();
  ~IsaGuard() { SetActiveIsa(saved); }
};

TEST(AffineFormat, HandMadeWords4Bit) {
  // Word 0x76543210: element 8k sits in the low nibble, so the row reads 0,1,…,7; the second
  // word 0xFEDCBA98 continues 8…15. Two groups of 32 with different scales and biases.
  std::vector<uint32_t> words(8, 0);
  words[0] = 0x76543210u;
  words[1] = 0xFEDCBA98u;
  words[4] = 0x0000000Fu;  // element 32 = 15, first of group 1
  std::vector<uint16_t> scales = {F32ToBf16(1.0f), F32ToBf16(-2.0f)};
  std::vector<uint16_t> biases = {F32ToBf16(0.0f), F32ToBf16(0.5f)};
  WeightView w = AffineWeight(words.data(), 1, 64, 4, 32, scales.data(), biases.data());
  for (int k = 0; k < 16; ++k) EXPECT_EQ(ref::WeightAt(w, 0, k), static_cast<float>(k)) << k;
  EXPECT_EQ(ref::WeightAt(w, 0, 16), 0.0f);
  EXPECT_EQ(ref::WeightAt(w, 0, 32), -2.0f * 15 + 0.5f);
  EXPECT_EQ(ref::WeightAt(w, 0, 33), 0.5f);
  std::vector<float> row(64);
  DequantRow(w, 0, row.data());
  for (int k = 0; k < 64; ++k) EXPECT_EQ(row[k], ref::WeightAt(w, 0, k)) << k;
}

TEST(AffineFormat, HandMadeWords8Bit) {
  // Byte j of word k is element 4k + j.
  std::vector<uint32_t> words(8, 0);
  words[0] = 0x04030201u;
  words[1] = 0xFF00807Fu;
  std::vector<uint16_t> scales = {F32ToBf16(0.5f)};
  std::vector<uint16_t> biases = {F32ToBf16(-1.0f)};
  WeightView w = AffineWeight(words.data(), 1, 32, 8, 32, scales.data(), biases.data());
  const float expect_q[8] = {1, 2, 3, 4, 127, 128, 0, 255};
  for (int k = 0; k < 8; ++k) EXPECT_EQ(ref::WeightAt(w, 0, k), 0.5f * expect_q[k] - 1.0f) << k;
  std::vector<float> x(32, 0.0f), y(1);
  x[5] = 1.0f;  // picks element 5 = 0.5·128 − 1
  MatVec(w, x.data(), y.data(), nullptr);
  EXPECT_FLOAT_EQ(y[0], 63.0f);
}

// The reference matvec on affine weights equals dequantize-then-f32-matvec, bit for bit.
TEST(AffineFormat, RefMatVecEqualsExplicitDequant) {
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      const int64_t n = 9, k = 384;
      auto w = MakeAffine(n, k, bits, group);
      std::vector<float> dense(static_cast<size_t>(n * k));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          // Straight from the format definition, not through WeightAt.
          const auto* words = static_cast<const uint32_t*>(w->view.data);
          const uint32_t word = words[r * (k * bits / 32) + c / (32 / bits)];
          const uint32_t q = (word >> ((c % (32 / bits)) * bits)) & ((1u << bits) - 1);
          const float s = Bf16ToF32(w->view.scales[r * (k / group) + c / group]);
          const float b = Bf16ToF32(w->view.biases[r * (k / group) + c / group]);
          dense[static_cast<size_t>(r * k + c)] = s * static_cast<float>(q) + b;
        }
      std::vector<float> x(static_cast<size_t>(k)), y_aff(n), y_dense(n);
      FillUniform(x.data(), k);
      ref::MatVec(w->view, x.data(), y_aff.data());
      ref::MatVec(F32Weight(dense.data(), n, k), x.data(), y_dense.data());
      for (int64_t r = 0; r < n; ++r) EXPECT_EQ(y_aff[r], y_dense[r]) << bits << " " << group;
    }
  }
}

// Checks fast against reference: each element within 2e-6·Σ|w·x| (the magnitude a dot
// product's rounding error scales with, so near-cancelling rows are judged fairly), and
// ‖Δ‖/‖ref‖ ≤ 1e-5 for vectors of 3+ rows. A single output can cancel to almost nothing, and its
// relative error is then unbounded in any fp32 summation order (seen: 7e-5 for [1x384]), so
// N = 1 relies on the elementwise bound alone.
void ExpectClose(const float* fast, const float* ref, const std::vector<double>& scale, int64_t n,
                 const std::string& what) {
  if (n >= 3) {
    EXPECT_LE(RelL2(fast, ref, n), 1e-5) << what;
  }
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    const double tol = 2e-6 * scale[static_cast<size_t>(i)] + 1e-30;
    if (std::fabs(double(fast[i]) - ref[i]) > tol) {
      ADD_FAILURE() << what << " row " << i << ": fast " << fast[i] << " ref " << ref[i];
      ++bad;
    }
  }
}

const int64_t kRowCounts[] = {1, 3, 7, 64, 65, 257, 1027};

void CheckMatMul(const WeightView& w, int64_t m, int off, const std::string& what);

// All offsets (0, +1, +3 floats) × pools (1, 2, 3 threads) for one weight, against one reference.
void SweepMatVec(const WeightView& w, const std::string& what) {
  Buffer x(w.cols, 0);
  FillUniform(x.data(), w.cols);
  std::vector<float> ref_y(static_cast<size_t>(w.rows));
  ref::MatVec(w, x.data(), ref_y.data());
  const auto scale = AbsDotScale(w, x.data());
  for (int off : {0, 1, 3}) {
    Buffer xo(w.cols, off), yo(w.rows, (off * 2) % 5);
    std::copy(x.data(), x.data() + w.cols, xo.data());
    for (int threads : {1, 2, 3}) {
      std::fill(yo.data(), yo.data() + w.rows, NAN);
      MatVec(w, xo.data(), yo.data(), Pool(threads));
      ExpectClose(yo.data(), ref_y.data(), scale, w.rows,
                  fmt::format("{} off {} threads {}", what, off, threads));
    }
  }
}

TEST(MatVec, AffineMatchesReference) {
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (int64_t k : {32, 64, 96, 128, 192, 256, 384, 704, 1024, 2816, 4096}) {
        if (k % group != 0) continue;
        for (int64_t n : kRowCounts) {
          if (n * k > 1100000) continue;  // keeps the reference pass short
          const bool misalign = (n + k / 32) % 2 == 1;
          auto w = MakeAffine(n, k, bits, group, misalign);
          SweepMatVec(w->view, fmt::format("q{} g{} [{}x{}] mis {}", bits, group, n, k, misalign));
        }
      }
    }
  }
}

// Every vector kernel set this CPU runs (the tests above use the best one), matvec and the
// few-row matmul that shares its unpacking, against the reference: rows whose words are not a
// multiple of the 16-word AVX-512 block (a masked last block: K = 704 at q4 is 88 words, K = 96
// is a single partial block), a group count that is not a multiple of 16, odd row counts.
TEST(MatVec, EveryIsaMatchesReference) {
  if (DetectedIsa() == Isa::kScalar) GTEST_SKIP() << "no vector kernels on this CPU";
  IsaGuard guard;
  int combo = 0;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
    SetActiveIsa(isa);
    for (int bits : {4, 8}) {
      for (int group : {32, 64, 128}) {
        for (int64_t k : {32, 96, 128, 640, 704, 1152, 2816}) {
          if (k % group != 0) continue;
          for (int64_t n : {1, 2, 5, 33}) {
            ++combo;
            auto w = MakeAffine(n, k, bits, group, combo % 2 == 0);
            const std::string what =
                fmt::format("{} q{} g{} [{}x{}]", IsaName(isa), bits, group, n, k);
            SweepMatVec(w->view, what);
            for (int64_t m : {2, 3, 4, 5, 6, 7, 8, 9}) CheckMatMul(w->view, m, combo % 4, what);
          }
        }
      }
    }
  }
}

TEST(MatVec, LargeAffineMultiThreaded) {
  // Big enough that two and three threads each get several chunks' worth of rows.
  auto w = MakeAffine(3001, 2816, 4, 64, true);
  SweepMatVec(w->view, "q4 g64 [3001x2816]");
}

TEST(MatVec, DenseMatchesReference) {
  for (WeightType type : {WeightType::kF32, WeightType::kBf16}) {
    for (int64_t k : {1, 3, 7, 8, 9, 31, 100, 257, 1000, 2816}) {
      for (int64_t n : kRowCounts) {
        if (n * k > 1100000) continue;
        auto w = MakeDense(type, n, k, (n + k) % 2 == 1);
        SweepMatVec(w->view,
                    fmt::format("{} [{}x{}]", type == WeightType::kF32 ? "f32" : "bf16", n, k));
      }
    }
  }
}

// Several matrices as one job give each matrix's own MatVec, bit for bit: mixed formats (x
// prepared once per format), row counts that split chunks across matrix boundaries, 1-3 threads.
TEST(MatVec, MultiEqualsSeparateMatVecs) {
  const int64_t k = 704;
  std::vector<std::unique_ptr<testing::TestWeight>> owned;
  owned.push_back(MakeAffine(517, k, 4, 64, true));
  owned.push_back(MakeAffine(64, k, 4, 64));
  owned.push_back(MakeAffine(33, k, 8, 64, true));
  owned.push_back(MakeAffine(301, k, 4, 32));
  Buffer x(k, 1);
  FillUniform(x.data(), k);
  for (int count = 1; count <= 4; ++count) {
    std::vector<WeightView> ws;
    std::vector<std::vector<float>> expect, got;
    for (int i = 0; i < count; ++i) {
      ws.push_back(owned[static_cast<size_t>(i)]->view);
      expect.emplace_back(static_cast<size_t>(ws.back().rows));
      MatVec(ws.back(), x.data(), expect.back().data(), nullptr);
      got.emplace_back(static_cast<size_t>(ws.back().rows), NAN);
    }
    for (int threads : {1, 2, 3}) {
      std::vector<float*> ys;
      for (auto& g : got) ys.push_back(g.data());
      MatVecMulti(ws.data(), count, x.data(), ys.data(), Pool(threads));
      for (int i = 0; i < count; ++i)
        EXPECT_EQ(got[static_cast<size_t>(i)], expect[static_cast<size_t>(i)])
            << "count " << count << " matrix " << i << " threads " << threads;
    }
  }
}

// Any subset of rows, on any pool, gives each row's bits of the full call: the kernels pair
// rows differently for short rows (adjacent) and long ones (from the two halves of a range).
TEST(MatVec, RowsSubset) {
  for (int64_t k : {256, 2816}) {
    auto wk = MakeAffine(1027, k, 4, 64);
    std::vector<float> xk(k), whole(1027), some(1027);
    FillUniform(xk.data(), k);
    MatVec(wk->view, xk.data(), whole.data(), nullptr);
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 1027}, {5, 300}, {6, 301}, {1000, 1027}}) {
      for (int threads : {1, 2, 3}) {
        MatVecRows(wk->view, xk.data(), some.data(), b, e, Pool(threads));
        for (int64_t r = b; r < e; ++r)
          EXPECT_EQ(some[r - b], whole[r]) << "K " << k << " row " << r;
      }
    }
  }
  auto w = MakeAffine(1027, 256, 4, 64);
  std::vector<float> x(256), full(1027), part(1027);
  FillUniform(x.data(), 256);
  MatVec(w->view, x.data(), full.data(), nullptr);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 1027}, {5, 300}, {1000, 1027}, {7, 7}}) {
    for (int threads : {1, 2, 3}) {
      MatVecRows(w->view, x.data(), part.data(), b, e, Pool(threads));
      for (int64_t r = b; r < e; ++r) EXPECT_EQ(part[r - b], full[r]) << r;
    }
  }
  ref::MatVecRows(w->view, x.data(), part.data(), 5, 300);
  std::vector<float> ref_full(1027);
  ref::MatVec(w->view, x.data(), ref_full.data());
  for (int64_t r = 5; r < 300; ++r) EXPECT_EQ(part[r - 5], ref_full[r]);
}

// MatMul against the reference for 1, 2 and 3 threads (one reference pass).
void CheckMatMul(const WeightView& w, int64_t m, int off, const std::string& what) {
  Buffer x(m * w.cols, off), y(m * w.rows, (off + 1) % 4);
  FillUniform(x.data(), m * w.cols);
  std::vector<float> ref_y(static_cast<size_t>(m * w.rows));
  ref::MatMul(w, x.data(), m, ref_y.data());
  std::vector<std::vector<double>> scale;
  for (int64_t i = 0; i < m; ++i) scale.push_back(AbsDotScale(w, x.data() + i * w.cols));
  for (int threads : {1, 2, 3}) {
    std::fill(y.data(), y.data() + m * w.rows, NAN);
    MatMul(w, x.data(), m, y.data(), Pool(threads));
    for (int64_t i = 0; i < m; ++i) {
      ExpectClose(y.data() + i * w.rows, ref_y.data() + i * w.rows, scale[static_cast<size_t>(i)],
                  w.rows,
                  fmt::format("{} m {} row {} threads {} off {}", what, m, i, threads, off));
    }
  }
}

TEST(MatMul, AffineMatchesReference) {
  int combo = 0;
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (int64_t k : {64, 128, 288, 320, 704, 1152}) {
        if (k % group != 0) continue;
        for (int64_t n : {1, 7, 16, 17, 65, 257}) {
          for (int64_t m : {2, 3, 4, 6, 7, 13}) {
            ++combo;
            auto w = MakeAffine(n, k, bits, group, combo % 2 == 0);
            CheckMatMul(w->view, m, combo % 4, fmt::format("q{} g{} [{}x{}]", bits, group, n, k));
          }
        }
      }
    }
  }
}

TEST(MatMul, PrefillSizedBlock) {
  auto w = MakeAffine(300, 2816, 4, 64, true);
  CheckMatMul(w->view, 64, 3, "q4 g64 [300x2816]");
}

TEST(MatMul, DenseMatchesReference) {
  int combo = 0;
  for (WeightType type : {WeightType::kF32, WeightType::kBf16}) {
    for (int64_t k : {1, 7, 9, 100, 257, 513}) {
      for (int64_t n : {1, 3, 16, 33, 65}) {
        for (int64_t m : {2, 5, 6, 11}) {
          ++combo;
          auto w = MakeDense(type, n, k, combo % 2 == 1);
          CheckMatMul(w->view, m, combo % 4, fmt::format("dense [{}x{}]", n, k));
        }
      }
    }
  }
}

// Every vector kernel set this CPU runs (the tests above use the best one): against the
// reference over panel edges (16/32 rows) and micro-tile heights (6/12 rows), and the AVX-512
// matmul bit-identical to the AVX2 one where both pack panels (same panels, same FMA order).
TEST(MatMul, EveryIsaMatchesReference) {
  if (DetectedIsa() == Isa::kScalar) GTEST_SKIP() << "no vector kernels on this CPU";
  IsaGuard guard;
  int combo = 0;
  for (int bits : {4, 8}) {
    for (int64_t k : {128, 320, 704}) {
      for (int64_t n : {17, 31, 32, 33, 70}) {
        for (int64_t m : {5, 12, 13, 25}) {
          ++combo;
          auto w = MakeAffine(n, k, bits, k == 320 ? 32 : 64, combo % 2 == 0);
          Buffer x(m * k, combo % 4);
          FillUniform(x.data(), m * k);
          std::vector<std::vector<float>> outs;
          for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
            if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) continue;
            SetActiveIsa(isa);
            CheckMatMul(w->view, m, combo % 4,
                        fmt::format("{} q{} [{}x{}]", IsaName(isa), bits, n, k));
            std::vector<float> y(static_cast<size_t>(m * n));
            MatMul(w->view, x.data(), m, y.data(), Pool(2));
            outs.push_back(std::move(y));
          }
          // Bitwise only where both sets pack panels: below a set's small_m it runs its
          // matvec over the rows (AVX2 from 8 rows down, AVX-512 from 4), rounded otherwise.
          const bool both_pack =
              m > detail::Avx2Kernels().small_m && m > detail::Avx512Kernels().small_m;
          for (size_t i = 1; i < outs.size() && both_pack; ++i)
            EXPECT_EQ(outs[i], outs[0]) << "q" << bits << " [" << n << "x" << k << "] m " << m;
        }
      }
    }
  }
}

TEST(MatMul, SingleRowIsMatVec) {
  auto w = MakeAffine(65, 256, 4, 32);
  std::vector<float> x(256), a(65), b(65);
  FillUniform(x.data(), 256);
  MatMul(w->view, x.data(), 1, a.data(), nullptr);
  MatVec(w->view, x.data(), b.data(), nullptr);
  EXPECT_EQ(a, b);
}

TEST(DequantRow, MatchesReferenceExactly) {
  std::vector<std::unique_ptr<testing::TestWeight>> ws;
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) ws.push_back(MakeAffine(5, 384, bits, group, bits == 8));
  ws.push_back(MakeDense(WeightType::kF32, 5, 37, true));
  ws.push_back(MakeDense(WeightType::kBf16, 5, 37, true));
  for (const auto& w : ws) {
    for (int64_t r = 0; r < 5; ++r) {
      Buffer fast(w->view.cols, 3);
      std::vector<float> ref_row(static_cast<size_t>(w->view.cols));
      DequantRow(w->view, r, fast.data());
      ref::DequantRow(w->view, r, ref_row.data());
      for (int64_t k = 0; k < w->view.cols; ++k) ASSERT_EQ(fast[k], ref_row[k]) << k;
    }
  }
}

TEST(ConvertBf16, MatchesReferenceExactly) {
  std::vector<uint16_t> src(1001);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i * 65.537);
  Buffer fast(1000, 1);
  std::vector<float> ref_out(1000);
  ConvertBf16ToF32(src.data() + 1, fast.data(), 1000);
  ref::ConvertBf16ToF32(src.data() + 1, ref_out.data(), 1000);
  EXPECT_EQ(std::memcmp(fast.data(), ref_out.data(), 4000), 0);
}

// The portable path (CPUs without AVX2) keeps the reference's arithmetic order: exact.
TEST(ScalarIsa, LinearIsBitwiseReference) {
  IsaGuard guard;
  SetActiveIsa(Isa::kScalar);
  for (int bits : {4, 8}) {
    auto w = MakeAffine(257, 320, bits, 32, true);
    Buffer x(3 * 320, 1);
    FillUniform(x.data(), 3 * 320);
    std::vector<float> ref_y(3 * 257), y(3 * 257);
    ref::MatMul(w->view, x.data(), 3, ref_y.data());
    MatMul(w->view, x.data(), 3, y.data(), Pool(3));
    EXPECT_EQ(y, ref_y);
    MatVec(w->view, x.data(), y.data(), Pool(2));
    EXPECT_TRUE(std::equal(ref_y.begin(), ref_y.begin() + 257, y.begin()));
  }
}

TEST(Dispatch, ReportsIsa) {
  EXPECT_STREQ(IsaName(Isa::kAvx2), "avx2");
  EXPECT_STREQ(IsaName(Isa::kAvx512), "avx512");
  if (DetectedIsa() == Isa::kAvx2) {
    IsaGuard guard;
    SetActiveIsa(Isa::kAvx2);
    EXPECT_EQ(ActiveIsa(), Isa::kAvx2);
  }
}

}  // namespace
}  // namespace rw::cpu
