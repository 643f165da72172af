// AVX2 + FMA matrix kernels: matvec for decode and a packed-panel matmul for prefill, over
// affine q4/q8 (MLX layout, read in place), bf16 and f32 weights. Compiled with -mavx2 -mfma;
// uses only intrinsics and local helpers (no CHECK, no std templates, no inline members of
// shared headers) so nothing compiled here can be picked for portable code. ops.cpp validates.
//
// Affine matvec. Per group, Σ_k x_k·(s·q_k + b) = s·Σ_k x_k·q_k + b·Σ_k x_k. The kernel loads 8
// words (one per lane) and isolates element j of every word with a single AND against the mask
// (2^bits − 1) << (j·bits), leaving q·2^(j·bits) in each lane: still an exact small integer,
// so cvtepi32_ps is exact. prepare_x stores x reordered to that lane order and pre-multiplied by
// 2^(−j·bits) (exact: a power of two), so q·2^(j·bits) · x·2^(−j·bits) = q·x with no shifts
// and no shuffles on the weight stream. The top element uses a shift (its AND would set the
// sign bit). Group sums of x are computed once per call.
//
// Affine matmul. A 16-row × 256-column weight panel is dequantized into an fp32 [k][16] buffer
// in L1 (8 words of 8 rows are transposed in registers, so word w of each row lands in one
// vector and its elements come out already as [k][row]), then a 6×16 register-blocked FMA
// micro-kernel runs it against all M rows of X. For M <= 4 the matvec kernel instead shares
// each unpacked block across the rows (MatMulPreppedRows), which is cheaper than packing.
//
// The matvec kernels prefetch the weight stream ~6 KB ahead (see PrefetchWords).
#include "backend/cpu/linear_avx2.h"

#include <immintrin.h>

#include "backend/cpu/avx2_math.h"
#include "backend/cpu/kernels.h"

namespace rw::cpu::avx2 {
namespace {

using detail::PackScratch;
using detail::PrefetchPanel;

inline int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// ---- Matvec: x preparation ----------------------------------------------------------------------

// Elements per word (EPL) and per 8-word block (EB).
template <int kBits>
struct AffineGeom {
  static constexpr int kEpl = 32 / kBits;
  static constexpr int kEb = 8 * kEpl;
};

template <int kBits>
void PrepareAffine(const WeightView& w, const float* x, float* prep) {
  using Geom = AffineGeom<kBits>;
  const int64_t k_total = w.cols;
  const int64_t blocks = k_total / Geom::kEb;
  for (int64_t t = 0; t < blocks; ++t) {
    const float* xb = x + t * Geom::kEb;
    float* pb = prep + t * Geom::kEb;
    for (int j = 0; j < Geom::kEpl; ++j) {
      // The last element of a word is shifted down, not masked, so it is not pre-scaled.
      const float scale = j + 1 < Geom::kEpl ? 1.0f / static_cast<float>(1u << (j * kBits)) : 1.0f;
      for (int i = 0; i < 8; ++i) pb[j * 8 + i] = xb[i * Geom::kEpl + j] * scale;
    }
  }
  // Per-group sums of x, then zero padding so 8-wide loads past the last group read zeros.
  float* xs = prep + k_total;
  const int64_t groups = k_total / w.group;
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * w.group;
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < w.group; k += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(xg + k));
    xs[g] = HorizontalSum(acc);
  }
  for (int i = 0; i < 16; ++i) xs[groups + i] = 0.0f;
}

// ---- Matvec: kernels
// ---------------------------------------------------------------------------------

// Up to 8 bf16 values as fp32 lanes, zeros beyond n.
inline __m256 LoadBf16Partial(const uint16_t* p, int64_t n) {
  if (n >= 8) return LoadBf16x8(p);
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) tmp[i] = Bf16Scalar(p[i]);
  return _mm256_load_ps(tmp);
}

// The same, reading a whole 8 when p + 8 stays inside [.., end) (the values past n belong to
// the next row and are masked to zero): the scalar path costs a row of K = 704 (11 groups, so
// one partial chunk) ~25% of its time.
inline __m256 LoadBf16Upto8(const uint16_t* p, int64_t n, const uint16_t* end) {
  if (n >= 8) return LoadBf16x8(p);
  if (p + 8 > end) return LoadBf16Partial(p, n);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  return _mm256_and_ps(LoadBf16x8(p), _mm256_castsi256_ps(keep));
}

