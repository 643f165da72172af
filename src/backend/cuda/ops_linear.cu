// Linear layers on the GPU for every weight format (f32, bf16, MLX affine 4/8-bit):
//   matvec (decode): affine 4/8-bit weights with groups of 64 go to the integer tensor-core
//     kernel of ops_matvec_i8.cu (REDWING_CUDA_MATVEC=simt keeps them here); otherwise one warp
//     per output row, lanes walk the packed words together and dequantize in registers; affine
//     4/8-bit rows take kernels specialized by width that load each warp's rows into registers
//     before staging x (the "fast" kernels below);
//   matmul (prefill): each K step dequantizes a 64×32 weight tile into shared memory (never the
//     whole matrix) and reuses it for all rows of the X tile; on sm_80+ the tile product runs on
//     tensor cores as 3xTF32 (fp32 accuracy), else (or with REDWING_CUDA_MATMUL=simt) as fp32
//     FMAs in 32×64 tiles. Affine weights take the bf16 kernels of ops_matmul_*.cu instead.
// Expert variants take per-slot blob addresses so one launch covers all chosen experts.
// Each output's K loop runs in ascending order whatever the grouping, so an expert's result
// does not depend on which other experts share the launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/matvec_tc.h"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

constexpr int kWarps = 8;  // matvec rows per block

// q as a float without an int→float conversion (a quarter-rate instruction): 2^23 + q has q
// in its mantissa, so subtracting 2^23 is exact.
__device__ __forceinline__ float Code(uint32_t word, int shift, uint32_t mask) {
  return __uint_as_float(((word >> shift) & mask) | 0x4B000000u) - 8388608.0f;
}

// Index of element k of x staged in shared memory with a float4 of padding after every 32
// elements: the lanes of a warp read x at a stride of 32 (4-bit) or 16 (8-bit) elements, which
// unpadded would put a quarter warp's float4 loads in the same banks.
__device__ __forceinline__ int Padded(int k) {
  return k + (k >> 5) * 4;
}

template <int kBits>
__device__ __forceinline__ float AffineRowDot(const DevMat& w, int64_t row, const float* x,
                                              bool padded, int lane) {
  constexpr int kPer = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int64_t wpr = w.cols / kPer;
  const int gpr = static_cast<int>(w.cols) / w.group;
  const int wpg = w.group / kPer;  // a multiple of 4: a uint4 of words never straddles groups
  const uint32_t* wr = static_cast<const uint32_t*>(w.data) + row * wpr;
  const uint16_t* sr = w.scales + row * gpr;
  const uint16_t* br = w.biases + row * gpr;
  float acc = 0.0f;
  if (((reinterpret_cast<uintptr_t>(wr) | reinterpret_cast<uintptr_t>(x)) & 15u) == 0 &&
      wpr % 4 == 0) {
    // 16 bytes of codes per lane per step, all steps' loads issued before any is used: a row is
    // short, and the DRAM round trip, not bandwidth, is what a warp waits on (4 steps cover a
    // 4096-wide 4-bit row, 8 a 2816-wide 8-bit row, in one round; more costs occupancy).
    constexpr int kU = kBits == 8 ? 8 : 4;
    const uint4* w4 = reinterpret_cast<const uint4*>(wr);
    const int n4 = static_cast<int>(wpr / 4);  // 32-bit index math: a row is short
    for (int base = lane; base < n4; base += 32 * kU) {
      uint4 q4[kU];
      float sc[kU], bc[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = base + 32 * u;
        if (i < n4) {
          q4[u] = __ldg(w4 + i);
          const int g = i * 4 / wpg;
          sc[u] = Bf16Bits(__ldg(sr + g));
          bc[u] = Bf16Bits(__ldg(br + g));
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = base + 32 * u;
        if (i >= n4) break;
        const uint32_t words[4] = {q4[u].x, q4[u].y, q4[u].z, q4[u].w};
        const int k0 = i * 4 * kPer;  // 32 (4-bit) or 16 (8-bit) elements, within one 32-block
        const float4* xv = reinterpret_cast<const float4*>(x + (padded ? Padded(k0) : k0));
#pragma unroll
        for (int wd = 0; wd < 4; ++wd) {
#pragma unroll
          for (int v = 0; v < kPer / 4; ++v) {
            const float4 xx = xv[wd * (kPer / 4) + v];
            const float xs[4] = {xx.x, xx.y, xx.z, xx.w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
              acc =
                  fmaf(fmaf(sc[u], Code(words[wd], (v * 4 + j) * kBits, kMask), bc[u]), xs[j], acc);
          }
        }
      }
    }
    return acc;
  }
  for (int i = lane; i < static_cast<int>(wpr); i += 32) {
    const uint32_t word = __ldg(wr + i);
    const int g = i / wpg;
    const float s = Bf16Bits(__ldg(sr + g)), b = Bf16Bits(__ldg(br + g));
    const int k0 = i * kPer;
    const float4* xv = reinterpret_cast<const float4*>(x + (padded ? Padded(k0) : k0));
#pragma unroll
    for (int v = 0; v < kPer / 4; ++v) {
      const float4 xx = xv[v];
      const float xs[4] = {xx.x, xx.y, xx.z, xx.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        acc = fmaf(fmaf(s, Code(word, (v * 4 + j) * kBits, kMask), b), xs[j], acc);
    }
  }
  return acc;
}

// Sum over the row (all lanes get it). x is in global memory, or (padded) staged by StageX.
__device__ __forceinline__ float RowDot(const DevMat& w, int64_t row, const float* x, bool padded,
                                        int lane) {
  float acc = 0.0f;
  if (w.type == DevMat::kAffine) {
    acc = w.bits == 4 ? AffineRowDot<4>(w, row, x, padded, lane)
                      : AffineRowDot<8>(w, row, x, padded, lane);
  } else if (w.type == DevMat::kBf16) {
    const uint16_t* wr = static_cast<const uint16_t*>(w.data) + row * w.cols;
    for (int64_t k = lane; k < w.cols; k += 32)
      acc = fmaf(Bf16Bits(__ldg(wr + k)), x[padded ? Padded(static_cast<int>(k)) : k], acc);
  } else {
    const float* wr = static_cast<const float*>(w.data) + row * w.cols;
    for (int64_t k = lane; k < w.cols; k += 32)
      acc = fmaf(__ldg(wr + k), x[padded ? Padded(static_cast<int>(k)) : k], acc);
  }
  return WarpAllSum(acc);
}

// Rows per warp: a block of kWarps warps covers kWarps·kRowsPerWarp rows, so the staged x is
// reused across more rows (measured: 2 beats 1 on the full-size model's decode).
constexpr int kRowsPerWarp = 2;
constexpr int kBlockRows = kWarps * kRowsPerWarp;
// Inputs up to this many floats are staged in shared memory (padded: 36 per 32).
constexpr int kMaxStaged = 8192;

int64_t StagedBytes(int64_t k) {
  return k <= kMaxStaged ? (k + (k / 32 + 1) * 4) * 4 : 0;
}

// Copies x[0..k) into shared memory (padded layout) when it fits; returns the pointer to read x
// from and whether it is padded. Every thread of the block must call it.
__device__ __forceinline__ const float* StageX(const float* x, int64_t k, float* smem,
                                               bool* padded) {
  if (k > kMaxStaged) {
    *padded = false;
    return x;
  }
  for (int i = threadIdx.x; i < k; i += blockDim.x) smem[Padded(i)] = __ldg(x + i);
  __syncthreads();
  *padded = true;
  return smem;
}

// The row the current warp computes in its r-th turn, or -1 past the end.
__device__ __forceinline__ int64_t TurnRow(int r, int64_t rows) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kBlockRows + r * kWarps + (threadIdx.x >> 5);
  return row < rows ? row : -1;
}

__global__ void MatVecKernel(DevMat w, const float* x, float* y) {
  PdlEnter();
  extern __shared__ __align__(16) float smem[];
  bool padded;
  const float* xs = StageX(x, w.cols, smem, &padded);
  const int lane = threadIdx.x & 31;
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = TurnRow(r, w.rows);
    if (row < 0) break;
    const float acc = RowDot(w, row, xs, padded, lane);
    if (lane == 0) y[row] = acc;
  }
}

struct MatVecBatch {
  DevMat w[3];
  float* y[3];
};

// blockIdx.y picks one of up to three matrices sharing the input (q/k/v).
__global__ void MatVecMultiKernel(MatVecBatch b, const float* x) {
  PdlEnter();
  extern __shared__ __align__(16) float smem[];
  const DevMat w = b.w[blockIdx.y];
  bool padded;
  const float* xs = StageX(x, w.cols, smem, &padded);
  const int lane = threadIdx.x & 31;
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = TurnRow(r, w.rows);
    if (row < 0) break;
    const float acc = RowDot(w, row, xs, padded, lane);
    if (lane == 0) b.y[blockIdx.y][row] = acc;
  }
}

