// AVX2 attention inner loops (the KernelTable's scores and pv), over a KV cache of fp32, bf16 or
// fp16 rows. One template per loop, instantiated per cache type: a half-precision cache is
// widened in registers as it is read (no fp32 copy of it anywhere), so decode streams half the
// bytes. Compiled with -mavx2 -mfma -mf16c -ffp-contract=off, as ops_avx2.cpp; fp32 instances
// are the loops as they were, bit for bit.
#include "backend/cpu/attention_avx2.h"

#include <immintrin.h>

#include "backend/cpu/avx2_math.h"

namespace rw::cpu::avx2 {
namespace {

// How each cache type's rows are read: 8 values widened to fp32, or one.
struct F32Kv {
  using T = float;
  static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static float At(const float* p) { return *p; }
};
struct Bf16Kv {
  using T = uint16_t;
  static __m256 Load(const uint16_t* p) { return LoadBf16x8(p); }
  static float At(const uint16_t* p) { return Bf16Scalar(*p); }
};
struct F16Kv {
  using T = uint16_t;
  static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float At(const uint16_t* p) { return _cvtsh_ss(*p); }
};

// Score tile: kQ queries × kT keys, 12 accumulators at most; each q and k load feeds several
// FMAs. The tail of head_dim past a multiple of 8 is summed in scalar. Every score takes the
// same operations whatever kQ and kT are (one accumulator over d, summed in one order, then the
// tail), so a score does not depend on how many queries or keys shared the call: a verify's rows
// score their keys as decode does.
template <class Kv, int kQ, int kT>
void ScoreTile(const float* const* q, const typename Kv::T* k, int hd, float scale, float* s,
               int64_t lds) {
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
      const __m256 kv = Kv::Load(k + t * hd + d);
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
      for (int d = hd8; d < hd; ++d) d4[t] += q[i][d] * Kv::At(k + t * hd + d);
      s[i * lds + t] = scale * d4[t];
    }
  }
}

// Asks for KV rows [row, row + rows) of a chunk: the attention kernels walk K and V rows
// ~1-2 KB apart several at a time, a pattern the hardware prefetchers follow poorly when the
// cache comes from DRAM (decode). Prefetches past the end of the cache never fault.
constexpr int kKvPrefetchRows = 4;
template <class Kv>
inline void PrefetchKvRows(const typename Kv::T* row, int hd, int rows) {
  const int per_line = 64 / static_cast<int>(sizeof(typename Kv::T));
  for (int d = 0; d < rows * hd; d += per_line)
    _mm_prefetch(reinterpret_cast<const char*>(row + d), _MM_HINT_T0);
}

// Only the first query tile's pass reads K from DRAM; later passes find it in L2.
template <class Kv, int kQ>
void ScoreRowTiles(const float* const* q, const typename Kv::T* k, int64_t n, int hd, float scale,
                   float* s, int64_t lds, bool prefetch) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    if (prefetch) PrefetchKvRows<Kv>(k + (t + 4) * hd, hd, kKvPrefetchRows);
    ScoreTile<Kv, kQ, 4>(q, k + t * hd, hd, scale, s + t, lds);
  }
  for (; t < n; ++t) ScoreTile<Kv, kQ, 1>(q, k + t * hd, hd, scale, s + t, lds);
}

// One or two queries (decode on a layer with two query heads per KV head): two key rows at a
// time (adjacent, so still one sequential stream) with one accumulator per query and row, as
// every tile has. Interleaving four rows as the tiles do streamed half as fast from DRAM.
template <class Kv, int kQ>
void ScoreRowsSequential(const float* const* q, const typename Kv::T* k, int64_t n, int hd,
                         float scale, float* s, int64_t lds) {
  int64_t t = 0;
  for (; t + 2 <= n; t += 2) {
    PrefetchKvRows<Kv>(k + (t + kKvPrefetchRows) * hd, hd, 2);
    ScoreTile<Kv, kQ, 2>(q, k + t * hd, hd, scale, s + t, lds);
  }
  if (t < n) ScoreTile<Kv, kQ, 1>(q, k + t * hd, hd, scale, s + t, lds);
}

