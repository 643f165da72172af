// Attention: reference and fast kernels against a naive full-matrix computation in double over
// logical (unwrapped) K/V arrays; ring-buffer wraparound, sliding windows, GQA, split ranges.
#include <algorithm>
#include <cmath>

#include "base/bf16.h"

#include "backend_test_util.h"

namespace rw::cpu {
namespace {

using testing::FillUniform;
using testing::Pool;
using testing::RelL2;

struct Shape {
  int n_heads, n_kv, hd;
};

// The whole timeline: K/V by logical position [T][n_kv][hd] and queries [T][n_heads][hd].
struct Timeline {
  Shape s;
  int64_t t;
  std::vector<float> k, v, q;
  Timeline(Shape shape, int64_t len, float q_gain) : s(shape), t(len) {
    k.resize(static_cast<size_t>(len * s.n_kv * s.hd));
    v.resize(k.size());
    q.resize(static_cast<size_t>(len * s.n_heads * s.hd));
    FillUniform(k.data(), static_cast<int64_t>(k.size()));
    FillUniform(v.data(), static_cast<int64_t>(v.size()));
    FillUniform(q.data(), static_cast<int64_t>(q.size()), -q_gain, q_gain);
  }
  const float* Q(int64_t p) const { return q.data() + p * s.n_heads * s.hd; }
  const float* K(int64_t p) const { return k.data() + p * s.n_kv * s.hd; }
  const float* V(int64_t p) const { return v.data() + p * s.n_kv * s.hd; }
};

// The expected output of one query, and the tolerance each head's outputs get.
struct Expected {
  std::vector<float> out;
  std::vector<double> tol;  // per element
  double rel = 1e-5;  // bound on ‖got − out‖/‖out‖: 1e-5, or looser for large scores
};

// Naive: for the query at position p, full score row over keys [lo, p], masked softmax, P·V.
// fp32 scores carry an absolute error ~ eps·Σ_j|q_j·k_j| that the softmax turns into relative
// errors of the weights, so each head's tolerance is 2e-6 + 3e-7·max_τ Σ_j |scale·q_j·k_τj|
// (about 5 ulp of the score's magnitude sum; values |v| ≤ 1).
Expected Naive(const Timeline& tl, int64_t p, int64_t lo, float scale) {
  const Shape& s = tl.s;
  const int rep = s.n_heads / s.n_kv;
  Expected e;
  e.out.resize(static_cast<size_t>(s.n_heads * s.hd));
  e.tol.resize(e.out.size());
  std::vector<float>& out = e.out;
  for (int i = 0; i < s.n_heads; ++i) {
    const int h = i / rep;
    std::vector<double> sc(static_cast<size_t>(tl.t), -INFINITY);
    double mx = -INFINITY, cond = 0;
    for (int64_t tau = 0; tau < tl.t; ++tau) {
      if (tau < lo || tau > p) continue;  // the mask
      double d = 0, a = 0;
      for (int j = 0; j < s.hd; ++j) {
        d += double(tl.Q(p)[i * s.hd + j]) * tl.K(tau)[h * s.hd + j];
        a += std::fabs(double(tl.Q(p)[i * s.hd + j]) * tl.K(tau)[h * s.hd + j]);
      }
      sc[static_cast<size_t>(tau)] = scale * d;
      mx = std::max(mx, scale * d);
      cond = std::max(cond, std::fabs(scale) * a);
    }
    for (int j = 0; j < s.hd; ++j) e.tol[static_cast<size_t>(i * s.hd + j)] = 2e-6 + 3e-7 * cond;
    e.rel = std::max(e.rel, 3e-7 * cond);
    double sum = 0;
    for (auto& x : sc) sum += x = std::exp(x - mx);
    for (int j = 0; j < s.hd; ++j) {
      double o = 0;
      for (int64_t tau = 0; tau < tl.t; ++tau)
        o += sc[static_cast<size_t>(tau)] * tl.V(tau)[h * s.hd + j];
      out[static_cast<size_t>(i * s.hd + j)] = static_cast<float>(o / sum);
    }
  }
  return e;
}

struct Cache {
  std::vector<float> k, v;
  KvCacheView view;
  Cache(const Shape& s, int64_t capacity) {
    k.assign(static_cast<size_t>(s.n_kv * capacity * s.hd), NAN);  // unwritten slots poison
    v.assign(k.size(), NAN);
    view = KvCacheView{k.data(), v.data(), s.n_kv, s.hd, capacity};
  }
  void Store(const Timeline& tl, int64_t p) {
    KvStore(k.data(), v.data(), tl.s.n_kv, tl.s.hd, view.capacity, p, tl.K(p), tl.V(p));
  }
};

void ExpectAttnClose(const std::vector<float>& got, const Expected& want, const std::string& what) {
  EXPECT_LE(RelL2(got.data(), want.out.data(), static_cast<int64_t>(got.size())), want.rel) << what;
  for (size_t i = 0; i < want.out.size(); ++i)
    ASSERT_NEAR(got[i], want.out[i], want.tol[i]) << what << " @" << i;
}

const Shape kShapes[] = {{1, 1, 8},  {4, 2, 12},   {8, 1, 64},  {4, 4, 72},
                         {8, 2, 40}, {16, 8, 256}, {16, 2, 512}};

TEST(Attention, DecodeMatchesNaiveFullCache) {
  for (const Shape& s : kShapes) {
    for (float gain : {1.0f, 4.0f}) {
      const int64_t len = s.hd >= 256 ? 70 : 300;
      Timeline tl(s, len, gain);
      Cache c(s, len);
      for (int64_t p = 0; p < len; ++p) c.Store(tl, p);
      for (float scale : {1.0f, 0.125f}) {
        const auto want = Naive(tl, len - 1, 0, scale);
        std::vector<float> got(want.out.size());
        ref::AttendOne(tl.Q(len - 1), s.n_heads, c.view, 0, len, scale, got.data());
        ExpectAttnClose(got, want, fmt::format("ref hd {}", s.hd));
        for (int threads : {1, 2, 3}) {
          std::fill(got.begin(), got.end(), NAN);
          AttendOne(tl.Q(len - 1), s.n_heads, c.view, 0, len, scale, got.data(), Pool(threads));
          ExpectAttnClose(got, want, fmt::format("fast hd {} threads {}", s.hd, threads));
        }
      }
    }
  }
}

TEST(Attention, RingBufferDecodeWithWindow) {
  for (const Shape& s : {Shape{4, 2, 16}, Shape{2, 1, 72}}) {
    for (int64_t window : {1, 5, 8, 130}) {
      const int64_t len = 2 * window + 150;
      Timeline tl(s, len, 2.0f);
      Cache c(s, window);  // exactly the window: every slot is reused many times
      for (int64_t p = 0; p < len; ++p) {
        c.Store(tl, p);
        const int64_t lo = std::max<int64_t>(0, p - window + 1);
        if (p % 7 != 0 && p != len - 1) continue;
        const auto want = Naive(tl, p, lo, 1.0f);
        std::vector<float> got(want.out.size());
        ref::AttendOne(tl.Q(p), s.n_heads, c.view, lo, p + 1, 1.0f, got.data());
        ExpectAttnClose(got, want, fmt::format("ref window {} pos {}", window, p));
        AttendOne(tl.Q(p), s.n_heads, c.view, lo, p + 1, 1.0f, got.data(), Pool(1 + p % 3));
        ExpectAttnClose(got, want, fmt::format("fast window {} pos {}", window, p));
      }
    }
  }
}

TEST(Attention, SplitPositionRangesMerge) {
  // One KV head and three threads: the fast path splits the positions and merges partials.
  const Shape s{4, 1, 16};
  const int64_t len = 3000, cap = 1800;  // also wraps the ring
  Timeline tl(s, len, 3.0f);
  Cache c(s, cap);
  for (int64_t p = 0; p < len; ++p) c.Store(tl, p);
  const int64_t lo = len - cap;
  const auto want = Naive(tl, len - 1, lo, 1.0f);
  std::vector<float> got(want.out.size());
  for (int threads : {1, 2, 3}) {
    AttendOne(tl.Q(len - 1), s.n_heads, c.view, lo, len, 1.0f, got.data(), Pool(threads));
    ExpectAttnClose(got, want, fmt::format("split threads {}", threads));
  }
}

// Prefill in blocks of m queries, as the runtime does: store the block's K/V, then attend.
void RunPrefill(const Shape& s, int64_t len, int64_t m, int64_t window, int64_t capacity,
                bool use_ref) {
  Timeline tl(s, len, 2.0f);
  Cache c(s, capacity);
  const int64_t row = s.n_heads * s.hd;
  for (int64_t p0 = 0; p0 < len; p0 += m) {
    const int64_t mb = std::min(m, len - p0);
    for (int64_t p = p0; p < p0 + mb; ++p) c.Store(tl, p);
    std::vector<float> got(static_cast<size_t>(mb * row));
    if (use_ref) {
      ref::AttendBlock(tl.Q(p0), mb, p0, s.n_heads, c.view, window, 1.0f, got.data());
    } else {
      AttendBlock(tl.Q(p0), mb, p0, s.n_heads, c.view, window, 1.0f, got.data(),
                  Pool(1 + (p0 / m) % 3));
    }
    for (int64_t i = 0; i < mb; ++i) {
      const int64_t p = p0 + i;
      const auto want = Naive(tl, p, window > 0 ? std::max<int64_t>(0, p - window + 1) : 0, 1.0f);
      std::vector<float> gi(got.begin() + i * row, got.begin() + (i + 1) * row);
      ExpectAttnClose(gi, want,
                      fmt::format("{} hd {} m {} window {} pos {}", use_ref ? "ref" : "fast", s.hd,
                                  m, window, p));
    }
  }
}

TEST(Attention, PrefillCausalFullCache) {
  for (bool use_ref : {true, false}) {
    RunPrefill({4, 2, 16}, 100, 7, 0, 100, use_ref);
    RunPrefill({16, 2, 512}, 40, 16, 0, 64, use_ref);
    RunPrefill({8, 8, 24}, 64, 64, 0, 64, use_ref);
  }
}

TEST(Attention, PrefillSlidingWindowRing) {
  for (bool use_ref : {true, false}) {
    // capacity = window + m − 1: the smallest ring that holds every key a block needs.
    RunPrefill({4, 2, 16}, 120, 8, 10, 10 + 8 - 1, use_ref);
    RunPrefill({2, 1, 64}, 90, 5, 1, 5, use_ref);
    RunPrefill({16, 8, 256}, 48, 16, 20, 40, use_ref);
    RunPrefill({4, 4, 8}, 200, 13, 33, 60, use_ref);
  }
}

TEST(Attention, BlockOfOneEqualsDecode) {
  const Shape s{8, 2, 64};
  Timeline tl(s, 50, 1.0f);
  Cache c(s, 64);
  for (int64_t p = 0; p < 50; ++p) c.Store(tl, p);
  std::vector<float> a(s.n_heads * s.hd), b(a.size());
  AttendBlock(tl.Q(49), 1, 49, s.n_heads, c.view, 0, 1.0f, a.data(), nullptr);
  AttendOne(tl.Q(49), s.n_heads, c.view, 0, 50, 1.0f, b.data(), nullptr);
  EXPECT_EQ(a, b);
}

// A bf16 or fp16 cache: the kernels read the half type directly. Against the naive computation
// over the rounded timeline (each K/V value rounded once, as KvStore does) they get the fp32
// tolerances; decode with a window on a ring, and prefill blocks, on every ISA's kernels.
struct HalfCache {
  std::vector<uint16_t> k, v;
  KvCacheView view;
  HalfCache(const Shape& s, int64_t capacity, KvType type) {
    const uint16_t nan = type == KvType::kBf16 ? 0x7fc0 : 0x7e00;  // unwritten slots poison
    k.assign(static_cast<size_t>(s.n_kv * capacity * s.hd), nan);
    v.assign(k.size(), nan);
    view = KvCacheView{k.data(), v.data(), s.n_kv, s.hd, capacity, type};
  }
  void Store(const Timeline& tl, int64_t p) {
    KvStore(k.data(), v.data(), view.type, tl.s.n_kv, tl.s.hd, view.capacity, p, tl.K(p), tl.V(p));
  }
};

Timeline Rounded(const Timeline& tl, KvType type) {
  Timeline r = tl;
  for (std::vector<float>* x : {&r.k, &r.v})
    for (float& f : *x) f = type == KvType::kBf16 ? RoundToBf16(f) : F16ToF32(F32ToF16(f));
  return r;
}

TEST(Attention, HalfCachesMatchNaiveOverRoundedValues) {
  for (KvType type : {KvType::kBf16, KvType::kF16}) {
    for (const Shape& s : {Shape{4, 2, 16}, Shape{8, 1, 64}, Shape{16, 8, 256}, Shape{16, 2, 512},
                           Shape{4, 4, 72}}) {
      const int64_t len = s.hd >= 256 ? 70 : 260, window = 37;
      Timeline tl(s, len, 2.0f);
      const Timeline want_tl = Rounded(tl, type);
      HalfCache full(s, len, type), ring(s, window + 7, type);
      for (int64_t p = 0; p < len; ++p) {
        full.Store(tl, p);
        ring.Store(tl, p);
      }
      const std::string what =
          fmt::format("{} hd {}", type == KvType::kBf16 ? "bf16" : "f16", s.hd);
      // Decode, the whole cache and a window on the ring.
      for (int64_t lo : {int64_t{0}, len - window}) {
        const auto want = Naive(want_tl, len - 1, lo, 1.0f);
        const KvCacheView& view = lo == 0 ? full.view : ring.view;
        std::vector<float> got(want.out.size());
        ref::AttendOne(tl.Q(len - 1), s.n_heads, view, lo, len, 1.0f, got.data());
        ExpectAttnClose(got, want, "ref " + what);
        for (int threads : {1, 2}) {
          std::fill(got.begin(), got.end(), NAN);
          AttendOne(tl.Q(len - 1), s.n_heads, view, lo, len, 1.0f, got.data(), Pool(threads));
          ExpectAttnClose(got, want, fmt::format("fast {} lo {} threads {}", what, lo, threads));
        }
      }
      // A prefill block of the last 5 positions, causal over the full cache.
      const int64_t m = 5, p0 = len - m;
      std::vector<float> got(static_cast<size_t>(m * s.n_heads * s.hd));
      AttendBlock(tl.Q(p0), m, p0, s.n_heads, full.view, 0, 1.0f, got.data(), Pool(2));
      for (int64_t i = 0; i < m; ++i) {
        const auto want = Naive(want_tl, p0 + i, 0, 1.0f);
        const std::vector<float> row(got.begin() + i * s.n_heads * s.hd,
                                     got.begin() + (i + 1) * s.n_heads * s.hd);
        ExpectAttnClose(row, want, fmt::format("block {} row {}", what, i));
      }
    }
  }
}

TEST(Attention, HalfConversionsRoundToNearestEven) {
  // fp16: exact values, ties to even, overflow, subnormals, NaN.
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // the tie above the largest half rounds to infinity
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1.0f + 1.0f / 2048), 0x3c00);  // tie: to the even 1.0
  EXPECT_EQ(F32ToF16(1.0f + 3.0f / 2048), 0x3c02);  // tie: to the even 1 + 2/1024
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie: to the even zero
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(F32ToF16(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
  // Every half survives the round trip.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaNs
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
}

}  // namespace
}  // namespace rw::cpu
