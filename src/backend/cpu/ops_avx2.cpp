// AVX2 + FMA elementwise kernels, attention inner loops, and the AVX2 kernel table. Compiled
// with -mavx2 -mfma -ffp-contract=off (explicit FMAs only, so operations written as separate
// multiply and add round exactly like the reference). Same restrictions as linear_avx2.cpp:
// intrinsics and local helpers only.
#include <immintrin.h>

#include "backend/cpu/avx2_math.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear_avx2.h"

namespace rw::cpu::avx2 {
namespace {

float SumSquares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  if (i + 8 <= n) {
    const __m256 v0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    i += 8;
  }
  float s = HorizontalSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

// y = (x·s)·w, the reference's order, so the result is bitwise equal to it.
void ScaleByWeight(const float* x, float s, const WeightView* w, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  const float* wf =
      w != nullptr && w->type == WeightType::kF32 ? static_cast<const float*>(w->data) : nullptr;
  const uint16_t* wb = w != nullptr && w->type == WeightType::kBf16
                           ? static_cast<const uint16_t*>(w->data)
                           : nullptr;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
    if (wf != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(wf + i));
    if (wb != nullptr) v = _mm256_mul_ps(v, LoadBf16x8(wb + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; ++i) {
    float v = x[i] * s;
    if (wf != nullptr) v *= wf[i];
    if (wb != nullptr) v *= Bf16Scalar(wb[i]);
    y[i] = v;
  }
}

// Applies f to n floats in place 8 at a time; the tail goes through a masked load/store so it
// uses the same vector math as the body.
template <typename F>
void MapInPlace(float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i), i));
  if (i < n) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(x + i, m, f(_mm256_maskload_ps(x + i, m), i));
  }
}

void Geglu(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i,
                     _mm256_mul_ps(GeluTanh(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i m = TailMask(n - i);
    const __m256 v =
        _mm256_mul_ps(GeluTanh(_mm256_maskload_ps(gate + i, m)), _mm256_maskload_ps(up + i, m));
    _mm256_maskstore_ps(gate + i, m, v);
  }
}

float Max(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = HorizontalMax(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// Sums in blocks of 2048 elements folded into a total, so the rounding error of the sum grows
// with √n rather than n (a 262144-entry vocabulary stays at ~1e-6 relative).
float ExpSubSum(float* x, int64_t n, float mx) {
  const __m256 mv = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  while (i + 8 <= n) {
    __m256 block = _mm256_setzero_ps();
    const int64_t end = i + 2048 < n ? i + 2048 : n;
    for (; i + 8 <= end; i += 8) {
      const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
      _mm256_storeu_ps(x + i, e);
      block = _mm256_add_ps(block, e);
    }
    sum = _mm256_add_ps(sum, block);
  }
  if (i < n) {
    const __m256i m = TailMask(n - i);
    const __m256 e =
        _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mv)), _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    sum = _mm256_add_ps(sum, e);
  }
  return HorizontalSum(sum);
}

void Softcap(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  MapInPlace(x, n, [&](__m256 v, int64_t) { return _mm256_mul_ps(c, Tanh(_mm256_div_ps(v, c))); });
}

// Separate multiplies and subtract/add, the reference's rounding.
void Rope(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* a = x + static_cast<int64_t>(h) * head_dim;
    float* b = a + half;
    int i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 av = _mm256_loadu_ps(a + i), bv = _mm256_loadu_ps(b + i);
      const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
      _mm256_storeu_ps(a + i, _mm256_sub_ps(_mm256_mul_ps(av, c), _mm256_mul_ps(bv, s)));
      _mm256_storeu_ps(b + i, _mm256_add_ps(_mm256_mul_ps(bv, c), _mm256_mul_ps(av, s)));
    }
    for (; i < half; ++i) {
      const float av = a[i], bv = b[i];
      a[i] = av * cos[i] - bv * sin[i];
      b[i] = bv * cos[i] + av * sin[i];
    }
  }
}

void Add(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

void Mul(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] *= x[i];
}

void Scale(float* y, float s, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
  for (; i < n; ++i) y[i] *= s;
}

void Axpy(float* y, float a, const float* x, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  if (i + 8 <= n) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    i += 8;
  }
  float s = HorizontalSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Score tile: kQ queries × kT keys, 12 accumulators at most; each q and k load feeds several