// The blob of expert slot j: table[idx[j]] (resident experts, chosen on the GPU) or blobs[j].
__device__ __forceinline__ const uint8_t* SlotBlob(const uint8_t* const* blobs, const int* idx,
                                                   int j) {
  return idx != nullptr ? blobs[idx[j]] : blobs[j];
}

// Gate/up kernels: warps 0–3 of a block compute four gate rows, warps 4–7 the same four up rows
// (both halves wait on DRAM at once), then four threads write gelu_tanh(g)·u.
constexpr int kGluRows = kWarps / 2;

__device__ __forceinline__ void GateUpRows(const DevMat& gate, const DevMat& up, const float* xs,
                                           bool padded, float* h) {
  __shared__ float gu[2][kGluRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int which = warp / kGluRows;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGluRows + warp % kGluRows;
  if (row < gate.rows) {
    const float v = RowDot(which == 0 ? gate : up, row, xs, padded, lane);
    if (lane == 0) gu[which][warp % kGluRows] = v;
  }
  __syncthreads();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kGluRows + threadIdx.x;
  if (threadIdx.x < kGluRows && r < gate.rows)
    h[r] = GeluTanh(gu[0][threadIdx.x]) * gu[1][threadIdx.x];
}

// h[j] = gelu_tanh(gate_j·x_j) ⊙ (up_j·x_j): no separate GeGLU pass.
__global__ void ExpertGateUpKernel(ExpertMats e, const uint8_t* const* blobs, const int* idx,
                                   const float* x, int64_t x_stride, float* h) {
  PdlEnter();
  extern __shared__ __align__(16) float smem[];
  const int j = blockIdx.y;
  const uint8_t* blob = SlotBlob(blobs, idx, j);
  const DevMat gate = Resolve(e.gate, blob), up = Resolve(e.up, blob);
  bool padded;
  const float* xs = StageX(x + j * x_stride, gate.cols, smem, &padded);
  GateUpRows(gate, up, xs, padded, h + j * gate.rows);
}

__global__ void ExpertDownKernel(ExpertMats e, const uint8_t* const* blobs, const int* idx,
                                 const float* h, float* y) {
  PdlEnter();
  extern __shared__ __align__(16) float smem[];
  const int lane = threadIdx.x & 31, j = blockIdx.y;
  const DevMat w = Resolve(e.down, SlotBlob(blobs, idx, j));
  bool padded;
  const float* xs = StageX(h + j * w.cols, w.cols, smem, &padded);
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t row = TurnRow(r, w.rows);
    if (row < 0) break;
    const float acc = RowDot(w, row, xs, padded, lane);
    if (lane == 0) y[j * w.rows + row] = acc;
  }
}

