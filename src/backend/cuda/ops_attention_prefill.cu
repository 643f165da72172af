// Prefill attention, flash-attention style on fp32 FMAs: a block takes 32 consecutive queries of
// one head and streams their keys in tiles of 32 through shared memory, so each K/V row is read
// from global memory once per 32 queries instead of once per query (the split kernel of
// ops_attention.cu). Per tile: S = scale·Q·Kᵀ (masked: causal, window), an online softmax per
// row, O = α·O + P·V. The K and V tiles arrive by cp.async while the other is in use (K of the
// next tile during the softmax and P·V, V during Q·Kᵀ).
//
// Thread layouts (256 threads, 8 warps), chosen so the shared-memory loads are broadcasts or
// conflict-free and each thread does 8 FMAs per float4 it loads:
//   Q·Kᵀ: a thread sums 4 rows × 4 keys over a quarter of the head dimension (float4 d-chunks
//         interleaved over the 4 lanes, summed by two shuffles); a warp covers 8 rows × 16 keys.
//   softmax: 8 lanes a row, 4 keys each; the row's running max and sum live in those lanes.
//   P·V: a warp owns 4 (hd ≤ 128) or 8 rows and all (or half) of the head dimension in float4
//        columns lane + 32·i; P is stored transposed so a thread's rows are one float4.
// Head dims are padded to the template's (128, 256, 512) with zeros; hd must be a multiple of 4.
// H200, full-size model, one 512-token chunk: 42.2 ms of attention GPU time with the split kernel,
// 4.5 ms with this one (about 16 TFLOP/s of fp32 FMAs; hd 512 takes one 203 KB block an SM,
// hd 256 two).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

constexpr int kBq = 32, kBk = 32, kThreads = 256;

template <int kHd>
struct Layout {
  static constexpr int kLd = kHd + 4;  // Q/K/V rows (+4: the Q·Kᵀ float4 loads hit distinct banks)
  static constexpr int kLds = kBk + 4;  // S rows
  static constexpr int kLdp = kBq + 4;  // Pᵀ rows
  static constexpr int kQ = 0, kK = kQ + kBq * kLd, kV = kK + kBk * kLd, kS = kV + kBk * kLd,
                       kP = kS + kBq * kLds, kAlpha = kP + kBk * kLdp, kL = kAlpha + kBq,
                       kFloats = kL + kBq;
  static constexpr int kBytes = kFloats * 4;
};

template <int kHd>
__global__ void __launch_bounds__(kThreads, kHd >= 512 ? 1 : 2)
    PrefillAttentionKernel(const float* q, int64_t m, int n_heads, const float* kc, const float* vc,
                           int n_kv, int hd, int64_t capacity, const int64_t* pos0_ptr,
                           int64_t window, float scale, float* out) {
  PdlEnter();
  using L = Layout<kHd>;
  extern __shared__ __align__(16) float smem[];
  float* const qs = smem + L::kQ;
  float* const ks = smem + L::kK;
  float* const vs = smem + L::kV;
  float* const ss = smem + L::kS;
  float* const pt = smem + L::kP;
  float* const alpha_s = smem + L::kAlpha;
  float* const l_s = smem + L::kL;

  const int h = blockIdx.x;
  // Heaviest query tiles (most keys) first, so the short ones fill the tail.
  const int64_t t0 = (static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y) * kBq;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t pos0 = *pos0_ptr;
  const int64_t rows = m - t0 < kBq ? m - t0 : kBq;  // real queries of this block
  const int64_t p_first = pos0 + t0, p_last = pos0 + t0 + rows - 1;
  const int64_t k_lo = window > 0 && p_first - window + 1 > 0 ? p_first - window + 1 : 0;
  const int kvh = h / (n_heads / n_kv);
  const float* const kbase = kc + static_cast<int64_t>(kvh) * capacity * hd;
  const float* const vbase = vc + static_cast<int64_t>(kvh) * capacity * hd;

  // Key rows of the tile at k0 (keys past the block's last query are zeros, never read).
  auto key_row = [&](const float* base, int64_t k0, int64_t s0, int r) -> const float* {
    if (k0 + r > p_last) return nullptr;
    int64_t slot = s0 + r;
    while (slot >= capacity) slot -= capacity;
    return base + slot * hd;
  };
  auto load_kv = [&](float* dst, const float* base, int64_t k0) {
    const int64_t s0 = k0 % capacity;
    constexpr int kC4 = kHd / 4, kPer = kBk * kC4 / kThreads;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = tid + i * kThreads;
      const int r = c / kC4, c4 = c % kC4;
      const float* row = key_row(base, k0, s0, r);
      const bool valid = row != nullptr && 4 * c4 < hd;
      CpAsync16(dst + r * L::kLd + 4 * c4, valid ? row + 4 * c4 : base, valid);
    }
  };
  {  // Q rows (zeros past m), in the first group with the first K tile.
    constexpr int kC4 = kHd / 4, kPer = kBq * kC4 / kThreads;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = tid + i * kThreads;
      const int r = c / kC4, c4 = c % kC4;
      const bool valid = r < rows && 4 * c4 < hd;
      const float* src = q + ((t0 + (valid ? r : 0)) * n_heads + h) * hd + (valid ? 4 * c4 : 0);
      CpAsync16(qs + r * L::kLd + 4 * c4, src, valid);
    }
  }
  load_kv(ks, kbase, k_lo);
  CpAsyncCommit();

  // Q·Kᵀ layout.
  const int ds = lane & 3, g = lane >> 2;
  const int rg = (g & 1) + 2 * (warp & 3), kg = (g >> 1) + 4 * (warp >> 2);
  // Softmax layout: row sr, keys 4·sub .. 4·sub + 3.
  const int sr = tid >> 3, sub = tid & 7;
  float m_run = -INFINITY, l_run = 0.0f;
  // P·V layout.
  constexpr int kNch = kHd >= 256 ? 2 : 1, kRpt = 4 * kNch, kF4 = kHd / (128 * kNch);
  const int rb = (warp % (8 / kNch)) * kRpt, ch = warp / (8 / kNch);
  const int col4 = ch * (kHd / 4 / kNch) + lane;  // + 32·i
  float4 acc[kRpt][kF4];