// FMAs. The tail of head_dim past a multiple of 8 is summed in scalar. Every score takes the
// same operations whatever kQ and kT are (one accumulator over d, summed in one order, then the
// tail), so a score does not depend on how many queries or keys shared the call: a verify's rows
// score their keys as decode does.
template <int kQ, int kT>
void ScoreTile(const float* const* q, const float* k, int hd, float scale, float* s, int64_t lds) {
  __m256 acc[kQ][kT];
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) RW_UNROLL
  for (int t = 0; t < kT; ++t) acc[i][t] = _mm256_setzero_ps();
  const int hd8 = hd & ~7;
  for (int d = 0; d < hd8; d += 8) {
    // kQ·kT accumulators + kQ query vectors + 1 key vector = 16 registers at 3×4.
    __m256 qv[kQ];
    RW_UNROLL
    for (int i = 0; i < kQ; ++i) qv[i] = _mm256_loadu_ps(q[i] + d);
    RW_UNROLL
    for (int t = 0; t < kT; ++t) {
      const __m256 kv = _mm256_loadu_ps(k + t * hd + d);
      RW_UNROLL
      for (int i = 0; i < kQ; ++i) acc[i][t] = _mm256_fmadd_ps(qv[i], kv, acc[i][t]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) {
    alignas(16) float d4[4] = {0, 0, 0, 0};
    if constexpr (kT == 4) {
      _mm_store_ps(d4, HorizontalSum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    } else {
      RW_UNROLL
      for (int t = 0; t < kT; ++t) d4[t] = HorizontalSumPairs(acc[i][t]);
    }
    RW_UNROLL
    for (int t = 0; t < kT; ++t) {
      for (int d = hd8; d < hd; ++d) d4[t] += q[i][d] * k[t * hd + d];
      s[i * lds + t] = scale * d4[t];
    }
  }
}

// Asks for KV rows [row, row + rows) of a chunk: the attention kernels walk K and V rows
// ~1-2 KB apart several at a time, a pattern the hardware prefetchers follow poorly when the
// cache comes from DRAM (decode). Prefetches past the end of the cache never fault.
constexpr int kKvPrefetchRows = 4;
inline void PrefetchKvRows(const float* row, int hd, int rows) {
  for (int d = 0; d < rows * hd; d += 16)
    _mm_prefetch(reinterpret_cast<const char*>(row + d), _MM_HINT_T0);
}

// Only the first query tile's pass reads K from DRAM; later passes find it in L2.
template <int kQ>
void ScoreRowTiles(const float* const* q, const float* k, int64_t n, int hd, float scale, float* s,
                   int64_t lds, bool prefetch) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    if (prefetch) PrefetchKvRows(k + (t + 4) * hd, hd, kKvPrefetchRows);
    ScoreTile<kQ, 4>(q, k + t * hd, hd, scale, s + t, lds);
  }
  for (; t < n; ++t) ScoreTile<kQ, 1>(q, k + t * hd, hd, scale, s + t, lds);
}

// One or two queries (decode on a layer with two query heads per KV head): two key rows at a
// time (adjacent, so still one sequential stream) with one accumulator per query and row, as
// every tile has. Interleaving four rows as the tiles do streamed half as fast from DRAM.
template <int kQ>
void ScoreRowsSequential(const float* const* q, const float* k, int64_t n, int hd, float scale,
                         float* s, int64_t lds) {
  int64_t t = 0;
  for (; t + 2 <= n; t += 2) {
    PrefetchKvRows(k + (t + kKvPrefetchRows) * hd, hd, 2);
    ScoreTile<kQ, 2>(q, k + t * hd, hd, scale, s + t, lds);
  }
  if (t < n) ScoreTile<kQ, 1>(q, k + t * hd, hd, scale, s + t, lds);
}

void Scores(const float* const* q, int nq, const float* k, int64_t n, int hd, float scale, float* s,
            int64_t lds) {
  if (nq == 1) return ScoreRowsSequential<1>(q, k, n, hd, scale, s, lds);
  if (nq == 2) return ScoreRowsSequential<2>(q, k, n, hd, scale, s, lds);
  int i = 0;
  for (; i + 3 <= nq; i += 3) ScoreRowTiles<3>(q + i, k, n, hd, scale, s + i * lds, lds, i == 0);
  if (nq - i == 2) ScoreRowTiles<2>(q + i, k, n, hd, scale, s + i * lds, lds, i == 0);
  if (nq - i == 1) ScoreRowTiles<1>(q + i, k, n, hd, scale, s + i * lds, lds, i == 0);
}

