// Decode matvec y = W·x for 4-bit affine weights on tensor cores.
//
// Why: the SIMT kernels spend ~10 instructions per weight (unpack, s·q + b, FMA, x from shared
// memory) and are bound by instruction issue, not by DRAM. Here the codes go to the tensor cores
// as they are: a 4-bit code q is an exact bf16, and per group of G columns
//   Σ_k (s·q_k + b)·x_k = s·Σ_k q_k·x_k + b·Σ_k x_k,
// so the MMA computes Σ q·x and the scale and bias are applied once per group. x is split into
// three bf16 parts (hi + mid + lo = x exactly: 8 + 8 + 8 significant bits), which become three
// of the MMA's 8 columns, so the products are exact and the sums are fp32: fp32-level accuracy
// (the reference's order of rounding is not kept; the kernel tests bound the difference).
//
// Layout: a block has kTiles × kSlices warps; tile i covers 16 rows, slice j a quarter of the
// groups of K. In mma.m16n8k16 the lanes of a quad hold the 16 k of an A row; which real column
// each k-slot stands for is free as long as B uses the same assignment, so lane t of a quad
// loads G/8 consecutive bytes of its row per group (all 4 lanes together: one group), and turns
// each 32-bit word into four bf16 pairs with one shift and one LOP3 each: nibbles (i, i+4).
// x's parts are staged in shared memory in that permuted order, so a B fragment is one load.
//
// Status: opt-in (REDWING_CUDA_MATVEC=tc). It issues a fifth of the SIMT kernels' instructions,
// yet on the H200 decode measured 232 tok/s against their 247: with 512-thread blocks at one per
// SM most launches take 2–5 waves, each restaging x, and expert down (K = 704) lost the most.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec_tc.h"

