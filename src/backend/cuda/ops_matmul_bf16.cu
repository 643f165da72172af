// Prefill matmul for affine 4/8-bit weights on bf16 tensor cores, fp32-grade: the path where x
// was not split beforehand (the forward pass splits it once and takes ops_matmul_planes.cu;
// REDWING_CUDA_MATMUL=bf16 sends it here). Why it is exact and faster:
//   - Σ_k w_k·x_k = Σ_groups s_g·(Σ_{k∈g} q_k·x_k) + b_g·(Σ_{k∈g} x_k): the codes (centered,
//     see mma_bf16.cuh) are exact in bf16, so only x needs splitting. x = hi + mid + lo by
//     truncation (each the next 8 significant bits) is exact, and every product q·part is exact in
//     the fp32 accumulator: 3 bf16 MMAs per k16 (m16n8k16, twice the TF32 rate) instead of 6 TF32
//     ones, and no per-element scale·q + bias.
//   - the split is done once per element while the X tile is staged (the warps sharing a row
//     read it ready), and the codes are widened to bf16 once per tile: 6 + 2 bytes a k column
//     in shared memory instead of 4 + 4 for the dequantized float tiles;
//   - each segment's (min(group, 64) columns) MMAs go into a fresh fragment that is then scaled
//     into the accumulator, with b·Σx from per-row sums taken while staging.
// Pipelining: the next K step's X, codes, scales and biases are copied (cp.async) into a staging
// area during the current step's MMAs, then split/widened into the other of two shared buffers;
// one barrier a step. X planes are laid out so that one 16-byte load is an A fragment.
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mma_bf16.cuh"