// The dense MLP's h = gelu_tanh(gate·x) ⊙ (up·x).
__global__ void GateUpGegluKernel(DevMat gate, DevMat up, const float* x, float* h) {
  PdlEnter();
  extern __shared__ __align__(16) float smem[];
  bool padded;
  const float* xs = StageX(x, gate.cols, smem, &padded);
  GateUpRows(gate, up, xs, padded, h);
}

// ---- Decode fast path: affine rows held in registers ----------------------------------------
// The generic kernels above need 96–168 registers (every format inlined), so an SM holds one or
// two blocks and each warp has one row's loads in flight. These are specialized by bit width and
// by kU (16-byte chunks per lane per row), and each warp issues the loads of all its kRW rows
// before the block stages x and waits at the barrier, so the DRAM round trip overlaps the
// staging. The sums run in the generic kernels' order (lane's chunks ascending, then the warp
// sum), so the results are bit-identical to theirs.

template <int kU>
struct Tile {
  uint4 q[kU];
  float s[kU], b[kU];
};

template <int kBits, int kU>
__device__ __forceinline__ void LoadTile(const DevMat& w, int64_t row, int lane, Tile<kU>& t) {
  constexpr int kPer = 32 / kBits;
  const int n4 = static_cast<int>(w.cols) / (4 * kPer);
  const int gpr = static_cast<int>(w.cols) / w.group;
  const int cpg = w.group / (4 * kPer);  // chunks per group
  const uint4* w4 = static_cast<const uint4*>(w.data) + row * n4;
  const uint16_t* sr = w.scales + row * gpr;
  const uint16_t* br = w.biases + row * gpr;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int i = lane + 32 * u;
    if (i < n4) {
      t.q[u] = __ldg(w4 + i);
      t.s[u] = Bf16Bits(__ldg(sr + i / cpg));
      t.b[u] = Bf16Bits(__ldg(br + i / cpg));
    }
  }
}

template <int kBits, int kU>
__device__ __forceinline__ float TileDot(const Tile<kU>& t, const float* xs, int cols, int lane) {
  constexpr int kPer = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int n4 = cols / (4 * kPer);
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int i = lane + 32 * u;
    if (i < n4) {
      const uint32_t words[4] = {t.q[u].x, t.q[u].y, t.q[u].z, t.q[u].w};
      const float4* xv = reinterpret_cast<const float4*>(xs + Padded(i * 4 * kPer));
#pragma unroll
      for (int wd = 0; wd < 4; ++wd) {
#pragma unroll
        for (int v = 0; v < kPer / 4; ++v) {
          const float4 xx = xv[wd * (kPer / 4) + v];
          const float x4[4] = {xx.x, xx.y, xx.z, xx.w};
#pragma unroll
          for (int j = 0; j < 4; ++j)
            acc =
                fmaf(fmaf(t.s[u], Code(words[wd], (v * 4 + j) * kBits, kMask), t.b[u]), x4[j], acc);
        }
      }
    }
  }
  return WarpAllSum(acc);
}

// x[0..k) (k % 4 == 0, 16-byte aligned) into shared memory in the padded layout, four float4
// loads per thread in flight.
__device__ __forceinline__ void StageX4(const float* x, int k, float* smem) {
  const int n = k / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  for (int i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (i0 + u * static_cast<int>(blockDim.x) < n) v[u] = __ldg(x4 + i0 + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * static_cast<int>(blockDim.x);
      if (i < n) *reinterpret_cast<float4*>(smem + Padded(4 * i)) = v[u];
    }
  }
  __syncthreads();
}

// Rows of one matrix per blockIdx.y: with blobs, expert slot j's down (b.w[0] resolved against
// its blob, input x + j·cols, output b.y[0] + j·rows); else matrix j of b (shared input x).
// A block covers kWarps·kRW rows per turn and strides over the rest (the LM head: staging x once
// per block rather than once per 16 rows).
// Blocks per SM the compiler must allow: short rows (expert down, ku 1) fit four in 64
// registers; expert gate/up and q/k/v (ku 3: 86–95 registers left them two per SM, 2.7–2.9
// waves under ncu) three in 80. (Expert down with 8 rows per warp at three per SM measured
// slower: 17.0 against 13.6 µs per launch.)
constexpr int MinBlocksFor(int ku) {
  return ku == 1 ? 4 : ku <= 3 ? 3 : 1;
}

