// Internal: the AVX-512 prefill matmul (linear_avx512.cpp) and decode matvec
// (matvec_avx512.cpp), entries of the AVX-512 KernelTable (the AVX2 table with these). See
// kernels.h for the contracts. Call only on CPUs with AVX-512 F/BW/VL/DQ, AVX2 and FMA.
#pragma once

#include <cstdint>

#include "backend/weight_view.h"

namespace rw::cpu::avx512 {

// MatMul restricted to weight rows [r0, r1), as KernelTable::matmul_rows; 32-row panels.
void MatMulRows(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1);

// The matvec entries (affine weights: x in 16-lane block order; bf16/f32 go to the AVX2 kernel).
// prep must be 64-byte aligned, and MatMulPreppedRows's prep_stride a multiple of 16 floats.
int64_t PrepFloats(const WeightView& w);
void PrepareX(const WeightView& w, const float* x, float* prep);
void MatVecRows(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                int64_t r1);
void MatMulPreppedRows(const WeightView& w, const float* x, int64_t m, const float* prep,
                       int64_t prep_stride, float* y, int64_t r0, int64_t r1);

}  // namespace rw::cpu::avx512
