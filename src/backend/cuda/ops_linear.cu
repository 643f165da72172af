// Linear layers on the GPU for every weight format (f32, bf16, MLX affine 4/8-bit):
//   matvec (decode): one warp per output row, lanes walk the packed words together and
//     dequantize in registers;
//   matmul (prefill): each K step dequantizes a 64×32 weight tile into shared memory (never the
//     whole matrix) and reuses it for all rows of the X tile; on sm_80+ the tile product runs on
//     tensor cores as 3xTF32 (fp32 accuracy), else (or with REDWING_CUDA_MATMUL=simt) as fp32
//     FMAs in 32×64 tiles.
// Expert variants take per-slot blob addresses so one launch covers all chosen experts.
// Each output's K loop runs in ascending order whatever the grouping, so an expert's result
// does not depend on which other experts share the launch.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_math.cuh"
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
  extern __shared__ __align__(16) float smem[];
  bool padded;
  const float* xs = StageX(x, gate.cols, smem, &padded);
  GateUpRows(gate, up, xs, padded, h);
}

constexpr int kBM = 32, kBN = 64, kBK = 32, kMmThreads = 256;

// Y[row0 + r][n] = Σ_k X[src(r)][k]·W[n][k] for r < rows of this group (see LaunchExpertMatMul).
__global__ void __launch_bounds__(kMmThreads)
    MatMulKernel(DevMat w, const uint8_t* const* blobs, const int* row0s, const int* rowss,
                 int64_t dense_rows, const int* gather, const float* x, float* y) {
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
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t r = m0 + wm + i * 16 + gid + (q >= 2 ? 8 : 0);
        const int64_t n = n0 + wn + j * 8 + tig * 2 + (q & 1);
        if (r < rows && n < N) y[(row0 + r) * N + n] = acc[i][j][q];
      }
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
  MatVecKernel<<<Blocks(w.rows, kBlockRows), 32 * kWarps, StagedBytes(w.cols), s>>>(w, x, y);
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
  MatVecMultiKernel<<<dim3(Blocks(rows, kBlockRows), static_cast<unsigned>(n)), 32 * kWarps,
                      StagedBytes(cols), s>>>(b, x);
  return cudaGetLastError();
}

cudaError_t LaunchMatMul(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s) {
  if (w.rows <= 0 || w.cols <= 0 || m <= 0) return cudaSuccess;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (UseTensorCores() && m >= 16) {
    const dim3 grid(Blocks(w.rows, kTN), Blocks(m, kTM), 1);
    MatMulTf32Kernel<<<grid, kTThreads, 0, s>>>(w, nullptr, nullptr, nullptr, m, nullptr, x, y);
    return cudaGetLastError();
  }
  const dim3 grid(Blocks(w.rows, kBN), Blocks(m, kBM), 1);
  MatMulKernel<<<grid, kMmThreads, 0, s>>>(w, nullptr, nullptr, nullptr, m, nullptr, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchGateUpGeglu(const DevMat& gate, const DevMat& up, const float* x, float* h,
                              cudaStream_t s) {
  if (gate.rows <= 0) return cudaSuccess;
  if (CheckMat(gate) != cudaSuccess || CheckMat(up) != cudaSuccess || gate.rows != up.rows)
    return cudaErrorInvalidValue;
  if (gate.type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
  GateUpGegluKernel<<<Blocks(gate.rows, kGluRows), 32 * kWarps, StagedBytes(gate.cols), s>>>(
      gate, up, x, h);
  return cudaGetLastError();
}

cudaError_t LaunchExpertGateUp(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                               int n, const float* x, int64_t x_stride, float* h, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (CheckMat(e.gate) != cudaSuccess || CheckMat(e.up) != cudaSuccess)
    return cudaErrorInvalidValue;
  if (e.gate.type == DevMat::kAffine && (!Aligned16(x) || x_stride % 4 != 0))
    return cudaErrorMisalignedAddress;
  const dim3 grid(Blocks(e.gate.rows, kGluRows), static_cast<unsigned>(n), 1);
  ExpertGateUpKernel<<<grid, 32 * kWarps, StagedBytes(e.gate.cols), s>>>(e, blobs, idx, x, x_stride,
                                                                         h);
  return cudaGetLastError();
}

cudaError_t LaunchExpertDown(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                             int n, const float* h, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (CheckMat(e.down) != cudaSuccess) return cudaErrorInvalidValue;
  if (e.down.type == DevMat::kAffine && (!Aligned16(h) || e.down.cols % 4 != 0))
    return cudaErrorMisalignedAddress;
  const dim3 grid(Blocks(e.down.rows, kBlockRows), static_cast<unsigned>(n), 1);
  ExpertDownKernel<<<grid, 32 * kWarps, StagedBytes(e.down.cols), s>>>(e, blobs, idx, h, y);
  return cudaGetLastError();
}

cudaError_t LaunchExpertMatMul(const ExpertMats& e, int which, const uint8_t* const* blobs,
                               int groups, const int* row0, const int* rows, int max_rows,
                               const int* gather, const float* x, float* y, cudaStream_t s) {
  if (groups <= 0 || max_rows <= 0) return cudaSuccess;
  const DevMat& w = which == 0 ? e.gate : which == 1 ? e.up : e.down;
  if (cudaError_t err = CheckMat(w); err != cudaSuccess) return err;
  if (UseTensorCores()) {
    const dim3 grid(Blocks(w.rows, kTN), Blocks(max_rows, kTM), static_cast<unsigned>(groups));
    MatMulTf32Kernel<<<grid, kTThreads, 0, s>>>(w, blobs, row0, rows, 0, gather, x, y);
    return cudaGetLastError();
  }
  const dim3 grid(Blocks(w.rows, kBN), Blocks(max_rows, kBM), static_cast<unsigned>(groups));
  MatMulKernel<<<grid, kMmThreads, 0, s>>>(w, blobs, row0, rows, 0, gather, x, y);
  return cudaGetLastError();
}

}  // namespace rw::cuda
