// Internal: the AVX2 + FMA matrix kernels (linear_avx2.cpp), entries of the AVX2 KernelTable.
// See kernels.h for the contracts. Call only on CPUs with AVX2 + FMA.
#pragma once

#include <cstdint>

#include "backend/weight_view.h"

namespace rw::cpu::avx2 {

int64_t PrepFloats(const WeightView& w);
void PrepareX(const WeightView& w, const float* x, float* prep);
void MatVecRows(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                int64_t r1);
void MatMulRows(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1);
void MatMulPreppedRows(const WeightView& w, const float* x, int64_t m, const float* prep,
                       int64_t prep_stride, float* y, int64_t r0, int64_t r1);
// Packs weight rows [n0, n0 + nr) (nr ≤ 16; missing rows as zeros) × columns [kc, kc + kl) as
// fp32 into bp[k·ld + 0..16), for the matmul micro-kernels (this one's and the AVX-512 one's).
// bp and ld·4 bytes 32-byte aligned.
void PackPanel16(const WeightView& w, int64_t n0, int nr, int64_t kc, int kl, float* bp, int ld);
void DequantRow(const WeightView& w, int64_t row, float* out);
void Bf16ToF32(const uint16_t* src, float* dst, int64_t n);

}  // namespace rw::cpu::avx2