// How far ahead (in words) the matvec kernels prefetch the weight stream: ~6 KB, at least two
// rows. Measured on a Xeon VM: one core streams q4 weights at ~4 GB/s from DRAM without it and
// ~7 GB/s with it (the read probe: ~8 GB/s); the hardware prefetchers alone run too short a
// distance ahead of a kernel this compute-heavy. Prefetches past the end never fault.
inline int64_t PrefetchWords(int64_t row_words) {
  const int64_t rows = (1536 + row_words - 1) / row_words;
  return (rows < 2 ? 2 : rows > 16 ? 16 : rows) * row_words;
}

// The scale vector of block bl of an 8-group chunk whose fp32 scales are sc[0..8): one group
// per block (a broadcast, no shuffle) except q4 with group 32, where lanes 0-3 and 4-7 of the
// block belong to two groups.
template <int kBits, int kGroup>
inline __m256 BlockScale(const float* sc, int64_t bl) {
  constexpr int kEb = AffineGeom<kBits>::kEb;
  if constexpr (kEb <= kGroup) return _mm256_broadcast_ss(sc + bl * kEb / kGroup);
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(sc + 2 * bl)),
                              _mm_broadcast_ss(sc + 2 * bl + 1), 1);
}

// kRows (1 or 2) weight rows, r and r + stride (y[0] and y[stride]): two rows share every x
// load. One block costs 8 AND/shift, 8 int→float conversions and 8 FMAs per row (~6.3 cycles
// per 64 weights per row on Zen 3 when the weights are in cache).
template <int kBits, int kGroup, int kRows>
void AffineRows(const WeightView& w, const float* x, const float* prep, float* y, int64_t r,
                int64_t stride) {
  using Geom = AffineGeom<kBits>;
  constexpr int64_t group = kGroup;
  const int64_t k_total = w.cols, groups = k_total / group;
  const int64_t row_words = k_total / Geom::kEpl;
  const int64_t full_blocks = k_total / Geom::kEb;
  const int64_t chunk_blocks = 8 * group / Geom::kEb;  // blocks per 8 groups
  const int64_t prefetch_words = PrefetchWords(row_words);
  const float* xs = prep + k_total;
  const uint16_t* const scales_end = w.scales + w.rows * groups;
  const uint16_t* const biases_end = w.biases + w.rows * groups;
  const uint32_t* wr[kRows];
  const uint16_t *sr[kRows], *br[kRows];
  __m256 acc[kRows], bias_acc[kRows];
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    wr[i] = static_cast<const uint32_t*>(w.data) + (r + i * stride) * row_words;
    sr[i] = w.scales + (r + i * stride) * groups;
    br[i] = w.biases + (r + i * stride) * groups;
    acc[i] = _mm256_setzero_ps();
    bias_acc[i] = _mm256_setzero_ps();
  }
  int64_t blk = 0;
  for (int64_t g0 = 0; g0 < groups; g0 += 8) {
    const int64_t ng = Min64(8, groups - g0);
    alignas(32) float sc[kRows][8];
    const __m256 xsum = _mm256_loadu_ps(xs + g0);
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      _mm256_store_ps(sc[i], LoadBf16Upto8(sr[i] + g0, ng, scales_end));
      bias_acc[i] = _mm256_fmadd_ps(LoadBf16Upto8(br[i] + g0, ng, biases_end), xsum, bias_acc[i]);
    }
    const int64_t nbl = ng == 8 ? chunk_blocks : ng * group / Geom::kEb;
    for (int64_t bl = 0; bl < nbl; ++bl, ++blk) {
      const float* xp = prep + blk * Geom::kEb;
      __m256i v[kRows];
      __m256 p0[kRows], p1[kRows];
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[i] + blk * 8 + prefetch_words), _MM_HINT_T0);
        v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[i] + blk * 8));
      }
      RW_UNROLL
      for (int j = 0; j < Geom::kEpl; ++j) {
        const __m256 xv = _mm256_loadu_ps(xp + 8 * j);
        RW_UNROLL
        for (int i = 0; i < kRows; ++i) {
          __m256i qi;
          if (j + 1 < Geom::kEpl) {
            const int mask = static_cast<int>(((1u << kBits) - 1u) << (j * kBits));
            qi = _mm256_and_si256(v[i], _mm256_set1_epi32(mask));
          } else {
            qi = _mm256_srli_epi32(v[i], 32 - kBits);
          }
          const __m256 q = _mm256_cvtepi32_ps(qi);
          if (j < 2) {
            (j == 0 ? p0[i] : p1[i]) = _mm256_mul_ps(q, xv);
          } else {
            __m256& p = j % 2 == 0 ? p0[i] : p1[i];
            p = _mm256_fmadd_ps(q, xv, p);
          }
        }
      }
      RW_UNROLL
      for (int i = 0; i < kRows; ++i)
        acc[i] = _mm256_fmadd_ps(BlockScale<kBits, kGroup>(sc[i], bl), _mm256_add_ps(p0[i], p1[i]),
                                 acc[i]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    // Elements past the last whole block (only q4 with group 32 and an odd group count).
    float tail = 0.0f;
    for (int64_t k = full_blocks * Geom::kEb; k < k_total; ++k) {
      const uint32_t q =
          (wr[i][k / Geom::kEpl] >> ((k % Geom::kEpl) * kBits)) & ((1u << kBits) - 1u);
      tail += Bf16Scalar(sr[i][k / group]) * (static_cast<float>(q) * x[k]);
    }
    y[i * stride] = HorizontalSum(acc[i]) + HorizontalSum(bias_acc[i]) + tail;
  }
}