template <int kBits, int kU, int kRW>
__global__ void __launch_bounds__(32 * kWarps, MinBlocksFor(kU))
    FastRowsKernel(MatVecBatch b, const float* x, const uint8_t* const* blobs, const int* idx) {
  PdlLaunchDependents();
  extern __shared__ __align__(16) float smem[];
  const int j = blockIdx.y;
  DevMat w;
  const float* xj = x;
  float* yj;
  // Experts: which blob to read is the router's output, so wait first. Dense matrices: load the
  // first rows, then wait (below), so the weights' DRAM round trip overlaps the previous kernel.
  const bool waited = blobs != nullptr;
  if (waited) PdlWait();
  if (blobs != nullptr) {
    w = Resolve(b.w[0], SlotBlob(blobs, idx, j));
    xj = x + j * w.cols;
    yj = b.y[0] + j * w.rows;
  } else {
    w = j == 0 ? b.w[0] : j == 1 ? b.w[1] : b.w[2];
    yj = j == 0 ? b.y[0] : j == 1 ? b.y[1] : b.y[2];
  }
  constexpr int kRows = kWarps * kRW;
  const int64_t turns = (w.rows + kRows - 1) / kRows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, cols = static_cast<int>(w.cols);
  bool staged = false;
  for (int64_t g = blockIdx.x; g < turns; g += gridDim.x) {
    Tile<kU> t[kRW];
#pragma unroll
    for (int r = 0; r < kRW; ++r) {
      const int64_t row = g * kRows + r * kWarps + warp;
      if (row < w.rows) LoadTile<kBits, kU>(w, row, lane, t[r]);
    }
    if (!staged) {  // the same for every thread of the block
      if (!waited) PdlWait();
      StageX4(xj, cols, smem);
      staged = true;
    }
#pragma unroll
    for (int r = 0; r < kRW; ++r) {
      const int64_t row = g * kRows + r * kWarps + warp;
      if (row >= w.rows) break;
      const float acc = TileDot<kBits, kU>(t[r], smem, cols, lane);
      if (lane == 0) yj[row] = acc;
    }
  }
  if (!staged && !waited) PdlWait();  // a block with no rows still keeps the chain
}

// h = gelu_tanh(gate·x) ⊙ (up·x) per blockIdx.y (an expert slot when blobs is given: input
// x + j·x_stride, output h + j·rows): warps 0–3 compute gate rows, warps 4–7 the same up rows.
template <int kBits, int kU, int kRW>
__global__ void __launch_bounds__(32 * kWarps, MinBlocksFor(kU))
    FastGateUpKernel(DevMat gate, DevMat up, const uint8_t* const* blobs, const int* idx,
                     const float* x, int64_t x_stride, float* h) {
  PdlLaunchDependents();
  extern __shared__ __align__(16) float smem[];
  constexpr int kRows = kGluRows * kRW;
  __shared__ float gu[2][kRows];
  const int j = blockIdx.y;
  const bool waited = blobs != nullptr;  // as FastRowsKernel
  if (waited) PdlWait();
  if (blobs != nullptr) {
    const uint8_t* blob = SlotBlob(blobs, idx, j);
    gate = Resolve(gate, blob);
    up = Resolve(up, blob);
    x += j * x_stride;
    h += j * gate.rows;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int which = warp / kGluRows, wr = warp % kGluRows, cols = static_cast<int>(gate.cols);
  const DevMat w = which == 0 ? gate : up;  // a copy: a reference to one of two locals put both
                                            // in local memory (112 bytes of stack, read per row)
  const int64_t turns = (gate.rows + kRows - 1) / kRows;
  bool staged = false;
  for (int64_t g = blockIdx.x; g < turns; g += gridDim.x) {
    Tile<kU> t[kRW];
#pragma unroll
    for (int r = 0; r < kRW; ++r) {
      const int64_t row = g * kRows + r * kGluRows + wr;
      if (row < gate.rows) LoadTile<kBits, kU>(w, row, lane, t[r]);
    }
    if (!staged) {
      if (!waited) PdlWait();
      StageX4(x, cols, smem);
      staged = true;
    }
#pragma unroll
    for (int r = 0; r < kRW; ++r) {
      const int64_t row = g * kRows + r * kGluRows + wr;
      if (row >= gate.rows) break;
      const float v = TileDot<kBits, kU>(t[r], smem, cols, lane);
      if (lane == 0) gu[which][r * kGluRows + wr] = v;
    }
    __syncthreads();
    const int64_t row = g * kRows + threadIdx.x;
    if (threadIdx.x < kRows && row < gate.rows)
      h[row] = GeluTanh(gu[0][threadIdx.x]) * gu[1][threadIdx.x];
    __syncthreads();  // gu is rewritten in the next turn
  }
  if (!staged && !waited) PdlWait();
}

constexpr int kFastU[6] = {1, 2, 3, 4, 6, 8};  // the kU values instantiated

// Which fast kernel a launch takes: 0 when the generic one must run (REDWING_CUDA_MATVEC=generic
// forces that, for comparison).
struct FastShape {
  int bits = 0, ku = 0;
};

bool FastAllowed() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATVEC");
    return e == nullptr || std::strcmp(e, "generic") != 0;
  }();
  return on;
}

// data_addr: the matrix's data address (dense) or offset in its blob (experts, whose blobs are
// 4 KiB-aligned in the file and 256-byte aligned in VRAM slots).
FastShape FastFor(const DevMat& w, const float* x) {
  FastShape f;
  if (!FastAllowed() || w.type != DevMat::kAffine || (w.bits != 4 && w.bits != 8)) return f;
  const int64_t chunk = 128 / w.bits;  // elements per 16 bytes of codes
  if (w.cols % chunk != 0 || w.group % chunk != 0 || w.cols > kMaxStaged) return f;
  if (((reinterpret_cast<uintptr_t>(w.data) | reinterpret_cast<uintptr_t>(x)) & 15u) != 0) return f;
  const int64_t per_lane = (w.cols / chunk + 31) / 32;
  for (int ku : kFastU)
    if (per_lane <= ku) {
      f.bits = w.bits;
      f.ku = ku;
      return f;
    }
  return f;
}

// Blocks per launch at most: as many as the GPU holds at once (beyond that, blocks stride over
// the rows rather than wait for a second wave, and stage x once each).
template <typename Kernel>
unsigned FastGridCap(Kernel kernel, int64_t cols) {
  return ResidentBlocks(reinterpret_cast<const void*>(kernel), 32 * kWarps,
                        static_cast<size_t>(StagedBytes(cols)));
}

