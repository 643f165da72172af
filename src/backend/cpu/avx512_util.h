// Small helpers shared by the AVX-512 translation units (linear_avx512.cpp, matvec_avx512.cpp,
// matvec_q8_avx512.cpp, matvec_q8_vnni.cpp).
// Include ONLY from files compiled with the AVX-512 flags: everything here has internal linkage,
// so no code built for AVX-512 can be picked by the linker for portable code (see kernels.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

// Fully unrolls a short fixed-count loop before GCC's scalar-replacement pass, so arrays of
// accumulators live in registers instead of the stack.
#ifndef RW_UNROLL
#if defined(__GNUC__)
#define RW_UNROLL _Pragma("GCC unroll 16")
#else
#define RW_UNROLL
#endif
#endif

namespace rw::cpu::avx512 {

static inline int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// The bytes [p, p + n) of a 64-byte window (n clamped to 0..64), zeros elsewhere; the masked
// load does not touch (or fault on) the bytes left out.
static inline __m512i LoadUpto64(const uint8_t* p, int64_t n) {
  if (n >= 64) return _mm512_loadu_si512(p);
  if (n <= 0) return _mm512_setzero_si512();
  return _mm512_maskz_loadu_epi8((__mmask64{1} << n) - 1, p);
}

// Two 32-byte aligned runs of int8 as one vector (a in the low half).
static inline __m512i LoadX2(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(a))),
      _mm256_load_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

}  // namespace rw::cpu::avx512
