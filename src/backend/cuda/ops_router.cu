// The router on the GPU: softmax (denominator in double), top-k with ties to the lower index and
// NaN first, weights renormalized × per_expert_scale. Three kernels giving the same bits: a
// thread per expert ranking all at once (one token, the decode default), a warp per token (chunks
// of up to 256 experts), a block per token (more experts).
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

// Whether (va, a) ranks above (vb, b) in top-k order: NaN first, larger, then lower index.
__device__ __forceinline__ bool Above(float va, int a, float vb, int b) {
  if (b < 0) return a >= 0;
  if (a < 0) return false;
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  return a < b;
}

// One block per token; dynamic shared memory: E floats of probabilities + E chosen flags.
__global__ void RouteTopKKernel(const float* logits, float* probs, int E, int k,
                                const float* per_expert_scale, int* idx, float* w) {
  PdlEnter();
  extern __shared__ float sp[];
  unsigned char* chosen = reinterpret_cast<unsigned char*>(sp + E);
  __shared__ double dsum[32];
  __shared__ float wv[32];
  __shared__ int wi[32];
  __shared__ int picked[64];
  const int t = blockIdx.x;
  const float* l = logits + static_cast<int64_t>(t) * E;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // Max.
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, l[e]);
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) wv[warp] = mx;
  __syncthreads();
  mx = wv[0];
  for (int i = 1; i < warps; ++i) mx = fmaxf(mx, wv[i]);
  // exp and the denominator.
  double sum = 0.0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float p = expf(l[e] - mx);
    sp[e] = p;
    chosen[e] = 0;
    sum += p;
  }
  const float total = static_cast<float>(BlockSumD(sum, dsum));
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    sp[e] = sp[e] / total;
    probs[static_cast<int64_t>(t) * E + e] = sp[e];
  }
  __syncthreads();
  // k rounds of a block argmax over the experts not chosen yet.
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int bi = -1;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      if (!chosen[e] && Above(sp[e], e, bv, bi)) bv = sp[e], bi = e;
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (Above(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (lane == 0) wv[warp] = bv, wi[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = wv[0];
      int b = wi[0];
      for (int i = 1; i < warps; ++i)
        if (Above(wv[i], wi[i], v, b)) v = wv[i], b = wi[i];
      picked[j] = b;
      chosen[b] = 1;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int j = 0; j < k; ++j) s += sp[picked[j]];
    for (int j = 0; j < k; ++j) {
      const int e = picked[j];
      idx[t * k + j] = e;
      w[t * k + j] = sp[e] / s * per_expert_scale[e];
    }
  }
}

// One warp per token for up to 256 experts: every value stays in registers and the k rounds of
// argmax are shuffles, with no block barriers (a decode step is latency-bound here).
constexpr int kWarpRouterMax = 8;  // experts per lane
__global__ void RouteTopKWarpKernel(const float* logits, float* probs, int64_t m, int E, int k,
                                    const float* per_expert_scale, int* idx, float* w) {
  PdlEnter();
  const int lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= m) return;
  const float* l = logits + t * E;
  float v[kWarpRouterMax];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kWarpRouterMax; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < E ? l[e] : -INFINITY;
    mx = fmaxf(mx, v[i]);
  }
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kWarpRouterMax; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < E ? expf(v[i] - mx) : 0.0f;
    sum += v[i];
  }
  const float total = static_cast<float>(WarpAllSumD(sum));
