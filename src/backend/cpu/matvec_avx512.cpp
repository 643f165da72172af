// AVX-512 decode matvec over affine q4/q8 weights (MLX layout, read in place): the AVX2
// kernel's method (linear_avx2.cpp) on 16-word blocks. One 512-bit load holds 16 words; an AND
// against (2^bits − 1) << (j·bits) leaves element j of every word as q·2^(j·bits), an exact
// small integer that cvtepi32_ps converts exactly, and prepare_x stores x in that lane order
// pre-multiplied by 2^(−j·bits). So per 16·(32/bits) weights: 32/bits ANDs, conversions and
// FMAs, the same instruction count as an AVX2 block of half the weights.
//
// Why: the AVX2 kernel runs ~10 GB/s of q4 weights per core with the data in cache, about one
// core's share of DRAM bandwidth, so decode on two cores was bound by both limits at once. At
// twice the work per instruction the kernel waits on memory instead.
//
// A row whose words are not a multiple of 16 (K = 704 at q4: 88 words) ends in a masked block;
// prepare_x zero-fills the x lanes past the end, so no scalar tail is needed. Scales are kept
// 16 groups to a register and spread to a block's lanes with one permute.
//
// Compiled with -mavx512f/bw/vl/dq; the rules of kernels.h apply (intrinsics and plain headers
// only).
#include <immintrin.h>

#include "backend/cpu/avx512_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear_avx2.h"
#include "backend/cpu/linear_avx512.h"

namespace rw::cpu::avx512 {
namespace {

// Elements per word, weights per 16-word block, words per group.
template <int kBits, int kGroup>
struct Geom {
  static constexpr int kEpl = 32 / kBits;
  static constexpr int kEb = 16 * kEpl;
  static constexpr int kWpg = kGroup / kEpl;
  static constexpr int kWpgShift = __builtin_ctz(kWpg);
};

inline int64_t Blocks(const WeightView& w) {
  return (w.RowWords() + 15) / 16;
}

// Up to 16 bf16 values as fp32 lanes, zeros beyond n (a masked load: nothing past n is read).
inline __m512 LoadBf16x16(const uint16_t* p, int64_t n) {
  const __mmask16 mask =
      n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// How far ahead (in words) the kernels prefetch the weight stream: ~6 KB, at least two rows
// (as the AVX2 kernels; the hardware prefetchers alone run too short a distance ahead).
inline int64_t PrefetchWords(int64_t row_words) {
  const int64_t rows = (1536 + row_words - 1) / row_words;
  return (rows < 2 ? 2 : rows > 16 ? 16 : rows) * row_words;
}

// ---- x preparation ------------------------------------------------------------------------------

template <int kBits>
void PrepareAffine(const WeightView& w, const float* x, float* prep) {
  constexpr int kEpl = 32 / kBits;
  const int64_t words = w.RowWords(), blocks = Blocks(w);
  for (int64_t t = 0; t < blocks; ++t) {
    float* pb = prep + t * 16 * kEpl;
    const int64_t valid = Min64(16, words - t * 16);
    const float* xb = x + t * 16 * kEpl;
    for (int j = 0; j < kEpl; ++j) {
      // The last element of a word is shifted down, not masked, so it is not pre-scaled.
      const float scale = j + 1 < kEpl ? 1.0f / static_cast<float>(1u << (j * kBits)) : 1.0f;
      for (int64_t i = 0; i < 16; ++i) pb[j * 16 + i] = i < valid ? xb[i * kEpl + j] * scale : 0.0f;
    }
  }
  // Per-group sums of x, then zeros so 16-wide loads past the last group read zeros.
  float* xs = prep + blocks * 16 * kEpl;
  const int64_t groups = w.RowGroups();
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * w.group;
    __m512 acc = _mm512_loadu_ps(xg);
    for (int k = 16; k < w.group; k += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(xg + k));
    xs[g] = _mm512_reduce_add_ps(acc);
  }
  for (int i = 0; i < 16; ++i) xs[groups + i] = 0.0f;
}

// ---- kernels ------------------------------------------------------------------------------------

// The products of one 16-word block with prepared x, as two partial sums (p0 + p1).
template <int kBits>
inline __m512 BlockDot(__m512i v, const float* xp) {
  constexpr int kEpl = 32 / kBits;
  __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
  RW_UNROLL
  for (int j = 0; j < kEpl; ++j) {
    __m512i qi;
    if (j + 1 < kEpl) {
      const int mask = static_cast<int>(((1u << kBits) - 1u) << (j * kBits));
      qi = _mm512_and_si512(v, _mm512_set1_epi32(mask));
    } else {
      qi = _mm512_srli_epi32(v, 32 - kBits);
    }
    const __m512 prod_in = _mm512_cvtepi32_ps(qi);
    const __m512 xv = _mm512_load_ps(xp + 16 * j);
    if (j < 2)
      (j == 0 ? p0 : p1) = _mm512_mul_ps(prod_in, xv);
    else
      (j % 2 == 0 ? p0 : p1) = _mm512_fmadd_ps(prod_in, xv, j % 2 == 0 ? p0 : p1);
  }
  return _mm512_add_ps(p0, p1);
}

// Lane i of block blk belongs to group (16·blk + i) / words-per-group; as an index into the
// 16 scales of the chunk starting at group g0.
template <int kBits, int kGroup>
inline __m512i ScaleIndex(int64_t blk, int64_t g0) {
  using G = Geom<kBits, kGroup>;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i word = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(blk * 16)));
  return _mm512_sub_epi32(_mm512_srli_epi32(word, G::kWpgShift),
                          _mm512_set1_epi32(static_cast<int>(g0)));
}