// Rows [r0, r1) in pairs. Long rows pair row i with row i + half, so the kernel reads two
// sequential streams; adjacent pairs interleave two runs 1.4 KB apart, which the hardware
// prefetchers follow poorly: a loads-only copy of the loop streamed 13.0 GB/s that way against
// 19.7 GB/s from far pairs (2 threads, Zen 3), and the kernel went 11.1 → 13.5 GB/s on
// [2816 × 2816] q4 from DRAM (a Xeon: +1–21% on 2 threads). Short rows (an expert's 352-byte
// down rows) are nearly sequential either way and lose a little to the split (−4%), and so do
// short ranges (a 16-thread Xeon's ~44-row chunks: −1–3%); they stay adjacent.
template <int kBits, int kGroup>
void MatVecAffineG(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                   int64_t r1) {
  const int64_t n = r1 - r0;
  if (w.cols * w.bits / 8 >= detail::kFarPairMinRowBytes && n >= detail::kFarPairMinRows) {
    const int64_t half = n / 2;
    for (int64_t i = 0; i < half; ++i)
      AffineRows<kBits, kGroup, 2>(w, x, prep, y + i, r0 + i, half);
    if (n % 2 != 0) AffineRows<kBits, kGroup, 1>(w, x, prep, y + n - 1, r1 - 1, 0);
    return;
  }
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) AffineRows<kBits, kGroup, 2>(w, x, prep, y + (r - r0), r, 1);
  if (r < r1) AffineRows<kBits, kGroup, 1>(w, x, prep, y + (r - r0), r, 0);
}

// The group size is a template parameter so block→group arithmetic is shifts, not divisions.
template <int kBits>
void MatVecAffine(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                  int64_t r1) {
  switch (w.group) {
    case 32:
      MatVecAffineG<kBits, 32>(w, x, prep, y, r0, r1);
      break;
    case 64:
      MatVecAffineG<kBits, 64>(w, x, prep, y, r0, r1);
      break;
    default:
      MatVecAffineG<kBits, 128>(w, x, prep, y, r0, r1);
      break;
  }
}

// The kEpl float vectors of one 8-word block: vector j holds element j of each word, as
// q·2^(j·bits) (the last element shifted down to q).
template <int kBits>
inline void BlockQ(const uint32_t* words, __m256* q) {
  constexpr int kEpl = 32 / kBits;
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words));
  RW_UNROLL
  for (int j = 0; j + 1 < kEpl; ++j) {
    const int mask = static_cast<int>(((1u << kBits) - 1u) << (j * kBits));
    q[j] = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(mask)));
  }
  q[kEpl - 1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 32 - kBits));
}