#pragma unroll
  for (int r = 0; r < kRpt; ++r)
#pragma unroll
    for (int i = 0; i < kF4; ++i) acc[r][i] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int64_t k0 = k_lo; k0 <= p_last; k0 += kBk) {
    load_kv(vs, vbase, k0);  // vs is free: the last P·V passed the loop's final barrier
    CpAsyncCommit();
    CpAsyncWait<1>();  // Q and this tile's K are in
    __syncthreads();

    // S = scale·Q·Kᵀ for rows 4·rg + i, keys 4·kg + e, over this lane's quarter of the dims.
    {
      float sacc[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[i][e] = 0.0f;
      const float* qp = qs + 4 * rg * L::kLd + 4 * ds;
      const float* kp = ks + 4 * kg * L::kLd + 4 * ds;
#pragma unroll 2
      for (int d = 0; d < kHd; d += 16) {
        float4 qv[4], kv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) qv[i] = *reinterpret_cast<const float4*>(qp + i * L::kLd + d);
#pragma unroll
        for (int e = 0; e < 4; ++e) kv[e] = *reinterpret_cast<const float4*>(kp + e * L::kLd + d);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float a = sacc[i][e];
            a = fmaf(qv[i].x, kv[e].x, a);
            a = fmaf(qv[i].y, kv[e].y, a);
            a = fmaf(qv[i].z, kv[e].z, a);
            a = fmaf(qv[i].w, kv[e].w, a);
            sacc[i][e] = a;
          }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sacc[i][e] += __shfl_xor_sync(0xffffffffu, sacc[i][e], 1);
          sacc[i][e] += __shfl_xor_sync(0xffffffffu, sacc[i][e], 2);
        }
      // Lane ds writes row 4·rg + ds (selects, not a dynamic index: sacc stays in registers).
      const int r = 4 * rg + ds;
      const int64_t p = pos0 + t0 + r;
      float o[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = ds == 0   ? sacc[0][e]
                        : ds == 1 ? sacc[1][e]
                        : ds == 2 ? sacc[2][e]
                                  : sacc[3][e];
        const int64_t key = k0 + 4 * kg + e;
        const bool seen = key <= p && (window <= 0 || p - key < window);
        o[e] = seen ? scale * v : -INFINITY;
      }
      *reinterpret_cast<float4*>(ss + r * L::kLds + 4 * kg) = make_float4(o[0], o[1], o[2], o[3]);
    }
    __syncthreads();  // S complete; ks free
    if (k0 + kBk <= p_last) load_kv(ks, kbase, k0 + kBk);
    CpAsyncCommit();  // possibly empty: the group count stays uniform

    // Online softmax of row sr.
    {
      const float4 s4 = *reinterpret_cast<const float4*>(ss + sr * L::kLds + 4 * sub);
      float mx = fmaxf(fmaxf(s4.x, s4.y), fmaxf(s4.z, s4.w));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      const float m_new = fmaxf(m_run, mx);
      float pv[4] = {0.f, 0.f, 0.f, 0.f}, alpha = 1.0f;
      if (m_new != -INFINITY) {  // else no key seen yet: P = 0, O and l stay 0
        pv[0] = expf(s4.x - m_new);
        pv[1] = expf(s4.y - m_new);
        pv[2] = expf(s4.z - m_new);
        pv[3] = expf(s4.w - m_new);
        alpha = expf(m_run - m_new);  // 0 when m_run is −inf
      }
      float sum = (pv[0] + pv[1]) + (pv[2] + pv[3]);
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      l_run = l_run * alpha + sum;
      m_run = m_new;
#pragma unroll
      for (int e = 0; e < 4; ++e) pt[(4 * sub + e) * L::kLdp + sr] = pv[e];
      if (sub == 0) alpha_s[sr] = alpha;
    }
    CpAsyncWait<1>();  // this tile's V is in (the next K may still be in flight)
    __syncthreads();

    // O = α·O + P·V for rows rb .. rb + kRpt − 1.
