// AVX-512 VNNI fast affine matvec (Precision::kFast; definition in matvec_q8.h). The AVX-512BW
// kernel with each product of weight bytes and an x plane formed by `vpdpbusd` (unsigned weight
// bytes times signed x bytes, four products summed into each int32 lane) instead of
// maddubs + madd. The int32 lanes hold the same sums of the same products, so the per-block sums,
// and everything after them (matvec_q8_simd.h), are the same bits as the other kernels'. 8-bit
// codes go in unsigned as they are: no q − 128 shift and no correction.
// Compiled with the AVX-512 flags plus -mavx512vnni, and picked only on CPUs that have VNNI.
#include <immintrin.h>

#include "backend/cpu/avx2_math.h"
#include "backend/cpu/avx512_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matvec_q8.h"
#include "backend/cpu/matvec_q8_simd.h"

namespace rw::cpu::avx512 {
namespace {

// 256·(w·a) + (w·c) per int32 lane: |w·a| <= 8·255·127 per lane, so nothing overflows.
inline __m512i TwoPlanes(__m512i sa, __m512i sc) {
  return _mm512_add_epi32(_mm512_slli_epi32(sa, 8), sc);
}

// Per-block sums of a q4 chunk from its two 512-bit partial sums: lo holds blocks 0-3 and hi
// blocks 4-7, four int32 partials per 128-bit lane. Returns lane b = block b's sum (integer adds:
// the same value as matvec_q8_simd.h's ReduceQ4 in fewer instructions).
inline __m256i ReduceQ4Pair(__m512i lo, __m512i hi) {
  // Lane j: [lo0 + lo2, hi0 + hi2, lo1 + lo3, hi1 + hi3], then [Lj, Hj, Lj, Hj] with Lj the sum
  // of block j and Hj of block 4 + j.
  const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(lo, hi), _mm512_unpackhi_epi32(lo, hi));
  const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, u));
}

// The same for a q8 chunk: s[h] holds blocks 2h (its low 256 bits) and 2h + 1 (high), eight
// partials each.
inline __m256i ReduceQ8Quad(const __m512i* s) {
  // Lane j of t01: [s0 + s0', s1 + s1', ...] pairs; of v: [Σ s0, Σ s1, Σ s2, Σ s3] over lane j.
  const __m512i t01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
  const __m512i t23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
  const __m512i v =
      _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
  // Lanes 0 + 1 are blocks 0, 2, 4, 6 (each s[h]'s low half); lanes 2 + 3 blocks 1, 3, 5, 7.
  const __m512i w = _mm512_add_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, w));
}

struct VnniSums {
  template <int kBits, int kRows, bool kFull>
  static inline void Chunk(const uint8_t* const* wc, const int8_t* xa, const int8_t* xc,
                           const int32_t* /*qs*/, int nbt, __m256i* isum) {
    const __m512i zero = _mm512_setzero_si512();
    const int64_t bytes = static_cast<int64_t>(nbt) * 32 * kBits / 8;
    if constexpr (kBits == 4) {
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      __m512i sum[kRows][2];
      RW_UNROLL
      for (int h = 0; h < 2; ++h) {
        // 64 bytes: blocks 4h .. 4h + 3, one per 128-bit lane (low nibbles the block's even
        // elements, high nibbles its odd ones, as x's planes are laid out).
        const __m512i alo = LoadX2(xa + 128 * h, xa + 128 * h + 64);
        const __m512i ahi = LoadX2(xa + 128 * h + 32, xa + 128 * h + 96);
        const __m512i clo = LoadX2(xc + 128 * h, xc + 128 * h + 64);
        const __m512i chi = LoadX2(xc + 128 * h + 32, xc + 128 * h + 96);
        RW_UNROLL
        for (int i = 0; i < kRows; ++i) {
          const __m512i v = kFull ? _mm512_loadu_si512(wc[i] + 64 * h)
                                  : LoadUpto64(wc[i] + 64 * h, bytes - 64 * h);
          const __m512i lo = _mm512_and_si512(v, m4);
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          const __m512i sa = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, alo), hi, ahi);
          const __m512i sc = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, lo, clo), hi, chi);
          sum[i][h] = TwoPlanes(sa, sc);
        }
      }
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) isum[i] = ReduceQ4Pair(sum[i][0], sum[i][1]);
    } else {
      __m512i sum[kRows][4];
      RW_UNROLL
      for (int h = 0; h < 4; ++h) {
        // 64 bytes: blocks 2h and 2h + 1 (a padded block reads zero codes: sum 0).
        const __m512i av = _mm512_load_si512(xa + 64 * h);
        const __m512i cv = _mm512_load_si512(xc + 64 * h);
        RW_UNROLL
        for (int i = 0; i < kRows; ++i) {
          const __m512i v = kFull ? _mm512_loadu_si512(wc[i] + 64 * h)
                                  : LoadUpto64(wc[i] + 64 * h, bytes - 64 * h);
          sum[i][h] = TwoPlanes(_mm512_dpbusd_epi32(zero, v, av), _mm512_dpbusd_epi32(zero, v, cv));
        }
      }
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) isum[i] = ReduceQ8Quad(sum[i]);
    }
  }
};

}  // namespace

void MatVecQ8RowsVnni(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  q8simd::MatVecRows<VnniSums>(w, prep, y, r0, r1);
}

}  // namespace rw::cpu::avx512