// kRows (1 or 2) weight rows, r and r + stride (y[0] and y[stride]): the rows share every x
// load.
template <int kBits, int kGroup, int kRows>
void AffineRows(const WeightView& w, const float* prep, float* y, int64_t r, int64_t stride) {
  using G = Geom<kBits, kGroup>;
  const int64_t groups = w.RowGroups(), row_words = w.RowWords();
  const int64_t blocks = Blocks(w), full_blocks = row_words / 16;
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << (row_words % 16)) - 1u);
  const int64_t prefetch_words = PrefetchWords(row_words);
  const float* xs = prep + blocks * G::kEb;
  const uint32_t* wr[kRows];
  const uint16_t *sr[kRows], *br[kRows];
  __m512 acc[kRows], bias_acc[kRows];
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    wr[i] = static_cast<const uint32_t*>(w.data) + (r + i * stride) * row_words;
    sr[i] = w.scales + (r + i * stride) * groups;
    br[i] = w.biases + (r + i * stride) * groups;
    acc[i] = _mm512_setzero_ps();
    bias_acc[i] = _mm512_setzero_ps();
  }
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int64_t ng = Min64(16, groups - g0);
    const __m512 xsum = _mm512_loadu_ps(xs + g0);
    __m512 sc[kRows];
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      sc[i] = LoadBf16x16(sr[i] + g0, ng);
      bias_acc[i] = _mm512_fmadd_ps(LoadBf16x16(br[i] + g0, ng), xsum, bias_acc[i]);
    }
    // The chunk's 16 groups are 16·kWpg words: whole blocks, so none straddles two chunks.
    const int64_t b0 = g0 * G::kWpg / 16;
    const int64_t b1 = Min64(blocks, (g0 + 16) * G::kWpg / 16);
    for (int64_t blk = b0; blk < b1; ++blk) {
      __m512i v[kRows];
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(wr[i] + blk * 16 + prefetch_words), _MM_HINT_T0);
        v[i] = blk < full_blocks ? _mm512_loadu_si512(wr[i] + blk * 16)
                                 : _mm512_maskz_loadu_epi32(tail_mask, wr[i] + blk * 16);
      }
      const __m512i idx = ScaleIndex<kBits, kGroup>(blk, g0);
      const float* xp = prep + blk * G::kEb;
      RW_UNROLL
      for (int i = 0; i < kRows; ++i)
        acc[i] =
            _mm512_fmadd_ps(_mm512_permutexvar_ps(idx, sc[i]), BlockDot<kBits>(v[i], xp), acc[i]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kRows; ++i)
    y[i * stride] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], bias_acc[i]));
}

