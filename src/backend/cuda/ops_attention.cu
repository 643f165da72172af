// Attention over the ring/linear KV cache, the split kernel: a block per (key split, head,
// query) streams its keys in tiles of 32 with an online softmax, writing an unnormalized partial
// (out, max, sum); a second kernel merges the splits. Decode uses many splits so a long context
// still fills the GPU (split-KV). Prefill (m > 1, one split) goes to the tiled kernel of
// ops_attention_prefill.cu unless REDWING_CUDA_PREFILL_ATTN=split, which keeps one block per query.
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 32;
constexpr int kMaxHeadDim = 512;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;

// Splits [0, used) of query t's keys hold keys (the partition of the kernels below); the rest
// saw none.
__device__ __forceinline__ int UsedSplits(const int64_t* pos0, int64_t t, int64_t window,
                                          int splits) {
  const int64_t p = *pos0 + t;
  const int64_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
  const int64_t len = p + 1 - lo;
  int64_t chunk = (len + splits - 1) / splits;
  chunk = ((chunk + kTile - 1) / kTile) * kTile;
  const int64_t used = (len + chunk - 1) / chunk;
  return static_cast<int>(used < splits ? used : splits);
}

// out = Σ_s acc_s·e^(m_s − M) / Σ_s l_s·e^(m_s − M) over the used splits of one (query, head),
// a block per (query·head, 128 dims): each split's (m_s, l_s) read once, by its own thread, into
// shared memory, then one dim per thread with the splits' loads unrolled. Only the used splits
// are read: a graph's split count covers the whole capacity, and at decode most are empty
// (reading all 64 of a full layer's in three serial passes cost ~7% of a decode step).
constexpr int kMergeThreads = 128;

__global__ void MergeSplitsKernel(const float* partial, int n_heads, int hd, int splits,
                                  const int64_t* pos0, int64_t window, float* out) {
  PdlEnter();
  extern __shared__ float sm[];   // [splits] m_s, [splits] l_s, [splits] e^(m_s − M)
  const int64_t qh = blockIdx.x;  // t·n_heads + h
  const int used = UsedSplits(pos0, qh / n_heads, window, splits);
  const float* base = partial + qh * splits * (hd + 2);
  const int stride = hd + 2;
  float *ms = sm, *ls = sm + used, *ws = sm + 2 * used;
  for (int s = threadIdx.x; s < used; s += blockDim.x) {
    ms[s] = base[s * stride + hd];
    ls[s] = base[s * stride + hd + 1];
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int s = 0; s < used; ++s) mx = fmaxf(mx, ms[s]);
  for (int s = threadIdx.x; s < used; s += blockDim.x) ws[s] = expf(ms[s] - mx);
  __syncthreads();
  float l = 0.0f;
  for (int s = 0; s < used; ++s) l += ls[s] * ws[s];
  const int d = blockIdx.y * blockDim.x + threadIdx.x;
  if (d >= hd) return;
  float a = 0.0f;
#pragma unroll 8
  for (int s = 0; s < used; ++s) a += base[s * stride + d] * ws[s];
  out[qh * hd + d] = a / l;
}

__global__ void AttendSplitKernel(const float* q, int n_heads, const float* kc, const float* vc,
                                  int n_kv, int hd, int64_t capacity, const int64_t* pos0,
                                  int64_t window, float scale, int splits, float* partial) {
  PdlEnter();
  __shared__ float qs[kMaxHeadDim];
  __shared__ float ps[kTile];
  __shared__ float tile_alpha, tile_m;
  const int sp = blockIdx.x, h = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t p = *pos0 + t;
  const int64_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
  const int64_t len = p + 1 - lo;
  int64_t chunk = (len + splits - 1) / splits;
  chunk = ((chunk + kTile - 1) / kTile) * kTile;
  const int64_t begin = lo + sp * chunk;
  const int64_t end = begin + chunk < p + 1 ? begin + chunk : p + 1;
  float* part = partial + ((t * n_heads + h) * splits + sp) * (hd + 2);
  if (begin >= end) {  // past the keys (decode's split count is fixed for the graph): no loads
    if (threadIdx.x == 0) {
      part[hd] = -INFINITY;
      part[hd + 1] = 0.0f;
    }
    return;
  }

  const int kvh = h / (n_heads / n_kv);
  const float* qh = q + (t * n_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) qs[d] = qh[d];
  const float* kbase = kc + static_cast<int64_t>(kvh) * capacity * hd;
  const float* vbase = vc + static_cast<int64_t>(kvh) * capacity * hd;
  float acc[kDimsPerThread];
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) acc[i] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;  // identical in every thread
  __syncthreads();
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int n = static_cast<int>(end - k0 < kTile ? end - k0 : kTile);
    const int64_t s0 = k0 % capacity;  // ring slot of the tile's first key
    // Scores: each warp takes every 4th key of the tile, its lanes split the head dimension.
    for (int j = warp; j < kTile; j += kThreads / 32) {
      float dot = 0.0f;
      if (j < n) {
        const int64_t slot = s0 + j >= capacity ? s0 + j - capacity : s0 + j;
        const float* kr = kbase + slot * hd;
        for (int d = lane; d < hd; d += 32) dot += qs[d] * kr[d];
      }
      dot = WarpAllSum(dot);
      if (lane == 0) ps[j] = j < n ? scale * dot : -INFINITY;
    }
    __syncthreads();
    if (warp == 0) {
      const float s = ps[lane];
      float mx = s;
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m_run, mx);
      ps[lane] = lane < n ? expf(s - m_new) : 0.0f;
      if (lane == 0) {
        tile_m = m_new;
        tile_alpha = m_run == -INFINITY ? 0.0f : expf(m_run - m_new);
      }
    }
    __syncthreads();
    const float alpha = tile_alpha;
    float tsum = 0.0f;
    for (int j = 0; j < n; ++j) tsum += ps[j];
