// Decode matvec y = W·x for 4-bit and 8-bit affine weights on the integer tensor cores.
//
// Why: the SIMT kernels spend ~5 instructions per weight (unpack, s·q + b, FMA, x from shared
// memory) and, at one token, are bound by instruction issue and DRAM round trips rather than
// bandwidth. Here a code q goes to mma.m16n8k32 as the unsigned byte it is (4-bit codes after
// one mask, 8-bit codes as stored), and per group of G columns
//   Σ_k (s·q_k + b)·x_k = s·Σ_k q_k·x_k + b·Σ_k x_k.
// x is brought into integers per group: with E the group's largest exponent, x·2^(30−E) is
// rounded to a 32-bit integer X (exact scaling by a power of two; the rounding is 2^-31 of the
// group's largest |x|, below fp32's own rounding of the products), whose four bytes are the
// parts: X = 2^24·b3 + 2^16·b2 + 2^8·b1 + b0 with b3 signed and the others 0..255, taken as
// the signed bytes b − 128 (offset binary: one byte permute per four values and an XOR, where
// 7-bit fields took shifts and masks per value). The four parts are four of the MMA's 8
// columns and a fifth column of ones gives Σq, which puts the offsets back:
// Σq·X = Σ_j 2^(8j)·Σq·p_j + 128·(1 + 2^8 + 2^16)·Σq. Σ q·p is exact in int32 and only the
// combination per group rounds (fp32). Results therefore differ from the SIMT kernels' fp32 FMA
// chain by rounding only (the kernel tests bound it against the CPU reference).
//
// Layout: a block has kTiles × kSlices warps; tile t covers 16 rows, slice j a share of the
// groups of K. In m16n8k32 lane (g, c) of a quad holds k-slots 4c..4c+3 and 16+4c..16+4c+3 of
// rows g and g + 8. Which real column a slot stands for is free as long as B uses the same
// assignment: each lane reads whole words of its rows (4-bit: (w & 0x0F0F0F0F) holds the even
// nibbles, (w >> 4) & 0x0F0F0F0F the odd ones; 8-bit: two words), so the eight columns a lane
// covers per MMA are always 8 consecutive ones, a "unit". x's byte parts are staged in shared
// memory in that order, so a B fragment is one 8-byte load.
//
// Loads: a block copies its rows' codes, scales and biases into shared memory with cp.async
// (consecutive threads take consecutive 16-byte pieces: whole cache lines, good PCIe requests
// on the mapped path too), so no registers are held while x is staged. A dense matrix's copies
// are issued before the kernel waits for its predecessor (PDL), so their DRAM round trip
// overlaps the previous kernel; expert weights wait for the routing. A launch has one row block
// per block (q/k/v: the three matrices' blocks one after another), except the LM head, whose
// blocks stride over the rows with the next block's copies in flight.
//
// Measured on the H200 (docs/CUDA.md): decode 271/276 → 296/302 tok/s against the SIMT kernels
// (REDWING_CUDA_MATVEC=simt) in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matvec_kernels.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

__device__ __forceinline__ void MmaU8S8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// The most input rows of a batch one block takes (REDWING_CUDA_MATVEC_ROWS, 1..kMaxRows).
constexpr int kMaxRows = 8;

// The launch as the caller describes it, with what the kernel adds.
struct Args : MatVecArgs {
  int nmat = 1;       // plain without blobs: the matrices sharing x (their tiles one after another)
  int64_t turns = 0;  // row blocks in all (per slot with blobs)
  int chunk = 1;      // without blobs: input rows per block (blockIdx.z: the chunk of them)
};

// Byte j of a, b, c, d packed as one word, a lowest.
template <int kJ>
__device__ __forceinline__ uint32_t Bytes4(int a, int b, int c, int d) {
  constexpr unsigned kSel = kJ | ((kJ + 4) << 4);
  return __byte_perm(__byte_perm(a, b, kSel), __byte_perm(c, d, kSel), 0x5410);
}

