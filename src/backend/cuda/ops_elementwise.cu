// Norms, activations, RoPE, the KV store, the router's softmax/top-k and the MoE sum on the GPU.
// Each kernel follows its CPU reference's arithmetic (backend/cpu/ops_ref.cpp) closely: sums of
// squares and the softmax denominator in double, the same multiplication order.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

constexpr int kThreads = 256;
// Row kernels run one block per row; a decode step has one row, so a block must cover it with
// few loads per thread (latency, not bandwidth, bounds them).
constexpr int kRowThreads = 1024;

// 1 / sqrt(mean of squares + eps) of one row, computed by the whole block.
__device__ float RowInvRms(const float* x, int n, float eps, double* smem32) {
  double ss = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(x[i]) * x[i];
  ss = BlockSumD(ss, smem32);
  return 1.0f / sqrtf(static_cast<float>(ss) / static_cast<float>(n) + eps);
}

__global__ void RmsNormKernel(const float* x, float* y, int n, const float* w, float eps) {
  PdlEnter();
  __shared__ double smem[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  const float r = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * r * (w ? w[i] : 1.0f);
}

__global__ void AddRmsNormKernel(float* x, const float* y, int n, const float* w, float eps,
                                 float scalar) {
  PdlEnter();
  __shared__ double smem[32];
  float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  const float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  const float r = RowInvRms(yr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = (xr[i] + yr[i] * r * w[i]) * scalar;
}

__global__ void RouterInputKernel(const float* x, float* out, int n, const float* scale, float root,
                                  float eps) {
  PdlEnter();
  __shared__ double smem[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* o = out + static_cast<int64_t>(blockIdx.x) * n;
  const float r = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) o[i] = xr[i] * r * 1.0f * scale[i] * root;
}

__global__ void GegluKernel(float* gate, const float* up, int64_t n) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) gate[i] = GeluTanh(gate[i]) * up[i];
}

__global__ void SoftcapKernel(float* x, int64_t n, float cap) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void AxpyKernel(float* y, float a, const float* x, int64_t n, int mode) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (mode == 0)
    y[i] += x[i];
  else if (mode == 1)
    y[i] *= a;
  else
    y[i] += a * x[i];
}

__global__ void EmbedKernel(DevMat e, const int* ids, float scale, float* out) {
  PdlEnter();
  const int64_t t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < e.cols) out[t * e.cols + c] = MatAt(e, ids[t], c) * scale;
}

__global__ void RopeTableKernel(const int64_t* pos0, int64_t m, const float* inv_freq, int half,
                                float* cos_out, float* sin_out) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * half) return;
  const int64_t t = i / half;
  const float angle = static_cast<float>(*pos0 + t) * inv_freq[i % half];
  // Through double so the table is the correctly rounded value, as close to libm's as can be.
  cos_out[i] = static_cast<float>(cos(static_cast<double>(angle)));
  sin_out[i] = static_cast<float>(sin(static_cast<double>(angle)));
}

__global__ void RopeKernel(float* x, int64_t m, int n_heads, int head_dim, const float* cos_t,
                           const float* sin_t) {
  PdlEnter();
  const int half = head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * n_heads * half) return;
  const int64_t t = i / (static_cast<int64_t>(n_heads) * half);
  const int64_t h = (i / half) % n_heads;
  const int j = static_cast<int>(i % half);
  float* xh = x + (t * n_heads + h) * head_dim;
  const float c = cos_t[t * half + j], s = sin_t[t * half + j];
  const float a = xh[j], b = xh[j + half];
  xh[j] = a * c - b * s;
  xh[j + half] = b * c + a * s;
}

__global__ void KvStoreKernel(const float* k, const float* v, float* kc, float* vc, int64_t m,
                              int n_kv, int head_dim, int64_t capacity, const int64_t* pos0) {
  PdlEnter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * n_kv * head_dim) return;
  const int64_t t = i / (static_cast<int64_t>(n_kv) * head_dim);
  const int64_t h = (i / head_dim) % n_kv;
  const int64_t d = i % head_dim;
  const int64_t slot = (*pos0 + t) % capacity;
  const int64_t dst = (h * capacity + slot) * head_dim + d;
  kc[dst] = k[i];
  if (v != nullptr) vc[dst] = v[i];
}

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

