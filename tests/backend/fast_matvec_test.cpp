// The fast affine matvec (Precision::kFast, backend/cpu/matvec_q8.h): every vector kernel this
// CPU runs gives the scalar reference's bits (prepared x, integer sums and the fp32
// combination), over shapes, groups, bit widths, misaligned weights, x and y; the result stays
// within the bound the int8 rounding of x allows of the exact (fp32) matvec; the dispatching
// calls (MatVec, MatVecMulti, MatVecBatch, threads) agree with one another bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matvec_q8.h"
#include "backend_test_util.h"

namespace rw::cpu {
namespace {

using testing::Buffer;
using testing::FillUniform;
using testing::MakeAffine;
using testing::MakeDense;
using testing::Rng;

struct IsaGuard {
  Isa saved = ActiveIsa();
  ~IsaGuard() { SetActiveIsa(saved); }
};

// The vector kernel sets this CPU runs.
std::vector<Isa> VectorIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512})
    if (static_cast<int>(isa) <= static_cast<int>(DetectedIsa())) out.push_back(isa);
  return out;
}

const detail::KernelTable& Table(Isa isa) {
  return isa == Isa::kAvx512 ? detail::Avx512Kernels() : detail::Avx2Kernels();
}

// Every vector row kernel this CPU runs, by name: the AVX-512 table picks its VNNI kernel where
// the CPU has VNNI, so the plain AVX-512BW one is listed on its own too.
struct RowKernel {
  std::string name;
  void (*rows)(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1);
};
std::vector<RowKernel> RowKernels() {
  std::vector<RowKernel> out;
  for (Isa isa : VectorIsas()) out.push_back({IsaName(isa), Table(isa).matvec_q8_rows});
  if (DetectedIsa() == Isa::kAvx512) {
    out.push_back({"avx512bw", avx512::MatVecQ8Rows});
    if (detail::CpuHasAvx512Vnni()) out.push_back({"avx512vnni", avx512::MatVecQ8RowsVnni});
  }
  return out;
}

// A prepared x (64-byte aligned, as the dispatcher's scratch is).
Buffer Prepared(const detail::KernelTable& kt, const WeightView& w, const float* x) {
  Buffer prep(detail::Q8LayoutFor(w).floats, 0);
  std::memset(prep.data(), 0xA5, static_cast<size_t>(prep.size()) * 4);  // no stale zeros
  kt.prepare_x_q8(w, x, prep.data());
  return prep;
}

// x with the shapes activations have: mostly small, an outlier now and then, a zero block.
void FillActivation(float* x, int64_t k) {
  FillUniform(x, k, -1.0f, 1.0f);
  for (int64_t i = 0; i < k; i += 37) x[i] *= 40.0f;
  if (k >= 96)
    for (int64_t i = 64; i < 96; ++i) x[i] = 0.0f;
}

// q of element k of row r (the format's definition).
uint32_t Q(const WeightView& w, int64_t r, int64_t k) {
  const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * w.RowWords();
  const int per_word = 32 / w.bits;
  return (words[k / per_word] >> ((k % per_word) * w.bits)) & ((1u << w.bits) - 1u);
}

void ExpectSameBits(const float* a, const float* b, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    ASSERT_EQ(ua, ub) << what << " row " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(FastMatVec, PreparedXMatchesScalarBitwise) {
  const auto isas = VectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (int64_t mult : {1, 2, 3, 5, 7, 8, 9, 17}) {
        const int64_t k = group * mult;
        auto w = MakeAffine(1, k, bits, group);
        for (int xoff : {0, 1, 3}) {
          Buffer x(k, xoff);
          FillActivation(x.data(), k);
          const Buffer want = Prepared(detail::ScalarKernels(), w->view, x.data());
          for (Isa isa : isas) {
            const Buffer got = Prepared(Table(isa), w->view, x.data());
            ASSERT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(want.size()) * 4), 0)
                << IsaName(isa) << " q" << bits << " g" << group << " K=" << k;
          }
        }
      }
    }
  }
}