// PV tile: kQ queries × 16 columns of head_dim in 2·kQ accumulators across all n positions
// (the matmul micro-kernel with V rows as the panel).
// The first tile of each column slice touches its V lines first; it prefetches the line 16
// rows ahead, because that walk (one 64-byte line per 1-2 KB row) defeats the hardware
// prefetchers when V comes from DRAM (decode).
template <int kQ, bool kPrefetch>
void PvTile(const float* p, int64_t ldp, int64_t n, const float* v, int hd, float* const* o,
            int c0) {
  __m256 a0[kQ], a1[kQ];
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) {
    a0[i] = _mm256_loadu_ps(o[i] + c0);
    a1[i] = _mm256_loadu_ps(o[i] + c0 + 8);
  }
  for (int64_t t = 0; t < n; ++t) {
    if constexpr (kPrefetch)
      _mm_prefetch(reinterpret_cast<const char*>(v + (t + 16) * hd + c0), _MM_HINT_T0);
    const __m256 b0 = _mm256_loadu_ps(v + t * hd + c0);
    const __m256 b1 = _mm256_loadu_ps(v + t * hd + c0 + 8);
    RW_UNROLL
    for (int i = 0; i < kQ; ++i) {
      const __m256 pt = _mm256_broadcast_ss(p + i * ldp + t);
      a0[i] = _mm256_fmadd_ps(pt, b0, a0[i]);
      a1[i] = _mm256_fmadd_ps(pt, b1, a1[i]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) {
    _mm256_storeu_ps(o[i] + c0, a0[i]);
    _mm256_storeu_ps(o[i] + c0 + 8, a1[i]);
  }
}

template <bool kPrefetch>
void PvQueries(int nq, const float* p, int64_t ldp, int64_t n, const float* v, int hd,
               float* const* o, int c0) {
  switch (nq) {
    case 1:
      PvTile<1, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 2:
      PvTile<2, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 3:
      PvTile<3, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 4:
      PvTile<4, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 5:
      PvTile<5, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    default:
      PvTile<6, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
  }
}

// Few queries (decode): V rows outermost, four at a time, each query's o updated in place
// (o stays in L1: at most 8 × 512 floats). V streams in order instead of in 16-column walks
// down a chunk; from DRAM those walks ran at half the read bandwidth. Queries go in pairs whose
// 8 probabilities stay in registers for the whole row block (re-broadcasting them per 8 columns
// made the loop load-bound: 8 queries at 4,000 positions −10%). Each o[c] still takes its FMAs
// in ascending t, so for head dims that are multiples of 16 the result is bitwise the
// column-slice path's.
constexpr int kPvRowsMaxQueries = 8;

// o[d] += Σ_r p[r]·v[r·hd + d] over 4 rows for kQ (1 or 2) queries, columns [0, hd8).
template <int kQ>
inline void PvRowBlock(const float* const* p, const float* v, int hd, int hd8, float* const* o) {
  __m256 pr[kQ][4];
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) RW_UNROLL
  for (int r = 0; r < 4; ++r) pr[i][r] = _mm256_broadcast_ss(p[i] + r);
  for (int d = 0; d < hd8; d += 8) {
    const __m256 b0 = _mm256_loadu_ps(v + d), b1 = _mm256_loadu_ps(v + hd + d);
    const __m256 b2 = _mm256_loadu_ps(v + 2 * hd + d), b3 = _mm256_loadu_ps(v + 3 * hd + d);
    RW_UNROLL
    for (int i = 0; i < kQ; ++i) {
      __m256 a = _mm256_loadu_ps(o[i] + d);
      a = _mm256_fmadd_ps(pr[i][0], b0, a);
      a = _mm256_fmadd_ps(pr[i][1], b1, a);
      a = _mm256_fmadd_ps(pr[i][2], b2, a);
      a = _mm256_fmadd_ps(pr[i][3], b3, a);
      _mm256_storeu_ps(o[i] + d, a);
    }
  }
}

