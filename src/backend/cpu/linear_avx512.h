// Internal: the AVX-512 prefill matmul (linear_avx512.cpp), an entry of the AVX-512
// KernelTable (the AVX2 table with this matmul). Call only on CPUs with AVX-512F, AVX2 and FMA.
#pragma once

#include <cstdint>

#include "backend/weight_view.h"

namespace rw::cpu::avx512 {

// MatMul restricted to weight rows [r0, r1), as KernelTable::matmul_rows; 32-row panels.
void MatMulRows(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1);

}  // namespace rw::cpu::avx512
