// Internal: one table of single-threaded kernels per instruction set. ops.cpp and attention.cpp
// validate arguments, split work across threads and call through the active table.
//
// The AVX2 table lives in translation units compiled with -mavx2 -mfma. Those files include
// only intrinsics and this header (plain function pointers and PODs), so no inline function
// or template instantiated with AVX2 code can be shared with (and picked by the linker for) the
// portable code: the library must run on CPUs without AVX2.
#pragma once

#include <cstdint>

#include "backend/cpu/ops.h"

namespace rw::cpu::detail {

struct KernelTable {
  Isa isa;

  // MatVec: prepare_x turns x into an ISA-specific form (for affine weights: x reordered to the
  // kernel's unpack order, plus per-group sums of x) in prep_floats(w) floats; matvec_rows then
  // writes y[r - r0] for rows [r0, r1).
  int64_t (*prep_floats)(const WeightView& w);
  void (*prepare_x)(const WeightView& w, const float* x, float* prep);
  void (*matvec_rows)(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
                      int64_t r1);
  // MatMul restricted to weight rows [r0, r1): Y[i, r] for all i < m (Y row stride = w.rows).
  void (*matmul_rows)(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0,
                      int64_t r1);
  // The weight rows matmul_rows packs together: thread splits keep to multiples of it.
  int matmul_panel;
  // Affine MatMul for a few rows of X (m <= small_m), each prepared by prepare_x at
  // prep + i·prep_stride: the matvec kernel sharing each unpacked block across the rows,
  // which beats packing panels when m is small. small_m = 0: not available.
  int small_m;
  void (*matmul_prepped_rows)(const WeightView& w, const float* x, int64_t m, const float* prep,
                              int64_t prep_stride, float* y, int64_t r0, int64_t r1);
  void (*dequant_row)(const WeightView& w, int64_t row, float* out);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);

  float (*sum_squares)(const float* x, int64_t n);
  // y = x·s·w, w an f32/bf16 norm weight or null.
  void (*scale_by_weight)(const float* x, float s, const WeightView* w, float* y, int64_t n);
  void (*geglu)(float* gate, const float* up, int64_t n);
  float (*max)(const float* x, int64_t n);
  // x = exp(x − m); returns the sum of the new x.
  float (*exp_sub_sum)(float* x, int64_t n, float m);
  void (*softcap)(float* x, int64_t n, float cap);
  void (*rope)(float* x, int n_heads, int head_dim, const float* cos, const float* sin);
  void (*add)(float* y, const float* x, int64_t n);
  void (*mul)(float* y, const float* x, int64_t n);
  void (*scale)(float* y, float s, int64_t n);
  void (*axpy)(float* y, float a, const float* x, int64_t n);
  float (*dot)(const float* a, const float* b, int64_t n);

  // Attention inner loops over n contiguous cache rows of head_dim floats, for nq query vectors
  // (pointer arrays, as the queries of one KV head need not be contiguous):
  //   s[i·lds + t] = scale·(q_i·k_t);   o_i += Σ_t p[i·ldp + t]·v_t.
  void (*scores)(const float* const* q, int nq, const float* k, int64_t n, int head_dim,
                 float scale, float* s, int64_t lds);
  void (*pv)(const float* p, int64_t ldp, int nq, int64_t n, const float* v, int head_dim,
             float* const* o);
  // The same over a bf16 or an IEEE fp16 cache (KvType), rows widened to fp32 as they are read.
  void (*scores_bf16)(const float* const* q, int nq, const uint16_t* k, int64_t n, int head_dim,
                      float scale, float* s, int64_t lds);
  void (*pv_bf16)(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int head_dim,
                  float* const* o);
  void (*scores_f16)(const float* const* q, int nq, const uint16_t* k, int64_t n, int head_dim,
                     float scale, float* s, int64_t lds);
  void (*pv_f16)(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int head_dim,
                 float* const* o);

  // Precision::kFast on affine weights (the definition is in matvec_q8.h): prepare_x_q8 writes
  // x as int8 blocks into Q8LayoutFor(w).floats floats at a 64-byte aligned prep; matvec_q8_rows
  // then writes y[r - r0] for rows [r0, r1). Every table gives the same bits.
  void (*prepare_x_q8)(const WeightView& w, const float* x, float* prep);
  void (*matvec_q8_rows)(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1);
};

const KernelTable& ScalarKernels();
// Only valid on CPUs with AVX2 + FMA.
const KernelTable& Avx2Kernels();
// Only valid on CPUs with AVX-512 F/BW/VL/DQ, AVX2 and FMA.
const KernelTable& Avx512Kernels();
// Whether the CPU has AVX-512 VNNI too (the AVX-512 table's fast matvec then uses it).
bool CpuHasAvx512Vnni();
// The table selected by ActiveIsa().
const KernelTable& Active();

// Scratch for the matmul kernels' packed X, per calling thread, 64-byte aligned, valid until the
// thread's next call. Defined in portable code so no container is instantiated with AVX code.
float* PackScratch(int64_t floats);

// The affine matvecs compute two rows at a time. A range of at least kFarPairMinRows rows of at
// least kFarPairMinRowBytes bytes pairs row i with row i + half (two sequential streams, which
// the hardware prefetchers follow; measurements in linear_avx2.cpp); others pair adjacent rows.
inline constexpr int64_t kFarPairMinRowBytes = 1024;
inline constexpr int64_t kFarPairMinRows = 128;

// Asks the caches for the weight bytes (data, scales, biases) that PackPanel will read for rows
// [n0, n0 + nr) × columns [kc, kc + kl). The matmuls call it one panel ahead: a panel's rows are
// short strided runs that the hardware prefetcher does not follow, and for an expert's ~32 rows
// the weights come from DRAM (measured: up to 20% of its time waiting).
void PrefetchPanel(const WeightView& w, int64_t n0, int nr, int64_t kc, int kl);

}  // namespace rw::cpu::detail
