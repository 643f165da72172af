// The simple prefill matmuls for every weight format: each K step dequantizes a 64×32 weight tile
// into shared memory (never the whole matrix) and reuses it for all rows of the X tile; on sm_80+
// the tile product runs on tensor cores as 3xTF32 (fp32 accuracy), else (or with
// REDWING_CUDA_MATMUL=simt) as fp32 FMAs in 32×64 tiles. The dispatcher (ops_matmul_dispatch.cu)
// sends affine weights to the bf16 kernels of ops_matmul_*.cu first; these take f32/bf16
// weights, unaligned inputs, single rows and GPUs older than sm_80. Each output's K loop
// runs in ascending order, so an expert's result does not depend on the grouping.
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/ops.h"

namespace rw::cuda {
namespace {

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

}  // namespace

cudaError_t LaunchMatMulTf32(const DevMat& w, const uint8_t* const* blobs, int groups,
                             const int* row0s, const int* rowss, int64_t dense_rows,
                             int64_t max_rows, const int* gather, const float* x, float* y,
                             cudaStream_t s) {
  const dim3 grid(Blocks(w.rows, kTN), Blocks(max_rows, kTM), static_cast<unsigned>(groups));
  LaunchKernel(MatMulTf32Kernel, grid, kTThreads, 0, s, w, blobs, row0s, rowss, dense_rows, gather,
               x, y);
  return cudaGetLastError();
}

cudaError_t LaunchMatMulSimt(const DevMat& w, const uint8_t* const* blobs, int groups,
                             const int* row0s, const int* rowss, int64_t dense_rows,
                             int64_t max_rows, const int* gather, const float* x, float* y,
                             cudaStream_t s) {
  const dim3 grid(Blocks(w.rows, kBN), Blocks(max_rows, kBM), static_cast<unsigned>(groups));
  LaunchKernel(MatMulKernel, grid, kMmThreads, 0, s, w, blobs, row0s, rowss, dense_rows, gather, x,
               y);
  return cudaGetLastError();
}

}  // namespace rw::cuda