// MatVec for kM x rows at once (small-batch prefill: a few tokens per expert): each block is
// unpacked once and used for every row. prep holds kM prepared rows, prep_stride apart.
template <int kBits, int kGroup, int kM>
void MatMulAffineSmall(const WeightView& w, const float* x, const float* prep, int64_t prep_stride,
                       float* y, int64_t r0, int64_t r1) {
  using Geom = AffineGeom<kBits>;
  constexpr int64_t group = kGroup;
  const int64_t k_total = w.cols, groups = k_total / group;
  const int64_t row_words = k_total / Geom::kEpl;
  const int64_t full_blocks = k_total / Geom::kEb;
  const int64_t ldy = w.rows;
  const int64_t chunk_blocks = 8 * group / Geom::kEb;
  const int64_t prefetch_words = PrefetchWords(row_words);
  const uint32_t* all_words = static_cast<const uint32_t*>(w.data);
  const uint16_t* const scales_end = w.scales + w.rows * groups;
  const uint16_t* const biases_end = w.biases + w.rows * groups;

  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* wr = all_words + r * row_words;
    const uint16_t* sr = w.scales + r * groups;
    const uint16_t* br = w.biases + r * groups;
    __m256 acc[kM];
    RW_UNROLL
    for (int m = 0; m < kM; ++m) acc[m] = _mm256_setzero_ps();
    int64_t blk = 0;
    for (int64_t g0 = 0; g0 < groups; g0 += 8) {
      const int64_t ng = Min64(8, groups - g0);
      alignas(32) float sc[8];
      _mm256_store_ps(sc, LoadBf16Upto8(sr + g0, ng, scales_end));
      const int64_t nbl = ng == 8 ? chunk_blocks : ng * group / Geom::kEb;
      for (int64_t bl = 0; bl < nbl; ++bl, ++blk) {
        const __m256 s = BlockScale<kBits, kGroup>(sc, bl);
        __m256 q[Geom::kEpl];
        _mm_prefetch(reinterpret_cast<const char*>(wr + blk * 8 + prefetch_words), _MM_HINT_T0);
        BlockQ<kBits>(wr + blk * 8, q);
        RW_UNROLL
        for (int m = 0; m < kM; ++m) {
          const float* xp = prep + m * prep_stride + blk * Geom::kEb;
          __m256 p0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(xp));
          __m256 p1 = _mm256_mul_ps(q[1], _mm256_loadu_ps(xp + 8));
          RW_UNROLL
          for (int j = 2; j < Geom::kEpl; j += 2) {
            p0 = _mm256_fmadd_ps(q[j], _mm256_loadu_ps(xp + 8 * j), p0);
            p1 = _mm256_fmadd_ps(q[j + 1], _mm256_loadu_ps(xp + 8 * j + 8), p1);
          }
          acc[m] = _mm256_fmadd_ps(s, _mm256_add_ps(p0, p1), acc[m]);
        }
      }
    }
    RW_UNROLL
    for (int m = 0; m < kM; ++m) {
      const float* xs = prep + m * prep_stride + k_total;
      __m256 bias = _mm256_setzero_ps();
      for (int64_t g0 = 0; g0 < groups; g0 += 8)
        bias = _mm256_fmadd_ps(LoadBf16Upto8(br + g0, Min64(8, groups - g0), biases_end),
                               _mm256_loadu_ps(xs + g0), bias);
      float tail = 0.0f;
      const float* xm = x + m * k_total;
      for (int64_t k = full_blocks * Geom::kEb; k < k_total; ++k) {
        const uint32_t qk =
            (wr[k / Geom::kEpl] >> ((k % Geom::kEpl) * kBits)) & ((1u << kBits) - 1u);
        tail += Bf16Scalar(sr[k / group]) * (static_cast<float>(qk) * xm[k]);
      }
      y[m * ldy + r] = HorizontalSum(acc[m]) + HorizontalSum(bias) + tail;
    }
  }
}

template <int kBits, int kGroup>
void MatMulAffineSmallM(const WeightView& w, const float* x, int64_t m, const float* prep,
                        int64_t prep_stride, float* y, int64_t r0, int64_t r1) {
  switch (m) {
    case 1:
      MatVecAffineG<kBits, kGroup>(w, x, prep, y + r0, r0, r1);
      break;
    case 2:
      MatMulAffineSmall<kBits, kGroup, 2>(w, x, prep, prep_stride, y, r0, r1);
      break;
    case 3:
      MatMulAffineSmall<kBits, kGroup, 3>(w, x, prep, prep_stride, y, r0, r1);
      break;
    case 4:
      MatMulAffineSmall<kBits, kGroup, 4>(w, x, prep, prep_stride, y, r0, r1);
      break;
    case 5:
      MatMulAffineSmall<kBits, kGroup, kBits == 8 ? 5 : 4>(w, x, prep, prep_stride, y, r0, r1);
      break;
    default:
      MatMulAffineSmall<kBits, kGroup, kBits == 8 ? 6 : 4>(w, x, prep, prep_stride, y, r0, r1);
      break;
  }
}

template <int kBits>
void MatMulAffineSmallAny(const WeightView& w, const float* x, int64_t m, const float* prep,
                          int64_t prep_stride, float* y, int64_t r0, int64_t r1) {
  switch (w.group) {
    case 32:
      MatMulAffineSmallM<kBits, 32>(w, x, m, prep, prep_stride, y, r0, r1);
      break;
    case 64:
      MatMulAffineSmallM<kBits, 64>(w, x, m, prep, prep_stride, y, r0, r1);
      break;
    default:
      MatMulAffineSmallM<kBits, 128>(w, x, m, prep, prep_stride, y, r0, r1);
      break;
  }
}

