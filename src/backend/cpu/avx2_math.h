// AVX2 helpers shared by the AVX2 translation units: exp, tanh, horizontal sums, bf16 loads.
// Include ONLY from files compiled with -mavx2 -mfma. Everything here has internal linkage
// (static inline) so no AVX2 code can leak into portable translation units.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// Fully unrolls a short fixed-count loop before GCC's scalar-replacement pass, so arrays of
// accumulators live in registers instead of being stored to the stack on every iteration.
#define RW_UNROLL _Pragma("GCC unroll 16")

namespace rw::cpu::avx2 {

static inline float Bf16Scalar(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// 8 bf16 values (any alignment) to fp32.
static inline __m256 LoadBf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// [sum(a), sum(b), sum(c), sum(d)].
static inline __m128 HorizontalSum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256 ab = _mm256_hadd_ps(a, b);
  __m256 cd = _mm256_hadd_ps(c, d);
  __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// sum(v) in HorizontalSum4's order, ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)): a value summed
// alone or four at a time rounds the same.
static inline float HorizontalSumPairs(__m256 v) {
  __m128 h = _mm_hadd_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_hadd_ps(h, h);
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// Lane mask selecting the first n (0..8) lanes, for masked loads and stores of tails.
static inline __m256i TailMask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

// e^x in fp32, max relative error ~2 ulp. x = n·ln2 + r with |r| <= ln2/2 (Cody–Waite split of
// ln2 so r is nearly exact); e^r by its degree-7 Taylor polynomial (truncation < 1e-8); 2^n by
// building the exponent bits. Inputs are clamped: e^x = 0 below −88, finite up to 88.
static inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 high part (exact n·hi)
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440054690583e-4f), r);  // ln2 − hi
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n = −127 gives exponent bits 0, i.e. 2^n becomes 0 (underflow to zero).
  __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// tanh in fp32, max abs error ~1.5e-7. For |u| < 0.5 the Taylor series to u^17 (truncation
// < 1e-9 relative, no cancellation near 0); beyond, 1 − 2/(e^{2|u|} + 1), where the absolute
// error of the exp form is ~1 ulp of 1. |u| >= 9 saturates to ±1 as fp32 does.
static inline __m256 Tanh(__m256 u) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 sign = _mm256_and_ps(u, sign_bit);
  const __m256 a = _mm256_andnot_ps(sign_bit, u);
  // Odd Taylor coefficients of tanh: 1, −1/3, 2/15, −17/315, 62/2835, … (Bernoulli numbers).
  const __m256 z = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(6404582.0f / 10854718875.0f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-929569.0f / 638512875.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(21844.0f / 6081075.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-1382.0f / 155925.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(62.0f / 2835.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), a, a);
  const __m256 e = Exp(_mm256_add_ps(_mm256_min_ps(a, _mm256_set1_ps(9.0f)),
                                     _mm256_min_ps(a, _mm256_set1_ps(9.0f))));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 large =
      _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 t =
      _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
  return _mm256_or_ps(t, sign);
}

// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the same operation order as rw::cpu::GeluTanh.
static inline __m256 GeluTanh(__m256 x) {
  const __m256 kx3 =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x), x);
  const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, kx3));
  const __m256 half_x = _mm256_mul_ps(_mm256_set1_ps(0.5f), x);
  return _mm256_mul_ps(half_x, _mm256_add_ps(_mm256_set1_ps(1.0f), Tanh(inner)));
}

}  // namespace rw::cpu::avx2
