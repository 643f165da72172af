// The promise a speculative verify rests on: up to kExactRows rows, Linear (MatVecBatch) and
// AttendBlock give every row exactly the bits (memcmp) of the one-row calls a decode step makes,
// MatVec and AttendOne, on every kernel set this CPU runs, for any thread count. Plus the batch
// kernel against the scalar reference over shapes and misalignments.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend_test_util.h"

namespace rw::cpu {
namespace {

using testing::AbsDotScale;
using testing::Buffer;
using testing::FillUniform;
using testing::MakeAffine;
using testing::MakeDense;
using testing::Pool;

struct IsaGuard {
  Isa saved = ActiveIsa();
  ~IsaGuard() { SetActiveIsa(saved); }
};

// Every kernel set this CPU runs. These tests sweep the sets themselves, so the suite's second
// run under REDWING_ISA=scalar skips them.
bool SweptElsewhere() {
  return std::getenv("REDWING_ISA") != nullptr;
}

std::vector<Isa> Isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (static_cast<int>(isa) <= static_cast<int>(DetectedIsa())) v.push_back(isa);
  return v;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// MatVecBatch of m = 1..kExactRows rows against m MatVec calls (bitwise, 1-3 threads) and
// against the reference (2e-6·Σ|w·x| per element, as linear_test judges MatVec).
void CheckBatch(const WeightView& w, int off, const std::string& what) {
  const int64_t M = kExactRows, K = w.cols, N = w.rows;
  Buffer x(M * K, off);
  FillUniform(x.data(), M * K);
  std::vector<float> one(static_cast<size_t>(M * N)), want(one.size());
  for (int64_t i = 0; i < M; ++i) MatVec(w, x.data() + i * K, &one[i * N], Pool(1));
  ref::MatMul(w, x.data(), M, want.data());
  Buffer y(M * N, (off + 1) % 4);
  for (int64_t m = 1; m <= M; ++m) {
    const int threads = 1 + static_cast<int>(m % 3);
    std::fill(y.data(), y.data() + M * N, NAN);
    MatVecBatch(w, x.data(), m, y.data(), Pool(threads));
    for (int64_t i = 0; i < m; ++i) {
      ASSERT_TRUE(SameBits(y.data() + i * N, &one[i * N], N))
          << what << " m " << m << " row " << i << " threads " << threads;
    }
  }
  for (int64_t i : {int64_t{0}, M - 1}) {
    const auto scale = AbsDotScale(w, x.data() + i * K);
    for (int64_t r = 0; r < N; ++r)
      ASSERT_NEAR(one[i * N + r], want[i * N + r], 2e-6 * scale[static_cast<size_t>(r)] + 1e-30)
          << what << " row " << i << " out " << r;
  }
}

TEST(ExactRows, BatchIsMatVecAffine) {
  if (SweptElsewhere()) GTEST_SKIP() << "sweeps every ISA in the default run";
  IsaGuard guard;
  int combo = 0;
  for (Isa isa : Isas()) {
    SetActiveIsa(isa);
    for (int bits : {4, 8}) {
      for (int group : {32, 64, 128}) {
        for (int64_t k : {32, 96, 704, 2816}) {
          if (k % group != 0) continue;
          for (int64_t n : {1, 5, 33, 130}) {
            if ((isa == Isa::kScalar || bits == 8) && n * k > 25000) continue;  // time
            ++combo;
            auto w = MakeAffine(n, k, bits, group, combo % 2 == 0);
            CheckBatch(w->view, combo % 4,
                       fmt::format("{} q{} g{} [{}x{}]", IsaName(isa), bits, group, n, k));
          }
        }
      }
    }
  }
}

TEST(ExactRows, BatchIsMatVecDense) {
  if (SweptElsewhere()) GTEST_SKIP() << "sweeps every ISA in the default run";
  IsaGuard guard;
  int combo = 0;
  for (Isa isa : Isas()) {
    SetActiveIsa(isa);
    for (WeightType type : {WeightType::kF32, WeightType::kBf16}) {
      for (int64_t k : {1, 7, 9, 100, 513}) {
        for (int64_t n : {1, 3, 33, 65}) {
          ++combo;
          auto w = MakeDense(type, n, k, combo % 2 == 1);
          CheckBatch(w->view, combo % 4, fmt::format("{} dense [{}x{}]", IsaName(isa), n, k));
        }
      }
    }
  }
}

// A verify-sized weight split across threads in many chunks: rows do not depend on the split.
TEST(ExactRows, LargeBatchAnyThreads) {
  if (SweptElsewhere()) GTEST_SKIP() << "sweeps every ISA in the default run";
  IsaGuard guard;
  auto w = MakeAffine(2048, 2816, 4, 64, true);
  for (Isa isa : Isas()) {
    if (isa == Isa::kScalar) continue;
    SetActiveIsa(isa);
    const int64_t M = kExactRows, K = 2816, N = 2048;
    std::vector<float> x(static_cast<size_t>(M * K)), one(static_cast<size_t>(M * N));
    FillUniform(x.data(), M * K);
    for (int64_t i = 0; i < M; ++i) MatVec(w->view, &x[i * K], &one[i * N], Pool(2));
    for (int threads : {1, 2, 3}) {
      std::vector<float> y(one.size());
      MatVecBatch(w->view, x.data(), M, y.data(), Pool(threads));
      EXPECT_TRUE(SameBits(y.data(), one.data(), M * N)) << IsaName(isa) << " threads " << threads;
      // Linear dispatches the same way for every m up to kExactRows.
      Linear(w->view, x.data(), 9, y.data(), Pool(threads));
      EXPECT_TRUE(SameBits(y.data(), one.data(), 9 * N)) << IsaName(isa) << " Linear m 9";
    }
  }
}

struct Shape {
  int n_heads, n_kv, hd;
};

// A cache holding positions [0, len) of random K/V (a ring of `capacity` slots), and queries.
struct Filled {
  std::vector<float> k, v, q;
  KvCacheView view;
  Filled(const Shape& s, int64_t len, int64_t capacity) {
    k.assign(static_cast<size_t>(s.n_kv * capacity * s.hd), NAN);
    v.assign(k.size(), NAN);
    std::vector<float> kp(static_cast<size_t>(s.n_kv * s.hd)), vp(kp.size());
    for (int64_t p = 0; p < len; ++p) {
      FillUniform(kp.data(), static_cast<int64_t>(kp.size()));
      FillUniform(vp.data(), static_cast<int64_t>(vp.size()));
      KvStore(k.data(), v.data(), s.n_kv, s.hd, capacity, p, kp.data(), vp.data());
    }
    q.resize(static_cast<size_t>(kExactRows * s.n_heads * s.hd));
    FillUniform(q.data(), static_cast<int64_t>(q.size()), -3.0f, 3.0f);
    view = KvCacheView{k.data(), v.data(), s.n_kv, s.hd, capacity};
  }
};

// AttendBlock of m rows ending at position len − 1 against AttendOne per row, for m = 1..16, on
// rings of two capacities (decode and verify may see different ones), threads 1-3.
void CheckAttention(const Shape& s, int64_t len, int64_t window, std::vector<int64_t> ms,
                    const std::string& what) {
  const int64_t row = static_cast<int64_t>(s.n_heads) * s.hd;
  for (int64_t extra : {int64_t{0}, int64_t{37}}) {
    if (window == 0 && extra > 0) continue;
    // The smallest ring the largest block needs (window + m − 1), or the whole timeline.
    const int64_t capacity = window > 0 ? window + kExactRows - 1 + extra : len + extra;
    Filled f(s, len, capacity);
    for (const int64_t m : ms) {
      const int64_t p0 = len - m;
      std::vector<float> block(static_cast<size_t>(m * row)), one(static_cast<size_t>(row));
      AttendBlock(f.q.data(), m, p0, s.n_heads, f.view, window, 1.0f, block.data(),
                  Pool(1 + static_cast<int>(m % 3)));
      for (int64_t i = 0; i < m; ++i) {
        const int64_t p = p0 + i, lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
        AttendOne(f.q.data() + i * row, s.n_heads, f.view, lo, p + 1, 1.0f, one.data(),
                  Pool(1 + static_cast<int>((m + i) % 3)));
        ASSERT_TRUE(SameBits(block.data() + i * row, one.data(), row))
            << what << " capacity " << capacity << " m " << m << " row " << i;
      }
    }
  }
}

TEST(ExactRows, BlockIsAttendOne) {
  if (SweptElsewhere()) GTEST_SKIP() << "sweeps every ISA in the default run";
  IsaGuard guard;
  for (Isa isa : Isas()) {
    SetActiveIsa(isa);
    const std::string name = IsaName(isa);
    // GQA shapes of the real model (2 and 8 query heads per KV head) and odd head dims (tails
    // past a multiple of 8 and of 16); windows shorter and longer than a 512-position segment;
    // full layers past several segments.
    std::vector<int64_t> all;
    for (int64_t m = 1; m <= kExactRows; ++m) all.push_back(m);
    auto what = [&](const Shape& s, const char* kind) {
      return fmt::format("{} heads {}/{} hd {} {}", name, s.n_heads, s.n_kv, s.hd, kind);
    };
    const Shape small{4, 2, 32}, wide{16, 8, 256}, full{16, 2, 64}, odd{6, 2, 24}, odd2{3, 1, 13};
    CheckAttention(small, 40, 16, all, what(small, "window 16"));
    CheckAttention(small, 700, 600, {5, 16}, what(small, "window 600"));
    CheckAttention(small, 1300, 0, {3, 16}, what(small, "full"));
    CheckAttention(wide, 40, 16, {2, 16}, what(wide, "window 16"));
    CheckAttention(wide, 700, 600, {9}, what(wide, "window 600"));
    CheckAttention(full, 1300, 0, {1, 8, 16}, what(full, "full"));
    CheckAttention(odd, 40, 16, {4, 13}, what(odd, "window 16"));
    CheckAttention(odd2, 700, 600, {6, 16}, what(odd2, "window 600"));
  }
}

}  // namespace
}  // namespace rw::cpu