// Dense rows, kRows at a time so each x vector is loaded once for several rows.
template <typename T, int kRows>
void DenseRows(const T* wbase, int64_t k_total, const float* x, float* y) {
  __m256 acc[kRows];
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) acc[i] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= k_total; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const T* wr = wbase + i * k_total + k;
      __m256 wv;
      if constexpr (sizeof(T) == 4) {
        wv = _mm256_loadu_ps(reinterpret_cast<const float*>(wr));
      } else {
        wv = LoadBf16x8(reinterpret_cast<const uint16_t*>(wr));
      }
      acc[i] = _mm256_fmadd_ps(wv, xv, acc[i]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    float tail = 0.0f;
    for (int64_t kk = k; kk < k_total; ++kk) {
      float wv;
      if constexpr (sizeof(T) == 4) {
        wv = reinterpret_cast<const float*>(wbase)[i * k_total + kk];
      } else {
        wv = Bf16Scalar(reinterpret_cast<const uint16_t*>(wbase)[i * k_total + kk]);
      }
      tail += wv * x[kk];
    }
    y[i] = HorizontalSum(acc[i]) + tail;
  }
}

template <typename T>
void MatVecDense(const WeightView& w, const float* x, float* y, int64_t r0, int64_t r1) {
  const T* base = static_cast<const T*>(w.data);
  const int64_t k_total = w.cols;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) DenseRows<T, 4>(base + r * k_total, k_total, x, y + (r - r0));
  for (; r < r1; ++r) DenseRows<T, 1>(base + r * k_total, k_total, x, y + (r - r0));
}

// ---- Matmul: panel packing
// -----------------------------------------------------------------------

constexpr int kNr = 16;   // weight rows per panel (two 8-lane vectors)
constexpr int kMr = 6;    // X rows per micro-tile: 12 accumulators + 2 panel vectors + 1 broadcast
constexpr int kKc = 256;  // panel depth: 16 KB of fp32, fits L1; a multiple of every group size
constexpr int kMc = 86 * kMr;  // X rows per pass over the weights: 516, a 512-token chunk