// rows 1..67 × K = group·{1, 2, 3, 5, 9, 17} × groups × bits, weights, x and y misaligned in
// turn: the vector kernels against the scalar reference, bit for bit.
TEST(FastMatVec, EveryIsaMatchesScalarBitwise) {
  const auto isas = VectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  int combo = 0;
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (int64_t mult : {1, 2, 3, 5, 9, 17}) {
        const int64_t k = group * mult;
        for (int64_t n = 1; n <= 67; n += (k > 1024 ? 11 : 1)) {
          ++combo;
          auto w = MakeAffine(n, k, bits, group, combo % 2 == 0);
          Buffer x(k, combo % 3);
          FillActivation(x.data(), k);
          const Buffer prep = Prepared(detail::ScalarKernels(), w->view, x.data());
          Buffer want(n, 0);
          detail::ScalarKernels().matvec_q8_rows(w->view, prep.data(), want.data(), 0, n);
          for (const RowKernel& kr : RowKernels()) {
            Buffer got(n, 1 + combo % 5);
            kr.rows(w->view, prep.data(), got.data(), 0, n);
            ExpectSameBits(got.data(), want.data(), n,
                           fmt::format("{} q{} g{} [{}x{}]", kr.name, bits, group, n, k));
            // A row range from the middle gives those rows' bits too.
            if (n >= 5) {
              Buffer part(n - 3, 2);
              kr.rows(w->view, prep.data(), part.data(), 2, n - 1);
              ExpectSameBits(part.data(), want.data() + 2, n - 3, "row range");
            }
          }
        }
      }
    }
  }
}

// Long rows over enough rows that the kernels pair row i with row i + half (kernels.h).
TEST(FastMatVec, FarPairsMatchScalarBitwise) {
  const auto isas = VectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  for (int bits : {4, 8}) {
    auto w = MakeAffine(301, 2816, bits, 64, bits == 8);
    Buffer x(2816, 1);
    FillActivation(x.data(), 2816);
    const Buffer prep = Prepared(detail::ScalarKernels(), w->view, x.data());
    Buffer want(301, 0);
    detail::ScalarKernels().matvec_q8_rows(w->view, prep.data(), want.data(), 0, 301);
    for (const RowKernel& kr : RowKernels()) {
      Buffer got(301, 3);
      kr.rows(w->view, prep.data(), got.data(), 0, 301);
      ExpectSameBits(got.data(), want.data(), 301, fmt::format("{} q{}", kr.name, bits));
    }
  }
}

// The integer limits: q at its maximum against planes of ±127 (q8: q − 128 = ±127 and −128,
// where maddubs pairs reach 2·128·127), q at 0, in every block.
TEST(FastMatVec, IntegerExtremesMatchScalar) {
  const auto isas = VectorIsas();
  if (isas.empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  for (int bits : {4, 8}) {
    for (uint32_t word : {0xFFFFFFFFu, 0x00000000u, 0x80808080u, 0x7F7F7F7Fu, 0x0F0F0F0Fu}) {
      for (float xv : {1.0f, -1.0f}) {
        const int64_t k = 256 + 64;
        auto w = MakeAffine(3, k, bits, 64);
        std::fill(w->words.begin(), w->words.end(), word);
        Buffer x(k, 0);
        for (int64_t i = 0; i < k; ++i) x[i] = i % 3 == 0 ? -xv : xv;
        const Buffer prep = Prepared(detail::ScalarKernels(), w->view, x.data());
        Buffer want(3, 0);
        detail::ScalarKernels().matvec_q8_rows(w->view, prep.data(), want.data(), 0, 3);
        // The integer part is exact whatever the values.
        for (const RowKernel& kr : RowKernels()) {
          Buffer got(3, 0);
          kr.rows(w->view, prep.data(), got.data(), 0, 3);
          ExpectSameBits(got.data(), want.data(), 3,
                         fmt::format("{} q{} word {:08x} x {}", kr.name, bits, word, xv));
        }
      }
    }
  }
}

// |fast − exact| per row within the activation rounding's bound: (256·a + c)·e differs from x by
// at most d/256 per element (d = amax/127 of its block: the second plane's step is d/256, and
// its clamp to ±127 costs at most one more half step), so the scale term moves by at most
// Σ_b |s_g(b)|·d_b/256·Σ_{k in b} q_k; fp32 summation adds a little on top (relative 1e-5 of
// Σ|w·x|). The bias term uses the exact sums of x and adds nothing.
TEST(FastMatVec, WithinTheActivationRoundingBound) {
  for (int bits : {4, 8}) {
    for (int group : {32, 64, 128}) {
      for (int64_t k : {int64_t{group}, int64_t{640}, int64_t{2816}}) {
        if (k % group != 0) continue;
        const int64_t n = 37;
        auto w = MakeAffine(n, k, bits, group);
        Buffer x(k, 0);
        FillActivation(x.data(), k);
        Buffer fast(n, 0), exact(n, 0);
        MatVec(w->view, x.data(), fast.data(), nullptr, Precision::kFast);
        ref::MatVec(w->view, x.data(), exact.data());
        const int64_t groups = k / group;
        double worst = 0;
        for (int64_t r = 0; r < n; ++r) {
          double bound = 0, mag = 0;
          for (int64_t b = 0; b < k / 32; ++b) {
            float amax = 0;
            double qsum = 0;
            for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
              amax = std::max(amax, std::fabs(x[i]));
              qsum += Q(w->view, r, i);
            }
            const double s = Bf16ToF32(w->scales[r * groups + b * 32 / group]);
            bound += std::fabs(s) * (amax / 127.0) / 256 * qsum;
          }
          for (int64_t i = 0; i < k; ++i) mag += std::fabs(ref::WeightAt(w->view, r, i) * x[i]);
          bound = bound * 1.001 + 1e-5 * mag;
          const double err = std::fabs(double(fast[r]) - exact[r]);
          ASSERT_LE(err, bound) << "q" << bits << " g" << group << " K=" << k << " row " << r;
          worst = std::max(worst, err / bound);
        }
        // The bound is not vacuous: the error uses some part of it somewhere.
        EXPECT_GT(worst, 1e-3) << "q" << bits << " g" << group << " K=" << k;
        std::printf("q%d g%d K=%lld: worst error / bound %.3f\n", bits, group,
                    static_cast<long long>(k), worst);
      }
    }
  }
}

