// Prefill matmul for affine 4/8-bit weights over x split once (LaunchSplitX), the default of the
// forward pass's prefill products (REDWING_CUDA_MATMUL=bf16 keeps the kernel that splits x
// itself, for comparison). Codes are exact 16-bit floats, centered (mma_bf16.cuh); per segment of
// min(group, 64) columns a fresh fragment is scaled into the accumulator plus b·Σx. x comes in
// one of two splits:
//   - fp16 × 2 (the default): per row, x' = x·2^s with s the power of two that puts the row's
//     largest |x'| in [2^14, 2^15); hi = fp16(x'), lo = fp16(x' − hi). Two m16n8k16 MMAs per
//     k16. hi + lo keeps ~22 significant bits of each element (lo rounds at 2^-11 of a remainder
//     itself under 2^-11 of x'), and an element 2^25 below its row's largest loses bits only
//     below 2^-39 of that largest: fp32-like accuracy. The sums of x are of x' too, and the
//     output row is scaled back by 2^-s (powers of two: exact).
//   - bf16 × 3 (REDWING_CUDA_SPLIT=bf16x3): x = hi + mid + lo exactly, three MMAs per k16, as in
//     ops_matmul_bf16.cu.
// What differs from ops_matmul_bf16.cu is where the work sits:
//   - the split happens once per element of x in LaunchSplitX, not once per element in every
//     block that reads it (there it was most of the instructions: a 64×128 tile re-split its X
//     for every 128 outputs), and q/k/v or gate/up share one split;
//   - the kernel is a plain multi-stage cp.async pipeline (kStages steps of X planes, codes and
//     row sums in flight), one barrier a step; A fragments come from ldmatrix on swizzled rows,
//     the codes are widened to bf16 in registers right before their MMAs, and only the scales
//     and biases pass through registers (loaded a step early, stored as floats after the MMAs).
// The planes hold each 32-column block's columns in the order the widened codes take (below), so
// one ldmatrix gives the A fragment that matches them.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

constexpr int kBK = 64;
constexpr int kMaxParts = 3;  // scratch is sized for the larger split

// Where the columns of a 32-column block sit in the planes: a thread's widened codes
// (Codes4/Codes8 on the 8 codes of columns 8·tig..8·tig+7) hold columns (v, v + 4) in register
// v; register 2t is the B operand's k slots (2·tig, 2·tig + 1) of k16 step t and register 2t + 1
// its slots (2·tig + 8, 2·tig + 9). So column 8·tig + v + 4e is slot 2·tig + 8·(v % 2) + e of
// step v / 2, at plane position 8v + 2·tig + e.

// The 8 columns of chunk `id` of x (zeros when not live), scaled by `up`.
__device__ __forceinline__ void LoadChunk(const float* x, int64_t at, bool live, float up,
                                          float (&f)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = 0.0f;
  if (!live) return;
  const float4 a = *reinterpret_cast<const float4*>(x + at);
  const float4 b = *reinterpret_cast<const float4*>(x + at + 4);
  f[0] = a.x * up, f[1] = a.y * up, f[2] = a.z * up, f[3] = a.w * up;
  f[4] = b.x * up, f[5] = b.y * up, f[6] = b.z * up, f[7] = b.w * up;
}