__global__ void MoeCombineKernel(const int* idx, const float* w, const int* rows, const float* y,
                                 int k, int n, float* out) {
  PdlEnter();
  const int64_t t = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n) return;
  // Ascending expert order (each expert appears once per token).
  int order[32];
  for (int j = 0; j < k; ++j) {
    int q = j;
    while (q > 0 && idx[t * k + order[q - 1]] > idx[t * k + j]) {
      order[q] = order[q - 1];
      --q;
    }
    order[q] = j;
  }
  float acc = 0.0f;
  for (int q = 0; q < k; ++q) {
    const int j = order[q];
    const int64_t r = rows != nullptr ? rows[t * k + j] : t * k + j;
    acc += w[t * k + j] * y[r * n + c];
  }
  out[t * n + c] = acc;
}

// One block per (token, head row): q heads, then k heads, then v heads.
__global__ void QkvPostKernel(float* q, float* k, float* v, int n_heads, int n_kv, int hd,
                              const float* q_norm, const float* k_norm, const float* cos_t,
                              const float* sin_t, float* kc, float* vc, int64_t capacity,
                              const int64_t* pos0, float eps) {
  PdlEnter();
  __shared__ double smem[32];
  __shared__ float row[512];
  const int rows = n_heads + 2 * n_kv;
  const int64_t t = blockIdx.x / rows;
  const int r = blockIdx.x % rows;
  float* x;
  const float* w;
  int kind;  // 0 q, 1 k, 2 v
  if (r < n_heads) {
    x = q + (t * n_heads + r) * hd, w = q_norm, kind = 0;
  } else if (r < n_heads + n_kv) {
    x = k + (t * n_kv + (r - n_heads)) * hd, w = k_norm, kind = 1;
  } else {
    x = v + (t * n_kv + (r - n_heads - n_kv)) * hd, w = nullptr, kind = 2;
  }
  const float inv = RowInvRms(x, hd, eps, smem);
  for (int i = threadIdx.x; i < hd; i += blockDim.x) row[i] = x[i] * inv * (w ? w[i] : 1.0f);
  __syncthreads();
  const int half = hd / 2;
  if (kind < 2) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float c = cos_t[t * half + i], sn = sin_t[t * half + i];
      const float a = row[i], b = row[i + half];
      x[i] = a * c - b * sn;
      x[i + half] = b * c + a * sn;
    }
  } else {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) x[i] = row[i];
  }
  if (kind == 0) return;
  __syncthreads();
  const int h = kind == 1 ? r - n_heads : r - n_heads - n_kv;
  float* cache = kind == 1 ? kc : vc;
  const int64_t slot = (*pos0 + t) % capacity;
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    cache[(static_cast<int64_t>(h) * capacity + slot) * hd + i] = x[i];
}

// The three normalized copies of the residual the feed-forward half reads.
__global__ void FfnInputsKernel(const float* x, int n, const float* pre_ff, const float* pre_ff2,
                                const float* router_scale, float root, float eps, float* a,
                                float* a2, float* r) {
  PdlEnter();
  __shared__ double smem[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  const float* xr = x + off;
  const float inv = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i];
    a[off + i] = v * inv * pre_ff[i];
    if (a2 != nullptr) a2[off + i] = v * inv * pre_ff2[i];
    if (r != nullptr) r[off + i] = v * inv * 1.0f * router_scale[i] * root;
  }
}

// The post-attention residual (x += RmsNorm(o)·post_attn, as AddRmsNormKernel with scalar 1)
// and then FfnInputsKernel's three copies of the new x, in one launch: decode's row kernels
// are latency-bound, and a launch costs more than the reductions.
__global__ void ResidualFfnInputsKernel(float* x, const float* o, int n, const float* post_attn,
                                        const float* pre_ff, const float* pre_ff2,
                                        const float* router_scale, float root, float eps, float* a,
                                        float* a2, float* r) {
  PdlEnter();
  __shared__ double smem[32];
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  float* xr = x + off;
  const float* orow = o + off;
  const float ro = RowInvRms(orow, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    xr[i] = (xr[i] + orow[i] * ro * post_attn[i]) * 1.0f;
  __syncthreads();  // the block's writes of x are visible to its threads after the barrier
  const float inv = RowInvRms(xr, n, eps, smem);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i];
    a[off + i] = v * inv * pre_ff[i];
    if (a2 != nullptr) a2[off + i] = v * inv * pre_ff2[i];
    if (r != nullptr) r[off + i] = v * inv * 1.0f * router_scale[i] * root;
  }
}

