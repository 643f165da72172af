// Prefill matmul for affine 4/8-bit weights on tensor cores (3xTF32, fp32-level accuracy),
// replaced by the bf16 kernel of ops_matmul_bf16.cu and kept for comparison: every product takes
// it under REDWING_CUDA_MATMUL=tf32pipe (ops_linear.cu keeps the simple kernels for f32/bf16
// weights, unaligned inputs and REDWING_CUDA_MATMUL=simt).
// Why it is faster than the simple 3xTF32 kernel (measured on the H200, docs/PERFORMANCE.md):
//   - software pipelined: the next K step's X float4s and packed weight words are loaded into
//     registers before the current step's MMAs, and stored (the weights dequantized) into the
//     other of two shared-memory buffers after them, so global latency hides behind the MMAs and
//     each K step needs one barrier;
//   - tile shapes by row count: 128×64 (8 warps) for dense products with m ≥ 128, so a
//     dequantized weight tile serves 128 rows; 32×128 (4 warps) for expert groups of ~8–40 rows,
//     so few rows of the tile are padding and each X tile serves 128 outputs.
// Each output's K loop and MMA sequence are the simple kernel's (ascending K, 3 MMAs per step).
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul.h"

namespace rw::cuda {
namespace {

constexpr int kBK = 32, kLd = kBK + 4;  // K step; padded shared row (fragment loads conflict-free)

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

// q as a float without an int→float conversion: 2^23 + q has q in its mantissa.
__device__ __forceinline__ float Code(uint32_t word, int shift, uint32_t mask) {
  return __uint_as_float(((word >> shift) & mask) | 0x4B000000u) - 8388608.0f;
}

template <int kWM, int kWN>
constexpr int SmemBytes() {
  return 2 * (32 * kWM + 32 * kWN) * kLd * 4;
}

// kWM×kWN warps of 32×32 outputs each; Y[row0 + r][n] = Σ_k X[src(r)][k]·W[n][k].
// At most 128 registers a thread (the compiler would take ~146): two 256-thread or four
// 128-thread blocks an SM.
template <int kWM, int kWN, int kBits>
__global__ void __launch_bounds__(32 * kWM * kWN, 16 / (kWM * kWN))
    AffineMatMulKernel(DevMat w, const uint8_t* const* blobs, const int* row0s, const int* rowss,
                       int64_t dense_rows, const int* gather, const float* x, float* y) {
  PdlEnter();
  constexpr int kT = 32 * kWM * kWN, kBM = 32 * kWM, kBN = 32 * kWN;
  constexpr int kPer = 32 / kBits, kWpr = kBK / kPer;  // codes per word, words per tile row
  constexpr int kXV = kBM * (kBK / 4) / kT;            // X float4s per thread per step
  constexpr int kWV = kBN * kWpr / kT;                 // weight words per thread per step
  static_assert(kXV >= 1 && kBM * (kBK / 4) % kT == 0 && kWV >= 1 && kBN * kWpr % kT == 0);
  constexpr int kXStep = kT / (kBK / 4), kWStep = kT / kWpr;  // rows between a thread's items
  extern __shared__ __align__(16) float smem[];
  float* const xs = smem;                  // [2][kBM][kLd]
  float* const ws = smem + 2 * kBM * kLd;  // [2][kBN][kLd]

  const int grp = blockIdx.z;
  if (blobs != nullptr) w = Resolve(w, blobs[grp]);
  const int64_t row0 = row0s != nullptr ? row0s[grp] : 0;
  const int64_t rows = rowss != nullptr ? rowss[grp] : dense_rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  if (m0 >= rows) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t K = w.cols, N = w.rows;
  const int tid = threadIdx.x;

  // This thread's X rows (gathered once) and weight rows, fixed over the K loop.
  const int xr0 = tid / (kBK / 4), xc = (tid % (kBK / 4)) * 4;
  const float* xsrc[kXV];
#pragma unroll
  for (int i = 0; i < kXV; ++i) {
    const int64_t r = m0 + xr0 + i * kXStep;
    xsrc[i] = nullptr;
    if (r < rows) {
      const int64_t gr = row0 + r;
      xsrc[i] = x + (gather != nullptr ? gather[gr] : gr) * K + xc;
    }
  }
  const int wn0 = tid / kWpr, wi = tid % kWpr;
  const int64_t wpr = K / kPer, gpr = K / w.group;
  const uint32_t* const wdata = static_cast<const uint32_t*>(w.data) + (n0 + wn0) * wpr + wi;
  const int64_t gbase = (n0 + wn0) * gpr;

  float4 xv[kXV];
  uint32_t wv[kWV];
  float sc[kWV], bi[kWV];
  auto load = [&](int64_t k0) {
#pragma unroll
    for (int i = 0; i < kXV; ++i)
      xv[i] = xsrc[i] != nullptr ? __ldg(reinterpret_cast<const float4*>(xsrc[i] + k0))
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
    const int64_t g = k0 / w.group;  // a tile row never straddles groups (group % 32 == 0)
#pragma unroll
    for (int i = 0; i < kWV; ++i) {
      wv[i] = 0;
      sc[i] = bi[i] = 0.0f;
      if (n0 + wn0 + i * kWStep < N) {
        wv[i] = __ldg(wdata + i * kWStep * wpr + k0 / kPer);
        const int64_t gi = gbase + i * kWStep * gpr + g;
        sc[i] = Bf16Bits(__ldg(w.scales + gi));
        bi[i] = Bf16Bits(__ldg(w.biases + gi));
      }
    }
  };
  auto store = [&](int buf) {
    float* xb = xs + buf * kBM * kLd;
#pragma unroll
    for (int i = 0; i < kXV; ++i)
      *reinterpret_cast<float4*>(xb + (xr0 + i * kXStep) * kLd + xc) = xv[i];
    float* wb = ws + buf * kBN * kLd;
    constexpr uint32_t kMask = (1u << kBits) - 1u;
#pragma unroll
    for (int i = 0; i < kWV; ++i) {
      float* dst = wb + (wn0 + i * kWStep) * kLd + wi * kPer;
#pragma unroll
      for (int v = 0; v < kPer / 4; ++v) {
        float4 d;
        d.x = fmaf(sc[i], Code(wv[i], (4 * v + 0) * kBits, kMask), bi[i]);
        d.y = fmaf(sc[i], Code(wv[i], (4 * v + 1) * kBits, kMask), bi[i]);
        d.z = fmaf(sc[i], Code(wv[i], (4 * v + 2) * kBits, kMask), bi[i]);
        d.w = fmaf(sc[i], Code(wv[i], (4 * v + 3) * kBits, kMask), bi[i]);
        *reinterpret_cast<float4*>(dst + 4 * v) = d;
      }
    }
  };

  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / kWN) * 32, wn = (warp % kWN) * 32;  // the warp's 32×32 corner
  const int gid = lane >> 2, tig = lane & 3;
  float acc[2][4][4] = {};
  load(0);
  store(0);
  __syncthreads();
  int buf = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    const bool more = k0 + kBK < K;
    if (more) load(k0 + kBK);  // in flight during this step's MMAs
    const float* xb = xs + buf * kBM * kLd;
    const float* wb = ws + buf * kBN * kLd;
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 8) {
      uint32_t ab[2][4], as[2][4], bb[4][2], bs[4][2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float* xr = xb + (wm + i * 16 + gid) * kLd + ks + tig;
        const float v[4] = {xr[0], xr[8 * kLd], xr[4], xr[8 * kLd + 4]};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          ab[i][q] = Tf32(v[q]);
          as[i][q] = Tf32(v[q] - __uint_as_float(ab[i][q]));
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* wr = wb + (wn + j * 8 + gid) * kLd + ks + tig;
        const float v[2] = {wr[0], wr[4]};
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
    if (more) store(buf ^ 1);  // the other buffer: its last readers passed the previous barrier
    __syncthreads();
    buf ^= 1;
  }
  StoreWarpTile(acc, m0 + wm, n0 + wn, gid, tig, rows, N, row0, y);
}

template <int kWM, int kWN, int kBits>
cudaError_t Launch(const DevMat& w, const uint8_t* const* blobs, int groups, const int* row0s,
                   const int* rowss, int64_t dense_rows, int64_t max_rows, const int* gather,
                   const float* x, float* y, cudaStream_t s) {
  constexpr int kBytes = SmemBytes<kWM, kWN>();
  auto* kernel = AffineMatMulKernel<kWM, kWN, kBits>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(Blocks(w.rows, 32 * kWN), Blocks(max_rows, 32 * kWM),
                  static_cast<unsigned>(groups));
  LaunchKernel(kernel, grid, 32 * kWM * kWN, kBytes, s, w, blobs, row0s, rowss, dense_rows, gather,
               x, y);
  return cudaGetLastError();
}

template <int kWM, int kWN>
cudaError_t LaunchBits(const DevMat& w, const uint8_t* const* blobs, int groups, const int* row0s,
                       const int* rowss, int64_t dense_rows, int64_t max_rows, const int* gather,
                       const float* x, float* y, cudaStream_t s) {
  return w.bits == 4 ? Launch<kWM, kWN, 4>(w, blobs, groups, row0s, rowss, dense_rows, max_rows,
                                           gather, x, y, s)
                     : Launch<kWM, kWN, 8>(w, blobs, groups, row0s, rowss, dense_rows, max_rows,
                                           gather, x, y, s);
}

int EnvTile(const char* name) {
  const char* e = std::getenv(name);
  const int v = e != nullptr ? std::atoi(e) : 0;
  return v == 32 || v == 64 || v == 128 ? v : 0;
}

}  // namespace