inline void Transpose8x8(__m256* r) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    __m256* th = t + 4 * h;
    s[4 * h + 0] = _mm256_shuffle_ps(th[0], th[2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(th[0], th[2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(th[1], th[3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(th[1], th[3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// Rows [n0, n0+valid) (valid ≤ 8) × cols [kc, kc+kl) of a dense matrix into bp[k][ld] lanes
// 0..7 (bp already offset to the half); missing rows are zero.
template <typename T>
void PackDenseHalf(const T* base, int64_t k_total, int64_t n0, int valid, int64_t kc, int kl,
                   float* bp, int ld) {
  int k = 0;
  for (; k + 8 <= kl; k += 8) {
    __m256 r[8];
    RW_UNROLL
    for (int i = 0; i < 8; ++i) {
      if (i >= valid) {
        r[i] = _mm256_setzero_ps();
        continue;
      }
      const T* src = base + (n0 + i) * k_total + kc + k;
      if constexpr (sizeof(T) == 4) {
        r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src));
      } else {
        r[i] = LoadBf16x8(reinterpret_cast<const uint16_t*>(src));
      }
    }
    Transpose8x8(r);
    RW_UNROLL
    for (int j = 0; j < 8; ++j) _mm256_store_ps(bp + (k + j) * ld, r[j]);
  }
  for (; k < kl; ++k) {
    RW_UNROLL
    for (int i = 0; i < 8; ++i) {
      float v = 0.0f;
      if (i < valid) {
        const T* src = base + (n0 + i) * k_total + kc + k;
        if constexpr (sizeof(T) == 4) {
          v = *reinterpret_cast<const float*>(src);
        } else {
          v = Bf16Scalar(*reinterpret_cast<const uint16_t*>(src));
        }
      }
      bp[k * ld + i] = v;
    }
  }
}

// Affine version: word wd of the 8 rows in one vector (a register transpose of 8 words × 8
// rows, or a gather for a last partial group), so its elements come out as [k][row].
template <int kBits>
void PackAffineHalf(const WeightView& w, int64_t n0, int valid, int64_t kc, int kl, float* bp,
                    int ld) {
  constexpr int kEpl = AffineGeom<kBits>::kEpl;
  const int64_t group = w.group, groups = w.cols / group;
  const int64_t row_words = w.cols / kEpl;
  alignas(32) int32_t idx[8];
  for (int i = 0; i < 8; ++i)
    idx[i] = static_cast<int32_t>((i < valid ? i : valid - 1) * row_words);
  const __m256i vidx = _mm256_load_si256(reinterpret_cast<const __m256i*>(idx));
  // Scale and bias of each group this panel covers, one lane per row; rows past `valid` get 0
  // so their (duplicated) gathered words dequantize to 0.
  const int ngl = static_cast<int>(kl / group);  // ≤ 8
  __m256 sv[8], bv[8];
  for (int gl = 0; gl < ngl; ++gl) {
    alignas(32) float s[8], b[8];
    const int64_t g = kc / group + gl;
    for (int i = 0; i < 8; ++i) {
      s[i] = i < valid ? Bf16Scalar(w.scales[(n0 + i) * groups + g]) : 0.0f;
      b[i] = i < valid ? Bf16Scalar(w.biases[(n0 + i) * groups + g]) : 0.0f;
    }
    sv[gl] = _mm256_load_ps(s);
    bv[gl] = _mm256_load_ps(b);
  }
  const int* base = reinterpret_cast<const int*>(static_cast<const uint32_t*>(w.data) +
                                                 n0 * row_words + kc / kEpl);
  const __m256i mask = _mm256_set1_epi32((1 << kBits) - 1);
  // Dequantizes word wd of the 8 rows (v) into bp rows 8·wd/… (kEpl k-positions).
  auto emit = [&](int wd, __m256i v) {
    const int gl = static_cast<int>(wd * kEpl / group);
    float* dst = bp + wd * kEpl * ld;
    RW_UNROLL
    for (int j = 0; j < kEpl; ++j) {
      __m256i q = _mm256_srli_epi32(v, j * kBits);
      if (j + 1 < kEpl) q = _mm256_and_si256(q, mask);
      _mm256_store_ps(dst + j * ld, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), sv[gl], bv[gl]));
    }
  };
  const int words = kl / kEpl;
  int wd = 0;
  // 8 words from each of 8 rows, transposed in registers (cheaper than gathers on Zen 3).
  for (; wd + 8 <= words; wd += 8) {
    __m256 r[8];
    RW_UNROLL
    for (int i = 0; i < 8; ++i)
      r[i] = _mm256_castsi256_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + idx[i] + wd)));
    Transpose8x8(r);
    RW_UNROLL
    for (int j = 0; j < 8; ++j) emit(wd + j, _mm256_castps_si256(r[j]));
  }
  for (; wd < words; ++wd) emit(wd, _mm256_i32gather_epi32(base + wd, vidx, 4));
}

void PackPanel(const WeightView& w, int64_t n0, int nr, int64_t kc, int kl, float* bp) {
  PackPanel16(w, n0, nr, kc, kl, bp, kNr);
}

// ---- Matmul: micro-kernel
// ------------------------------------------------------------------------

// c[i][0..16) (+)= Σ_k a[k][i]·bp[k][0..16) for i < kRows (a packed as [k][kMr]).
template <int kRows>
void MicroKernel(const float* a, const float* bp, int kl, float* c, int64_t ldc, bool accumulate) {
  __m256 c0[kRows], c1[kRows];
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    c0[i] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    c1[i] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (int k = 0; k < kl; ++k) {
    const __m256 b0 = _mm256_load_ps(bp + k * kNr);
    const __m256 b1 = _mm256_load_ps(bp + k * kNr + 8);
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + k * kMr + i);
      c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    _mm256_storeu_ps(c + i * ldc, c0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, c1[i]);
  }
}

template <int kRows>
void RunMicroAt(int rows, const float* a, const float* bp, int kl, float* c, int64_t ldc,
                bool accumulate) {
  if constexpr (kRows > 1) {
    if (rows < kRows) {
      RunMicroAt<kRows - 1>(rows, a, bp, kl, c, ldc, accumulate);
      return;
    }
  }
  MicroKernel<kRows>(a, bp, kl, c, ldc, accumulate);
}