#pragma unroll
    for (int r = 0; r < kRpt; ++r) {
      const float a = alpha_s[rb + r];
#pragma unroll
      for (int i = 0; i < kF4; ++i) {
        acc[r][i].x *= a, acc[r][i].y *= a, acc[r][i].z *= a, acc[r][i].w *= a;
      }
    }
#pragma unroll 4
    for (int j = 0; j < kBk; ++j) {
      float pr[kRpt];
#pragma unroll
      for (int r4 = 0; r4 < kRpt / 4; ++r4) {
        const float4 p4 = *reinterpret_cast<const float4*>(pt + j * L::kLdp + rb + 4 * r4);
        pr[4 * r4 + 0] = p4.x, pr[4 * r4 + 1] = p4.y, pr[4 * r4 + 2] = p4.z, pr[4 * r4 + 3] = p4.w;
      }
      float4 v[kF4];
#pragma unroll
      for (int i = 0; i < kF4; ++i)
        v[i] = *reinterpret_cast<const float4*>(vs + j * L::kLd + 4 * (col4 + 32 * i));
#pragma unroll
      for (int r = 0; r < kRpt; ++r)
#pragma unroll
        for (int i = 0; i < kF4; ++i) {
          acc[r][i].x = fmaf(pr[r], v[i].x, acc[r][i].x);
          acc[r][i].y = fmaf(pr[r], v[i].y, acc[r][i].y);
          acc[r][i].z = fmaf(pr[r], v[i].z, acc[r][i].z);
          acc[r][i].w = fmaf(pr[r], v[i].w, acc[r][i].w);
        }
    }
    __syncthreads();  // vs and pt are rewritten by the next tile
  }
  CpAsyncWait<0>();

  if (sub == 0) l_s[sr] = l_run;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRpt; ++r) {
    const int64_t t = t0 + rb + r;
    if (t >= m) continue;
    const float inv = 1.0f / l_s[rb + r];
    float* o = out + (t * n_heads + h) * hd;
#pragma unroll
    for (int i = 0; i < kF4; ++i) {
      const int c = 4 * (col4 + 32 * i);
      if (c < hd)
        *reinterpret_cast<float4*>(o + c) =
            make_float4(acc[r][i].x * inv, acc[r][i].y * inv, acc[r][i].z * inv, acc[r][i].w * inv);
    }
  }
}

template <int kHd>
cudaError_t LaunchHd(const float* q, int64_t m, int n_heads, const float* k_cache,
                     const float* v_cache, int n_kv, int head_dim, int64_t capacity,
                     const int64_t* pos0, int64_t window, float scale, float* out, cudaStream_t s) {
  constexpr int kBytes = Layout<kHd>::kBytes;
  auto* kernel = PrefillAttentionKernel<kHd>;
  // Over 48 KB needs the opt-in; an sm_80 part (163 KB) cannot take hd 512: the caller falls back.
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (attr != cudaSuccess) {
    cudaGetLastError();  // clear it: the split kernel runs instead
    return cudaErrorNotSupported;
  }
  const dim3 grid(static_cast<unsigned>(n_heads), static_cast<unsigned>((m + kBq - 1) / kBq), 1);
  LaunchKernel(kernel, grid, kThreads, kBytes, s, q, m, n_heads, k_cache, v_cache, n_kv, head_dim,
               capacity, pos0, window, scale, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPrefillAttention(const float* q, int64_t m, int n_heads, const float* k_cache,
                                   const float* v_cache, int n_kv, int head_dim, int64_t capacity,
                                   const int64_t* pos0, int64_t window, float scale, float* out,
                                   cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  const auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
  if (head_dim <= 0 || head_dim > 512 || head_dim % 4 != 0 || n_kv <= 0 || n_heads % n_kv != 0 ||
      misaligned(q) || misaligned(k_cache) || misaligned(v_cache) || misaligned(out))
    return cudaErrorNotSupported;
  if (head_dim <= 128)
    return LaunchHd<128>(q, m, n_heads, k_cache, v_cache, n_kv, head_dim, capacity, pos0, window,
                         scale, out, s);
  if (head_dim <= 256)
    return LaunchHd<256>(q, m, n_heads, k_cache, v_cache, n_kv, head_dim, capacity, pos0, window,
                         scale, out, s);
  return LaunchHd<512>(q, m, n_heads, k_cache, v_cache, n_kv, head_dim, capacity, pos0, window,
                       scale, out, s);
}

}  // namespace rw::cuda