cudaError_t LaunchAffineMatMulTc(const DevMat& w, const uint8_t* const* blobs, int groups,
                                 const int* row0s, const int* rowss, int64_t dense_rows,
                                 int64_t max_rows, const int* gather, const float* x, float* y,
                                 cudaStream_t s) {
  if (w.type != DevMat::kAffine || (w.bits != 4 && w.bits != 8) || w.group % kBK != 0 ||
      w.cols % w.group != 0 || (reinterpret_cast<uintptr_t>(x) & 15u) != 0)
    return cudaErrorNotSupported;
  static const bool bf16 = [] {
    const char* e = std::getenv("REDWING_CUDA_MATMUL");
    return e == nullptr || std::strcmp(e, "tf32pipe") != 0;
  }();
  if (bf16) {
    const cudaError_t e = LaunchAffineMatMulBf16(w, blobs, groups, row0s, rowss, dense_rows,
                                                 max_rows, gather, x, y, s);
    if (e != cudaErrorNotSupported) return e;
  }
  // Tile rows: 128 (8 warps) for dense products of ≥ 128 rows, else 32 (4 warps, 128 outputs
  // wide). REDWING_CUDA_MM_DENSE / REDWING_CUDA_MM_EXPERT = 32, 64 or 128 force one (for
  // comparison; 64 is the simple kernel's 64×64 shape).
  static const int dense_tile = EnvTile("REDWING_CUDA_MM_DENSE");
  static const int expert_tile = EnvTile("REDWING_CUDA_MM_EXPERT");
  int tile = blobs != nullptr ? expert_tile : dense_tile;
  if (tile == 0) tile = blobs == nullptr && max_rows >= 128 ? 128 : 32;
  if (tile == 128)
    return LaunchBits<4, 2>(w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
  if (tile == 64)
    return LaunchBits<2, 2>(w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
  return LaunchBits<1, 4>(w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
}

}  // namespace rw::cuda