// Rows [r0, r1) in pairs; long rows of a long range pair row i with row i + half so the kernel
// reads two sequential streams, not two runs a row apart interleaved (see linear_avx2.cpp). On
// a Xeon, 2 threads: +5–14%; 16 threads (short ranges, left adjacent): −2% to +1%.
template <int kBits, int kGroup>
void MatVecAffineG(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  const int64_t n = r1 - r0;
  if (w.cols * w.bits / 8 >= detail::kFarPairMinRowBytes && n >= detail::kFarPairMinRows) {
    const int64_t half = n / 2;
    for (int64_t i = 0; i < half; ++i) AffineRows<kBits, kGroup, 2>(w, prep, y + i, r0 + i, half);
    if (n % 2 != 0) AffineRows<kBits, kGroup, 1>(w, prep, y + n - 1, r1 - 1, 0);
    return;
  }
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) AffineRows<kBits, kGroup, 2>(w, prep, y + (r - r0), r, 1);
  if (r < r1) AffineRows<kBits, kGroup, 1>(w, prep, y + (r - r0), r, 0);
}

// MatVec for kM x rows at once (small-batch prefill: a few tokens per expert): each block is
// loaded once and used for every row. prep holds kM prepared rows, prep_stride apart.
template <int kBits, int kGroup, int kM>
void MatMulAffineSmall(const WeightView& w, const float* prep, int64_t prep_stride, float* y,
                       int64_t r0, int64_t r1) {
  using G = Geom<kBits, kGroup>;
  const int64_t groups = w.RowGroups(), row_words = w.RowWords();
  const int64_t blocks = Blocks(w), full_blocks = row_words / 16;
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << (row_words % 16)) - 1u);
  const int64_t prefetch_words = PrefetchWords(row_words);
  const int64_t ldy = w.rows;
  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* wr = static_cast<const uint32_t*>(w.data) + r * row_words;
    const uint16_t* sr = w.scales + r * groups;
    const uint16_t* br = w.biases + r * groups;
    __m512 acc[kM], bias_acc[kM];
    RW_UNROLL
    for (int m = 0; m < kM; ++m) {
      acc[m] = _mm512_setzero_ps();
      bias_acc[m] = _mm512_setzero_ps();
    }
    for (int64_t g0 = 0; g0 < groups; g0 += 16) {
      const int64_t ng = Min64(16, groups - g0);
      const __m512 sc = LoadBf16x16(sr + g0, ng);
      const __m512 bs = LoadBf16x16(br + g0, ng);
      RW_UNROLL
      for (int m = 0; m < kM; ++m)
        bias_acc[m] = _mm512_fmadd_ps(
            bs, _mm512_loadu_ps(prep + m * prep_stride + blocks * G::kEb + g0), bias_acc[m]);
      const int64_t b0 = g0 * G::kWpg / 16;
      const int64_t b1 = Min64(blocks, (g0 + 16) * G::kWpg / 16);
      for (int64_t blk = b0; blk < b1; ++blk) {
        _mm_prefetch(reinterpret_cast<const char*>(wr + blk * 16 + prefetch_words), _MM_HINT_T0);
        const __m512i v = blk < full_blocks ? _mm512_loadu_si512(wr + blk * 16)
                                            : _mm512_maskz_loadu_epi32(tail_mask, wr + blk * 16);
        const __m512 s = _mm512_permutexvar_ps(ScaleIndex<kBits, kGroup>(blk, g0), sc);
        RW_UNROLL
        for (int m = 0; m < kM; ++m)
          acc[m] =
              _mm512_fmadd_ps(s, BlockDot<kBits>(v, prep + m * prep_stride + blk * G::kEb), acc[m]);
      }
    }
    RW_UNROLL
    for (int m = 0; m < kM; ++m)
      y[m * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m], bias_acc[m]));
  }
}