// X rows [0, rows) (rows ≤ kMr, row stride k_total) × columns [kc, kc + kl) into a[k][kMr]:
// 8 columns of 8 rows (rows past `rows` as zeros) transposed in registers, then each column
// stored as a whole vector in ascending k, so the next store overwrites the 8 − kMr lanes that
// spilled into it. The last store spills past the tile: the scratch has kPackSlack floats more.
constexpr int kPackSlack = 8;
void PackX(const float* x, int64_t k_total, int rows, int64_t kc, int kl, float* a) {
  int k = 0;
  for (; k + 8 <= kl; k += 8) {
    __m256 r[8];
    RW_UNROLL
    for (int i = 0; i < 8; ++i)
      r[i] = i < rows ? _mm256_loadu_ps(x + i * k_total + kc + k) : _mm256_setzero_ps();
    Transpose8x8(r);
    RW_UNROLL
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(a + (k + j) * kMr, r[j]);
  }
  for (; k < kl; ++k)
    for (int i = 0; i < kMr; ++i) a[k * kMr + i] = i < rows ? x[i * k_total + kc + k] : 0.0f;
}

}  // namespace

// ---- Entry points ------------------------------------------------------------------------------

void PackPanel16(const WeightView& w, int64_t n0, int nr, int64_t kc, int kl, float* bp, int ld) {
  for (int h = 0; h < 2; ++h) {
    const int valid = nr - 8 * h < 0 ? 0 : (nr - 8 * h > 8 ? 8 : nr - 8 * h);
    float* dst = bp + 8 * h;
    if (valid == 0) {
      for (int k = 0; k < kl; ++k) _mm256_store_ps(dst + k * ld, _mm256_setzero_ps());
      continue;
    }
    const int64_t rows = n0 + 8 * h;
    switch (w.type) {
      case WeightType::kF32:
        PackDenseHalf(static_cast<const float*>(w.data), w.cols, rows, valid, kc, kl, dst, ld);
        break;
      case WeightType::kBf16:
        PackDenseHalf(static_cast<const uint16_t*>(w.data), w.cols, rows, valid, kc, kl, dst, ld);
        break;
      case WeightType::kAffine:
        if (w.bits == 4) {
          PackAffineHalf<4>(w, rows, valid, kc, kl, dst, ld);
        } else {
          PackAffineHalf<8>(w, rows, valid, kc, kl, dst, ld);
        }
        break;
    }
  }
}

int64_t PrepFloats(const WeightView& w) {
  return w.type == WeightType::kAffine ? w.cols + w.cols / w.group + 16 : 0;
}

void PrepareX(const WeightView& w, const float* x, float* prep) {
  if (w.type != WeightType::kAffine) return;
  if (w.bits == 4) {
    PrepareAffine<4>(w, x, prep);
  } else {
    PrepareAffine<8>(w, x, prep);
  }
}

void MatVecRows(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                int64_t r1) {
  switch (w.type) {
    case WeightType::kF32:
      MatVecDense<float>(w, x, y, r0, r1);
      break;
    case WeightType::kBf16:
      MatVecDense<uint16_t>(w, x, y, r0, r1);
      break;
    case WeightType::kAffine:
      if (w.bits == 4) {
        MatVecAffine<4>(w, x, prep, y, r0, r1);
      } else {
        MatVecAffine<8>(w, x, prep, y, r0, r1);
      }
      break;
  }
}

void MatMulPreppedRows(const WeightView& w, const float* x, int64_t m, const float* prep,
                       int64_t prep_stride, float* y, int64_t r0, int64_t r1) {
  // X rows in ceil(m/4) groups (q8: ceil(m/6)) of near-equal size (5 = 3 + 2, not 4 + 1: a group of
  // one unpacks every block for a single row). With several groups the weight rows go in blocks of
  // 8 (~11 KB of q4 at K = 2,816), so every group after the first finds its block in L1.
  // 8-bit blocks unpack into 4 registers, not 8: groups of up to 6 rows still fit the registers
  // and unpack each block fewer times (a 16-row verify: 3 times, not 4).
  const int64_t per = w.bits == 8 ? 6 : 4;
  const int64_t groups = (m + per - 1) / per;
  const int64_t block = groups > 1 ? 8 : r1 - r0;
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min64(r1, rb + block);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i = m * g / groups, mi = m * (g + 1) / groups - i;
      if (w.bits == 4) {
        MatMulAffineSmallAny<4>(w, x + i * w.cols, mi, prep + i * prep_stride, prep_stride,
                                y + i * w.rows, rb, re);
      } else {
        MatMulAffineSmallAny<8>(w, x + i * w.cols, mi, prep + i * prep_stride, prep_stride,
                                y + i * w.rows, rb, re);
      }
    }
  }
}