// One thread per 8 columns (a quarter of a 32-column block; loads coalesced) splits them into
// kP parts: bf16 by truncation (kP = 3, exact: each takes the next 8 significant bits) or fp16 by
// rounding (kP = 2, of x' = x·up). Quarter tig holds columns 8·tig + v and 8·tig + v + 4, which is
// word 4v + tig of the block in each plane; four rotations among the quarters give quarter tig
// the words 4·tig..4·tig + 3, one 16-byte store a plane. Every lane of the warp must call it
// (cols is a multiple of 32, so a quad is all live or all past the end).
template <int kP>
__device__ __forceinline__ void SplitChunk(const float (&f)[8], bool live, int64_t at, int tig,
                                           int64_t plane, uint16_t* planes, float* sums) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += f[i];
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  uint32_t word[kP][4];  // [part][v]
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const float a = f[v], b = f[v + 4];
    if constexpr (kP == 3) {
      const float ra = a - Trunc(a), rb = b - Trunc(b);
      word[0][v] = HiPair(a, b);
      word[1][v] = HiPair(ra, rb);
      word[2][v] = HiPair(ra - Trunc(ra), rb - Trunc(rb));
    } else {
      const __half2 hi = __floats2half2_rn(a, b);
      // a − hi is exact in fp32 (hi is a rounded to 11 bits).
      const __half2 lo = __floats2half2_rn(a - __low2float(hi), b - __high2float(hi));
      word[0][v] = *reinterpret_cast<const uint32_t*>(&hi);
      word[1][v] = *reinterpret_cast<const uint32_t*>(&lo);
    }
  }
  // Round r: send word v = tig + r, receive quarter tig - r's word v = tig (its slot tig - r).
  uint32_t out[kP][4];
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int send = (tig + r) & 3, from = (tig - r) & 3;
#pragma unroll
    for (int q = 0; q < kP; ++q) {
      const uint32_t mine = send == 0   ? word[q][0]
                            : send == 1 ? word[q][1]
                            : send == 2 ? word[q][2]
                                        : word[q][3];
      const uint32_t got = __shfl_sync(0xffffffffu, mine, (lane & ~3) | from);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (k == from) out[q][k] = got;
    }
  }
  if (!live) return;
  const int64_t blk = at - tig * 8;  // the block's first element
  if (tig == 0) sums[blk / 32] = s;
#pragma unroll
  for (int q = 0; q < kP; ++q)
    *reinterpret_cast<uint4*>(planes + q * plane + blk + 8 * tig) =
        make_uint4(out[q][0], out[q][1], out[q][2], out[q][3]);
}

// bf16 × 3: one thread per chunk of 8 columns over the whole of x.
__global__ void SplitX3Kernel(const float* x, int rows, int cols, uint16_t* planes, float* sums) {
  PdlEnter();
  const int chunks = cols / 8;
  const int64_t id = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool live = id < static_cast<int64_t>(rows) * chunks;
  const int64_t at = live ? id * 8 : 0;  // row · cols + column
  float f[8];
  LoadChunk(x, at, live, 1.0f, f);
  SplitChunk<3>(f, live, at, static_cast<int>(id & 3), static_cast<int64_t>(rows) * cols, planes,
                sums);
}

// fp16 × 2: a block per row. Its chunks (up to kSplitPer per thread, warp-uniform so quads stay
// together) are loaded into registers once; the row's largest |x| gives the scale, then each
// chunk is split. Rows wider than 256·kSplitPer·8 columns take the bf16 × 3 split instead.
constexpr int kSplitPer = 4;

__global__ void SplitX2Kernel(const float* x, int rows, int cols, uint16_t* planes, float* sums,
                              float* row_down) {
  PdlEnter();
  __shared__ float s_max[32];
  const int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunks = cols / 8;
  const int64_t row_at = static_cast<int64_t>(r) * cols;
  float f[kSplitPer][8];
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kSplitPer; ++i) {
    const int c = i * blockDim.x + threadIdx.x;
    LoadChunk(x, row_at + c * 8, c < chunks, 1.0f, f[i]);
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(f[i][k]));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) s_max[warp] = m;
  __syncthreads();
  m = 0.0f;
  for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) m = fmaxf(m, s_max[i]);
  // m < 2^(e+1): x·2^(14−e) stays below 2^15 (fp16's largest is 65504). Zero rows take s = 0;
  // non-finite ones too (they stay non-finite, as they would be in fp32).
  const int e = static_cast<int>((__float_as_uint(m) >> 23) & 255u) - 127;
  const int sh = m > 0.0f && e < 128 ? max(-126, min(14 - e, 126)) : 0;
  const float up = __uint_as_float(static_cast<uint32_t>(sh + 127) << 23);
  if (threadIdx.x == 0) row_down[r] = __uint_as_float(static_cast<uint32_t>(127 - sh) << 23);
#pragma unroll
  for (int i = 0; i < kSplitPer; ++i) {
    if (i * static_cast<int>(blockDim.x) >= chunks) break;  // block-uniform
    const int c = i * blockDim.x + threadIdx.x;
    const bool live = c < chunks;
#pragma unroll
    for (int k = 0; k < 8; ++k) f[i][k] *= up;  // exact (a power of two)
    SplitChunk<2>(f[i], live, row_at + (live ? c * 8 : 0), c & 3, static_cast<int64_t>(rows) * cols,
                  planes, sums);
  }
}