// Rows per warp: as many as keep ≤ 8 chunks per lane in flight.
constexpr int RwFor(int ku) {
  return ku <= 2 ? 4 : ku <= 4 ? 2 : 1;
}

template <int kBits, int kU>
cudaError_t LaunchFastT(bool gateup, const MatVecBatch& b, const DevMat& gate, const DevMat& up,
                        int64_t rows, int64_t cols, unsigned slots, const uint8_t* const* blobs,
                        const int* idx, const float* x, int64_t x_stride, float* h,
                        cudaStream_t s) {
  constexpr int kRW = RwFor(kU);
  const size_t smem = static_cast<size_t>(StagedBytes(cols));
  const int per_block = (gateup ? kGluRows : kWarps) * kRW;
  unsigned blocks = Blocks(rows, per_block);
  if (blocks > 1024)  // the LM head's 262,144 rows
    blocks = std::min(blocks, gateup ? FastGridCap(FastGateUpKernel<kBits, kU, kRW>, cols)
                                     : FastGridCap(FastRowsKernel<kBits, kU, kRW>, cols));
  const dim3 grid(blocks, slots, 1);
  if (gateup)
    LaunchKernel(FastGateUpKernel<kBits, kU, kRW>, grid, 32 * kWarps, smem, s, gate, up, blobs, idx,
                 x, x_stride, h);
  else
    LaunchKernel(FastRowsKernel<kBits, kU, kRW>, grid, 32 * kWarps, smem, s, b, x, blobs, idx);
  return cudaGetLastError();
}

cudaError_t LaunchFast(FastShape f, bool gateup, const MatVecBatch& b, const DevMat& gate,
                       const DevMat& up, int64_t rows, int64_t cols, unsigned slots,
                       const uint8_t* const* blobs, const int* idx, const float* x,
                       int64_t x_stride, float* h, cudaStream_t s) {
  {  // the integer tensor-core kernel (ops_matvec_i8.cu) when it takes the shape
    TcMatVec t;
    t.gateup = gateup;
    if (gateup) {
      t.w[0] = gate;
      t.w[1] = up;
    } else {
      for (int i = 0; i < 3; ++i) {
        t.w[i] = b.w[i];
        t.y[i] = b.y[i];
      }
    }
    t.rows = rows;
    t.cols = cols;
    t.slots = slots;
    t.blobs = blobs;
    t.idx = idx;
    t.x = x;
    t.x_stride = x_stride;
    t.h = h;
    if (const cudaError_t e = LaunchAffineMatVecI8(t, s); e != cudaErrorNotSupported) return e;
  }
  using Fn = decltype(&LaunchFastT<4, 1>);
  static constexpr Fn kFns[2][6] = {{LaunchFastT<4, 1>, LaunchFastT<4, 2>, LaunchFastT<4, 3>,
                                     LaunchFastT<4, 4>, LaunchFastT<4, 6>, LaunchFastT<4, 8>},
                                    {LaunchFastT<8, 1>, LaunchFastT<8, 2>, LaunchFastT<8, 3>,
                                     LaunchFastT<8, 4>, LaunchFastT<8, 6>, LaunchFastT<8, 8>}};
  for (int i = 0; i < 6; ++i)
    if (kFastU[i] == f.ku)
      return kFns[f.bits == 8][i](gateup, b, gate, up, rows, cols, slots, blobs, idx, x, x_stride,
                                  h, s);
  return cudaErrorInvalidValue;
}

constexpr int kBM = 32, kBN = 64, kBK = 32, kMmThreads = 256;