template <class Kv>
void Scores(const float* const* q, int nq, const typename Kv::T* k, int64_t n, int hd, float scale,
            float* s, int64_t lds) {
  if (nq == 1) return ScoreRowsSequential<Kv, 1>(q, k, n, hd, scale, s, lds);
  if (nq == 2) return ScoreRowsSequential<Kv, 2>(q, k, n, hd, scale, s, lds);
  int i = 0;
  for (; i + 3 <= nq; i += 3)
    ScoreRowTiles<Kv, 3>(q + i, k, n, hd, scale, s + i * lds, lds, i == 0);
  if (nq - i == 2) ScoreRowTiles<Kv, 2>(q + i, k, n, hd, scale, s + i * lds, lds, i == 0);
  if (nq - i == 1) ScoreRowTiles<Kv, 1>(q + i, k, n, hd, scale, s + i * lds, lds, i == 0);
}

// PV tile: kQ queries × 16 columns of head_dim in 2·kQ accumulators across all n positions
// (the matmul micro-kernel with V rows as the panel).
// The first tile of each column slice touches its V lines first; it prefetches the line 16
// rows ahead, because that walk (one 64-byte line per 1-2 KB row) defeats the hardware
// prefetchers when V comes from DRAM (decode).
template <class Kv, int kQ, bool kPrefetch>
void PvTile(const float* p, int64_t ldp, int64_t n, const typename Kv::T* v, int hd,
            float* const* o, int c0) {
  __m256 a0[kQ], a1[kQ];
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) {
    a0[i] = _mm256_loadu_ps(o[i] + c0);
    a1[i] = _mm256_loadu_ps(o[i] + c0 + 8);
  }
  for (int64_t t = 0; t < n; ++t) {
    if constexpr (kPrefetch)
      _mm_prefetch(reinterpret_cast<const char*>(v + (t + 16) * hd + c0), _MM_HINT_T0);
    const __m256 b0 = Kv::Load(v + t * hd + c0);
    const __m256 b1 = Kv::Load(v + t * hd + c0 + 8);
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

template <class Kv, bool kPrefetch>
void PvQueries(int nq, const float* p, int64_t ldp, int64_t n, const typename Kv::T* v, int hd,
               float* const* o, int c0) {
  switch (nq) {
    case 1:
      PvTile<Kv, 1, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 2:
      PvTile<Kv, 2, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 3:
      PvTile<Kv, 3, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 4:
      PvTile<Kv, 4, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    case 5:
      PvTile<Kv, 5, kPrefetch>(p, ldp, n, v, hd, o, c0);
      break;
    default:
      PvTile<Kv, 6, kPrefetch>(p, ldp, n, v, hd, o, c0);
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
template <class Kv, int kQ>
inline void PvRowBlock(const float* const* p, const typename Kv::T* v, int hd, int hd8,
                       float* const* o) {
  __m256 pr[kQ][4];
  RW_UNROLL
  for (int i = 0; i < kQ; ++i) RW_UNROLL
  for (int r = 0; r < 4; ++r) pr[i][r] = _mm256_broadcast_ss(p[i] + r);
  for (int d = 0; d < hd8; d += 8) {
    const __m256 b0 = Kv::Load(v + d), b1 = Kv::Load(v + hd + d);
    const __m256 b2 = Kv::Load(v + 2 * hd + d), b3 = Kv::Load(v + 3 * hd + d);
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

template <class Kv>
void PvRows(const float* p, int64_t ldp, int nq, int64_t n, const typename Kv::T* v, int hd,
            float* const* o) {
  const int hd8 = hd & ~7;
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    const typename Kv::T* v0 = v + t * hd;
    PrefetchKvRows<Kv>(v0 + kKvPrefetchRows * hd, hd, 4);
    int i = 0;
    for (; i + 2 <= nq; i += 2) {
      const float* pq[2] = {p + i * ldp + t, p + (i + 1) * ldp + t};
      PvRowBlock<Kv, 2>(pq, v0, hd, hd8, o + i);
    }
    if (i < nq) {
      const float* pq[1] = {p + i * ldp + t};
      PvRowBlock<Kv, 1>(pq, v0, hd, hd8, o + i);
    }
    for (i = 0; i < nq; ++i) {
      for (int d = hd8; d < hd; ++d) {
        float a = o[i][d];
        for (int r = 0; r < 4; ++r) a += p[i * ldp + t + r] * Kv::At(v0 + r * hd + d);
        o[i][d] = a;
      }
    }
  }
  for (; t < n; ++t) {
    const typename Kv::T* v0 = v + t * hd;
    for (int i = 0; i < nq; ++i) {
      const __m256 pt = _mm256_broadcast_ss(p + i * ldp + t);
      int d = 0;
      for (; d < hd8; d += 8)
        _mm256_storeu_ps(o[i] + d,
                         _mm256_fmadd_ps(pt, Kv::Load(v0 + d), _mm256_loadu_ps(o[i] + d)));
      for (; d < hd; ++d) o[i][d] += p[i * ldp + t] * Kv::At(v0 + d);
    }
  }
}

// Many queries (prefill): column slices outermost, so one 16-column slice of the V chunk (n
// lines of 64 bytes) stays in L1 while every query tile uses it; the strided walk down V would
// otherwise come from L2 once per query tile.
template <class Kv>
void Pv(const float* p, int64_t ldp, int nq, int64_t n, const typename Kv::T* v, int hd,
        float* const* o) {
  if (nq <= kPvRowsMaxQueries) return PvRows<Kv>(p, ldp, nq, n, v, hd, o);
  const int hd16 = hd & ~15;
  // Queries in ceil(nq/6) tiles of near-equal height (8 queries: 4+4, not 6+2).
  const int tiles = (nq + 5) / 6;
  for (int c0 = 0; c0 < hd16; c0 += 16) {
    for (int t = 0; t < tiles; ++t) {
      const int i0 = nq * t / tiles, i1 = nq * (t + 1) / tiles;
      if (t == 0) {
        PvQueries<Kv, true>(i1 - i0, p + i0 * ldp, ldp, n, v, hd, o + i0, c0);
      } else {
        PvQueries<Kv, false>(i1 - i0, p + i0 * ldp, ldp, n, v, hd, o + i0, c0);
      }
    }
  }
  // Columns past a multiple of 16, one query at a time, rounded as PvRows rounds them (fused
  // below a multiple of 8, multiply then add past it) so the result does not depend on nq.
  const int hd8 = hd & ~7;
  for (int j = 0; j < nq; ++j) {
    for (int c = hd16; c < hd; ++c) {
      float acc = o[j][c];
      for (int64_t t = 0; t < n; ++t) {
        const float pv = p[j * ldp + t], vv = Kv::At(v + t * hd + c);
        acc = c < hd8 ? _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(pv), _mm_set_ss(vv), _mm_set_ss(acc)))
                      : acc + pv * vv;
      }
      o[j][c] = acc;
    }
  }
}

}  // namespace

void Scores(const float* const* q, int nq, const float* k, int64_t n, int hd, float scale, float* s,
            int64_t lds) {
  Scores<F32Kv>(q, nq, k, n, hd, scale, s, lds);
}
void Pv(const float* p, int64_t ldp, int nq, int64_t n, const float* v, int hd, float* const* o) {
  Pv<F32Kv>(p, ldp, nq, n, v, hd, o);
}
void ScoresBf16(const float* const* q, int nq, const uint16_t* k, int64_t n, int hd, float scale,
                float* s, int64_t lds) {
  Scores<Bf16Kv>(q, nq, k, n, hd, scale, s, lds);
}
void PvBf16(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int hd,
            float* const* o) {
  Pv<Bf16Kv>(p, ldp, nq, n, v, hd, o);
}
void ScoresF16(const float* const* q, int nq, const uint16_t* k, int64_t n, int hd, float scale,
               float* s, int64_t lds) {
  Scores<F16Kv>(q, nq, k, n, hd, scale, s, lds);
}
void PvF16(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int hd,
           float* const* o) {
  Pv<F16Kv>(p, ldp, nq, n, v, hd, o);
}

}  // namespace rw::cpu::avx2