template <int kBits, int kGroup>
void MatMulAffineSmallM(const WeightView& w, int64_t m, const float* prep, int64_t prep_stride,
                        float* y, int64_t r0, int64_t r1) {
  switch (m) {
    case 1:
      MatVecAffineG<kBits, kGroup>(w, prep, y + r0, r0, r1);
      break;
    case 2:
      MatMulAffineSmall<kBits, kGroup, 2>(w, prep, prep_stride, y, r0, r1);
      break;
    case 3:
      MatMulAffineSmall<kBits, kGroup, 3>(w, prep, prep_stride, y, r0, r1);
      break;
    default:
      MatMulAffineSmall<kBits, kGroup, 4>(w, prep, prep_stride, y, r0, r1);
      break;
  }
}

// The group size is a template parameter so block→group arithmetic is shifts.
template <int kBits>
void MatVecAffine(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  switch (w.group) {
    case 32:
      MatVecAffineG<kBits, 32>(w, prep, y, r0, r1);
      break;
    case 64:
      MatVecAffineG<kBits, 64>(w, prep, y, r0, r1);
      break;
    default:
      MatVecAffineG<kBits, 128>(w, prep, y, r0, r1);
      break;
  }
}

template <int kBits>
void MatMulAffineSmallAny(const WeightView& w, int64_t m, const float* prep, int64_t prep_stride,
                          float* y, int64_t r0, int64_t r1) {
  switch (w.group) {
    case 32:
      MatMulAffineSmallM<kBits, 32>(w, m, prep, prep_stride, y, r0, r1);
      break;
    case 64:
      MatMulAffineSmallM<kBits, 64>(w, m, prep, prep_stride, y, r0, r1);
      break;
    default:
      MatMulAffineSmallM<kBits, 128>(w, m, prep, prep_stride, y, r0, r1);
      break;
  }
}

}  // namespace

int64_t PrepFloats(const WeightView& w) {
  if (w.type != WeightType::kAffine) return 0;
  return Blocks(w) * 16 * (32 / w.bits) + w.RowGroups() + 16;
}

void PrepareX(const WeightView& w, const float* x, float* prep) {
  if (w.type != WeightType::kAffine) return;
  if (w.bits == 4)
    PrepareAffine<4>(w, x, prep);
  else
    PrepareAffine<8>(w, x, prep);
}

void MatVecRows(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                int64_t r1) {
  if (w.type != WeightType::kAffine) {
    avx2::MatVecRows(w, x, prep, y, r0, r1);  // bf16/f32: small matrices, the AVX2 kernel
    return;
  }
  if (w.bits == 4)
    MatVecAffine<4>(w, prep, y, r0, r1);
  else
    MatVecAffine<8>(w, prep, y, r0, r1);
}

void MatMulPreppedRows(const WeightView& w, const float*, int64_t m, const float* prep,
                       int64_t prep_stride, float* y, int64_t r0, int64_t r1) {
  // Groups of up to 4 x rows. With several groups the weight rows go in blocks of 8, so every
  // group after the first finds its block in L1 (a verify of 16 rows reads the weights once).
  const int64_t block = m > 4 ? 8 : r1 - r0;
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = Min64(r1, rb + block);
    for (int64_t i = 0; i < m; i += 4) {
      const int64_t mi = Min64(4, m - i);
      if (w.bits == 4)
        MatMulAffineSmallAny<4>(w, mi, prep + i * prep_stride, prep_stride, y + i * w.rows, rb, re);
      else
        MatMulAffineSmallAny<8>(w, mi, prep + i * prep_stride, prep_stride, y + i * w.rows, rb, re);
    }
  }
}

}  // namespace rw::cpu::avx512