namespace rw::cuda {
namespace {

constexpr int kSlices = 8;  // warps splitting a tile's K
constexpr int kTiles = 2;   // 16-row tiles per block
constexpr int kThreads = 32 * kSlices * kTiles;

// Column k's place in the staged parts: within each 8 columns (one word of codes) the order
// 0,4,1,5,2,6,3,7 that the nibble pairs (i, i+4) give.
__device__ __forceinline__ int Perm(int k) {
  return (k & ~7) | ((k & 3) << 1) | ((k >> 2) & 1);
}

__device__ __forceinline__ uint16_t Bf16Rn(float v, float* back) {
  const uint32_t u = __float_as_uint(v);
  const uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;  // round to nearest even (finite v)
  *back = __uint_as_float(r << 16);
  return static_cast<uint16_t>(r);
}

// Nibbles i and i + 4 of w as a bf16 pair (low half: nibble i): 128 + q by bits, minus 128.
__device__ __forceinline__ uint32_t CodePair(uint32_t w, int i) {
  const uint32_t v = ((w >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
  uint32_t out;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(v), "r"(0x3F803F80u), "r"(0xC300C300u));
  return out;
}

__device__ __forceinline__ void Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

using Args = TcMatVec;  // a launch as the caller describes it

// Stages x's three bf16 parts ([3][cols], permuted) and the group sums of x ([cols/G], in
// column order) in shared memory.
template <int G>
__device__ __forceinline__ void StageParts(const float* x, int cols, uint16_t* parts, float* gsum) {
  for (int k = threadIdx.x; k < cols; k += blockDim.x) {
    const float v = x[k];
    float hb, mb, lb;
    const uint16_t hi = Bf16Rn(v, &hb);
    const float r1 = v - hb;  // exact
    const uint16_t mid = Bf16Rn(r1, &mb);
    const uint16_t lo = Bf16Rn(r1 - mb, &lb);
    const int p = Perm(k);
    parts[p] = hi;
    parts[cols + p] = mid;
    parts[2 * cols + p] = lo;
  }
  const int lane = threadIdx.x & 31;
  for (int g = threadIdx.x >> 5; g < cols / G; g += blockDim.x >> 5) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < G / 32; ++i) sum += x[g * G + 32 * i + lane];
    sum = WarpAllSum(sum);
    if (lane == 0) gsum[g] = sum;
  }
  __syncthreads();
}

// A warp's loads, all issued at once (a chain of smaller batches waits on DRAM once per batch):
// for up to kMaxG groups, the lane's words of rows g and g + 8, and (lanes 0–1 of a quad) the
// groups' scales, (lane 0) biases.
template <int G, int kBatch>
struct Batch {
  static constexpr int kWords = G / 32;  // words of codes per lane per group
  uint32_t a[kBatch][kWords], b[kBatch][kWords];
  uint32_t scale[kBatch], bias[kBatch];  // bf16 of row g (low half) and row g + 8 (high half)
};

template <int G, int kBatch>
__device__ __forceinline__ void LoadBatch(const DevMat& w, int64_t r0, int64_t rows, int g0,
                                          int g_end, int quad_lane, Batch<G, kBatch>& bt) {
  constexpr int kW = Batch<G, kBatch>::kWords;
  const int64_t wpr = w.cols / 8, gpr = w.cols / G;
  const int64_t ra = r0, rb = r0 + 8;
  const uint32_t* data = static_cast<const uint32_t*>(w.data);
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    const int g = g0 + i;
    const bool in = g < g_end;
#pragma unroll
    for (int v = 0; v < kW; ++v) {
      const int64_t wi = static_cast<int64_t>(g) * (G / 8) + quad_lane * kW + v;
      bt.a[i][v] = in && ra < rows ? __ldg(data + ra * wpr + wi) : 0u;
      bt.b[i][v] = in && rb < rows ? __ldg(data + rb * wpr + wi) : 0u;
    }
    const bool sc = in && quad_lane < 2, bi = in && quad_lane == 0;
    const uint32_t sa = sc && ra < rows ? __ldg(w.scales + ra * gpr + g) : 0u;
    const uint32_t sb = sc && rb < rows ? __ldg(w.scales + rb * gpr + g) : 0u;
    const uint32_t ba = bi && ra < rows ? __ldg(w.biases + ra * gpr + g) : 0u;
    const uint32_t bb = bi && rb < rows ? __ldg(w.biases + rb * gpr + g) : 0u;
    bt.scale[i] = sa | (sb << 16);
    bt.bias[i] = ba | (bb << 16);
  }
}

template <int G, int kBatch>
__device__ __forceinline__ void ComputeBatch(const Batch<G, kBatch>& bt, int g0, int g_end,
                                             int cols, const uint16_t* parts, const float* gsum,
                                             int lane, float& acc_a, float& acc_b) {
  constexpr int kW = Batch<G, kBatch>::kWords;
  const int quad_lane = lane & 3, part = lane >> 2;
#pragma unroll
  for (int i = 0; i < kBatch; ++i) {
    const int g = g0 + i;
    if (g >= g_end) break;
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int base = g * G + quad_lane * 8 * kW;  // the lane's first column (permuted index)
#pragma unroll
    for (int v = 0; v < kW; ++v) {
      uint4 xb = make_uint4(0u, 0u, 0u, 0u);
      if (part < 3) xb = *reinterpret_cast<const uint4*>(parts + part * cols + base + 8 * v);
      const uint32_t wa = bt.a[i][v], wb = bt.b[i][v];
      // slots (2t, 2t+1) ← nibble pair 0 (1 in the second MMA), slots (2t+8, 2t+9) ← pair 1 (3)
      Mma(c, CodePair(wa, 0), CodePair(wb, 0), CodePair(wa, 1), CodePair(wb, 1), xb.x, xb.y);
      Mma(c, CodePair(wa, 2), CodePair(wb, 2), CodePair(wa, 3), CodePair(wb, 3), xb.z, xb.w);
    }
    // Columns: lane 0 of the quad holds parts hi and mid, lane 1 lo and a zero column.
    if (quad_lane < 2) {
      acc_a += __uint_as_float(bt.scale[i] << 16) * (c[0] + c[1]);
      acc_b += __uint_as_float(bt.scale[i] & 0xFFFF0000u) * (c[2] + c[3]);
    }
    if (quad_lane == 0) {
      const float xs = gsum[g];
      acc_a += __uint_as_float(bt.bias[i] << 16) * xs;
      acc_b += __uint_as_float(bt.bias[i] & 0xFFFF0000u) * xs;
    }
  }
}