#pragma unroll
    for (int i = 0; i < kDimsPerThread; ++i) {
      const int d = threadIdx.x + i * kThreads;
      if (d < hd) {
        float a = acc[i] * alpha;
        // A fixed trip count so the loads of the tile's V rows are issued together.
#pragma unroll 8
        for (int j = 0; j < kTile; ++j) {
          if (j < n) {
            const int64_t slot = s0 + j >= capacity ? s0 + j - capacity : s0 + j;
            a += ps[j] * vbase[slot * hd + d];
          }
        }
        acc[i] = a;
      }
    }
    l_run = l_run * alpha + tsum;
    m_run = tile_m;
    __syncthreads();  // ps is rewritten by the next tile
  }
#pragma unroll
  for (int i = 0; i < kDimsPerThread; ++i) {
    const int d = threadIdx.x + i * kThreads;
    if (d < hd) part[d] = acc[i];
  }
  if (threadIdx.x == 0) {
    part[hd] = m_run;
    part[hd + 1] = l_run;
  }
}

// The same for head dims that are multiples of 128 (up to 512): each lane reads whole float4s
// of K, and every load of a tile is issued before it is used (the cache is cold in DRAM at
// decode time, so waiting on one load at a time is what costs). For V, thread t owns float4
// column t % (hd/4) for keys t / (hd/4) + G·i (G = 512/hd groups), summed at the end.
// kPer = hd / 128 is a template parameter: with it known, a 256-wide head's kernel holds 134
// registers instead of 172 (more blocks per SM; decode 340 → 369 tok/s, see docs/CUDA.md).
// Loading a whole tile's K and V rows at once instead of in batches of 4 keys and 8 rows
// (228 registers) measured slower (363).
template <int kPer>
__global__ void AttendSplitVecKernel(const float* q, int n_heads, const float* kc, const float* vc,
                                     int n_kv, int hd, int64_t capacity, const int64_t* pos0,
                                     int64_t window, float scale, int splits, float* partial) {
  PdlEnter();
  __shared__ __align__(16) float red[kMaxHeadDim * 4];  // V partials of the G key groups
  __shared__ float ps[kTile];
  __shared__ float tile_alpha, tile_m;
  const int sp = blockIdx.x, h = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t p = *pos0 + t;
  const int64_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
  const int64_t len = p + 1 - lo;
  int64_t chunk = (len + splits - 1) / splits;
  chunk = ((chunk + kTile - 1) / kTile) * kTile;
  const int64_t begin = lo + sp * chunk;
  const int64_t end = begin + chunk < p + 1 ? begin + chunk : p + 1;
  float* part = partial + ((t * n_heads + h) * splits + sp) * (hd + 2);
  if (begin >= end) {  // past the keys (decode's split count is fixed for the graph): no loads
    if (threadIdx.x == 0) {
      part[hd] = -INFINITY;
      part[hd + 1] = 0.0f;
    }
    return;
  }
  const int kvh = h / (n_heads / n_kv);
  constexpr int per = kPer;  // float4s per lane per key row
  const int cols4 = hd / 4, groups = kThreads / cols4;
  const int my_col = threadIdx.x % cols4, my_group = threadIdx.x / cols4;
  const float4* q4 = reinterpret_cast<const float4*>(q + (t * n_heads + h) * hd);
  float4 qv[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) qv[c] = c < per ? q4[lane + 32 * c] : make_float4(0.f, 0.f, 0.f, 0.f);
  const float4* kbase =
      reinterpret_cast<const float4*>(kc + static_cast<int64_t>(kvh) * capacity * hd);
  const float4* vbase =
      reinterpret_cast<const float4*>(vc + static_cast<int64_t>(kvh) * capacity * hd);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float m_run = -INFINITY, l_run = 0.0f;
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int n = static_cast<int>(end - k0 < kTile ? end - k0 : kTile);
    const int64_t s0 = k0 % capacity;
    // Scores: warp w takes keys w, w + 4, ... in two halves of four.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float dot[4];
      float4 kv[4][4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = warp + 4 * (half * 4 + jj);
        const int64_t slot = s0 + j >= capacity ? s0 + j - capacity : s0 + j;
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (j < n && c < per) kv[jj][c] = kbase[slot * cols4 + lane + 32 * c];
      }
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int j = warp + 4 * (half * 4 + jj);
        float d = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (j < n && c < per)
            d += qv[c].x * kv[jj][c].x + qv[c].y * kv[jj][c].y + qv[c].z * kv[jj][c].z +
                 qv[c].w * kv[jj][c].w;
        dot[jj] = WarpAllSum(d);
      }
      if (lane == 0) {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = warp + 4 * (half * 4 + jj);
          ps[j] = j < n ? scale * dot[jj] : -INFINITY;
        }
      }
    }
    __syncthreads();
    if (warp == 0) {
      const float sc = ps[lane];
      float mx = sc;
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m_run, mx);
      ps[lane] = lane < n ? expf(sc - m_new) : 0.0f;
      if (lane == 0) {
        tile_m = m_new;
        tile_alpha = m_run == -INFINITY ? 0.0f : expf(m_run - m_new);
      }
    }
    __syncthreads();
    const float alpha = tile_alpha;
    float tsum = 0.0f;
    for (int j = 0; j < n; ++j) tsum += ps[j];
    acc.x *= alpha, acc.y *= alpha, acc.z *= alpha, acc.w *= alpha;
    // V: this thread's column for keys my_group, my_group + groups, ... (loads first).