// Part j of 8 integers as the B fragment words of a unit (see StageParts).
template <int kBits, int kJ>
__device__ __forceinline__ uint2 PartWords(const int (&xi)[8]) {
  constexpr uint32_t kOffset = kJ < 3 ? 0x80808080u : 0u;  // unsigned bytes to signed
  uint2 b;
  if (kBits == 4) {
    b.x = Bytes4<kJ>(xi[0], xi[2], xi[4], xi[6]) ^ kOffset;
    b.y = Bytes4<kJ>(xi[1], xi[3], xi[5], xi[7]) ^ kOffset;
  } else {
    b.x = Bytes4<kJ>(xi[0], xi[1], xi[2], xi[3]) ^ kOffset;
    b.y = Bytes4<kJ>(xi[4], xi[5], xi[6], xi[7]) ^ kOffset;
  }
  return b;
}

// Stages x as B fragments: frag[(unit-MMA m of group gi)][part p][quad lane c] = {b0, b1}, the
// four parts' bytes of the unit's 8 columns (4-bit: even columns in b0, odd in b1, matching the
// nibble masks; 8-bit: first four in b0). Also per group 2^(E−30) (the integers' scale) and Σx.
// nr input rows x[nr][cols], row r's staged at xs + r·xbytes (fragments, then the factors), in
// one pass over all their units (a row's units are whole groups, so no group straddles two
// rows). Every thread of the block must call it; x is 16-byte aligned and cols a multiple of G.
template <int kBits, int G, int kRows>
__device__ __forceinline__ void StageParts(const float* x, int cols, int nr, uint8_t* xs,
                                           int xbytes) {
  constexpr int kUpg = G / 8;   // units per group
  constexpr int kMpg = G / 32;  // MMAs per group
  const int units = cols / 8, total = nr * units;
  const int lane = threadIdx.x & 31;
  for (int u0 = threadIdx.x - lane; u0 < total; u0 += blockDim.x) {  // warp-uniform
    const bool in = u0 + lane < total;
    const int r = kRows == 1 || !in ? 0 : (u0 + lane) / units;  // (one row: no division)
    const int u = in ? u0 + lane - r * units : 0;
    const float4* x4 = reinterpret_cast<const float4*>(x + static_cast<int64_t>(r) * cols);
    const float4 lo = in ? __ldg(x4 + 2 * u) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float4 hi = in ? __ldg(x4 + 2 * u + 1) : make_float4(0.f, 0.f, 0.f, 0.f);
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(v[k]));
    float s = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    // The group's units are kUpg consecutive lanes (G/8 divides 32): a butterfly gives every lane
    // the same bits (each step adds the same two values, in either order).
#pragma unroll
    for (int o = 1; o < kUpg; o <<= 1) {
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      s += __shfl_xor_sync(0xffffffffu, s, o);
    }
    // m < 2^(e+1) with e its unbiased exponent: X = x·2^(30−e) has |X| < 2^31 (and as a float
    // below 2^31 it is at most 2^31 − 128: the conversion cannot overflow).
    const int e = static_cast<int>((__float_as_uint(m) >> 23) & 255u) - 127;
    const int sh = min(30 - e, 126);
    const float up = __uint_as_float(static_cast<uint32_t>(sh + 127) << 23);
    int xi[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) xi[k] = __float2int_rn(v[k] * up);
    if (in) {
      uint2* frag = reinterpret_cast<uint2*>(xs + r * xbytes);
      float* gdown = reinterpret_cast<float*>(xs + r * xbytes + 4 * cols);
      float* gsum = gdown + cols / G;
      const int gi = u / kUpg, ui = u % kUpg;
      const int c = ui / kMpg, mm = ui % kMpg;
      uint2* f = frag + (gi * kMpg + mm) * 16 + c;
      f[0] = PartWords<kBits, 0>(xi);
      f[4] = PartWords<kBits, 1>(xi);
      f[8] = PartWords<kBits, 2>(xi);
      f[12] = PartWords<kBits, 3>(xi);
      if (ui == 0) {
        gdown[gi] = __uint_as_float(static_cast<uint32_t>(127 - sh) << 23);
        gsum[gi] = s;
      }
    }
  }
  __syncthreads();
}