void MatMulRows(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1) {
  alignas(64) float bp[kKc * kNr];
  alignas(32) float tile[kMr * kNr];
  const int64_t k_total = w.cols, n_total = w.rows;
  for (int64_t m0 = 0; m0 < m; m0 += kMc) {
    const int64_t mc = Min64(kMc, m - m0);
    // Rows in ceil(mc/6) tiles of near-equal height (8 rows: 4+4, not 6+2). For each kc block
    // the tiles are packed as [tile][k][6] (~0.5 MB at mc = 516: stays in L2) and every weight
    // panel of the block runs against all of them.
    const int64_t tiles = (mc + kMr - 1) / kMr;
    float* const ap = PackScratch(tiles * kKc * kMr + kPackSlack);
    auto tile_rows = [&](int64_t t, int64_t* mb) {
      *mb = m0 + mc * t / tiles;
      return static_cast<int>(m0 + mc * (t + 1) / tiles - *mb);
    };
    for (int64_t kc = 0; kc < k_total; kc += kKc) {
      const int kl = static_cast<int>(Min64(kKc, k_total - kc));
      for (int64_t t = 0; t < tiles; ++t) {
        int64_t mb = 0;
        const int mr = tile_rows(t, &mb);
        PackX(x + mb * k_total, k_total, mr, kc, kl, ap + t * kKc * kMr);
      }
      for (int64_t n0 = r0; n0 < r1; n0 += kNr) {
        const int nr = static_cast<int>(Min64(kNr, r1 - n0));
        if (n0 + kNr < r1) {
          PrefetchPanel(w, n0 + kNr, static_cast<int>(Min64(kNr, r1 - n0 - kNr)), kc, kl);
        } else if (kc + kKc < k_total) {
          PrefetchPanel(w, r0, static_cast<int>(Min64(kNr, r1 - r0)), kc + kKc,
                        static_cast<int>(Min64(kKc, k_total - kc - kKc)));
        }
        PackPanel(w, n0, nr, kc, kl, bp);
        for (int64_t t = 0; t < tiles; ++t) {
          int64_t mb = 0;
          const int mr = tile_rows(t, &mb);
          const float* a = ap + t * kKc * kMr;
          float* yc = y + mb * n_total + n0;
          if (kc > 0 && t + 1 < tiles) {
            // The next tile's partial sums: Y of a 512-row chunk is 4-8 MB, so they come from
            // L3, and the micro-kernel's first FMAs wait on them.
            int64_t mb1 = 0;
            const int mr1 = tile_rows(t + 1, &mb1);
            for (int i = 0; i < mr1; ++i)
              _mm_prefetch(reinterpret_cast<const char*>(y + (mb1 + i) * n_total + n0),
                           _MM_HINT_T0);
          }
          if (nr == kNr) {
            RunMicroAt<kMr>(mr, a, bp, kl, yc, n_total, kc > 0);
            continue;
          }
          // A partial panel goes through a 16-wide tile so stores stay inside Y.
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < kNr; ++j)
              tile[i * kNr + j] = j < nr && kc > 0 ? yc[i * n_total + j] : 0.0f;
          RunMicroAt<kMr>(mr, a, bp, kl, tile, kNr, kc > 0);
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j) yc[i * n_total + j] = tile[i * kNr + j];
        }
      }
    }
  }
}

void DequantRow(const WeightView& w, int64_t row, float* out) {
  const int64_t k_total = w.cols;
  if (w.type == WeightType::kF32) {
    const float* src = static_cast<const float*>(w.data) + row * k_total;
    for (int64_t k = 0; k < k_total; ++k) out[k] = src[k];
    return;
  }
  if (w.type == WeightType::kBf16) {
    Bf16ToF32(static_cast<const uint16_t*>(w.data) + row * k_total, out, k_total);
    return;
  }
  // Affine: s·q + b with a separate multiply and add, exactly as the reference rounds.
  const int64_t groups = k_total / w.group;
  const int64_t row_words = k_total * w.bits / 32;
  const uint32_t* wr = static_cast<const uint32_t*>(w.data) + row * row_words;
  const __m256i shifts4 = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int64_t g = 0; g < groups; ++g) {
    const __m256 s = _mm256_set1_ps(Bf16Scalar(w.scales[row * groups + g]));
    const __m256 b = _mm256_set1_ps(Bf16Scalar(w.biases[row * groups + g]));
    for (int64_t k = g * w.group; k < (g + 1) * w.group; k += 8) {
      __m256i q;
      if (w.bits == 4) {
        q = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(wr[k / 8])), shifts4),
            _mm256_set1_epi32(0xF));
      } else {
        q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + k / 4)));
      }
      _mm256_storeu_ps(out + k, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), s), b));
    }
  }
}

void Bf16ToF32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadBf16x8(src + i));
  for (; i < n; ++i) dst[i] = Bf16Scalar(src[i]);
}

}  // namespace rw::cpu::avx2