#pragma unroll
    for (int j0 = 0; j0 < kTile; j0 += 8) {
      if (groups * j0 >= kTile) break;
      float4 vv[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int j = my_group + groups * (j0 + u);
        const int64_t slot = s0 + j >= capacity ? s0 + j - capacity : s0 + j;
        if (j < n) vv[u] = vbase[slot * cols4 + my_col];
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int j = my_group + groups * (j0 + u);
        if (j < n) {
          const float w = ps[j];
          acc.x += w * vv[u].x, acc.y += w * vv[u].y, acc.z += w * vv[u].z, acc.w += w * vv[u].w;
        }
      }
    }
    l_run = l_run * alpha + tsum;
    m_run = tile_m;
    __syncthreads();
  }
  // Sum the key groups' partials.
  reinterpret_cast<float4*>(red)[my_group * cols4 + my_col] = acc;
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += kThreads) {
    float a = 0.0f;
    for (int g = 0; g < groups; ++g) a += red[g * hd + d];
    part[d] = a;
  }
  if (threadIdx.x == 0) {
    part[hd] = m_run;
    part[hd + 1] = l_run;
  }
}

}  // namespace

int64_t AttentionPartialFloats(int64_t m, int n_heads, int head_dim, int splits) {
  return m * n_heads * splits * (head_dim + 2);
}

cudaError_t LaunchAttention(const float* q, int64_t m, int n_heads, const float* k_cache,
                            const float* v_cache, int n_kv, int head_dim, int64_t capacity,
                            const int64_t* pos0, int64_t window, float scale, int splits,
                            float* partial, float* out, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (head_dim > kMaxHeadDim || splits < 1 || n_kv <= 0 || n_heads % n_kv != 0)
    return cudaErrorInvalidValue;
  // Prefill (several queries, one split each) takes the tiled kernel, which reads each K/V tile
  // once per 32 queries; REDWING_CUDA_PREFILL_ATTN=split keeps the per-query kernel (comparison).
  if (m > 1 && splits == 1) {
    if (CurrentTuning().tiled_prefill_attention) {
      const cudaError_t e = LaunchPrefillAttention(q, m, n_heads, k_cache, v_cache, n_kv, head_dim,
                                                   capacity, pos0, window, scale, out, s);
      if (e != cudaErrorNotSupported) {
        CountPath(Path::kPrefillAttentionTiled);
        return e;
      }
    }
    CountPath(Path::kPrefillAttentionSplit);
  }
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(n_heads),
                  static_cast<unsigned>(m));
  if (head_dim % 128 == 0) {
    auto* kernel = head_dim == 128   ? AttendSplitVecKernel<1>
                   : head_dim == 256 ? AttendSplitVecKernel<2>
                   : head_dim == 384 ? AttendSplitVecKernel<3>
                                     : AttendSplitVecKernel<4>;
    LaunchKernel(kernel, grid, kThreads, 0, s, q, n_heads, k_cache, v_cache, n_kv, head_dim,
                 capacity, pos0, window, scale, splits, partial);
  } else
    LaunchKernel(AttendSplitKernel, grid, kThreads, 0, s, q, n_heads, k_cache, v_cache, n_kv,
                 head_dim, capacity, pos0, window, scale, splits, partial);
  const dim3 merge(static_cast<unsigned>(m * n_heads), Blocks(head_dim, kMergeThreads), 1);
  LaunchKernel(MergeSplitsKernel, merge, kMergeThreads, static_cast<size_t>(splits) * 12, s,
               partial, n_heads, head_dim, splits, pos0, window, out);
  return cudaGetLastError();
}

}  // namespace rw::cuda