void PvRows(const float* p, int64_t ldp, int nq, int64_t n, const float* v, int hd,
            float* const* o) {
  const int hd8 = hd & ~7;
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const float* v0 = v + t * hd;
    PrefetchKvRows(v0 + kKvPrefetchRows * hd, hd, 4);
    int i = 0;
    for (; i + 2 <= nq; i += 2) {
      const float* pq[2] = {p + i * ldp + t, p + (i + 1) * ldp + t};
      PvRowBlock<2>(pq, v0, hd, hd8, o + i);
    }
    if (i < nq) {
      const float* pq[1] = {p + i * ldp + t};
      PvRowBlock<1>(pq, v0, hd, hd8, o + i);
    }
    for (i = 0; i < nq; ++i) {
      for (int d = hd8; d < hd; ++d) {
        float a = o[i][d];
        for (int r = 0; r < 4; ++r) a += p[i * ldp + t + r] * v0[r * hd + d];
        o[i][d] = a;
      }
    }
  }
  for (; t < n; ++t) {
    const float* v0 = v + t * hd;
    for (int i = 0; i < nq; ++i) {
      const __m256 pt = _mm256_broadcast_ss(p + i * ldp + t);
      int d = 0;
      for (; d < hd8; d += 8)
        _mm256_storeu_ps(o[i] + d,
                         _mm256_fmadd_ps(pt, _mm256_loadu_ps(v0 + d), _mm256_loadu_ps(o[i] + d)));
      for (; d < hd; ++d) o[i][d] += p[i * ldp + t] * v0[d];
    }
  }
}

// Many queries (prefill): column slices outermost, so one 16-column slice of the V chunk (n
// lines of 64 bytes) stays in L1 while every query tile uses it; the strided walk down V would
// otherwise come from L2 once per query tile.
void Pv(const float* p, int64_t ldp, int nq, int64_t n, const float* v, int hd, float* const* o) {
  if (nq <= kPvRowsMaxQueries) return PvRows(p, ldp, nq, n, v, hd, o);
  const int hd16 = hd & ~15;
  // Queries in ceil(nq/6) tiles of near-equal height (8 queries: 4+4, not 6+2).
  const int tiles = (nq + 5) / 6;
  for (int c0 = 0; c0 < hd16; c0 += 16) {
    for (int t = 0; t < tiles; ++t) {
      const int i0 = nq * t / tiles, i1 = nq * (t + 1) / tiles;
      if (t == 0) {
        PvQueries<true>(i1 - i0, p + i0 * ldp, ldp, n, v, hd, o + i0, c0);
      } else {
        PvQueries<false>(i1 - i0, p + i0 * ldp, ldp, n, v, hd, o + i0, c0);
      }
    }
  }
  // Columns past a multiple of 16, one query at a time, rounded as PvRows rounds them (fused
  // below a multiple of 8, multiply then add past it) so the result does not depend on nq.
  const int hd8 = hd & ~7;
  for (int j = 0; j < nq; ++j) {
    for (int c = hd16; c < hd; ++c) {
      float acc = o[j][c];
      for (int64_t t = 0; t < n; ++t)
        acc = c < hd8 ? _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(p[j * ldp + t]),
                                                   _mm_set_ss(v[t * hd + c]), _mm_set_ss(acc)))
                      : acc + p[j * ldp + t] * v[t * hd + c];
      o[j][c] = acc;
    }
  }
}

// Up to this many X rows, MatMul on affine weights runs the shared-unpack matvec kernel (in
// groups of up to 4 rows) instead of packing panels: a prefill of ~128 tokens gives each expert
// 5-8 of them. One thread, weights from DRAM, M = 5-8 on an expert's [704 × 2816] and
// [2816 × 704] q4: +8% to +55% over the packed path (Zen 3); at M = 12 it lost 17%.
constexpr int kSmallM = 8;

const detail::KernelTable kAvx2 = {
    Isa::kAvx2, PrepFloats, PrepareX,   MatVecRows,
    MatMulRows, 16,         kSmallM,    MatMulPreppedRows,
    DequantRow, Bf16ToF32,  SumSquares, ScaleByWeight,
    Geglu,      Max,        ExpSubSum,  Softcap,
    Rope,       Add,        Mul,        Scale,
    Axpy,       Dot,        Scores,     Pv,
};

}  // namespace
}  // namespace rw::cpu::avx2

namespace rw::cpu::detail {
const KernelTable& Avx2Kernels() {
  return avx2::kAvx2;
}
}  // namespace rw::cpu::detail