// Y[row0 + r][n] = Σ_k X[src(r)][k]·W[n][k] for r < rows of this group (see LaunchExpertMatMul).
__global__ void __launch_bounds__(kMmThreads)
    MatMulKernel(DevMat w, const uint8_t* const* blobs, const int* row0s, const int* rowss,
                 int64_t dense_rows, const int* gather, const float* x, float* y) {
  PdlEnter();
  __shared__ __align__(16) float xs[kBK][kBM + 4];
  __shared__ __align__(16) float ws[kBK][kBN + 4];
  const int grp = blockIdx.z;
  if (blobs != nullptr) w = Resolve(w, blobs[grp]);
  const int64_t row0 = row0s != nullptr ? row0s[grp] : 0;
  const int64_t rows = rowss != nullptr ? rowss[grp] : dense_rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  if (m0 >= rows) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t K = w.cols, N = w.rows;
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  float acc[2][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    // X tile, transposed into xs[k][r].
    for (int e = tid; e < kBM * kBK; e += kMmThreads) {
      const int r = e / kBK, kk = e % kBK;
      float v = 0.0f;
      if (m0 + r < rows && k0 + kk < K) {
        const int64_t gr = row0 + m0 + r;
        const int64_t src = gather != nullptr ? gather[gr] : gr;
        v = x[src * K + k0 + kk];
      }
      xs[kk][r] = v;
    }
    // W tile, dequantized into ws[k][n].
    if (w.type == DevMat::kAffine) {
      const int per = 32 / w.bits, wpt = kBK / per;  // words per tile row
      const uint32_t mask = (1u << w.bits) - 1u;
      for (int e = tid; e < kBN * wpt; e += kMmThreads) {
        const int n = e / wpt, wi = e % wpt;
        if (n0 + n >= N) {
          for (int j = 0; j < per; ++j) ws[wi * per + j][n] = 0.0f;
          continue;
        }
        const int64_t kw = k0 + static_cast<int64_t>(wi) * per;
        const uint32_t word = static_cast<const uint32_t*>(w.data)[(n0 + n) * (K / per) + kw / per];
        const int64_t gi = (n0 + n) * (K / w.group) + kw / w.group;
        const float s = Bf16Bits(w.scales[gi]), b = Bf16Bits(w.biases[gi]);
        for (int j = 0; j < per; ++j)
          ws[wi * per + j][n] = s * static_cast<float>((word >> (j * w.bits)) & mask) + b;
      }
    } else {
      for (int e = tid; e < kBN * kBK; e += kMmThreads) {
        const int n = e / kBK, kk = e % kBK;
        ws[kk][n] = (n0 + n < N && k0 + kk < K) ? MatAt(w, n0 + n, k0 + kk) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kBK; ++kk) {
      const float2 a = *reinterpret_cast<const float2*>(&xs[kk][ty * 2]);
      const float4 b = *reinterpret_cast<const float4*>(&ws[kk][tx * 4]);
      const float av[2] = {a.x, a.y}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = m0 + ty * 2 + i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = n0 + tx * 4 + j;
      if (n < N) y[(row0 + r) * N + n] = acc[i][j];
    }
  }
}

// The same product on tensor cores, to fp32 accuracy: each operand is split into a TF32 "big"
// part and a TF32 remainder, and big·big + big·small + small·big (3xTF32) is accumulated in
// fp32 by mma.sync m16n8k8. Block tile 64×64, K step 32; 4 warps of 32×32.
constexpr int kTM = 64, kTN = 64, kTK = 32, kTThreads = 128;

__device__ __forceinline__ uint32_t Tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void Mma(float* c, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__global__ void __launch_bounds__(kTThreads)
    MatMulTf32Kernel(DevMat w, const uint8_t* const* blobs, const int* row0s, const int* rowss,
                     int64_t dense_rows, const int* gather, const float* x, float* y) {
  PdlEnter();
  __shared__ float xs[kTM][kTK + 4];
  __shared__ float ws[kTN][kTK + 4];
  const int grp = blockIdx.z;
  if (blobs != nullptr) w = Resolve(w, blobs[grp]);
  const int64_t row0 = row0s != nullptr ? row0s[grp] : 0;
  const int64_t rows = rowss != nullptr ? rowss[grp] : dense_rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTM;
  if (m0 >= rows) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTN;
  const int64_t K = w.cols, N = w.rows;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;  // the warp's 32×32 corner
  const int gid = lane >> 2, tig = lane & 3;
  float acc[2][4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kTK) {
    for (int e = tid; e < kTM * kTK; e += kTThreads) {
      const int r = e / kTK, kk = e % kTK;
      float v = 0.0f;
      if (m0 + r < rows && k0 + kk < K) {
        const int64_t gr = row0 + m0 + r;
        const int64_t src = gather != nullptr ? gather[gr] : gr;
        v = x[src * K + k0 + kk];
      }
      xs[r][kk] = v;
    }
    if (w.type == DevMat::kAffine) {
      const int per = 32 / w.bits, wpt = kTK / per;
      const uint32_t mask = (1u << w.bits) - 1u;
      for (int e = tid; e < kTN * wpt; e += kTThreads) {
        const int n = e / wpt, wi = e % wpt;
        if (n0 + n >= N) {
          for (int j = 0; j < per; ++j) ws[n][wi * per + j] = 0.0f;
          continue;
        }
        const int64_t kw = k0 + static_cast<int64_t>(wi) * per;
        const uint32_t word = static_cast<const uint32_t*>(w.data)[(n0 + n) * (K / per) + kw / per];
        const int64_t gi = (n0 + n) * (K / w.group) + kw / w.group;
        const float sc = Bf16Bits(w.scales[gi]), bi = Bf16Bits(w.biases[gi]);
        for (int j = 0; j < per; ++j)
          ws[n][wi * per + j] = sc * static_cast<float>((word >> (j * w.bits)) & mask) + bi;
      }
    } else {
      for (int e = tid; e < kTN * kTK; e += kTThreads) {
        const int n = e / kTK, kk = e % kTK;
        ws[n][kk] = (n0 + n < N && k0 + kk < K) ? MatAt(w, n0 + n, k0 + kk) : 0.0f;
      }
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kTK; ks += 8) {
      uint32_t ab[2][4], as[2][4], bb[4][2], bs[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = wm + i * 16 + gid;
        const float v[4] = {xs[r][ks + tig], xs[r + 8][ks + tig], xs[r][ks + tig + 4],
                            xs[r + 8][ks + tig + 4]};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          ab[i][q] = Tf32(v[q]);
          as[i][q] = Tf32(v[q] - __uint_as_float(ab[i][q]));
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = wn + j * 8 + gid;
        const float v[2] = {ws[n][ks + tig], ws[n][ks + tig + 4]};
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          bb[j][q] = Tf32(v[q]);
          bs[j][q] = Tf32(v[q] - __uint_as_float(bb[j][q]));
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          Mma(acc[i][j], as[i], bb[j]);
          Mma(acc[i][j], ab[i], bs[j]);
          Mma(acc[i][j], ab[i], bb[j]);
        }
    }
    __syncthreads();
  }
  StoreWarpTile(acc, m0 + wm, n0 + wn, gid, tig, rows, N, row0, y);
}

// REDWING_CUDA_MATMUL=tf32: the simple 3xTF32 kernel below for affine weights too, not the bf16
// kernel of ops_matmul_bf16.cu (for comparison).
bool UseBf16Kernel() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    return e == nullptr || std::strcmp(e, "tf32") != 0;
  }();
  return on;
}

// REDWING_CUDA_MATMUL=bf16: the bf16 kernel that splits x itself even where the caller split it
// once (for comparison).
bool UsePlanes() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    return e == nullptr || std::strcmp(e, "planes") == 0;
  }();
  return on;
}