// Per token: moe = Σ_j w_j·y_j (ascending expert order); m2 = RmsNorm(moe)·post2;
// m1 += m2; x = (x + RmsNorm(m1)·post)·scalar. Dynamic shared memory: n floats.
__global__ void MoeFinishKernel(const int* idx, const float* w, const int* rows, const float* y,
                                int k, int n, const float* post1, const float* post2, float* m1,
                                const float* post, float* x, float eps, float scalar,
                                const float* next_w, float* next_out) {
  PdlEnter();
  extern __shared__ float moe[];
  __shared__ double smem[32];
  const int64_t t = blockIdx.x;
  int order[32];
  for (int j = 0; j < k; ++j) {
    int q = j;
    while (q > 0 && idx[t * k + order[q - 1]] > idx[t * k + j]) {
      order[q] = order[q - 1];
      --q;
    }
    order[q] = j;
  }
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    float acc = 0.0f;
    for (int q = 0; q < k; ++q) {
      const int j = order[q];
      const int64_t rr = rows != nullptr ? rows[t * k + j] : t * k + j;
      acc += w[t * k + j] * y[rr * n + c];
    }
    moe[c] = acc;
  }
  __syncthreads();
  const float inv2 = RowInvRms(moe, n, eps, smem);
  float* m1r = m1 + t * n;
  // m1 = RmsNorm(dense)·post1 (when given) + RmsNorm(moe)·post2.
  const float inv1 = post1 != nullptr ? RowInvRms(m1r, n, eps, smem) : 1.0f;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const float d = post1 != nullptr ? m1r[c] * inv1 * post1[c] : m1r[c];
    m1r[c] = d + moe[c] * inv2 * post2[c];
  }
  __syncthreads();
  const float inv = RowInvRms(m1r, n, eps, smem);
  float* xr = x + t * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x)
    xr[c] = (xr[c] + m1r[c] * inv * post[c]) * scalar;
  if (next_w == nullptr) return;
  // The next layer's input norm (RmsNormKernel's arithmetic) on the new x.
  __syncthreads();
  const float rn = RowInvRms(xr, n, eps, smem);
  float* out = next_out + t * n;
  for (int c = threadIdx.x; c < n; c += blockDim.x) out[c] = xr[c] * rn * next_w[c];
}

// ---- Decode's fused row kernels with the row in registers ------------------------------------
// The same arithmetic as MoeFinishKernel and ResidualFfnInputsKernel (same threads per row, the
// same elements per thread, the same reduction order: bit-identical), restructured for latency,
// which is all a one-row launch has: the norm weights are loaded before waiting on the previous
// kernel, every other load of the row is issued at once into registers, and reductions that do
// not depend on each other share one pass. Rows up to kRowThreads·kRowPer wide.
constexpr int kRowPer = 4;

__device__ __forceinline__ float InvRms(double ss, int n, float eps) {
  return 1.0f / sqrtf(static_cast<float>(ss) / static_cast<float>(n) + eps);
}

// BlockSumD for two values at once (each summed exactly as BlockSumD would).
__device__ __forceinline__ void BlockSum2D(double& a, double& b, double2* smem32) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = WarpAllSumD(a);
  b = WarpAllSumD(b);
  __syncthreads();
  if (lane == 0) smem32[warp] = make_double2(a, b);
  __syncthreads();
  const double2 v = lane < warps ? smem32[lane] : make_double2(0.0, 0.0);
  a = WarpAllSumD(v.x);
  b = WarpAllSumD(v.y);
}