// Shared memory of a launch: x's fragments and group factors (per input row of the block), then
// `stages` buffers each holding
// a turn's codes (16 rows per tile, rows padded so the lanes' fragment loads avoid bank
// conflicts) and the aligned words that hold each row's bf16 scales, then its biases.
struct SmemPlan {
  int cols, bits, tiles, stages, xrows;
  __host__ __device__ int Groups() const { return cols / 64; }
  __host__ __device__ int RowBytes() const { return cols * bits / 8; }
  // Row stride ≡ 8 words (4-bit: a quad's 8-byte loads of 4 rows cover the banks once) or 16
  // words (8-bit, 16-byte loads of 2 rows) modulo 32.
  __host__ __device__ int Stride() const {
    const int words = RowBytes() / 4, target = bits == 4 ? 8 : 16;
    return (words + ((target - words % 32) + 32) % 32) * 4;
  }
  __host__ __device__ int ScaleWords() const { return Groups() / 2 + 2; }  // per row, per array
  // A row's scales then biases, padded to an odd count of words: the 8 rows a warp reads at
  // once then fall in 8 different banks.
  __host__ __device__ int RowScaleWords() const { return 2 * ScaleWords() + 1; }
  // (rounded to 128 bytes: the stages take 16-byte cp.async copies)
  __host__ __device__ int XBytes() const { return (cols * 4 + Groups() * 8 + 127) / 128 * 128; }
  __host__ __device__ int CodeBytes() const { return tiles * 16 * Stride(); }
  __host__ __device__ int StageBytes() const {
    return CodeBytes() + tiles * 16 * RowScaleWords() * 4;
  }
  __host__ __device__ int Bytes() const { return xrows * XBytes() + stages * StageBytes(); }
};

// Where the block's rows of a turn come from: matrix `mat` (of q/k/v; 0 otherwise), first row.
struct TurnPos {
  int mat;
  int64_t row0;
};

// bf16 element i of an array whose row starts at global address p, copied as the aligned words
// that hold it (cp.async moves at least 4 bytes).
__device__ __forceinline__ float ScaleAt(const uint32_t* words, const uint16_t* p, int i) {
  const int off = static_cast<int>((reinterpret_cast<uintptr_t>(p) & 2u) >> 1);
  return Bf16Bits(reinterpret_cast<const uint16_t*>(words)[off + i]);
}

// Copies the rows [row0, row0 + 16) of w for tile t of a stage (zeros past the end): each warp
// takes whole rows, its lanes consecutive 16-byte pieces (and the words holding the scales).
__device__ __forceinline__ void IssueTile(const DevMat& w, int64_t row0, const SmemPlan& sp,
                                          uint8_t* codes, uint32_t* sb) {
  const int rb = sp.RowBytes(), n16 = rb / 16, stride = sp.Stride(), sw = sp.ScaleWords();
  const int rsw = sp.RowScaleWords(), gpr = sp.Groups();
  const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  for (int i = threadIdx.x >> 5; i < 16; i += nw) {
    const int64_t row = row0 + i;
    const bool ok = row < w.rows;
    const uint8_t* src = data + (ok ? row : 0) * rb;
    for (int ch = lane; ch < n16; ch += 32)
      CpAsync16(codes + i * stride + ch * 16, src + ch * 16, ok);
    for (int wd = lane; wd < 2 * sw; wd += 32) {
      const bool bias = wd >= sw;
      const int k = bias ? wd - sw : wd;
      const uintptr_t a =
          reinterpret_cast<uintptr_t>((bias ? w.biases : w.scales) + (ok ? row : 0) * gpr);
      const int n_words = static_cast<int>(((a & 2u) + 2u * gpr + 3u) / 4u);
      const bool in = ok && k < n_words;
      const uint32_t* from = reinterpret_cast<const uint32_t*>(a & ~static_cast<uintptr_t>(3)) + k;
      CpAsync4(sb + i * rsw + wd, in ? from : reinterpret_cast<const uint32_t*>(w.scales), in);
    }
  }
}

