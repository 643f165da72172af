// Internal: the fast affine matvec (Precision::kFast): x as two int8 planes per block of 32,
// each block's dot with the 4-bit or 8-bit weights an exact integer sum. One definition,
// followed bit for bit by the scalar reference (kernels_scalar.cpp) and the AVX2 and AVX-512
// kernels:
//
//   prepare (per call, O(K)), for each block b of 32 consecutive x (natural order):
//     amax = max |x_k|;  d = amax / 127 (d = 0 when amax < 2^-96: the block is zero);
//     id = d != 0 ? 1 / d : 0;
//     a_k = nearbyint(x_k · id)                        (ties to even; |a| <= 127)
//     r_k = x_k − a_k · d                              (two fp32 roundings, in that order)
//     c_k = clamp(nearbyint((r_k · id) · 256), ±127)   (the remainder, 256 times finer)
//     e_b = d / 256;  qs_b = Σ (256·a_k + c_k)   (int32)
//   so x_k ≈ (256·a_k + c_k)·e_b to within ~d/256 (a 16-bit code, as two int8 planes that the
//   byte multipliers take). For each weight group g, sx_g = Σ x_k over the group
//   (unquantized), summed in 8 lanes (lane i takes k ≡ i mod 8, in order) then reduced as Hsum
//   below: the exact path's sum.
//
//   row r, with s_g, t_g the bf16 scale and bias of group g and q_k in 0..2^bits − 1:
//     isum_b = Σ_{k in b} q_k · (256·a_k + c_k)        (int32, exact: |isum| < 32·255·32639)
//     acc[b mod 8] = fma(float(isum_b), s_g(b) · e_b, acc[b mod 8])    for b = 0, 1, ...
//     bacc[g mod 8] = fma(t_g, sx_g, bacc[g mod 8])                     for g = 0, 1, ...
//     y_r = Hsum(acc) + Hsum(bacc),  Hsum(v) = ((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7)).
//   (float(isum) rounds to nearest even: the same in every kernel.)
//
// One int8 plane alone (a_k·d) is what llama.cpp's Q8 activations do; on the golden fixtures'
// random models it moved the mean KL per position by 0.1-0.24 nats, the second plane by ~1e-6
// (docs/PERFORMANCE.md, 2026-12-06). The bias term uses the exact sums of x, so only the scale
// term carries the activation's rounding: |(256·a + c)·e − x| <= d/256 per element.
//
// Prepared x (all ISAs share the layout, so a test can run any kernel on any prepared x), in
// bytes from a 64-byte aligned base; Kp = K rounded up to 256, zero padded:
//   a, c  int8 [Kp] each: 8-bit weights in natural order; 4-bit weights with each 64-element
//         span stored as its 32 even elements then its 32 odd ones (the order of a 32-byte
//         load's low nibbles, then its high nibbles);
//   e float [Kp/32]; qs int32 [Kp/32]; sx float [groups rounded up to 8, + 8].
//
// Everything here has internal linkage: the file is included by the AVX2 and AVX-512 units too,
// and no code built for them may be picked by the linker for portable code (see kernels.h).
#pragma once

#include <cstdint>

#include "backend/weight_view.h"

namespace rw::cpu::detail {
namespace {

struct Q8Layout {
  int64_t kp;      // padded K
  int64_t blocks;  // Kp / 32
  int64_t c_off;   // byte offsets from the base (a is at 0)
  int64_t d_off;   // e
  int64_t qs_off;
  int64_t sx_off;
  int64_t sx_count;  // floats of sx (zero past the last group)
  int64_t floats;    // the whole, in 4-byte units
};

[[maybe_unused]] Q8Layout Q8LayoutFor(const WeightView& w) {
  Q8Layout l;
  l.kp = (w.cols + 255) / 256 * 256;
  l.blocks = l.kp / 32;
  l.c_off = l.kp;
  l.d_off = 2 * l.kp;
  l.qs_off = l.d_off + 4 * l.blocks;
  l.sx_off = l.qs_off + 4 * l.blocks;
  l.sx_count = (w.RowGroups() + 7) / 8 * 8 + 8;
  l.floats = l.sx_off / 4 + l.sx_count;
  return l;
}

// The prepared x's parts, from its base (prep, 64-byte aligned) and layout.
struct Q8Planes {
  int8_t* a;
  int8_t* c;
  float* e;
  int32_t* qs;
  float* sx;
};
struct Q8ConstPlanes {
  const int8_t* a;
  const int8_t* c;
  const float* e;
  const int32_t* qs;
  const float* sx;
};

[[maybe_unused]] Q8Planes Q8PlanesOf(void* prep, const Q8Layout& l) {
  auto* base = static_cast<char*>(prep);
  return {reinterpret_cast<int8_t*>(base), reinterpret_cast<int8_t*>(base + l.c_off),
          reinterpret_cast<float*>(base + l.d_off), reinterpret_cast<int32_t*>(base + l.qs_off),
          reinterpret_cast<float*>(base + l.sx_off)};
}

[[maybe_unused]] Q8ConstPlanes Q8ConstPlanesOf(const void* prep, const Q8Layout& l) {
  const auto* base = static_cast<const char*>(prep);
  return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const int8_t*>(base + l.c_off),
          reinterpret_cast<const float*>(base + l.d_off),
          reinterpret_cast<const int32_t*>(base + l.qs_off),
          reinterpret_cast<const float*>(base + l.sx_off)};
}

// Where element k of x lives in xq.
[[maybe_unused]] int64_t Q8Slot(int bits, int64_t k) {
  if (bits == 8) return k;
  const int64_t j = k % 64;
  return k - j + (j % 2) * 32 + j / 2;
}

// Blocks whose max |x| is below this quantize to zero (1/d would overflow near FLT_MIN).
constexpr float kQ8TinyMax = 0x1p-96f;

}  // namespace
}  // namespace rw::cpu::detail

namespace rw::cpu::avx2 {
// The AVX2 fast entries (matvec_q8_avx2.cpp): KernelTable::prepare_x_q8 and matvec_q8_rows.
void PrepareXQ8(const WeightView& w, const float* x, float* prep);
void MatVecQ8Rows(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1);
}  // namespace rw::cpu::avx2

namespace rw::cpu::avx512 {
// The AVX-512 kernel (matvec_q8_avx512.cpp); preparation is the AVX2 one.
void MatVecQ8Rows(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1);
// The same on VNNI's byte dot products (matvec_q8_vnni.cpp): only on CPUs with AVX512_VNNI
// (CpuHasAvx512Vnni); the AVX-512 table takes it there.
void MatVecQ8RowsVnni(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1);
}  // namespace rw::cpu::avx512