__global__ void __launch_bounds__(kRowThreads)
    MoeFinishRegKernel(const int* idx, const float* w, const int* rows, const float* y, int k,
                       int n, const float* post1, const float* post2, float* m1, const float* post,
                       float* x, float eps, float scalar, const float* next_w, float* next_out) {
  PdlLaunchDependents();
  __shared__ double2 smem[32];
  __shared__ int s_row[32];
  __shared__ float s_w[32];
  const int64_t t = blockIdx.x;
  float p1[kRowPer], p2[kRowPer], pp[kRowPer], nw[kRowPer];
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      p1[u] = post1 != nullptr ? post1[c] : 0.0f;
      p2[u] = post2[c];
      pp[u] = post[c];
      nw[u] = next_w != nullptr ? next_w[c] : 0.0f;
    }
  }
  PdlWait();
  // The experts in ascending index order (each appears once): thread j places its own by rank.
  if (threadIdx.x < k) {
    const int j = threadIdx.x, e = idx[t * k + j];
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += idx[t * k + i] < e;
    s_row[rank] = rows != nullptr ? rows[t * k + j] : static_cast<int>(t * k + j);
    s_w[rank] = w[t * k + j];
  }
  float* m1r = m1 + t * n;
  float* xr = x + t * n;
  float dv[kRowPer], xv[kRowPer], mo[kRowPer];
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      dv[u] = m1r[c];
      xv[u] = xr[c];
    }
  }
  __syncthreads();
  // Expert by expert (each weight and row read from shared memory once), every element's sum in
  // the same order as MoeFinishKernel's.
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) mo[u] = 0.0f;
#pragma unroll 8
  for (int q = 0; q < k; ++q) {
    const float wq = s_w[q];
    const float* yq = y + static_cast<int64_t>(s_row[q]) * n;
#pragma unroll
    for (int u = 0; u < kRowPer; ++u) {
      const int c = threadIdx.x + u * kRowThreads;
      if (c < n) mo[u] += wq * yq[c];
    }
  }
  // RmsNorm(moe) and RmsNorm(dense) in one pass.
  double ss2 = 0.0, ss1 = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    if (threadIdx.x + u * kRowThreads < n) {
      ss2 += static_cast<double>(mo[u]) * mo[u];
      ss1 += static_cast<double>(dv[u]) * dv[u];
    }
  }
  BlockSum2D(ss2, ss1, smem);
  const float inv2 = InvRms(ss2, n, eps);
  const float inv1 = post1 != nullptr ? InvRms(ss1, n, eps) : 1.0f;
  double ssm = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      const float d = post1 != nullptr ? dv[u] * inv1 * p1[u] : dv[u];
      dv[u] = d + mo[u] * inv2 * p2[u];
      m1r[c] = dv[u];
      ssm += static_cast<double>(dv[u]) * dv[u];
    }
  }
  ssm = BlockSumD(ssm, reinterpret_cast<double*>(smem));
  const float inv = InvRms(ssm, n, eps);
  double ssx = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      xv[u] = (xv[u] + dv[u] * inv * pp[u]) * scalar;
      xr[c] = xv[u];
      ssx += static_cast<double>(xv[u]) * xv[u];
    }
  }
  if (next_w == nullptr) return;
  // The next layer's input norm (RmsNormKernel's arithmetic) on the new x.
  ssx = BlockSumD(ssx, reinterpret_cast<double*>(smem));
  const float rn = InvRms(ssx, n, eps);
  float* out = next_out + t * n;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) out[c] = xv[u] * rn * nw[u];
  }
}

__global__ void __launch_bounds__(kRowThreads)
    ResidualFfnInputsRegKernel(float* x, const float* o, int n, const float* post_attn,
                               const float* pre_ff, const float* pre_ff2, const float* router_scale,
                               float root, float eps, float* a, float* a2, float* r) {
  PdlLaunchDependents();
  __shared__ double smem[32];
  float pa[kRowPer], f1[kRowPer], f2[kRowPer], rs[kRowPer];
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      pa[u] = post_attn[c];
      f1[u] = pre_ff[c];
      f2[u] = a2 != nullptr ? pre_ff2[c] : 0.0f;
      rs[u] = r != nullptr ? router_scale[c] : 0.0f;
    }
  }
  PdlWait();
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  float* xr = x + off;
  const float* orow = o + off;
  float ov[kRowPer], xv[kRowPer];
  double sso = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      ov[u] = orow[c];
      xv[u] = xr[c];
    }
  }
#pragma unroll
  for (int u = 0; u < kRowPer; ++u)
    if (threadIdx.x + u * kRowThreads < n) sso += static_cast<double>(ov[u]) * ov[u];
  const float ro = InvRms(BlockSumD(sso, smem), n, eps);
  double ssx = 0.0;
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      xv[u] = (xv[u] + ov[u] * ro * pa[u]) * 1.0f;
      xr[c] = xv[u];
      ssx += static_cast<double>(xv[u]) * xv[u];
    }
  }
  const float inv = InvRms(BlockSumD(ssx, smem), n, eps);
#pragma unroll
  for (int u = 0; u < kRowPer; ++u) {
    const int c = threadIdx.x + u * kRowThreads;
    if (c < n) {
      const float v = xv[u];
      a[off + c] = v * inv * f1[u];
      if (a2 != nullptr) a2[off + c] = v * inv * f2[u];
      if (r != nullptr) r[off + c] = v * inv * 1.0f * rs[u] * root;
    }
  }
}