// The lane's partial sums of rows g (acc_a[r]) and g + 8 (acc_b[r]) of one tile over groups
// [g0, g1) for each of the block's nr input rows (r < nr ≤ kRows), from the codes and scales in
// shared memory; input row r's fragments start at xs + r·XBytes. A group's weight fragments and
// scales are loaded once for all the rows, and each row's sums take the same operations in the
// same order as a one-row launch's, so its results are bit-identical to a decode step's.
template <int kBits, int kRows>
__device__ __forceinline__ void ComputeTile(const DevMat& w, int64_t row0, const SmemPlan& sp,
                                            const uint8_t* codes, const uint32_t* sb, int g0,
                                            int g1, const uint8_t* xs, int nr,
                                            float (&acc_a)[kRows], float (&acc_b)[kRows]) {
  const int lane = threadIdx.x & 31, c = lane & 3, g = lane >> 2, part = g;
  const int stride = sp.Stride(), sw = sp.ScaleWords(), gpr = sp.Groups();
  const int xbytes = sp.XBytes(), cols = sp.cols;
  const uint8_t* ca = codes + g * stride;
  const uint8_t* cbr = codes + (g + 8) * stride;
  const uint32_t* sa = sb + g * sp.RowScaleWords();
  const uint32_t* sbb = sb + (g + 8) * sp.RowScaleWords();
  // The global rows' scale/bias addresses only for their alignment (the halves' offsets).
  const uint16_t* psa = w.scales + (row0 + g) * gpr;
  const uint16_t* psb = w.scales + (row0 + g + 8) * gpr;
  const uint16_t* pba = w.biases + (row0 + g) * gpr;
  const uint16_t* pbb = w.biases + (row0 + g + 8) * gpr;
  // Quad lane 0 holds parts 0 and 1 (×1, ×2^8), lane 1 parts 2 and 3 (×2^16, ×2^24), lane 2
  // the codes' sums (column 4, B all ones: ×128·(1 + 2^8 + 2^16), the parts' offsets).
  const float pw = c == 0 ? 1.0f : c == 1 ? 65536.0f : 8421504.0f;
  constexpr uint2 kOnes = {0x01010101u, 0x01010101u}, kZero = {0u, 0u};
#pragma unroll 2
  for (int gi = g0; gi < g1; ++gi) {
    // The group's words of rows g and g + 8: the A fragments of its two MMAs (4-bit: the
    // nibble masks are applied per MMA, which keeps fewer registers live).
    uint32_t wa[4], wb[4];
    if (kBits == 4) {
      const uint2 a2 = *reinterpret_cast<const uint2*>(ca + gi * 32 + c * 8);
      const uint2 b2 = *reinterpret_cast<const uint2*>(cbr + gi * 32 + c * 8);
      wa[0] = a2.x, wa[1] = a2.y, wb[0] = b2.x, wb[1] = b2.y;
    } else {
      const uint4 a4 = *reinterpret_cast<const uint4*>(ca + gi * 64 + c * 16);
      const uint4 b4 = *reinterpret_cast<const uint4*>(cbr + gi * 64 + c * 16);
      wa[0] = a4.x, wa[1] = a4.y, wa[2] = a4.z, wa[3] = a4.w;
      wb[0] = b4.x, wb[1] = b4.y, wb[2] = b4.z, wb[3] = b4.w;
    }
    float s_a = 0.0f, s_b = 0.0f, bias_a = 0.0f, bias_b = 0.0f;  // (read after row 0's MMAs)
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= nr) break;  // nr is the same for the whole block
      const uint2* frag = reinterpret_cast<const uint2*>(xs + r * xbytes);
      const float* gdown = reinterpret_cast<const float*>(xs + r * xbytes + 4 * cols);
      const float* gsum = gdown + gpr;
      int acc[4] = {0, 0, 0, 0};
#pragma unroll
      for (int mm = 0; mm < 2; ++mm) {
        const uint2 bf = part < 4    ? frag[(gi * 2 + mm) * 16 + part * 4 + c]
                         : part == 4 ? kOnes
                                     : kZero;
        if (kBits == 4)
          MmaU8S8(acc, wa[mm] & 0x0F0F0F0Fu, wb[mm] & 0x0F0F0F0Fu, (wa[mm] >> 4) & 0x0F0F0F0Fu,
                  (wb[mm] >> 4) & 0x0F0F0F0Fu, bf.x, bf.y);
        else
          MmaU8S8(acc, wa[2 * mm], wb[2 * mm], wa[2 * mm + 1], wb[2 * mm + 1], bf.x, bf.y);
      }
      if (r == 0 && c < 3) {
        s_a = ScaleAt(sa, psa, gi);
        s_b = ScaleAt(sbb, psb, gi);
        if (c == 0) {
          bias_a = ScaleAt(sa + sw, pba, gi);
          bias_b = ScaleAt(sbb + sw, pbb, gi);
        }
      }
      if (c < 3) {  // (lane 2's second column is zero)
        const float d = gdown[gi] * pw;
        const float va = fmaf(static_cast<float>(acc[1]), 256.0f, static_cast<float>(acc[0]));
        const float vb = fmaf(static_cast<float>(acc[3]), 256.0f, static_cast<float>(acc[2]));
        acc_a[r] = fmaf(va, s_a * d, acc_a[r]);
        acc_b[r] = fmaf(vb, s_b * d, acc_b[r]);
        if (c == 0) {
          const float xsum = gsum[gi];
          acc_a[r] = fmaf(bias_a, xsum, acc_a[r]);
          acc_b[r] = fmaf(bias_b, xsum, acc_b[r]);
        }
      }
    }
  }
}

