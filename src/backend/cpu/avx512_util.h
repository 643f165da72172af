// Small helpers shared by the AVX-512 translation units (linear_avx512.cpp, matvec_avx512.cpp).
// Include ONLY from files compiled with the AVX-512 flags: everything here has internal linkage,
// so no code built for AVX-512 can be picked by the linker for portable code (see kernels.h).
#pragma once

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

}  // namespace rw::cpu::avx512
