// AVX2 fast affine matvec (Precision::kFast; the definition is in matvec_q8.h). Compiled with
// -mavx2 -mfma; intrinsics and local helpers only (see kernels.h).
//
// Integer part, per plane (a, then c; the sums combine as madd(Σa, 256) + madd(Σc, 1)). q4: a
// 32-byte load holds 64 weights, the low nibbles the even ones and the high nibbles the odd
// ones, which is why the prepared x stores each 64-element span as evens then odds:
// maddubs(nibbles, plane) (unsigned × signed bytes, adjacent pairs summed into int16: at most
// 2·15·127, twice) and madd give int32 lanes, lanes 0-3 block 2p and 4-7 block 2p + 1. q8:
// maddubs of q (0..255) × a plane would overflow int16 (2·255·127 = 64770 > 32767), so the
// kernel takes q − 128 (a byte XOR 0x80) as |q − 128| × the sign-adjusted plane (pairs at most
// 2·128·127 = 32512) and adds back 128·qs per block from the prepared x: the same exact integer.
// Per 256 weights and row: q4 4 loads and 44 integer ops, q8 8 loads and 64, against 96 float
// ops (and/shift, convert, FMA) in the exact kernel.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/avx2_math.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matvec_q8.h"
#include "backend/cpu/matvec_q8_simd.h"

namespace rw::cpu::avx2 {
namespace {

using detail::Q8Layout;

struct Avx2Sums {
  template <int kBits, int kRows, bool kFull>
  static inline void Chunk(const uint8_t* const* wc, const int8_t* xa, const int8_t* xc,
                           const int32_t* qs, int nbt, __m256i* isum) {
    const __m256i ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
    if constexpr (kBits == 4) {
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      __m256i part[kRows][4];
      RW_UNROLL
      for (int p = 0; p < 4; ++p) {
        const __m256i alo = _mm256_load_si256(reinterpret_cast<const __m256i*>(xa + 64 * p));
        const __m256i ahi = _mm256_load_si256(reinterpret_cast<const __m256i*>(xa + 64 * p + 32));
        const __m256i clo = _mm256_load_si256(reinterpret_cast<const __m256i*>(xc + 64 * p));
        const __m256i chi = _mm256_load_si256(reinterpret_cast<const __m256i*>(xc + 64 * p + 32));
        RW_UNROLL
        for (int i = 0; i < kRows; ++i) {
          __m256i v;
          if (kFull || 2 * p + 1 < nbt) {
            v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wc[i] + 32 * p));
          } else if (2 * p < nbt) {  // the row's last block: 16 bytes, no read past the row
            v = _mm256_zextsi128_si256(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(wc[i] + 32 * p)));
          } else {
            v = _mm256_setzero_si256();
          }
          const __m256i lo = _mm256_and_si256(v, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          const __m256i sa =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi));
          const __m256i sc =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, clo), _mm256_maddubs_epi16(hi, chi));
          part[i][p] = _mm256_add_epi32(_mm256_madd_epi16(sa, k256), _mm256_madd_epi16(sc, ones));
        }
      }
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) isum[i] = q8simd::ReduceQ4(part[i]);
    } else {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      __m256i part[kRows][8];
      RW_UNROLL
      for (int b = 0; b < 8; ++b) {
        const __m256i av = _mm256_load_si256(reinterpret_cast<const __m256i*>(xa + 32 * b));
        const __m256i cv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xc + 32 * b));
        RW_UNROLL
        for (int i = 0; i < kRows; ++i) {
          if (!kFull && b >= nbt) {
            part[i][b] = _mm256_setzero_si256();
            continue;
          }
          const __m256i v = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wc[i] + 32 * b)), flip);
          const __m256i mag = _mm256_abs_epi8(v);
          const __m256i sa = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(av, v));
          const __m256i sc = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(cv, v));
          part[i][b] = _mm256_add_epi32(_mm256_madd_epi16(sa, k256), _mm256_madd_epi16(sc, ones));
        }
      }
      const __m256i corr =
          _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(qs)), 7);
      RW_UNROLL
      for (int i = 0; i < kRows; ++i) isum[i] = _mm256_add_epi32(q8simd::ReduceQ8(part[i]), corr);
    }
  }
};

// 32 int32 (four vectors, in order) as 32 int8 in natural order: packs interleave 128-bit lanes,
// the permute undoes it.
inline __m256i PackBytes(const __m256i* q) {
  const __m256i p16 =
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Block b's 32 codes into plane p: natural order (q8), or each 64-element span as its evens
// then its odds (q4), this block's half of each.
inline void StorePlane(int bits, int64_t b, __m256i nat, int8_t* p) {
  if (bits == 8) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(p + b * 32), nat);
    return;
  }
  const __m256i split = _mm256_shuffle_epi8(
      nat, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10,
                            12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i eo = _mm256_permute4x64_epi64(split, 0xD8);  // [evens 16 | odds 16]
  int8_t* span = p + (b / 2) * 64 + (b % 2) * 16;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(span), _mm256_castsi256_si128(eo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(span + 32), _mm256_extracti128_si256(eo, 1));
}

}  // namespace

void PrepareXQ8(const WeightView& w, const float* x, float* prep) {
  const Q8Layout l = detail::Q8LayoutFor(w);
  const auto [xa, xc, e, qs, sx] = detail::Q8PlanesOf(prep, l);
  const int64_t nb = w.cols / 32;
  // Padding (a q4 span half filled keeps its other half zero too).
  const int64_t filled = nb / 2 * 64;
  std::memset(xa + filled, 0, static_cast<size_t>(l.kp - filled));
  std::memset(xc + filled, 0, static_cast<size_t>(l.kp - filled));
  for (int64_t b = nb; b < l.blocks; ++b) {
    e[b] = 0.0f;
    qs[b] = 0;
  }
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 k256 = _mm256_set1_ps(256.0f);
  const __m256i lim = _mm256_set1_epi32(127);
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(xb + 8 * j);
    const __m256 m =
        _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    const float amax = HorizontalMax(m);
    const float db = amax < detail::kQ8TinyMax ? 0.0f : amax / 127.0f;
    const __m256 dv = _mm256_set1_ps(db);
    const __m256 id = _mm256_set1_ps(db != 0.0f ? 1.0f / db : 0.0f);
    __m256i a[4], c[4];
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      // cvtps rounds in the current mode (to nearest even), as std::nearbyint does.
      a[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));
      const __m256 r = _mm256_sub_ps(v[j], _mm256_mul_ps(_mm256_cvtepi32_ps(a[j]), dv));
      c[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(r, id), k256));
      c[j] = _mm256_max_epi32(_mm256_min_epi32(c[j], lim),
                              _mm256_sub_epi32(_mm256_setzero_si256(), lim));
      sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_slli_epi32(a[j], 8), c[j]));
    }
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    qs[b] = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
    e[b] = db / 256.0f;
    StorePlane(w.bits, b, PackBytes(a), xa);
    StorePlane(w.bits, b, PackBytes(c), xc);
  }
  // Group sums of the unquantized x: 8 lanes, then HorizontalSum (the exact path's sums).
  const int64_t groups = w.RowGroups();
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * w.group;
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < w.group; k += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(xg + k));
    sx[g] = HorizontalSum(acc);
  }
  for (int64_t g = groups; g < l.sx_count; ++g) sx[g] = 0.0f;
}

void MatVecQ8Rows(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  q8simd::MatVecRows<Avx2Sums>(w, prep, y, r0, r1);
}

}  // namespace rw::cpu::avx2