#pragma unroll
  for (int i = 0; i < kWarpRouterMax; ++i) {
    const int e = lane + 32 * i;
    if (e < E) {
      v[i] = v[i] / total;
      probs[t * E + e] = v[i];
    }
  }
  unsigned chosen = 0;  // bit i: expert lane + 32·i taken
  float picked_sum = 0.0f;
  int my_e = -1;  // lane j < k keeps the j-th choice
  float my_p = 0.0f;
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int bi = -1;
#pragma unroll
    for (int i = 0; i < kWarpRouterMax; ++i) {
      const int e = lane + 32 * i;
      if (e < E && !(chosen >> i & 1u) && Above(v[i], e, bv, bi)) bv = v[i], bi = e;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (Above(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if ((bi & 31) == lane) chosen |= 1u << (bi >> 5);
    picked_sum += bv;  // in choice order, as the reference sums
    if (lane == j) my_e = bi, my_p = bv;
  }
  if (lane < k) {
    idx[t * k + lane] = my_e;
    w[t * k + lane] = my_p / picked_sum * per_expert_scale[my_e];
  }
}

// The same result as RouteTopKWarpKernel (bit for bit) for one token per block and a thread per
// expert: the softmax summed in the warp kernel's order (lane l adds experts l, l + 32, … in
// order, then the same butterfly), and each expert's place in the top-k order counted against
// all the others at once, instead of k dependent rounds of argmax over shuffles (one warp
// issuing ~2,300 dependent instructions: ~9 µs of a decode step's critical path per layer).
__global__ void RouteTopKRankKernel(const float* logits, float* probs, int E, int k,
                                    const float* per_expert_scale, int* idx, float* w) {
  PdlEnter();
  constexpr int kMax = 32 * kWarpRouterMax;
  __shared__ double s_ex[kMax];
  __shared__ float s_p[kMax];
  __shared__ float s_max[kMax / 32];
  __shared__ float s_total;
  __shared__ int s_pick_e[32];
  __shared__ float s_pick_p[32];
  const int64_t t = blockIdx.x;
  const int e = threadIdx.x, lane = e & 31, warp = e >> 5, warps = blockDim.x >> 5;
  const float x = e < E ? logits[t * E + e] : -INFINITY;
  float mx = fmaxf(-INFINITY, x);
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) s_max[warp] = mx;
  __syncthreads();
  for (int i = 0; i < warps; ++i) mx = fmaxf(mx, s_max[i]);
  const float ex = e < E ? expf(x - mx) : 0.0f;
  s_ex[e] = ex;
  __syncthreads();
  if (warp == 0) {
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kWarpRouterMax; ++i)
      sum += lane + 32 * i < warps * 32 ? s_ex[lane + 32 * i] : 0.0;
    const double total = WarpAllSumD(sum);
    if (lane == 0) s_total = static_cast<float>(total);
  }
  __syncthreads();
  const float p = ex / s_total;
  if (e < E) probs[t * E + e] = p;
  s_p[e] = p;
  const bool any_nan = __syncthreads_or(e < E && isnan(p));
  if (e < E) {
    int rank = 0;
    if (!any_nan) {
#pragma unroll 8
      for (int j = 0; j < E; ++j) {
        const float q = s_p[j];
        rank += q > p || (q == p && j < e);
      }
    } else {
      for (int j = 0; j < E; ++j) rank += Above(s_p[j], j, p, e);
    }
    if (rank < k) {
      s_pick_e[rank] = e;
      s_pick_p[rank] = p;
    }
  }
  __syncthreads();
  if (e < k) {
    float picked_sum = 0.0f;  // in choice order, as the reference sums
    for (int j = 0; j < k; ++j) picked_sum += s_pick_p[j];
    const int pe = s_pick_e[e];
    idx[t * k + e] = pe;
    w[t * k + e] = s_pick_p[e] / picked_sum * per_expert_scale[pe];
  }
}

}  // namespace

cudaError_t LaunchRouteTopK(const float* logits, float* probs, int64_t m, int num_experts, int k,
                            const float* per_expert_scale, int* idx, float* w, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 64 || k > num_experts) return cudaErrorInvalidValue;
  if (num_experts <= 32 * kWarpRouterMax && k <= 32) {
    // REDWING_CUDA_TOPK=warp: the warp kernel for every chunk size (comparisons).
    if (m == 1 && CurrentTuning().rank_topk) {
      CountPath(Path::kTopKRank);
      LaunchKernel(RouteTopKRankKernel, 1, (num_experts + 31) / 32 * 32, 0, s, logits, probs,
                   num_experts, k, per_expert_scale, idx, w);
      return cudaGetLastError();
    }
    CountPath(Path::kTopKWarp);
    LaunchKernel(RouteTopKWarpKernel, Blocks(m, 4), 128, 0, s, logits, probs, m, num_experts, k,
                 per_expert_scale, idx, w);
    return cudaGetLastError();
  }
  const int threads = num_experts >= 256 ? 256 : ((num_experts + 31) / 32) * 32;
  const size_t smem = static_cast<size_t>(num_experts) * (sizeof(float) + 1);
  LaunchKernel(RouteTopKKernel, static_cast<unsigned>(m), threads, smem, s, logits, probs,
               num_experts, k, per_expert_scale, idx, w);
  return cudaGetLastError();
}

}  // namespace rw::cuda
