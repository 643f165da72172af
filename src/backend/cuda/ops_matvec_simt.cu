// The decode matvec's SIMT kernels for every weight format (f32, bf16, MLX affine 4/8-bit):
//   generic: one warp per output row, lanes walk the packed words together and dequantize in
//     registers, x staged in shared memory (padded);
//   register-tiled: affine 4/8-bit rows take kernels specialized by width that load each warp's
//     rows into registers before staging x (bit-identical to the generic ones).
// The dispatcher (ops_matvec_dispatch.cu) tries the integer tensor-core kernel first. Expert
// variants take per-slot blob addresses so one launch covers all chosen experts; each output's K
// loop runs in ascending order whatever the grouping, so an expert's result does not depend on
// which other experts share the launch.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec_kernels.h"
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

}  // namespace

// data_addr: the matrix's data address (dense) or offset in its blob (experts, whose blobs are
// 4 KiB-aligned in the file and 256-byte aligned in VRAM slots).
FastShape FastFor(const DevMat& w, const float* x) {
  FastShape f;
  if (w.type != DevMat::kAffine || (w.bits != 4 && w.bits != 8)) return f;
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

cudaError_t LaunchMatVecTiled(FastShape f, const MatVecArgs& a, cudaStream_t s) {
  MatVecBatch b{};
  for (int i = 0; i < 3; ++i) {
    b.w[i] = a.w[i];
    b.y[i] = a.y[i];
  }
  const DevMat& gate = a.w[0];
  const DevMat& up = a.gateup ? a.w[1] : a.w[0];
  const bool gateup = a.gateup;
  const int64_t rows = a.rows, cols = a.cols, x_stride = a.x_stride;
  const unsigned slots = a.slots;
  const uint8_t* const* blobs = a.blobs;
  const int* idx = a.idx;
  const float* x = a.x;
  float* h = a.h;
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

cudaError_t LaunchMatVecGeneric(const MatVecArgs& a, cudaStream_t s) {
  if (a.gateup) {
    if (a.blobs != nullptr) {  // routed experts' gate/up
      const ExpertMats e{a.w[0], a.w[1], DevMat{}};
      const dim3 grid(Blocks(a.rows, kGluRows), a.slots, 1);
      LaunchKernel(ExpertGateUpKernel, grid, 32 * kWarps, StagedBytes(a.cols), s, e, a.blobs, a.idx,
                   a.x, a.x_stride, a.h);
    } else {  // the dense MLP's gate/up
      LaunchKernel(GateUpGegluKernel, Blocks(a.rows, kGluRows), 32 * kWarps, StagedBytes(a.cols), s,
                   a.w[0], a.w[1], a.x, a.h);
    }
  } else if (a.blobs != nullptr) {  // routed experts' down
    const ExpertMats e{DevMat{}, DevMat{}, a.w[0]};
    const dim3 grid(Blocks(a.rows, kBlockRows), a.slots, 1);
    LaunchKernel(ExpertDownKernel, grid, 32 * kWarps, StagedBytes(a.cols), s, e, a.blobs, a.idx,
                 a.x, a.y[0]);
  } else if (a.slots == 1) {  // one matrix
    LaunchKernel(MatVecKernel, Blocks(a.rows, kBlockRows), 32 * kWarps, StagedBytes(a.cols), s,
                 a.w[0], a.x, a.y[0]);
  } else {  // up to three matrices sharing x (q/k/v)
    MatVecBatch b{};
    for (int i = 0; i < 3; ++i) {
      b.w[i] = a.w[i];
      b.y[i] = a.y[i];
    }
    LaunchKernel(MatVecMultiKernel, dim3(Blocks(a.rows, kBlockRows), a.slots), 32 * kWarps,
                 StagedBytes(a.cols), s, b, a.x);
  }
  return cudaGetLastError();
}

}  // namespace rw::cuda