template <int G, int kMaxG>
__global__ void __launch_bounds__(kThreads, 1) AffineMatVecTcKernel(Args a) {
  PdlLaunchDependents();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ float red[kTiles][kSlices][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile = warp / kSlices, slice = warp % kSlices;
  const int j = blockIdx.y;
  // The matrix this warp reads, the input and where results go.
  bool waited = false;
  DevMat w;
  const float* x = a.x;
  float* y = nullptr;
  if (a.blobs != nullptr) {
    PdlWait();  // the blob is the router's choice
    waited = true;
    const uint8_t* blob = a.idx != nullptr ? a.blobs[a.idx[j]] : a.blobs[j];
    w = Resolve(a.gateup ? a.w[tile] : a.w[0], blob);
    x += j * (a.gateup ? a.x_stride : a.w[0].cols);
    y = a.gateup ? a.h + j * a.rows : a.y[0] + j * a.rows;
  } else {
    w = a.gateup ? a.w[tile] : a.w[j];
    y = a.gateup ? a.h : a.y[j];
  }
  const int cols = static_cast<int>(w.cols);
  const int64_t rows = w.rows;
  const int rows_per_block = a.gateup ? 16 : 16 * kTiles;
  const int64_t turns = (rows + rows_per_block - 1) / rows_per_block;
  uint16_t* parts = reinterpret_cast<uint16_t*>(smem_raw);
  float* gsum = reinterpret_cast<float*>(smem_raw + 6 * static_cast<size_t>(cols));
  const int ng = cols / G;
  const int g_begin = slice * ng / kSlices, g_end = (slice + 1) * ng / kSlices;
  const int quad_lane = lane & 3, grow = lane >> 2;
  bool staged = false;
  for (int64_t turn = blockIdx.x; turn < turns; turn += gridDim.x) {
    const int64_t r0 = turn * rows_per_block + (a.gateup ? 0 : 16 * tile);
    Batch<G, kMaxG> all;
    LoadBatch<G, kMaxG>(w, r0 + grow, rows, g_begin, g_end, quad_lane, all);
    if (!staged) {  // the same for every thread of the block
      if (!waited) PdlWait();
      waited = true;
      StageParts<G>(x, cols, parts, gsum);
      staged = true;
    }
    float acc_a = 0.0f, acc_b = 0.0f;
    ComputeBatch<G, kMaxG>(all, g_begin, g_end, cols, parts, gsum, lane, acc_a, acc_b);
    // Lanes 0 and 1 of each quad hold partial sums of rows grow and grow + 8.
    acc_a += __shfl_down_sync(0xffffffffu, acc_a, 1);
    acc_b += __shfl_down_sync(0xffffffffu, acc_b, 1);
    if (quad_lane == 0) {
      red[tile][slice][grow] = acc_a;
      red[tile][slice][grow + 8] = acc_b;
    }
    __syncthreads();
    if (a.gateup) {
      if (threadIdx.x < 16) {
        const int64_t row = r0 + threadIdx.x;
        float g = 0.0f, u = 0.0f;
        for (int s = 0; s < kSlices; ++s) g += red[0][s][threadIdx.x];
        for (int s = 0; s < kSlices; ++s) u += red[1][s][threadIdx.x];
        if (row < rows) y[row] = GeluTanh(g) * u;
      }
    } else if (threadIdx.x < 16 * kTiles) {
      const int t = threadIdx.x / 16, r = threadIdx.x % 16;
      const int64_t row = turn * rows_per_block + 16 * t + r;
      float v = 0.0f;
      for (int s = 0; s < kSlices; ++s) v += red[t][s][r];
      if (row < rows) y[row] = v;
    }
    __syncthreads();  // red is rewritten by the next turn
  }
  if (!waited) PdlWait();  // a block with no rows still keeps the chain
}

thread_local bool t_host_reads = false;

bool Allowed() {
  static const bool on = [] {
    // Opt-in: measured slower than the SIMT kernels so far (see docs/CUDA.md).
    const char* e = std::getenv("REDWING_CUDA_MATVEC");
    if (e == nullptr || std::strcmp(e, "tc") != 0) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 8;
  }();
  return on;
}

bool Fits(const DevMat& w, int64_t cols) {
  return w.type == DevMat::kAffine && w.bits == 4 && (w.group == 32 || w.group == 64) &&
         w.cols == cols && cols % 64 == 0 && (reinterpret_cast<uintptr_t>(w.data) & 7u) == 0;
}

size_t SmemBytes(int64_t cols, int group) {
  return static_cast<size_t>(cols) * 6 + static_cast<size_t>(cols / group) * 4;
}

template <int G, int kMaxG>
cudaError_t LaunchT(const Args& args, const TcMatVec& a, cudaStream_t s) {
  const size_t smem = SmemBytes(a.cols, G);
  if (smem > 48 * 1024) {
    static cudaError_t attr = cudaFuncSetAttribute(
        AffineMatVecTcKernel<G, kMaxG>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    if (attr != cudaSuccess) return cudaErrorNotSupported;
    if (smem > 200 * 1024) return cudaErrorNotSupported;
  }
  const int rows_per_block = a.gateup ? 16 : 16 * kTiles;
  unsigned blocks = static_cast<unsigned>((a.rows + rows_per_block - 1) / rows_per_block);
  if (blocks > 2048) {  // the LM head: stride over the rows with what the GPU holds at once
    const unsigned cap = ResidentBlocks(
        reinterpret_cast<const void*>(AffineMatVecTcKernel<G, kMaxG>), kThreads, smem);
    blocks = blocks < cap ? blocks : cap;
  }
  return LaunchKernel(AffineMatVecTcKernel<G, kMaxG>, dim3(blocks, a.slots, 1), kThreads, smem, s,
                      args);
}

}  // namespace

void SetHostExpertReads(bool may) {
  t_host_reads = may;
}

bool HostExpertReads() {
  return t_host_reads;
}

cudaError_t LaunchAffineMatVecTc(const TcMatVec& a, cudaStream_t s) {
  if (!Allowed() || a.rows <= 0 || a.slots == 0) return cudaErrorNotSupported;
  // A quad reads 32 bytes of each of 8 rows: fine for DRAM, poor PCIe requests (the SIMT
  // kernels read 512 contiguous bytes per warp load).
  if (a.blobs != nullptr && t_host_reads) return cudaErrorNotSupported;
  if ((reinterpret_cast<uintptr_t>(a.x) & 3u) != 0) return cudaErrorNotSupported;
  const int nmat = a.gateup ? 2 : (a.blobs != nullptr ? 1 : static_cast<int>(a.slots));
  if (nmat > 3) return cudaErrorNotSupported;
  const int group = a.w[0].group;
  for (int i = 0; i < nmat; ++i)
    if (!Fits(a.w[i], a.cols) || a.w[i].group != group) return cudaErrorNotSupported;
  if (a.gateup && a.w[0].rows != a.w[1].rows) return cudaErrorNotSupported;
  const Args& args = a;
  // Groups per warp: the kernel holds all of a warp's loads in registers.
  const int64_t per_warp = (a.cols / group + kSlices - 1) / kSlices;
  if (group == 64) {
    if (per_warp <= 2) return LaunchT<64, 2>(args, a, s);
    if (per_warp <= 8) return LaunchT<64, 8>(args, a, s);
    if (per_warp <= 16) return LaunchT<64, 16>(args, a, s);
  } else {
    if (per_warp <= 4) return LaunchT<32, 4>(args, a, s);
    if (per_warp <= 16) return LaunchT<32, 16>(args, a, s);
  }
  return cudaErrorNotSupported;
}

}  // namespace rw::cuda