bool RegRows(int n) {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_ROWS");
    return e == nullptr || std::strcmp(e, "shared") != 0;
  }();
  return on && n <= kRowThreads * kRowPer;
}

unsigned Grid(int64_t n) {
  return Blocks(n, kThreads);
}

// Either MoE-finish kernel (next_w null: without the next layer's input norm).
cudaError_t MoeFinishLaunch(const int* idx, const float* w, const int* rows, const float* y,
                            int64_t m, int k, int n, const float* post1, const float* post2,
                            float* m1, const float* post, float* x, float eps, float scalar,
                            const float* next_w, float* next_out, cudaStream_t s) {
  if (RegRows(n))
    return LaunchKernel(MoeFinishRegKernel, static_cast<unsigned>(m), kRowThreads, 0, s, idx, w,
                        rows, y, k, n, post1, post2, m1, post, x, eps, scalar, next_w, next_out);
  LaunchKernel(MoeFinishKernel, static_cast<unsigned>(m), kRowThreads, static_cast<size_t>(n) * 4,
               s, idx, w, rows, y, k, n, post1, post2, m1, post, x, eps, scalar, next_w, next_out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRmsNormRows(const float* x, float* y, int64_t rows, int n, const float* w,
                              float eps, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(RmsNormKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, y, n, w, eps);
  return cudaGetLastError();
}

cudaError_t LaunchAddRmsNorm(float* x, const float* y, int64_t rows, int n, const float* w,
                             float eps, float scalar, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(AddRmsNormKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, y, n, w, eps,
               scalar);
  return cudaGetLastError();
}

cudaError_t LaunchRouterInput(const float* x, float* r, int64_t rows, int n, const float* scale,
                              float root, float eps, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(RouterInputKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, r, n, scale,
               root, eps);
  return cudaGetLastError();
}

cudaError_t LaunchGeglu(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(GegluKernel, Grid(n), kThreads, 0, s, gate, up, n);
  return cudaGetLastError();
}

cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(SoftcapKernel, Grid(n), kThreads, 0, s, x, n, cap);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(AxpyKernel, Grid(n), kThreads, 0, s, y, 1.0f, x, n, 0);
  return cudaGetLastError();
}

cudaError_t LaunchScale(float* y, float a, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(AxpyKernel, Grid(n), kThreads, 0, s, y, a, nullptr, n, 1);
  return cudaGetLastError();
}

cudaError_t LaunchAxpy(float* y, float a, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  LaunchKernel(AxpyKernel, Grid(n), kThreads, 0, s, y, a, x, n, 2);
  return cudaGetLastError();
}

cudaError_t LaunchEmbed(const DevMat& e, const int* ids, int64_t m, float scale, float* out,
                        cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  const dim3 grid(Grid(e.cols), static_cast<unsigned>(m));
  LaunchKernel(EmbedKernel, grid, kThreads, 0, s, e, ids, scale, out);
  return cudaGetLastError();
}

cudaError_t LaunchRopeTable(const int64_t* pos0, int64_t m, const float* inv_freq, int half,
                            float* cos, float* sin, cudaStream_t s) {
  if (m * half <= 0) return cudaSuccess;
  LaunchKernel(RopeTableKernel, Grid(m * half), kThreads, 0, s, pos0, m, inv_freq, half, cos, sin);
  return cudaGetLastError();
}

cudaError_t LaunchRopeNeox(float* x, int64_t m, int n_heads, int head_dim, const float* cos,
                           const float* sin, cudaStream_t s) {
  const int64_t n = m * n_heads * (head_dim / 2);
  if (n <= 0) return cudaSuccess;
  LaunchKernel(RopeKernel, Grid(n), kThreads, 0, s, x, m, n_heads, head_dim, cos, sin);
  return cudaGetLastError();
}

cudaError_t LaunchKvStore(const float* k, const float* v, float* k_cache, float* v_cache, int64_t m,
                          int n_kv, int head_dim, int64_t capacity, const int64_t* pos0,
                          cudaStream_t s) {
  const int64_t n = m * n_kv * head_dim;
  if (n <= 0) return cudaSuccess;
  LaunchKernel(KvStoreKernel, Grid(n), kThreads, 0, s, k, v, k_cache, v_cache, m, n_kv, head_dim,
               capacity, pos0);
  return cudaGetLastError();
}

cudaError_t LaunchRouteTopK(const float* logits, float* probs, int64_t m, int num_experts, int k,
                            const float* per_expert_scale, int* idx, float* w, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 64 || k > num_experts) return cudaErrorInvalidValue;
  if (num_experts <= 32 * kWarpRouterMax && k <= 32) {
    // REDWING_CUDA_TOPK=warp: the warp kernel for every chunk size (comparisons).
    static const bool warp_only = [] {
      const char* e = std::getenv("REDWING_CUDA_TOPK");
      return e != nullptr && std::strcmp(e, "warp") == 0;
    }();
    if (m == 1 && !warp_only) {
      LaunchKernel(RouteTopKRankKernel, 1, (num_experts + 31) / 32 * 32, 0, s, logits, probs,
                   num_experts, k, per_expert_scale, idx, w);
      return cudaGetLastError();
    }
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

cudaError_t LaunchMoeCombine(const int* idx, const float* w, const int* rows, const float* y,
                             int64_t m, int k, int n, float* out, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 32) return cudaErrorInvalidValue;
  const dim3 grid(Grid(n), static_cast<unsigned>(m));
  LaunchKernel(MoeCombineKernel, grid, kThreads, 0, s, idx, w, rows, y, k, n, out);
  return cudaGetLastError();
}

cudaError_t LaunchQkvPost(float* q, float* k, float* v, int64_t m, int n_heads, int n_kv,
                          int head_dim, const float* q_norm, const float* k_norm, const float* cos,
                          const float* sin, float* k_cache, float* v_cache, int64_t capacity,
                          const int64_t* pos0, float eps, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (head_dim > 512) return cudaErrorInvalidValue;
  const int64_t blocks = m * (n_heads + 2 * n_kv);
  LaunchKernel(QkvPostKernel, static_cast<unsigned>(blocks), 128, 0, s, q, k, v, n_heads, n_kv,
               head_dim, q_norm, k_norm, cos, sin, k_cache, v_cache, capacity, pos0, eps);
  return cudaGetLastError();
}

cudaError_t LaunchFfnInputs(const float* x, int64_t rows, int n, const float* pre_ff,
                            const float* pre_ff2, const float* router_scale, float root, float eps,
                            float* a, float* a2, float* r, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  LaunchKernel(FfnInputsKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, n, pre_ff,
               pre_ff2, router_scale, root, eps, a, a2, r);
  return cudaGetLastError();
}

cudaError_t LaunchMoeFinish(const int* idx, const float* w, const int* rows, const float* y,
                            int64_t m, int k, int n, const float* post_ff1, const float* post_ff2,
                            float* m1, const float* post_ff, float* x, float eps, float scalar,
                            cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 32 || n > 12 * 1024) return cudaErrorInvalidValue;  // the row lives in shared memory
  return MoeFinishLaunch(idx, w, rows, y, m, k, n, post_ff1, post_ff2, m1, post_ff, x, eps, scalar,
                         nullptr, nullptr, s);
}