// Blocks of kTiles × kSlices warps. Plain: tile t covers rows 16t..16t+15 of the block's rows of
// one matrix; gateup (kTiles 2): tile 0 the gate rows, tile 1 the same up rows.
// kRows 1: one input row per block (blockIdx.z: the row of a batch). 64 registers: up to four
// 256-thread blocks per SM, so a launch fits one wave: q/k/v's 512 row blocks (38 KB of shared
// memory each, four per SM), expert down's 352 (33 KB), expert gate/up's 352 (63 KB: three per
// SM, 396 at once).
// kRows > 1 (a verify's batch, no blobs): blockIdx.z is a chunk of a.chunk ≤ kRows input rows,
// all staged at once, so each weight tile crosses DRAM and shared memory once per chunk instead
// of once per row (128 registers: the rows' sums; two blocks per SM).
template <int kBits, int kTiles, int kSlices, int kRows>
__global__ void __launch_bounds__(32 * kTiles * kSlices,
                                  kRows == 1 ? 1024 / (32 * kTiles * kSlices) : 2)
    AffineMatVecI8Kernel(Args a, int stages) {
  PdlLaunchDependents();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  __shared__ float red[kRows][kTiles][kSlices][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile = warp / kSlices, slice = warp % kSlices;
  const int j = blockIdx.y;
  const int cols = static_cast<int>(a.cols);
  // The block's input rows: [b0, b0 + nr) of the batch.
  const int64_t b0 = static_cast<int64_t>(blockIdx.z) * (kRows == 1 ? 1 : a.chunk);
  const int nr = kRows == 1 ? 1 : min(a.chunk, a.batch - static_cast<int>(b0));
  const SmemPlan sp{cols, kBits, kTiles, stages, kRows == 1 ? 1 : a.chunk};
  uint8_t* stage0 = smem_raw + sp.xrows * sp.XBytes();
  const int rows_per_block = a.gateup ? 16 : 16 * kTiles;
  bool waited = false;
  const float* x = a.x;
  DevMat wb0, wb1;  // with blobs: the slot's matrices (gateup: gate, up)
  float* yb = nullptr;
  if (a.blobs != nullptr) {
    PdlWait();  // the blob is the router's choice
    waited = true;
    const uint8_t* blob = a.idx != nullptr ? a.blobs[a.idx[j]] : a.blobs[j];
    wb0 = Resolve(a.w[0], blob);
    wb1 = a.gateup ? Resolve(a.w[1], blob) : wb0;
    x += a.gateup ? (j / a.x_per) * a.x_stride : j * a.w[0].cols;
    yb = a.gateup ? a.h + j * a.rows : a.y[0] + j * a.rows;
  }
  x += b0 * cols;
  // Turn → matrix and first row (q/k/v: the matrices' tiles one after another).
  auto locate = [&](int64_t turn) {
    TurnPos p{0, turn * rows_per_block};
    if (a.blobs == nullptr && !a.gateup) {
      for (int m = 0; m + 1 < a.nmat; ++m) {
        const DevMat& wm = m == 0 ? a.w[0] : a.w[1];
        const int64_t tiles = (wm.rows + rows_per_block - 1) / rows_per_block;
        if (turn < tiles) break;
        turn -= tiles;
        p.mat = m + 1;
        p.row0 = turn * rows_per_block;
      }
    }
    return p;
  };
  auto matrix = [&](const TurnPos& p, int t) -> DevMat {
    if (a.blobs != nullptr) return a.gateup && t == 1 ? wb1 : wb0;
    if (a.gateup) return t == 0 ? a.w[0] : a.w[1];
    return p.mat == 0 ? a.w[0] : p.mat == 1 ? a.w[1] : a.w[2];
  };
  auto issue = [&](int64_t turn, int buf) {
    const TurnPos p = locate(turn);
    uint8_t* st = stage0 + buf * sp.StageBytes();
    for (int t = 0; t < kTiles; ++t)
      IssueTile(matrix(p, t), p.row0 + (a.gateup ? 0 : 16 * t), sp, st + t * 16 * sp.Stride(),
                reinterpret_cast<uint32_t*>(st + sp.CodeBytes()) + t * 16 * sp.RowScaleWords());
    CpAsyncCommit();
  };
  const int ng = sp.Groups();
  const int g_begin = slice * ng / kSlices, g_end = (slice + 1) * ng / kSlices;
  int64_t turn = blockIdx.x;
  if (turn < a.turns) issue(turn, 0);  // dense weights: before the wait
  if (!waited) PdlWait();
  StageParts<kBits, 64, kRows>(x, cols, nr, smem_raw, sp.XBytes());
  for (int k = 0; turn < a.turns; turn += gridDim.x, ++k) {
    const int64_t next = turn + gridDim.x;
    const int buf = stages > 1 ? k % 2 : 0;
    if (stages > 1 && next < a.turns) {
      issue(next, 1 - buf);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const TurnPos p = locate(turn);
    const DevMat w = matrix(p, tile);
    const int64_t r0 = p.row0 + (a.gateup ? 0 : 16 * tile);
    const uint8_t* st = stage0 + buf * sp.StageBytes();
    float acc_a[kRows], acc_b[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc_a[r] = acc_b[r] = 0.0f;
    ComputeTile<kBits, kRows>(
        w, r0, sp, st + tile * 16 * sp.Stride(),
        reinterpret_cast<const uint32_t*>(st + sp.CodeBytes()) + tile * 16 * sp.RowScaleWords(),
        g_begin, g_end, smem_raw, nr, acc_a, acc_b);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r >= nr) break;
      float va = acc_a[r], vb = acc_b[r];
      va += __shfl_down_sync(0xffffffffu, va, 1);  // quad lanes 0 + 1, 2 + 3
      vb += __shfl_down_sync(0xffffffffu, vb, 1);
      va += __shfl_down_sync(0xffffffffu, va, 2);
      vb += __shfl_down_sync(0xffffffffu, vb, 2);
      if ((lane & 3) == 0) {
        red[r][tile][slice][lane >> 2] = va;
        red[r][tile][slice][(lane >> 2) + 8] = vb;
      }
    }
    __syncthreads();
    for (int r = 0; r < nr; ++r) {
      const int64_t b = b0 + r;  // the input row of a batch (no blobs)
      if (a.gateup) {
        if (threadIdx.x < 16) {
          const int64_t row = p.row0 + threadIdx.x;
          float g = 0.0f, u = 0.0f;
#pragma unroll
          for (int s = 0; s < kSlices; ++s) g += red[r][0][s][threadIdx.x];
#pragma unroll
          for (int s = 0; s < kSlices; ++s) u += red[r][1][s][threadIdx.x];
          float* y = a.blobs != nullptr ? yb : a.h + b * a.rows;
          if (row < w.rows) y[row] = GeluTanh(g) * u;
        }
      } else if (threadIdx.x < 16 * kTiles) {
        const int t = threadIdx.x / 16, rr = threadIdx.x % 16;
        const int64_t row = p.row0 + 16 * t + rr;
        float v = 0.0f;
#pragma unroll
        for (int s = 0; s < kSlices; ++s) v += red[r][t][s][rr];
        const DevMat& wm = matrix(p, 0);
        float* y = a.blobs != nullptr ? yb
                                      : (p.mat == 0   ? a.y[0]
                                         : p.mat == 1 ? a.y[1]
                                                      : a.y[2]) +
                                            b * wm.rows;
        if (row < wm.rows) y[row] = v;
      }
    }
    __syncthreads();  // red and this stage's buffer are reused
    if (stages == 1 && next < a.turns) issue(next, 0);
  }
}

// sm_80+ (the dispatcher leaves it out under REDWING_CUDA_MATVEC=simt or generic).
bool Allowed() {
  static const bool on = [] {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 8;
  }();
  return on;
}

bool Fits(const DevMat& w, int64_t cols, int bits) {
  return w.type == DevMat::kAffine && w.bits == bits && w.group == 64 && w.cols == cols &&
         (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0;
}

// kRows > 1: the batch in chunks of at most chunk_max ≤ kRows rows, balanced (9 rows with 8 a
// chunk: 5 + 4); cudaErrorNotSupported where the rows' x do not fit shared memory.
template <int kBits, int kTiles, int kSlices, int kRows>
cudaError_t LaunchT(Args& args, int chunk_max, cudaStream_t s) {
  auto* kernel = AffineMatVecI8Kernel<kBits, kTiles, kSlices, kRows>;
  constexpr int kThreads = 32 * kTiles * kSlices;
  const int rows_per_block = args.gateup ? 16 : 16 * kTiles;
  args.turns = 0;
  if (args.blobs != nullptr || args.gateup) {
    args.turns = (args.rows + rows_per_block - 1) / rows_per_block;
  } else {
    for (int m = 0; m < args.nmat; ++m)
      args.turns += (args.w[m].rows + rows_per_block - 1) / rows_per_block;
  }
  unsigned chunks = args.blobs != nullptr ? 1 : static_cast<unsigned>(args.batch);
  args.chunk = 1;
  if (kRows > 1) {
    const int per = std::clamp(chunk_max, 1, kRows);
    chunks = static_cast<unsigned>((args.batch + per - 1) / per);
    args.chunk = static_cast<int>((args.batch + chunks - 1) / chunks);
  }
  SmemPlan sp{static_cast<int>(args.cols), kBits, kTiles, 1, args.chunk};
  static int max_smem = [] {
    int dev = 0, v = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    return v;
  }();
  // Room left for the kernel's static shared memory (the slices' sums).
  constexpr int kMargin = std::max(2048, 4 * kRows * kTiles * kSlices * 16 + 1024);
  if (sp.Bytes() + kMargin > max_smem) return cudaErrorNotSupported;
  static const cudaError_t attr = [&] {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               max_smem - kMargin);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not left for a later launch's check to find
      std::fprintf(stderr,
                   "redwing: warning: the %d-row integer matvec is unavailable (%d bytes of "
                   "shared memory: %s); products take %s\n",
                   kRows, max_smem - kMargin, cudaGetErrorString(e),
                   kRows > 1 ? "one row a block" : "the SIMT kernels");
    }
    return e;
  }();
  if (attr != cudaSuccess) return cudaErrorNotSupported;
  unsigned blocks = static_cast<unsigned>(args.turns);
  const void* k = reinterpret_cast<const void*>(kernel);
  if (args.blobs == nullptr && blocks > ResidentBlocks(k, kThreads, sp.Bytes())) {
    // The LM head: blocks stride over the rows, the next turn's rows loading during this one's.
    sp.stages = 2;
    if (sp.Bytes() + kMargin > max_smem) sp.stages = 1;
    blocks = ResidentBlocks(k, kThreads, sp.Bytes());
    if (blocks == 0) return cudaErrorNotSupported;
  }
  const unsigned slots = args.blobs != nullptr ? args.slots : 1;
  return LaunchKernel(kernel, dim3(blocks, slots, chunks), kThreads,
                      static_cast<size_t>(sp.Bytes()), s, args, sp.stages);
}