__device__ __forceinline__ void LdMatrix4(uint32_t* a, const void* p) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(s));
}

// Shared memory of one stage: X planes [kP][kBM][128 bytes] (16-byte chunk c of row r at
// c ^ (r & 7): ldmatrix's 8 rows of a chunk fall in distinct banks), codes [kBN][8·bits bytes]
// (16-byte chunk c of row n at c ^ Swz(n), so the 8 rows × 4 lanes of a fragment load spread
// over the banks), scales and biases as floats [2][2 halves][kBN], x sums [kBM][2 halves].
template <int kWM, int kWN, int kBits, int kP>
struct Stage {
  static constexpr int kBM = 32 * kWM, kBN = 32 * kWN;
  static constexpr int kRowBytes = 8 * kBits;  // 64 codes
  static constexpr int kX = kP * kBM * 128, kW = kBN * kRowBytes, kSB = 4 * kBN * 4;
  static constexpr int kSum = kBM * 2 * 4;
  static constexpr int kBytes = kX + kW + kSB + kSum;
  static_assert(kBytes % 16 == 0);
};

template <int kBits>
__device__ __forceinline__ int Swz(int n) {
  return kBits == 4 ? (n >> 2) & 1 : (n >> 1) & 3;
}

// kWM×kWN warps of 32×32 outputs each; Y[row0 + r][n] = X[src(r)]·W[n] for the rows of each
// group (grid z), X given as kP planes (plane_rows rows each), 32-column sums and (kP = 2) the
// rows' factors 2^-s.
template <int kWM, int kWN, int kBits, int kP, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWM * kWN, kMinBlocks)
    PlanesMatMulKernel(DevMat w, const uint8_t* const* blobs, const int* row0s, const int* rowss,
                       int dense_rows, const int* gather, const uint16_t* planes, int plane_rows,
                       const float* sums, const float* row_down, float* y) {
  PdlEnter();
  using L = Stage<kWM, kWN, kBits, kP>;
  constexpr int kT = 32 * kWM * kWN, kBM = L::kBM, kBN = L::kBN;
  constexpr int kXCopies = kP * kBM * 8 / kT;       // 16-byte X copies per thread per step
  constexpr int kWCopies = kBN * (kBits / 2) / kT;  // 16-byte code copies per thread
  constexpr int kSBPer = (2 * kBN + kT - 1) / kT;   // scale/bias entries per thread
  static_assert(kP * kBM * 8 % kT == 0 && kBN * (kBits / 2) % kT == 0 && kWCopies >= 1);
  extern __shared__ __align__(16) uint8_t smem[];

  const int grp = blockIdx.z;
  if (blobs != nullptr) w = Resolve(w, blobs[grp]);
  const int row0 = row0s != nullptr ? row0s[grp] : 0;
  const int rows = rowss != nullptr ? rowss[grp] : dense_rows;
  const int m0 = blockIdx.y * kBM;
  if (m0 >= rows) return;
  const int n0 = blockIdx.x * kBN;
  const int K = static_cast<int>(w.cols), N = static_cast<int>(w.rows);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = w.group, gpr = K / group, sums_per_row = K / 32;
  const int nvalid = N - n0;
  const int64_t plane = static_cast<int64_t>(plane_rows) * K;

  // This thread's X copies: u = tid + i·kT over [part][row][chunk], the same kXRows rows in
  // every part; the plane offset of each row's chunk (gathered) or -1 past the group's rows.
  constexpr int kXRows = kXCopies / kP;
  static_assert(kXCopies % kP == 0 && 2 * kBM <= kT);
  int xoff[kXRows];
#pragma unroll
  for (int i = 0; i < kXRows; ++i) {
    const int u = tid + i * kT, r = (u / 8) % kBM, c = u % 8;
    const int gr = row0 + m0 + r;
    xoff[i] = m0 + r < rows ? (gather != nullptr ? gather[gr] : gr) * K + c * 8 : -1;
  }
  // Its x sum: entry tid of [row][half] (rows past the group's: -1).
  int soff = -1;
  if (tid < 2 * kBM && m0 + (tid >> 1) < rows) {
    const int gr = row0 + m0 + (tid >> 1);
    soff = (gather != nullptr ? gather[gr] : gr) * sums_per_row + (tid & 1);
  }
  const uint8_t* const wbytes = static_cast<const uint8_t*>(w.data);
  constexpr int kChunks = kBits / 2;  // 16-byte chunks of a row's 64 codes

  auto issue = [&](int st, int k0) {
    uint8_t* const base = smem + st * L::kBytes;
#pragma unroll
    for (int i = 0; i < kXCopies; ++i) {
      const int u = tid + i * kT, r = (u / 8) % kBM, c = u % 8, q = u / (8 * kBM);
      const int off = xoff[i % kXRows];
      const bool ok = off >= 0 && k0 + c * 8 < K;
      const uint16_t* src = ok ? planes + q * plane + off + k0 : planes;
      CpAsync16(base + q * kBM * 128 + r * 128 + ((c ^ (r & 7)) << 4), src, ok);
    }
    uint8_t* const wb = base + L::kX;
#pragma unroll
    for (int i = 0; i < kWCopies; ++i) {
      const int u = tid + i * kT, n = u / kChunks, c = u % kChunks;
      const bool ok = n < nvalid && k0 + c * (128 / kBits) < K;
      const uint8_t* src =
          ok ? wbytes + static_cast<int64_t>(n0 + n) * (K * kBits / 8) + k0 * kBits / 8 + c * 16
             : wbytes;
      CpAsync16(wb + n * L::kRowBytes + ((c ^ Swz<kBits>(n)) << 4), src, ok);
    }
    float* const xs = reinterpret_cast<float*>(base + L::kX + L::kW + L::kSB);
    if (tid < 2 * kBM) {
      const bool ok = soff >= 0 && k0 + 32 * (tid & 1) < K;
      CpAsync4(xs + tid, ok ? sums + soff + k0 / 32 : sums, ok);
    }
  };
  // Scales and biases of step k0 into registers ([entry][scale, bias] as floats), then shared.
  float sbv[kSBPer][2];
  auto load_sb = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kSBPer; ++i) {
      const int e = tid + i * kT, n = e % kBN, h = e / kBN;
      sbv[i][0] = sbv[i][1] = 0.0f;
      if (e < 2 * kBN && n < nvalid && k0 + 32 * h < K) {
        const int gi = (n0 + n) * gpr + (k0 + 32 * h) / group;
        sbv[i][0] = Bf16Bits(w.scales[gi]);
        sbv[i][1] = CenteredBias(Bf16Bits(w.biases[gi]), sbv[i][0], kBits);
      }
    }
  };
  auto store_sb = [&](int st) {
    float* const sb = reinterpret_cast<float*>(smem + st * L::kBytes + L::kX + L::kW);
#pragma unroll
    for (int i = 0; i < kSBPer; ++i) {
      const int e = tid + i * kT;
      if (e < 2 * kBN) {
        sb[e] = sbv[i][0];
        sb[2 * kBN + e] = sbv[i][1];
      }
    }
  };

  const int wm = (warp / kWN) * 32, wn = (warp % kWN) * 32;
  const int gid = lane >> 2, tig = lane & 3;
  // ldmatrix: lane l addresses row l & 15 of a 16-row tile, chunk 2·(k16 step) + l / 16.
  const int lrow = lane & 15, lsw = (lane >> 4) ^ (lrow & 7);
  const bool seg64 = group >= 64;
  const int nk = (K + kBK - 1) / kBK;
  float acc[2][4][4] = {};

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) {
      issue(s, s * kBK);
      load_sb(s * kBK);
      store_sb(s);
    }
    CpAsyncCommit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int pf = kt + kStages - 1;
    if (pf < nk) {
      issue(pf % kStages, pf * kBK);
      load_sb(pf * kBK);
    }
    CpAsyncCommit();

    const uint8_t* const base = smem + (kt % kStages) * L::kBytes;
    const uint8_t* const wb = base + L::kX;
    const float* const sb = reinterpret_cast<const float*>(base + L::kX + L::kW);
    const float* const xsb = reinterpret_cast<const float*>(base + L::kX + L::kW + L::kSB);
    float frag[2][4][4] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t words[4][2];  // row wn + 8j + gid's codes of this half (8-bit: two words)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = wn + j * 8 + gid;
        if constexpr (kBits == 4) {
          const uint32_t* row = reinterpret_cast<const uint32_t*>(wb + n * L::kRowBytes);
          words[j][0] = row[((h ^ Swz<4>(n)) << 2) + tig];
        } else {
          const uint2 p = *reinterpret_cast<const uint2*>(
              wb + n * L::kRowBytes + (((2 * h + (tig >> 1)) ^ Swz<8>(n)) << 4) + (tig & 1) * 8);
          words[j][0] = p.x, words[j][1] = p.y;
        }
      }
      uint4 bq[4];  // the B fragments of both k16 steps (registers 2t, 2t + 1)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if constexpr (kP == 2)
          bq[j] = kBits == 4 ? Codes4H(words[j][0]) : Codes8H(words[j][0], words[j][1]);
        else
          bq[j] = kBits == 4 ? Codes4(words[j][0]) : Codes8(words[j][0], words[j][1]);
      }
      // The smallest part first: its products gather in a fragment still near zero, where the
      // tensor core's accumulation loses none of their bits.