// The dispatching calls: MatVecMulti and MatVecBatch give each row MatVec's bits, threads or
// not; f32/bf16 weights are exact whatever the precision; the default stays exact.
TEST(FastMatVec, DispatchAgreesWithMatVec) {
  ThreadPool pool(3);
  for (int bits : {4, 8}) {
    auto a = MakeAffine(300, 1024, bits, 64);
    auto b = MakeAffine(77, 1024, bits, 32, true);
    auto c = MakeDense(WeightType::kBf16, 40, 1024);
    Buffer x(1024 * 16, 1);
    FillActivation(x.data(), 1024 * 16);
    Buffer ya(300, 0), yb(77, 0), yc(40, 0);
    MatVec(a->view, x.data(), ya.data(), nullptr, Precision::kFast);
    MatVec(b->view, x.data(), yb.data(), nullptr, Precision::kFast);
    MatVec(c->view, x.data(), yc.data(), nullptr, Precision::kFast);
    // bf16: the exact kernel.
    Buffer yc_exact(40, 0);
    MatVec(c->view, x.data(), yc_exact.data(), nullptr);
    ExpectSameBits(yc.data(), yc_exact.data(), 40, "bf16 under kFast");
    // Exact is the default, and differs from fast.
    Buffer ya_exact(300, 0);
    MatVec(a->view, x.data(), ya_exact.data(), &pool);
    EXPECT_NE(std::memcmp(ya.data(), ya_exact.data(), 300 * 4), 0);
    Buffer ma(300, 2), mb(77, 1), mc(40, 3);
    const WeightView ws[3] = {a->view, b->view, c->view};
    float* const ys[3] = {ma.data(), mb.data(), mc.data()};
    MatVecMulti(ws, 3, x.data(), ys, &pool, Precision::kFast);
    ExpectSameBits(ma.data(), ya.data(), 300, "multi a");
    ExpectSameBits(mb.data(), yb.data(), 77, "multi b");
    ExpectSameBits(mc.data(), yc.data(), 40, "multi c");
    Buffer pa(300, 1);
    MatVec(a->view, x.data(), pa.data(), &pool, Precision::kFast);
    ExpectSameBits(pa.data(), ya.data(), 300, "threads");
    for (int64_t m : {2, 5, 16}) {
      Buffer y(m * 300, 1);
      MatVecBatch(a->view, x.data(), m, y.data(), &pool, Precision::kFast);
      Linear(a->view, x.data(), m, y.data(), &pool, Precision::kFast);
      for (int64_t i = 0; i < m; ++i) {
        Buffer one(300, 0);
        MatVec(a->view, x.data() + i * 1024, one.data(), nullptr, Precision::kFast);
        ExpectSameBits(y.data() + i * 300, one.data(), 300, fmt::format("batch m={} i={}", m, i));
      }
    }
  }
}

// The scalar kernel set runs the fast path too (what CPUs without AVX2 run), with the same bits.
TEST(FastMatVec, ScalarIsaDispatchMatchesVector) {
  IsaGuard guard;
  auto w = MakeAffine(50, 704, 4, 64, true);
  Buffer x(704, 2);
  FillActivation(x.data(), 704);
  SetActiveIsa(Isa::kScalar);
  Buffer want(50, 0);
  MatVec(w->view, x.data(), want.data(), nullptr, Precision::kFast);
  for (Isa isa : VectorIsas()) {
    SetActiveIsa(isa);
    Buffer got(50, 1);
    MatVec(w->view, x.data(), got.data(), nullptr, Precision::kFast);
    ExpectSameBits(got.data(), want.data(), 50, IsaName(isa));
  }
}

}  // namespace
}  // namespace rw::cpu