// A batch without blobs takes the multi-row kernel (REDWING_CUDA_MATVEC_ROWS rows a block at
// most, fewer where their x do not fit shared memory; 1 turns it off), else one row a block.
template <int kBits, int kTiles, int kSlices>
cudaError_t LaunchShape(Args& args, cudaStream_t s) {
  if (args.blobs == nullptr && args.batch > 1) {
    for (int rows_max = CurrentTuning().matvec_rows; rows_max > 1; rows_max /= 2) {
      const cudaError_t e = LaunchT<kBits, kTiles, kSlices, kMaxRows>(args, rows_max, s);
      if (e != cudaErrorNotSupported) {
        CountPath(Path::kMatVecInt8Rows);
        return e;
      }
    }
  }
  return LaunchT<kBits, kTiles, kSlices, 1>(args, 1, s);
}

// The block shape: 16-row tiles × K slices of 8 warps in all (short rows: four tiles of two
// slices), so a warp covers a few groups of its tile.
template <int kBits>
cudaError_t LaunchBits(Args& args, cudaStream_t s) {
  const int64_t ng = args.cols / 64;
  if (args.gateup) return LaunchShape<kBits, 2, 4>(args, s);  // a gate tile and its up tile
  if (ng <= 16) return LaunchShape<kBits, 4, 2>(args, s);     // short rows (expert down)
  return LaunchShape<kBits, 1, 8>(args, s);
}

}  // namespace