#pragma unroll
      for (int q = kP - 1; q >= 0; --q)
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            uint32_t a[4];
            const int r = wm + i * 16 + lrow;
            LdMatrix4(a, base + q * kBM * 128 + r * 128 + (((4 * h + 2 * t) ^ lsw) << 4));
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              if constexpr (kP == 2)
                MmaF16(frag[i][j], a, t ? bq[j].z : bq[j].x, t ? bq[j].w : bq[j].y);
              else
                MmaBf16(frag[i][j], a, t ? bq[j].z : bq[j].x, t ? bq[j].w : bq[j].y);
            }
          }
      // acc += s·Σq·x + b·Σx over the segment (half h, or the whole step).
      if (h == 1 || !seg64) ScaleSegment<kBN>(acc, frag, xsb, sb, wm, wn, gid, tig, h, seg64);
    }
    // The scales of step pf go to the stage step kt - 1 used: every thread is past it.
    if (pf < nk) store_sb(pf % kStages);
  }
  if constexpr (kP == 2) {
    // Rows back from x' = x·2^s to x.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = m0 + wm + i * 16 + gid + e * 8;
        if (r >= rows) continue;
        const int gr = row0 + r;
        const float down = row_down[gather != nullptr ? gather[gr] : gr];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j][2 * e] *= down;
          acc[i][j][2 * e + 1] *= down;
        }
      }
  }
  StoreWarpTile(acc, m0 + wm, n0 + wn, gid, tig, rows, N, row0, y);
}