bool UseTensorCores() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    if (e != nullptr && std::strcmp(e, "simt") == 0) return false;
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    return major >= 8;
  }();
  return on;
}

// REDWING_CUDA_STACK=0: products that share an input launch one by one (for comparison).
bool UseStacks() {
  static const bool on = [] {
    const char* e = std::getenv("REDWING_CUDA_STACK");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }();
  return on;
}

bool SameShape(const DevMat& a, const DevMat& b) {
  return a.type == b.type && a.bits == b.bits && a.group == b.group && a.rows == b.rows &&
         a.cols == b.cols;
}

bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

cudaError_t CheckMat(const DevMat& w) {
  if (w.type != DevMat::kAffine) return cudaSuccess;
  if ((w.bits != 4 && w.bits != 8) || w.group % 32 != 0 || w.cols % w.group != 0)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchMatVec(const DevMat& w, const float* x, float* y, cudaStream_t s) {
  if (w.rows <= 0 || w.cols <= 0) return cudaSuccess;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (w.type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
  if (const FastShape f = FastFor(w, x); f.ku != 0) {
    MatVecBatch b{};
    b.w[0] = w;
    b.y[0] = y;
    return LaunchFast(f, false, b, w, w, w.rows, w.cols, 1, nullptr, nullptr, x, 0, nullptr, s);
  }
  LaunchKernel(MatVecKernel, Blocks(w.rows, kBlockRows), 32 * kWarps, StagedBytes(w.cols), s, w, x,
               y);
  return cudaGetLastError();
}

cudaError_t LaunchMatVecMulti(const DevMat* w, float* const* y, int n, const float* x,
                              cudaStream_t s) {
  if (n < 1 || n > 3) return cudaErrorInvalidValue;
  MatVecBatch b{};
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    if (cudaError_t e = CheckMat(w[i]); e != cudaSuccess) return e;
    if (w[i].type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
    b.w[i] = w[i];
    b.y[i] = y[i];
    rows = w[i].rows > rows ? w[i].rows : rows;
  }
  if (rows <= 0) return cudaSuccess;
  int64_t cols = 0;
  for (int i = 0; i < n; ++i) cols = w[i].cols > cols ? w[i].cols : cols;
  // The fast kernel when every matrix takes the same one (q/k/v share their shape's width).
  FastShape f = FastFor(w[0], x);
  for (int i = 1; i < n && f.ku != 0; ++i) {
    const FastShape fi = FastFor(w[i], x);
    if (fi.bits != f.bits || fi.ku != f.ku || w[i].cols != w[0].cols) f = FastShape{};
  }
  if (f.ku != 0)
    return LaunchFast(f, false, b, w[0], w[0], rows, cols, static_cast<unsigned>(n), nullptr,
                      nullptr, x, 0, nullptr, s);
  LaunchKernel(MatVecMultiKernel, dim3(Blocks(rows, kBlockRows), static_cast<unsigned>(n)),
               32 * kWarps, StagedBytes(cols), s, b, x);
  return cudaGetLastError();
}

cudaError_t LaunchMatMul(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s,
                         const XPlanes* xp) {
  if (w.rows <= 0 || w.cols <= 0 || m <= 0) return cudaSuccess;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (UseTensorCores() && m >= 16) {
    if (xp != nullptr && xp->rows >= m && UsePlanes()) {
      cudaError_t e =
          LaunchAffineMatMulWgmma(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, y, s);
      if (e == cudaErrorNotSupported)
        e = LaunchAffineMatMulPlanes(w, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, y, s);
      if (e != cudaErrorNotSupported) return e;
    }
    const cudaError_t e = UseBf16Kernel() ? LaunchAffineMatMulBf16(w, nullptr, 1, nullptr, nullptr,
                                                                   m, m, nullptr, x, y, s)
                                          : cudaErrorNotSupported;
    if (e != cudaErrorNotSupported) return e;
    const dim3 grid(Blocks(w.rows, kTN), Blocks(m, kTM), 1);
    LaunchKernel(MatMulTf32Kernel, grid, kTThreads, 0, s, w, nullptr, nullptr, nullptr, m, nullptr,
                 x, y);
    return cudaGetLastError();
  }
  const dim3 grid(Blocks(w.rows, kBN), Blocks(m, kBM), 1);
  LaunchKernel(MatMulKernel, grid, kMmThreads, 0, s, w, nullptr, nullptr, nullptr, m, nullptr, x,
               y);
  return cudaGetLastError();
}

cudaError_t LaunchMatMulMulti(const DevMat* w, float* const* y, int n, const float* x, int64_t m,
                              cudaStream_t s, const XPlanes* xp) {
  if (n < 1 || n > 3) return cudaErrorInvalidValue;
  if (n > 1 && UseStacks() && m >= 16 && xp != nullptr && xp->rows >= m && UseTensorCores() &&
      UsePlanes()) {
    const cudaError_t e =
        LaunchAffineMatMulWgmmaStack(w, y, n, nullptr, 1, nullptr, nullptr, m, m, nullptr, *xp, s);
    if (e != cudaErrorNotSupported) return e;
  }
  for (int i = 0; i < n; ++i)
    if (cudaError_t e = LaunchMatMul(w[i], x, m, y[i], s, xp); e != cudaSuccess) return e;
  return cudaSuccess;
}

cudaError_t LaunchGateUpGeglu(const DevMat& gate, const DevMat& up, const float* x, float* h,
                              cudaStream_t s) {
  if (gate.rows <= 0) return cudaSuccess;
  if (CheckMat(gate) != cudaSuccess || CheckMat(up) != cudaSuccess || gate.rows != up.rows)
    return cudaErrorInvalidValue;
  if (gate.type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
  if (const FastShape f = FastFor(gate, x); f.ku != 0 && SameShape(gate, up))
    return LaunchFast(f, true, MatVecBatch{}, gate, up, gate.rows, gate.cols, 1, nullptr, nullptr,
                      x, 0, h, s);
  LaunchKernel(GateUpGegluKernel, Blocks(gate.rows, kGluRows), 32 * kWarps, StagedBytes(gate.cols),
               s, gate, up, x, h);
  return cudaGetLastError();
}

cudaError_t LaunchExpertGateUp(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                               int n, const float* x, int64_t x_stride, float* h, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (CheckMat(e.gate) != cudaSuccess || CheckMat(e.up) != cudaSuccess)
    return cudaErrorInvalidValue;
  if (e.gate.type == DevMat::kAffine && (!Aligned16(x) || x_stride % 4 != 0))
    return cudaErrorMisalignedAddress;
  if (const FastShape f = FastFor(e.gate, x); f.ku != 0 && SameShape(e.gate, e.up))
    return LaunchFast(f, true, MatVecBatch{}, e.gate, e.up, e.gate.rows, e.gate.cols,
                      static_cast<unsigned>(n), blobs, idx, x, x_stride, h, s);
  const dim3 grid(Blocks(e.gate.rows, kGluRows), static_cast<unsigned>(n), 1);
  LaunchKernel(ExpertGateUpKernel, grid, 32 * kWarps, StagedBytes(e.gate.cols), s, e, blobs, idx, x,
               x_stride, h);
  return cudaGetLastError();
}

cudaError_t LaunchExpertDown(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                             int n, const float* h, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (CheckMat(e.down) != cudaSuccess) return cudaErrorInvalidValue;
  if (e.down.type == DevMat::kAffine && (!Aligned16(h) || e.down.cols % 4 != 0))
    return cudaErrorMisalignedAddress;
  if (const FastShape f = FastFor(e.down, h); f.ku != 0) {
    MatVecBatch b{};
    b.w[0] = e.down;
    b.y[0] = y;
    return LaunchFast(f, false, b, e.down, e.down, e.down.rows, e.down.cols,
                      static_cast<unsigned>(n), blobs, idx, h, 0, nullptr, s);
  }
  const dim3 grid(Blocks(e.down.rows, kBlockRows), static_cast<unsigned>(n), 1);
  LaunchKernel(ExpertDownKernel, grid, 32 * kWarps, StagedBytes(e.down.cols), s, e, blobs, idx, h,
               y);
  return cudaGetLastError();
}

cudaError_t LaunchExpertGateUpMatMul(const ExpertMats& e, const uint8_t* const* blobs, int groups,
                                     const int* row0, const int* rows, int max_rows,
                                     const int* gather, const float* x, float* gate, float* up,
                                     cudaStream_t s, const XPlanes* xp, int64_t total_rows) {
  if (groups <= 0 || max_rows <= 0) return cudaSuccess;
  if (xp != nullptr && UseStacks() && UseTensorCores() && UsePlanes()) {
    const DevMat w[2] = {e.gate, e.up};
    float* const y[2] = {gate, up};
    const cudaError_t err = LaunchAffineMatMulWgmmaStack(w, y, 2, blobs, groups, row0, rows, 0,
                                                         max_rows, gather, *xp, s, total_rows);
    if (err != cudaErrorNotSupported) return err;
  }
  if (cudaError_t err = LaunchExpertMatMul(e, 0, blobs, groups, row0, rows, max_rows, gather, x,
                                           gate, s, xp, total_rows);
      err != cudaSuccess)
    return err;
  return LaunchExpertMatMul(e, 1, blobs, groups, row0, rows, max_rows, gather, x, up, s, xp,
                            total_rows);
}

cudaError_t LaunchExpertMatMul(const ExpertMats& e, int which, const uint8_t* const* blobs,
                               int groups, const int* row0, const int* rows, int max_rows,
                               const int* gather, const float* x, float* y, cudaStream_t s,
                               const XPlanes* xp, int64_t total_rows) {
  if (groups <= 0 || max_rows <= 0) return cudaSuccess;
  const DevMat& w = which == 0 ? e.gate : which == 1 ? e.up : e.down;
  if (cudaError_t err = CheckMat(w); err != cudaSuccess) return err;
  if (UseTensorCores()) {
    if (xp != nullptr && UsePlanes()) {
      cudaError_t err = LaunchAffineMatMulWgmma(w, blobs, groups, row0, rows, 0, max_rows, gather,
                                                *xp, y, s, total_rows);
      if (err == cudaErrorNotSupported)
        err =
            LaunchAffineMatMulPlanes(w, blobs, groups, row0, rows, 0, max_rows, gather, *xp, y, s);
      if (err != cudaErrorNotSupported) return err;
    }
    const cudaError_t err = UseBf16Kernel() ? LaunchAffineMatMulBf16(w, blobs, groups, row0, rows, 0,
                                                                     max_rows, gather, x, y, s)
                                            : cudaErrorNotSupported;
    if (err != cudaErrorNotSupported) return err;
    const dim3 grid(Blocks(w.rows, kTN), Blocks(max_rows, kTM), static_cast<unsigned>(groups));
    LaunchKernel(MatMulTf32Kernel, grid, kTThreads, 0, s, w, blobs, row0, rows, 0, gather, x, y);
    return cudaGetLastError();
  }
  const dim3 grid(Blocks(w.rows, kBN), Blocks(max_rows, kBM), static_cast<unsigned>(groups));
  LaunchKernel(MatMulKernel, grid, kMmThreads, 0, s, w, blobs, row0, rows, 0, gather, x, y);
  return cudaGetLastError();
}

}  // namespace rw::cuda
