// Internal: the AVX2 + FMA (+ F16C) attention loops (attention_avx2.cpp), entries of the AVX2
// KernelTable for each KV cache type. See kernels.h for the contracts. Call only on CPUs with
// AVX2, FMA and F16C.
#pragma once

#include <cstdint>

namespace rw::cpu::avx2 {

void Scores(const float* const* q, int nq, const float* k, int64_t n, int hd, float scale, float* s,
            int64_t lds);
void Pv(const float* p, int64_t ldp, int nq, int64_t n, const float* v, int hd, float* const* o);
void ScoresBf16(const float* const* q, int nq, const uint16_t* k, int64_t n, int hd, float scale,
                float* s, int64_t lds);
void PvBf16(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int hd,
            float* const* o);
void ScoresF16(const float* const* q, int nq, const uint16_t* k, int64_t n, int hd, float scale,
               float* s, int64_t lds);
void PvF16(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int hd,
           float* const* o);

}  // namespace rw::cpu::avx2