template <int kWM, int kWN, int kBits, int kP, int kStages, int kMinBlocks>
cudaError_t Launch(const DevMat& w, const uint8_t* const* blobs, int groups, const int* row0s,
                   const int* rowss, int64_t dense_rows, int64_t max_rows, const int* gather,
                   const XPlanes& x, float* y, cudaStream_t s) {
  constexpr int kBytes = kStages * Stage<kWM, kWN, kBits, kP>::kBytes;
  auto* kernel = PlanesMatMulKernel<kWM, kWN, kBits, kP, kStages, kMinBlocks>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(Blocks(w.rows, 32 * kWN), Blocks(max_rows, 32 * kWM),
                  static_cast<unsigned>(groups));
  LaunchKernel(kernel, grid, 32 * kWM * kWN, kBytes, s, w, blobs, row0s, rowss,
               static_cast<int>(dense_rows), gather, x.planes, static_cast<int>(x.rows), x.sums,
               x.row_down, y);
  return cudaGetLastError();
}

template <int kWM, int kWN, int kStages, int kMinBlocks>
cudaError_t LaunchBits(const DevMat& w, const uint8_t* const* blobs, int groups, const int* row0s,
                       const int* rowss, int64_t dense_rows, int64_t max_rows, const int* gather,
                       const XPlanes& x, float* y, cudaStream_t s) {
  if (x.parts == 2)
    return w.bits == 4 ? Launch<kWM, kWN, 4, 2, kStages, kMinBlocks>(
                             w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s)
                       : Launch<kWM, kWN, 8, 2, kStages, kMinBlocks>(
                             w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
  return w.bits == 4 ? Launch<kWM, kWN, 4, 3, kStages, kMinBlocks>(
                           w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s)
                     : Launch<kWM, kWN, 8, 3, kStages, kMinBlocks>(
                           w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y, s);
}

}  // namespace