namespace rw::cuda {
namespace {

// K step: 64 columns, two halves of 32 (the smallest group). A shared W row is 8 chunks of 8
// bf16 (16 bytes); chunk c of row r sits at c ^ 4·(r & 1), so a quarter warp reading chunks 0–3
// (or 4–7) of two adjacent rows hits 32 distinct banks.
constexpr int kBK = 64;

__device__ __forceinline__ int Chunk(int row, int c) {
  return row * 8 + (c ^ ((row & 1) << 2));
}

// An X plane holds rows g and g + 8 of each 16-row block interleaved, so one 16-byte load is a
// whole A fragment (no register moves before the MMA): unit (block, g, chunk c, k16 step t) =
// {row g, row g + 8, row g, row g + 8} × registers (2t, 2t, 2t + 1, 2t + 1) of the chunk. The
// unit index is XORed with g & 1 so two adjacent g of a quarter warp fall in different banks.
__device__ __forceinline__ int XUnit(int blk, int g, int c, int t) {
  return (blk * 8 + g) * 16 + ((c * 2 + t) ^ (g & 1));
}

// A chunk's slot order (Codes4/Codes8): register v holds columns (v, v + 4) of the 8, for X and
// W alike. Register v is slots (2·tig, 2·tig + 1) (v even) or (2·tig + 8, 2·tig + 9) (v odd) of
// k16 step v / 2.
template <int kWM, int kWN, int kBits>
constexpr int SmemBytes() {
  // Per buffer: X planes [3][kBM][64] bf16, W [kBN][64] bf16, scales and biases
  // [2 halves][kBN] floats, row sums [kBM][2] floats; once: the next step's X and packed W as
  // loaded (through cp.async: registers held across the MMAs made the kernel spill).
  return 2 * (3 * 32 * kWM * kBK * 2 + 32 * kWN * kBK * 2 + 2 * 2 * 32 * kWN * 4 +
              32 * kWM * 2 * 4) +
         32 * kWM * kBK * 4 + 32 * kWN * kBK * kBits / 8 + 2 * 2 * 32 * kWN * 4;
}

// kWM×kWN warps of 32×32 outputs each; Y[row0 + r][n] = Σ_k X[src(r)][k]·W[n][k].
template <int kWM, int kWN, int kBits>
__global__ void __launch_bounds__(32 * kWM * kWN, 16 / (kWM * kWN))
    AffineMatMulBf16Kernel(DevMat w, const uint8_t* const* blobs, const int* row0s,
                           const int* rowss, int64_t dense_rows, const int* gather, const float* x,
                           float* y) {
  PdlEnter();
  constexpr int kT = 32 * kWM * kWN, kBM = 32 * kWM, kBN = 32 * kWN;
  constexpr int kXC = kBM * 8 / kT;             // X chunks (8 floats) per thread per step
  constexpr int kWC = kBN * 8 / kT;             // W chunks (8 codes) per thread per step
  constexpr int kSB = (2 * kBN + kT - 1) / kT;  // scale/bias entries per thread per step
  static_assert(kXC % 2 == 0 && kBM * 8 % kT == 0 && kWC >= 1 && kBN * 8 % kT == 0);
  constexpr int kRowStep = kT / 8;  // rows between a thread's chunks
  extern __shared__ __align__(16) uint4 smem4[];
  constexpr int kXWords = 3 * kBM * 8, kWWords = kBN * 8;                        // uint4 per buffer
  uint4* const xs = smem4;                                                       // [2][3][kBM·8]
  uint4* const ws = smem4 + 2 * kXWords;                                         // [2][kBN·8]
  float* const sbs = reinterpret_cast<float*>(smem4 + 2 * (kXWords + kWWords));  // [2][2][2][kBN]
  float* const xsum = sbs + 2 * 4 * kBN;                                         // [2][kBM][2]
  float* const xraw = xsum + 2 * kBM * 2;                                        // [kBM][64]
  constexpr int kPer = 32 / kBits, kWpc = 8 / kPer;  // codes per word, words per chunk
  uint32_t* const wraw = reinterpret_cast<uint32_t*>(xraw + kBM * kBK);  // [kBN][8·kWpc]
  uint32_t* const sbraw = wraw + kBN * 8 * kWpc;  // [scale, bias][2 halves][kBN] words

  const int grp = blockIdx.z;
  if (blobs != nullptr) w = Resolve(w, blobs[grp]);
  const int64_t row0 = row0s != nullptr ? row0s[grp] : 0;
  const int64_t rows = rowss != nullptr ? rowss[grp] : dense_rows;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  if (m0 >= rows) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  // 32-bit offsets (every prefill operand has < 2^31 elements): fewer registers, no spills.
  const int K = static_cast<int>(w.cols), N = static_cast<int>(w.rows);
  const int tid = threadIdx.x;
  const int group = w.group;

  // Thread's chunk column (c8 of 8); its W chunks are rows r8 + i·kRowStep, its X chunks the row
  // pairs (xrow(i), xrow(i) + 8) for pair p = tid + (i / 2)·kT (g = (p / 8) % 8, block p / 64).
  const int c8 = tid & 7, r8 = tid >> 3;
  auto xrow = [&](int i) {
    const int p = tid + (i / 2) * kT;
    return (p >> 6) * 16 + ((p >> 3) & 7) + (i & 1) * 8;
  };
  int xoff[kXC];  // the chunk's row of X (gathered) × K + column, or -1 past the rows
#pragma unroll
  for (int i = 0; i < kXC; ++i) {
    const int64_t r = m0 + xrow(i);
    xoff[i] = -1;
    if (r < rows) {
      const int64_t gr = row0 + r;
      xoff[i] = static_cast<int>(gather != nullptr ? gather[gr] : gr) * K + c8 * 8;
    }
  }
  const int wpr = K / kPer, gpr = K / group, n0i = static_cast<int>(n0);
  const uint32_t* const wdata = static_cast<const uint32_t*>(w.data);
  const int nvalid = N - n0i;  // rows of W in this tile: r < nvalid
  const int ngroups = N * gpr;

  // Scales and biases come as the aligned word holding the bf16 (cp.async moves >= 4 bytes); a
  // word reaching past either end of the array is read directly instead (`edge`).
  auto sb_index = [&](int e, int k0, int& gi) {
    const int n = e % kBN, h = e / kBN;
    gi = (n0i + n) * gpr + (k0 + 32 * h) / group;
    return n < nvalid && k0 + 32 * h < K;
  };
  auto edge = [&](const uint16_t* a, int gi) {
    const bool high = (reinterpret_cast<uintptr_t>(a + gi) & 2u) != 0;
    return high ? gi == 0 : gi + 1 >= ngroups;
  };
  auto word_of = [](const uint16_t* a) {
    return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(a) & ~uintptr_t{3});
  };
  auto load = [&](int k0) {
    const bool colok = k0 + c8 * 8 < K;  // K may end at half a step (K % 64 == 32)
#pragma unroll
    for (int i = 0; i < kXC; ++i) {
      const bool ok = xoff[i] >= 0 && colok;
      const float* src = ok ? x + xoff[i] + k0 : x;
      float* dst = xraw + xrow(i) * kBK + c8 * 8;
      CpAsync16(dst, src, ok);
      CpAsync16(dst + 4, src + 4, ok);
    }
#pragma unroll
    for (int i = 0; i < kWC; ++i) {
      const int r = r8 + i * kRowStep;
      const bool ok = r < nvalid && colok;
      const uint32_t* src = ok ? wdata + (n0i + r) * wpr + (k0 + c8 * 8) / kPer : wdata;
#pragma unroll
      for (int v = 0; v < kWpc; ++v) CpAsync4(wraw + (r * 8 + c8) * kWpc + v, src + v, ok);
    }
#pragma unroll
    for (int i = 0; i < kSB; ++i) {
      const int e = tid + i * kT;
      if (e < 2 * kBN) {
        int gi;
        const bool ok = sb_index(e, k0, gi);
        const bool sok = ok && !edge(w.scales, gi), bok = ok && !edge(w.biases, gi);
        CpAsync4(sbraw + e, sok ? word_of(w.scales + gi) : w.scales, sok);
        CpAsync4(sbraw + 2 * kBN + e, bok ? word_of(w.biases + gi) : w.biases, bok);
      }
    }
    CpAsyncCommit();
  };
  // The bf16 at a + gi from its word as loaded (or read directly at an edge), widened.
  auto sb_value = [&](const uint16_t* a, int gi, uint32_t word) {
    if (edge(a, gi)) return Bf16Bits(a[gi]);
    const bool high = (reinterpret_cast<uintptr_t>(a + gi) & 2u) != 0;
    return __uint_as_float(high ? word & 0xFFFF0000u : word << 16);
  };
  int k_next = 0;  // the step that store() converts
  auto store = [&](int buf) {
    uint4* xb = xs + buf * kXWords;
    float* xsb = xsum + buf * kBM * 2;
    CpAsyncWait<0>();     // this thread's own chunks
    uint32_t p[2][3][4];  // [row of the pair][part][chunk register]
#pragma unroll
    for (int i = 0; i < kXC; ++i) {
      const int r = xrow(i);
      const float* src = xraw + r * kBK + c8 * 8;
      const float4 lo = *reinterpret_cast<const float4*>(src);
      const float4 hi = *reinterpret_cast<const float4*>(src + 4);
      const float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      float s = 0.0f;
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const float a = f[v], b = f[v + 4];
        s += a + b;
        p[i & 1][0][v] = HiPair(a, b);
        const float ra = a - Trunc(a), rb = b - Trunc(b);  // exact: the low 16 bits of a, b
        p[i & 1][1][v] = HiPair(ra, rb);
        p[i & 1][2][v] = HiPair(ra - Trunc(ra), rb - Trunc(rb));
      }
      // Row sum per half (chunks 0–3 and 4–7 of the row are 4 adjacent lanes each).
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if ((c8 & 3) == 0) xsb[r * 2 + (c8 >> 2)] = s;
      if (i & 1) {
#pragma unroll
        for (int q = 0; q < 3; ++q)
#pragma unroll
          for (int t = 0; t < 2; ++t)
            xb[q * kBM * 8 + XUnit(r >> 4, r & 7, c8, t)] =
                make_uint4(p[0][q][2 * t], p[1][q][2 * t], p[0][q][2 * t + 1], p[1][q][2 * t + 1]);
      }
    }
    uint4* wb = ws + buf * kWWords;
#pragma unroll
    for (int i = 0; i < kWC; ++i) {
      const uint32_t* src = wraw + ((r8 + i * kRowStep) * 8 + c8) * kWpc;
      uint4 c;
      if constexpr (kBits == 4)
        c = Codes4(src[0]);
      else
        c = Codes8(src[0], src[1]);
      wb[Chunk(r8 + i * kRowStep, c8)] = c;
    }
    float* sb = sbs + buf * 4 * kBN;
#pragma unroll
    for (int i = 0; i < kSB; ++i) {
      const int e = tid + i * kT;
      if (e < 2 * kBN) {
        int gi;
        const bool ok = sb_index(e, k_next, gi);
        const float sv = ok ? sb_value(w.scales, gi, sbraw[e]) : 0.0f;
        sb[e] = sv;  // [h][n]
        sb[2 * kBN + e] =
            ok ? CenteredBias(sb_value(w.biases, gi, sbraw[2 * kBN + e]), sv, kBits) : 0.0f;
      }
    }
  };