cudaError_t LaunchMoeFinishNorm(const int* idx, const float* w, const int* rows, const float* y,
                                int64_t m, int k, int n, const float* post_ff1,
                                const float* post_ff2, float* m1, const float* post_ff, float* x,
                                float eps, float scalar, const float* next_norm, float* next_out,
                                cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (k > 32 || n > 12 * 1024 || next_norm == nullptr || next_out == nullptr)
    return cudaErrorInvalidValue;
  return MoeFinishLaunch(idx, w, rows, y, m, k, n, post_ff1, post_ff2, m1, post_ff, x, eps, scalar,
                         next_norm, next_out, s);
}

cudaError_t LaunchResidualFfnInputs(float* x, const float* o, int64_t rows, int n,
                                    const float* post_attn, const float* pre_ff,
                                    const float* pre_ff2, const float* router_scale, float root,
                                    float eps, float* a, float* a2, float* r, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (RegRows(n))
    return LaunchKernel(ResidualFfnInputsRegKernel, static_cast<unsigned>(rows), kRowThreads, 0, s,
                        x, o, n, post_attn, pre_ff, pre_ff2, router_scale, root, eps, a, a2, r);
  LaunchKernel(ResidualFfnInputsKernel, static_cast<unsigned>(rows), kRowThreads, 0, s, x, o, n,
               post_attn, pre_ff, pre_ff2, router_scale, root, eps, a, a2, r);
  return cudaGetLastError();
}

}  // namespace rw::cuda