size_t SplitXBytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(rows * cols) * 2 * kMaxParts +
         static_cast<size_t>(rows * (cols / 32)) * 4 + static_cast<size_t>(rows) * 4;
}

cudaError_t LaunchSplitX(const float* x, int64_t rows, int64_t cols, void* scratch,
                         size_t scratch_bytes, XPlanes* out, cudaStream_t s, int parts) {
  *out = XPlanes{};
  if (parts == 0) parts = CurrentTuning().split_parts;  // the forward pass's split
  if (parts != 2 && parts != 3) return cudaErrorInvalidValue;
  if (parts == 2 && cols / 8 > 256 * kSplitPer) parts = 3;  // wider than SplitX2Kernel holds
  if (rows <= 0 || cols <= 0 || cols % 32 != 0 || (reinterpret_cast<uintptr_t>(x) & 15u) != 0 ||
      (reinterpret_cast<uintptr_t>(scratch) & 15u) != 0 || rows * cols >= (int64_t{1} << 30))
    return cudaErrorNotSupported;
  if (SplitXBytes(rows, cols) > scratch_bytes) return cudaErrorInvalidValue;
  auto* planes = static_cast<uint16_t*>(scratch);
  auto* sums = reinterpret_cast<float*>(planes + parts * rows * cols);
  float* row_down = nullptr;
  CountPath(parts == 2 ? Path::kSplitFp16x2 : Path::kSplitBf16x3);
  if (parts == 2) {
    row_down = sums + rows * (cols / 32);
    const int threads = static_cast<int>(std::min<int64_t>(256, (cols / 8 + 31) / 32 * 32));
    LaunchKernel(SplitX2Kernel, static_cast<unsigned>(rows), threads, 0, s, x,
                 static_cast<int>(rows), static_cast<int>(cols), planes, sums, row_down);
  } else {
    const int64_t threads = rows * (cols / 8);
    LaunchKernel(SplitX3Kernel, Blocks(threads, 256), 256, 0, s, x, static_cast<int>(rows),
                 static_cast<int>(cols), planes, sums);
  }
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  *out = XPlanes{planes, sums, row_down, rows, cols, parts};
  return cudaSuccess;
}

cudaError_t LaunchAffineMatMulPlanes(const DevMat& w, const uint8_t* const* blobs, int groups,
                                     const int* row0s, const int* rowss, int64_t dense_rows,
                                     int64_t max_rows, const int* gather, const XPlanes& x,
                                     float* y, cudaStream_t s) {
  if (w.type != DevMat::kAffine || (w.bits != 4 && w.bits != 8) ||
      (w.group != 32 && w.group % 64 != 0) || w.cols % w.group != 0 || w.cols != x.cols ||
      x.planes == nullptr || (reinterpret_cast<uintptr_t>(w.data) & 15u) != 0 ||
      w.rows * w.cols >= (int64_t{1} << 31))
    return cudaErrorNotSupported;
  // 32×128 tiles of 4 warps, 3 stages, 3 blocks an SM (168 registers, no spills), for dense
  // products and expert groups alike. Measured on the H200 (512-token prefill, tok/s): 6,653–6,761
  // against 5,987–6,072 with 2 blocks an SM (registers unbounded), 6,114–6,124 with 4 stages at 2
  // blocks, 5,586–5,618 with 64×64 tiles, 5,831–5,865 with 64×128 tiles for dense products (their
  // 128-register bound spilled; and a k projection of 2,048 rows filled half the GPU).
  return LaunchBits<1, 4, 3, 3>(w, blobs, groups, row0s, rowss, dense_rows, max_rows, gather, x, y,
                                s);
}

}  // namespace rw::cuda