  const int lane = tid & 31, warp = tid >> 5;
  const int wm = (warp / kWN) * 32, wn = (warp % kWN) * 32;  // the warp's 32×32 corner
  const int gid = lane >> 2, tig = lane & 3;
  const bool seg64 = group >= 64;  // one scale per 64-column step, else one per half
  float acc[2][4][4] = {};
  load(0);
  store(0);
  __syncthreads();
  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += kBK) {
    const bool more = k0 + kBK < K;
    k_next = k0 + kBK;
    if (more) load(k_next);  // in flight during this step's MMAs
    const uint4* xb = xs + buf * kXWords;
    const uint4* wb = ws + buf * kWWords;
    const float* sb = sbs + buf * 4 * kBN;
    const float* xsb = xsum + buf * kBM * 2;
    float frag[2][4][4] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = h * 4 + tig;
      uint4 bq[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) bq[j] = wb[Chunk(wn + j * 8 + gid, c)];
#pragma unroll
      for (int q = 2; q >= 0; --q) {  // smallest part first
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint4 u = xb[q * kBM * 8 + XUnit((wm >> 4) + i, gid, c, t)];
            const uint32_t a[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const uint32_t b[2] = {t ? bq[j].z : bq[j].x, t ? bq[j].w : bq[j].y};
              MmaBf16(frag[i][j], a, b[0], b[1]);
            }
          }
      }
      // acc += s·Σq·x + b·Σx over the segment (half h, or the whole step).
      if (h == 1 || !seg64) ScaleSegment<kBN>(acc, frag, xsb, sb, wm, wn, gid, tig, h, seg64);
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
  constexpr int kBytes = SmemBytes<kWM, kWN, kBits>();
  auto* kernel = AffineMatMulBf16Kernel<kWM, kWN, kBits>;
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

}  // namespace

cudaError_t LaunchAffineMatMulBf16(const DevMat& w, const uint8_t* const* blobs, int groups,
                                   const int* row0s, const int* rowss, int64_t dense_rows,
                                   int64_t max_rows, const int* gather, const float* x, float* y,
                                   cudaStream_t s) {
  // A 64-column step holds one group or two whole ones (group 32 or a multiple of 64).
  if (w.type != DevMat::kAffine || (w.bits != 4 && w.bits != 8) ||
      (w.group != 32 && w.group % 64 != 0) || w.cols % w.group != 0 ||
      (reinterpret_cast<uintptr_t>(x) & 15u) != 0)
    return cudaErrorNotSupported;
  // Tiles: 64×128 (8 warps) for dense products of ≥ 64 rows (X split once per 128 outputs),
  // else 32×128 (4 warps) for expert groups of ~8–40 rows (measured against 64×64 dense and
  // 64×128 grouped tiles: slower).
  if (blobs == nullptr && max_rows >= 64)
    return LaunchBits<2, 4>(w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
  return LaunchBits<1, 4>(w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
}

}  // namespace rw::cuda
