// Pieces shared by the 16-bit tensor-core prefill matmuls (ops_matmul_bf16.cu,
// ops_matmul_planes.cu): the exact split of x into bf16 parts, the codes widened to bf16 or fp16,
// and the MMAs themselves.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rw::cuda {

// The upper halves of a and b (the bf16 truncations) as one bf16 pair, a low.
__device__ __forceinline__ uint32_t HiPair(float a, float b) {
  return __byte_perm(__float_as_uint(a), __float_as_uint(b), 0x7632);
}

__device__ __forceinline__ float Trunc(float a) {
  return __uint_as_float(__float_as_uint(a) & 0xFFFF0000u);
}

// c += a·b, m16n8k16, bf16 in, fp32 accumulate.
__device__ __forceinline__ void MmaBf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a·b, m16n8k16, fp16 in, fp32 accumulate (the same fragment layout as MmaBf16).
__device__ __forceinline__ void MmaF16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 8 codes widened to bf16 pairs, centered: q − 2^(bits−1), with the weight s·q + b taken as
// s·(q − c) + (b + c·s). The tensor core's fp32 accumulation truncates, so a fragment of Σq·x
// carries an error relative to its size; with q ≥ 0 that size holds c·Σx, which the bias term
// then cancels, leaving the error on a much smaller result (on the golden fixtures: decode error
// 8.7e-5 uncentered, see docs/CUDA.md). Centered codes keep the fragment at the size of the
// result. Register v holds codes (v, v + 4), low half first (a k16 step's slots may map to any
// columns as long as both operands agree; the kernels say which).
// 4-bit: one word; (word >> 4v) & 0x000F000F | 0x43004300 is the pair 128 + q, exact in bf16,
// and subtracting 136 leaves q − 8.
__device__ __forceinline__ uint4 Codes4(uint32_t w) {
  const __nv_bfloat162 k136 = __floats2bfloat162_rn(136.0f, 136.0f);
  uint32_t r[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint32_t p = ((w >> (4 * v)) & 0x000F000Fu) | 0x43004300u;
    __nv_bfloat162 b = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&p), k136);
    r[v] = *reinterpret_cast<uint32_t*>(&b);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// 8-bit: two words of 4 codes; 2^23 + q as a float (one byte permute) minus 2^23 + 128, then
// packed (q − 128 is exact in bf16).
__device__ __forceinline__ uint4 Codes8(uint32_t w0, uint32_t w1) {
  uint32_t r[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const float a = __uint_as_float(__byte_perm(w0, 0x4B000000u, 0x7540 + v)) - 8388736.0f;
    const float b = __uint_as_float(__byte_perm(w1, 0x4B000000u, 0x7540 + v)) - 8388736.0f;
    __nv_bfloat162 p = __floats2bfloat162_rn(a, b);
    r[v] = *reinterpret_cast<uint32_t*>(&p);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// Codes4 and Codes8 as fp16 pairs (same registers, same centering): 0x6400 | q is the fp16
// 1024 + q for q < 1024, exact, and subtracting 1024 + c leaves q − c.
__device__ __forceinline__ uint4 Codes4H(uint32_t w) {
  const __half2 k = __floats2half2_rn(1032.0f, 1032.0f);
  uint32_t r[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint32_t p = ((w >> (4 * v)) & 0x000F000Fu) | 0x64006400u;
    __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&p), k);
    r[v] = *reinterpret_cast<uint32_t*>(&h);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

__device__ __forceinline__ uint4 Codes8H(uint32_t w0, uint32_t w1) {
  const __half2 k = __floats2half2_rn(1152.0f, 1152.0f);
  uint32_t r[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    // Byte v of w0 into the low half's low byte, byte v of w1 into the high half's.
    const uint32_t sel = v | (v << 4) | ((4 + v) << 8) | ((4 + v) << 12);
    const uint32_t p = (__byte_perm(w0, w1, sel) & 0x00FF00FFu) | 0x64006400u;
    __half2 h = __hsub2(*reinterpret_cast<const __half2*>(&p), k);
    r[v] = *reinterpret_cast<uint32_t*>(&h);
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// The bias that goes with centered codes: b + c·s, c = 2^(bits−1) (exact: c·s is, and b and c·s
// are bf16 values a few binades apart).
__device__ __forceinline__ float CenteredBias(float b, float s, int bits) {
  return fmaf(static_cast<float>(1 << (bits - 1)), s, b);
}

// The end of a segment (min(group, 64) columns) of a warp's 32×32 corner: acc += s·frag + b·Σx,
// frag cleared. xsb: the block's x sums [row][half]; sb: scales [half][kBN], then biases; h: the
// half just done (seg64: the segment is the whole 64-column step, both halves' sums).
template <int kBN>
__device__ __forceinline__ void ScaleSegment(float (&acc)[2][4][4], float (&frag)[2][4][4],
                                             const float* xsb, const float* sb, int wm, int wn,
                                             int gid, int tig, int h, bool seg64) {
  float xsr[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float2 p = *reinterpret_cast<const float2*>(xsb + (wm + i * 16 + gid + e * 8) * 2);
      xsr[i][e] = seg64 ? p.x + p.y : (h ? p.y : p.x);
    }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = wn + j * 8 + tig * 2;
    const float2 s = *reinterpret_cast<const float2*>(sb + h * kBN + n);
    const float2 b = *reinterpret_cast<const float2*>(sb + 2 * kBN + h * kBN + n);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float se = e & 1 ? s.y : s.x, be = e & 1 ? b.y : b.x;
        acc[i][j][e] = fmaf(be, xsr[i][e >> 1], fmaf(se, frag[i][j][e], acc[i][j][e]));
        frag[i][j][e] = 0.0f;
      }
  }
}

}  // namespace rw::cuda
