// AVX-512BW fast affine matvec (Precision::kFast; definition in matvec_q8.h). The AVX2 kernel
// with the integer products on 512-bit vectors (twice the weights per instruction); the
// per-block sums are then split into the AVX2 kernel's 256-bit partial sums, so the reduction
// and the fp32 combination (matvec_q8_simd.h) are shared and the bits are the same. x is
// prepared by the AVX2 code. Compiled with the AVX-512 flags; intrinsics and local helpers only.
#include <immintrin.h>

#include "backend/cpu/avx2_math.h"
#include "backend/cpu/avx512_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matvec_q8.h"
#include "backend/cpu/matvec_q8_simd.h"

namespace rw::cpu::avx512 {
namespace {

struct Avx512Sums {
  template <int kBits, int kRows, bool kFull>
  static inline void Chunk(const uint8_t* const* wc, const int8_t* xa, const int8_t* xc,
                           const int32_t* qs, int nbt, __m256i* isum) {
    const __m512i ones = _mm512_set1_epi16(1), k256 = _mm512_set1_epi16(256);
    // Bytes of this chunk inside the row.
    const int64_t bytes = static_cast<int64_t>(nbt) * 32 * kBits / 8;
    if constexpr (kBits == 4) {
      const __m512i m4 = _mm512_set1_epi8(0x0F);
      __m256i part[kRows][4];
      RW_UNROLL
      for (int h = 0; h < 2; ++h) {
        // 64 bytes: spans 2h and 2h + 1 (blocks 4h .. 4h + 3, one per 128-bit lane).
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
          const __m512i sa =
              _mm512_add_epi16(_mm512_maddubs_epi16(lo, alo), _mm512_maddubs_epi16(hi, ahi));
          const __m512i sc =
              _mm512_add_epi16(_mm512_maddubs_epi16(lo, clo), _mm512_maddubs_epi16(hi, chi));
          const __m512i s =
              _mm512_add_epi32(_mm512_madd_epi16(sa, k256), _mm512_madd_epi16(sc, ones));
          part[i][2 * h] = _mm512_castsi512_si256(s);
          part[i][2 * h + 1] = _mm512_extracti64x4_epi64(s, 1);
        }
      }
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) isum[i] = q8simd::ReduceQ4(part[i]);
    } else {
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      __m256i part[kRows][8];
      RW_UNROLL
      for (int h = 0; h < 4; ++h) {
        // 64 bytes: blocks 2h and 2h + 1.
        const __m512i av = _mm512_load_si512(xa + 64 * h);
        const __m512i cv = _mm512_load_si512(xc + 64 * h);
        RW_UNROLL
        for (int i = 0; i < kRows; ++i) {
          const __m512i raw = kFull ? _mm512_loadu_si512(wc[i] + 64 * h)
                                    : LoadUpto64(wc[i] + 64 * h, bytes - 64 * h);
          const __m512i v = _mm512_xor_si512(raw, flip);
          // No 512-bit sign_epi8: negate the planes where q − 128 < 0 (where it is 0, |v| = 0).
          const __mmask64 neg = _mm512_movepi8_mask(v);
          const __m512i zero = _mm512_setzero_si512();
          const __m512i mag = _mm512_abs_epi8(v);
          const __m512i sa = _mm512_maddubs_epi16(mag, _mm512_mask_sub_epi8(av, neg, zero, av));
          const __m512i sc = _mm512_maddubs_epi16(mag, _mm512_mask_sub_epi8(cv, neg, zero, cv));
          const __m512i s =
              _mm512_add_epi32(_mm512_madd_epi16(sa, k256), _mm512_madd_epi16(sc, ones));
          // A padded block read zero weights, i.e. q − 128 = −128 against planes of 0: sum 0.
          part[i][2 * h] = _mm512_castsi512_si256(s);
          part[i][2 * h + 1] = _mm512_extracti64x4_epi64(s, 1);
        }
      }
      const __m256i corr =
          _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(qs)), 7);
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) isum[i] = _mm256_add_epi32(q8simd::ReduceQ8(part[i]), corr);
    }
  }
};

}  // namespace

void MatVecQ8Rows(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  q8simd::MatVecRows<Avx512Sums>(w, prep, y, r0, r1);
}

}  // namespace rw::cpu::avx512