cudaError_t LaunchAffineMatVecI8(const MatVecArgs& a, cudaStream_t s) {
  if (!Allowed() || a.rows <= 0 || a.slots == 0) return cudaErrorNotSupported;
  // Expert blobs in host memory (the mapped path) take this kernel too, so that the logits stay
  // bit-identical to a resident run (its whole 16-byte copies make fair PCIe requests).
  if ((reinterpret_cast<uintptr_t>(a.x) & 15u) != 0 || a.cols % 64 != 0 || a.cols > 8192)
    return cudaErrorNotSupported;
  if (a.gateup && a.blobs != nullptr && a.x_stride % 4 != 0) return cudaErrorNotSupported;
  if (a.batch < 1 || a.batch > 65535 || a.x_per < 1 || (a.blobs != nullptr && a.batch != 1))
    return cudaErrorNotSupported;
  const int nmat = a.gateup ? 2 : (a.blobs != nullptr ? 1 : static_cast<int>(a.slots));
  if (nmat > 3) return cudaErrorNotSupported;
  const int bits = a.w[0].bits;
  if (bits != 4 && bits != 8) return cudaErrorNotSupported;
  for (int i = 0; i < nmat; ++i)
    if (!Fits(a.w[i], a.cols, bits)) return cudaErrorNotSupported;
  if (a.gateup && a.w[0].rows != a.w[1].rows) return cudaErrorNotSupported;
  Args args;
  static_cast<MatVecArgs&>(args) = a;
  args.nmat = nmat;
  return bits == 4 ? LaunchBits<4>(args, s) : LaunchBits<8>(args, s);
}

}  // namespace rw::cuda
