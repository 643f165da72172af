// Prefill matmul for affine 4/8-bit weights on Hopper's warpgroup MMA (wgmma, sm_90a), over x
// split once into two fp16 planes (LaunchSplitX, parts 2). The default for those products on a
// compute-capability-9.0 GPU; REDWING_CUDA_WGMMA=0 keeps the mma.sync planes kernel
// (ops_matmul_planes.cu), which every other GPU takes.
//
// The roles are swapped from the planes kernel: the weights are the A operand, dequantized in
// registers, and x is the B operand, read by the tensor cores straight from shared memory (the
// planes' 128-byte rows in the 128-byte swizzle wgmma expects). A warpgroup computes 64 weight
// rows × kTN tokens; a block is two warpgroups (128 rows) over the same x tile.
//
// Why the weights can go in scaled: with the row's scales multiplied by 2^t (t per row, so the
// largest lands just under the top of fp16's range), a scaled code s'·(q − c) is exact in fp16.
//   - 4-bit: s' has bf16's 8 significant bits and |q − 8| ≤ 8 has at most 3 (7 = 111b), so the
//     product has at most 11, fp16's precision. It is made as p·s' − 24·s' with p = 16 + q (one
//     OR into fp16 16.0) in one fused multiply-add: the exact result is representable, so the
//     single rounding leaves it exact. 24·s' (3·s'·8) has 10 bits.
//   - 8-bit: |q − 128| needs up to 7 bits, so s' is split into its top 4 significant bits and
//     the rest (each at most 4 bits): two A operands, p·s'_hi − 1152·s'_hi and the same for the
//     low part, p = 1024 + q (1152 = 9·128: 4 bits).
// The sum over all of K then runs in the tensor core's fp32 accumulator, with no per-group
// fragment to scale: two MMAs per k16 for 4-bit weights (x's hi and lo), four for 8-bit. Groups
// whose scale is 2^14 below the row's largest turn subnormal in fp16 and round, but their
// products are then below 2^-24 of the row's largest ones. The bias term Σ_g b'_g·Σx_g (b' the
// centered bias, mma_bf16.cuh) runs on the tensor cores after the main loop, from the planes'
// 32-column sums; the result is scaled by 2^-t per weight row and by the row factor 2^-s of x.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/matmul.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

constexpr int kBlockRows = 128;  // weight rows per block: two warpgroups of 64
constexpr int kThreads = 256;

// One stage: the hi and lo x planes [kTN][128 bytes] (16-byte chunk c of row r at c ^ (r & 7),
// the 128-byte swizzle), the codes [128 rows][8·bits bytes] (chunk c of row n at c ^ Swz(n));
// 1024-byte aligned (the swizzle's period).
template <int kTN, int kBits>
struct WgStage {
  static constexpr int kPlane = kTN * 128;
  static constexpr int kRowBytes = 8 * kBits;
  static constexpr int kCodes = 2 * kPlane;
  static constexpr int kBytes = (kCodes + kBlockRows * kRowBytes + 1023) / 1024 * 1024;
};

// Up to three matrices with the same K, bits and group, stacked by rows: one launch covers them
// all (q/k/v, gate/up), so the grid fills the GPU where each alone would leave SMs idle. An
// expert launch's matrices hold offsets, resolved per group against the expert's blob.
struct WgStack {
  DevMat w[3];
  float* y[3];
  int n = 1;
  int rows = 0;  // the stacked rows, Σ w[i].rows
};

template <int kBits>
__device__ __forceinline__ int CodeSwz(int n) {
  return kBits == 4 ? (n >> 2) & 1 : (n >> 1) & 3;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Where stacked row r lives: its matrix's codes, scales and biases row and its output column.
struct StackRow {
  const uint8_t* codes = nullptr;
  const uint16_t *scales = nullptr, *biases = nullptr;
  float* y = nullptr;  // output column (y + local row); the row stride is ld
  int64_t ld = 0;
  bool ok = false;
};
__device__ __forceinline__ StackRow RowOf(const WgStack& st, const uint8_t* blob, int r, int gpr) {
  StackRow s;
  if (r >= st.rows) return s;
  int i = 0;
  while (i + 1 < st.n && r >= st.w[i].rows) r -= static_cast<int>(st.w[i].rows), ++i;
  const DevMat w = blob != nullptr ? Resolve(st.w[i], blob) : st.w[i];
  s.codes = static_cast<const uint8_t*>(w.data) + static_cast<int64_t>(r) * (w.cols * w.bits / 8);
  s.scales = w.scales + static_cast<int64_t>(r) * gpr;
  s.biases = w.biases + static_cast<int64_t>(r) * gpr;
  s.y = st.y[i] + r;
  s.ld = w.rows;
  s.ok = true;
  return s;
}

constexpr int kBK = 64;  // columns of K per step

__device__ __forceinline__ void WgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kN>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kN) : "memory");
}
__device__ __forceinline__ uint32_t LdShared32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ uint2 LdShared64(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
// cp.async writes through the generic proxy; wgmma reads through the async one.
__device__ __forceinline__ void FenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The descriptor of a K-major operand in the 128-byte swizzle: rows of 128 bytes, 8-row groups
// 1,024 bytes apart (stride), the leading offset unused; p 1024-aligned plus 32 bytes per k16.
__device__ __forceinline__ uint64_t PlaneDesc(const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((a & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{64} << 32) |
         (uint64_t{1} << 62);
}

// d += A·B over one k16 step, m64nN: A four registers of fp16 pairs (the mma.m16n8k16 A layout
// per warp), B kTN rows of x from shared memory.
__device__ __forceinline__ void Wgmma(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{.reg .pred p; setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
      "}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

__device__ __forceinline__ void Wgmma(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{.reg .pred p; setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

__device__ __forceinline__ void Wgmma(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{.reg .pred p; setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
}

__device__ __forceinline__ uint32_t Half2Bits(__half2 h) {
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t Hfma2Bits(uint32_t p, uint32_t s, uint32_t c) {
  return Half2Bits(__hfma2(*reinterpret_cast<const __half2*>(&p),
                           *reinterpret_cast<const __half2*>(&s),
                           *reinterpret_cast<const __half2*>(&c)));
}

// Register v of a 4-bit word as the fp16 pair (16 + q) of columns v and v + 4 (the same column
// order as Codes4H): nibble v shifted to fp16 mantissa bits 6..9 of each half.
template <int kV>
__device__ __forceinline__ uint32_t Nibbles16(uint32_t w) {
  const uint32_t s = kV == 0 ? w << 6 : kV == 1 ? w << 2 : kV == 2 ? w >> 2 : w >> 6;
  return (s & 0x03C003C0u) | 0x4C004C00u;
}
// Register v of an 8-bit pair of words as the fp16 pair (1024 + q) of columns v and v + 4.
template <int kV>
__device__ __forceinline__ uint32_t Bytes1024(uint32_t w0, uint32_t w1) {
  constexpr uint32_t sel = kV | (kV << 4) | ((4 + kV) << 8) | ((4 + kV) << 12);
  return (__byte_perm(w0, w1, sel) & 0x00FF00FFu) | 0x64006400u;
}

// A row's scale s·2^t as the fp16 pairs an A operand multiplies by: [part] = {s', −c·s'} with
// c = 24 (4-bit) or 1152 (8-bit, two parts: s' split after its 4th significant bit).
template <int kBits>
struct RowScale {
  uint32_t s[kBits == 4 ? 1 : 2], c[kBits == 4 ? 1 : 2];
};
template <int kBits>
__device__ __forceinline__ RowScale<kBits> MakeRowScale(float s) {
  RowScale<kBits> r;
  if constexpr (kBits == 4) {
    r.s[0] = Half2Bits(__float2half2_rn(s));
    r.c[0] = Half2Bits(__float2half2_rn(-24.0f * s));
  } else {
    const float hi = __uint_as_float(__float_as_uint(s) & 0xFFF00000u), lo = s - hi;
    r.s[0] = Half2Bits(__float2half2_rn(hi));
    r.c[0] = Half2Bits(__float2half2_rn(-1152.0f * hi));
    r.s[1] = Half2Bits(__float2half2_rn(lo));
    r.c[1] = Half2Bits(__float2half2_rn(-1152.0f * lo));
  }
  return r;
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Y[row0 + r][n] = X[src(r)]·W[n] for the rows of each group (grid z), as PlanesMatMulKernel,
// over x as two fp16 planes (plane_rows rows each), their 32-column sums and row factors.
template <int kTN, int kBits, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    WgmmaMatMulKernel(const WgStack st, const uint8_t* const* blobs, const int* row0s,
                      const int* rowss, int dense_rows, int tile_groups, const int* gather,
                      const uint16_t* planes, int plane_rows, const float* sums,
                      const float* row_down) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  PdlEnter();
  using L = WgStage<kTN, kBits>;
  // Stages: kAhead steps of x and codes in flight, one being read, one whose MMAs may still run.
  constexpr int kAhead = kStages - 2;
  constexpr int kAParts = kBits == 4 ? 1 : 2;
  constexpr int kAcc = kTN / 2;                     // accumulators per thread
  constexpr int kXCopies = 2 * kTN * 8 / kThreads;  // 16-byte x copies per thread per step
  constexpr int kXRows = kXCopies / 2;              // distinct (token, chunk) of them
  constexpr int kChunks = kBits / 2;                // 16-byte chunks of a row's 64 codes
  constexpr int kWCopies = kBlockRows * kChunks / kThreads;
  static_assert(kXCopies % 2 == 0 && kWCopies >= 1 && 2 * kTN <= kThreads);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                                   ~static_cast<uintptr_t>(1023));

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int grp = blockIdx.z, m0 = blockIdx.y * kTN;
  if (tile_groups > 0) {
    // A tile list over the groups (tile_groups of them in one grid row): block y takes tile y
    // of the groups' tiles in order, ceil(rows / kTN) each, so no block is launched per group
    // for rows it does not have.
    __shared__ int s_tile[2];
    if (warp == 0) {
      int before = 0, found = -1, fm0 = 0;
      const int target = static_cast<int>(blockIdx.y);
      for (int base = 0; base < tile_groups && found < 0; base += 32) {
        const int g = base + lane;
        const int t = g < tile_groups ? (rowss[g] + kTN - 1) / kTN : 0;
        int incl = t;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int v = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += v;
        }
        const int at = target - before;
        const unsigned hit = __ballot_sync(0xffffffffu, at < incl && at >= incl - t);
        if (hit != 0) {
          const int src = __ffs(hit) - 1;
          found = base + src;
          fm0 = (at - __shfl_sync(0xffffffffu, incl - t, src)) * kTN;
        }
        before += __shfl_sync(0xffffffffu, incl, 31);
      }
      if (lane == 0) s_tile[0] = found, s_tile[1] = fm0;
    }
    __syncthreads();
    grp = s_tile[0], m0 = s_tile[1];
    if (grp < 0) return;
  }
  const uint8_t* const blob = blobs != nullptr ? blobs[grp] : nullptr;
  const DevMat w = blob != nullptr ? Resolve(st.w[0], blob) : st.w[0];
  const int row0 = row0s != nullptr ? row0s[grp] : 0;
  const int rows = rowss != nullptr ? rowss[grp] : dense_rows;
  if (m0 >= rows) return;
  const int n0 = blockIdx.x * kBlockRows;
  const int K = static_cast<int>(w.cols);
  const int gid = lane >> 2, tig = lane & 3;
  const int group = w.group, gpr = K / group, sums_per_row = K / 32;
  const int64_t plane = static_cast<int64_t>(plane_rows) * K;
  const int nk = (K + kBK - 1) / kBK;

  // What a step copies, as sources at k0 = 0 (a valid address with size 0, which zero-fills,
  // past the group's rows) and shared offsets within a stage: the per-step work is an add per
  // copy. x: [part][token][chunk], the same kXRows (token, chunk) pairs in both parts. Only a K
  // that is not a multiple of the step needs the column check.
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const bool ragged = K % kBK != 0;
  const uint16_t* xsrc[kXRows];
  uint32_t xdst[kXRows], xsize[kXRows];
  int xcol[kXRows];
#pragma unroll
  for (int i = 0; i < kXRows; ++i) {
    const int u = tid + i * kThreads, r = (u / 8) % kTN, c = u % 8;
    const int gr = row0 + m0 + r;
    const bool live = m0 + r < rows;
    xsrc[i] =
        planes + (live ? static_cast<int64_t>(gather != nullptr ? gather[gr] : gr) * K + c * 8 : 0);
    xsize[i] = live ? 16 : 0;
    xdst[i] = r * 128 + ((c ^ (r & 7)) << 4);
    xcol[i] = c * 8;
  }
  const uint8_t* wsrc[kWCopies];
  uint32_t wdst[kWCopies], wsize[kWCopies];
  int wcol[kWCopies];
#pragma unroll
  for (int i = 0; i < kWCopies; ++i) {
    const int u = tid + i * kThreads, n = u / kChunks, c = u % kChunks;
    const StackRow sr = RowOf(st, blob, n0 + n, gpr);
    wsrc[i] = sr.ok ? sr.codes + c * 16 : static_cast<const uint8_t*>(w.data);
    wsize[i] = sr.ok ? 16 : 0;
    wdst[i] = L::kCodes + n * L::kRowBytes + ((c ^ CodeSwz<kBits>(n)) << 4);
    wcol[i] = c * (128 / kBits);
  }
  auto issue = [&](int stage, int k0) {
    const uint32_t base = sbase + stage * L::kBytes;
#pragma unroll
    for (int i = 0; i < kXCopies; ++i) {
      const int j = i % kXRows, q = i / kXRows;
      const uint32_t size = ragged && k0 + xcol[j] >= K ? 0 : xsize[j];
      CpAsync16Sized(base + q * L::kPlane + xdst[j], xsrc[j] + q * plane + k0, size);
    }
#pragma unroll
    for (int i = 0; i < kWCopies; ++i) {
      const uint32_t size = ragged && k0 + wcol[i] >= K ? 0 : wsize[i];
      CpAsync16Sized(base + wdst[i], wsrc[i] + k0 * kBits / 8, size);
    }
  };

  // This thread's two weight rows (fragment rows gid and gid + 8 of its warp's 16).
  const int nl = 64 * (warp >> 2) + 16 * (warp & 3) + gid;  // local row of the lower
  // (Looked up again after the main loop rather than kept in registers through it.)
  StackRow row_lo = RowOf(st, blob, n0 + nl, gpr), row_hi = RowOf(st, blob, n0 + nl + 8, gpr);
  const bool lo_ok = row_lo.ok, hi_ok = row_hi.ok;
  // Where its codes sit in a stage: [row][half].
  uint32_t coff[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = nl + 8 * r;
      coff[r][h] = L::kCodes + n * L::kRowBytes +
                   (kBits == 4 ? ((h ^ CodeSwz<4>(n)) << 4) + tig * 4
                               : (((2 * h + (tig >> 1)) ^ CodeSwz<8>(n)) << 4) + (tig & 1) * 8);
    }
  // Each row's exponent t: the smaller of the one that brings its largest |scale| to
  // [2^10, 2^11) (4-bit) or [2^4, 2^5) (8-bit), and the one that keeps its largest |b'|·2^lg
  // (the bias operand, lg = log2 of the group) within fp16; the quad shares the scan.
  const int lg = 32 - __clz(group - 1);  // group ≤ 2^lg
  float up_lo = 1.0f, up_hi = 1.0f;
  {
    uint32_t mlo = 0, mhi = 0;
    float blo = 0.0f, bhi = 0.0f;
    for (int g = tig; g < gpr; g += 4) {
      if (lo_ok) {
        const uint16_t sb = row_lo.scales[g];
        mlo = max(mlo, static_cast<uint32_t>(sb & 0x7FFFu));
        blo = fmaxf(blo, fabsf(CenteredBias(Bf16Bits(row_lo.biases[g]), Bf16Bits(sb), kBits)));
      }
      if (hi_ok) {
        const uint16_t sb = row_hi.scales[g];
        mhi = max(mhi, static_cast<uint32_t>(sb & 0x7FFFu));
        bhi = fmaxf(bhi, fabsf(CenteredBias(Bf16Bits(row_hi.biases[g]), Bf16Bits(sb), kBits)));
      }
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      mlo = max(mlo, __shfl_xor_sync(0xffffffffu, mlo, o));
      mhi = max(mhi, __shfl_xor_sync(0xffffffffu, mhi, o));
      blo = fmaxf(blo, __shfl_xor_sync(0xffffffffu, blo, o));
      bhi = fmaxf(bhi, __shfl_xor_sync(0xffffffffu, bhi, o));
    }
    auto up = [lg](uint32_t m, float b) {
      const int e = static_cast<int>(m >> 7);  // biased bf16 exponent
      const int eb = static_cast<int>((__float_as_uint(b) >> 23) & 255u);
      int t = 127;
      if (m != 0 && e != 255) t = (kBits == 4 ? 10 : 4) - (e - 127);
      if (b > 0.0f && eb != 255) t = min(t, 14 - lg - (eb - 127));
      if (t == 127) t = 0;
      t = max(-126, min(t, 126));
      return __uint_as_float(static_cast<uint32_t>(t + 127) << 23);
    };
    up_lo = up(mlo, blo), up_hi = up(mhi, bhi);
  }
  // A step's scales of both rows, per half ([row][half]), one step ahead.
  float sv[2][2];
  // (Groups of a power-of-two size take a shift, not a division.)
  const bool pow2 = (group & (group - 1)) == 0;
  const uint16_t* const srow[2] = {lo_ok ? row_lo.scales : w.scales,
                                   hi_ok ? row_hi.scales : w.scales};
  auto load_sb = [&](int k0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = k0 + 32 * h;
      if (h == 1 && group >= 64) {  // the same group as the first half
        sv[0][1] = sv[0][0], sv[1][1] = sv[1][0];
        continue;
      }
      const int g = pow2 ? col >> lg : col / group;
      const bool in = col < K;
      sv[0][h] = in && lo_ok ? Bf16Bits(srow[0][g]) * up_lo : 0.0f;
      sv[1][h] = in && hi_ok ? Bf16Bits(srow[1][g]) * up_hi : 0.0f;
    }
  };

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < nk) issue(s, s * kBK);
    CpAsyncCommit();
  }
  load_sb(0);
  // One step; a: its A operands [part][k16][register]. The MMAs read them after the step
  // returns (asynchronously, until the next step's wait), so consecutive steps take different
  // arrays: the loop runs two steps a turn.
  auto step = [&](int kt, uint32_t(&a)[kAParts][4][4]) {
    CpAsyncWait<kAhead - 1>();
    FenceProxyAsync();
    __syncthreads();
    // The stage step kt − 2 used: its MMAs are done (at most one group was left in flight).
    if (kt + kAhead < nk) issue((kt + kAhead) % kStages, (kt + kAhead) * kBK);
    CpAsyncCommit();

    const uint8_t* const base = smem + (kt % kStages) * L::kBytes;
    const uint64_t desc = PlaneDesc(base);
    const uint32_t sst = sbase + (kt % kStages) * L::kBytes;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      RowScale<kBits> rs[2] = {MakeRowScale<kBits>(sv[0][h]), MakeRowScale<kBits>(sv[1][h])};
      uint32_t p[2][4];  // [row][register v]
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if constexpr (kBits == 4) {
          const uint32_t word = LdShared32(sst + coff[r][h]);
          p[r][0] = Nibbles16<0>(word), p[r][1] = Nibbles16<1>(word);
          p[r][2] = Nibbles16<2>(word), p[r][3] = Nibbles16<3>(word);
        } else {
          const uint2 wd = LdShared64(sst + coff[r][h]);
          p[r][0] = Bytes1024<0>(wd.x, wd.y), p[r][1] = Bytes1024<1>(wd.x, wd.y);
          p[r][2] = Bytes1024<2>(wd.x, wd.y), p[r][3] = Bytes1024<3>(wd.x, wd.y);
        }
      }
      // k16 step 2h + t: registers (row gid, slots 2tig..), (gid + 8, ..), (gid, 2tig + 8..),
      // (gid + 8, ..) are registers 2t, 2t, 2t + 1, 2t + 1 of the rows' codes.
#pragma unroll
      for (int ap = 0; ap < kAParts; ++ap)
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          a[ap][2 * h + t][0] = Hfma2Bits(p[0][2 * t], rs[0].s[ap], rs[0].c[ap]);
          a[ap][2 * h + t][1] = Hfma2Bits(p[1][2 * t], rs[1].s[ap], rs[1].c[ap]);
          a[ap][2 * h + t][2] = Hfma2Bits(p[0][2 * t + 1], rs[0].s[ap], rs[0].c[ap]);
          a[ap][2 * h + t][3] = Hfma2Bits(p[1][2 * t + 1], rs[1].s[ap], rs[1].c[ap]);
        }
    }
    if (kt + 1 < nk) load_sb((kt + 1) * kBK);

    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int ap = 0; ap < kAParts; ++ap)
#pragma unroll
        for (int q = 0; q < 2; ++q) Wgmma(acc, a[ap][kk], desc + ((q * L::kPlane + kk * 32) >> 4));
    WgmmaCommit();

    WgmmaWait<1>();
  };
  uint32_t a0[kAParts][4][4], a1[kAParts][4][4];
  for (int kt = 0; kt < nk; kt += 2) {
    step(kt, a0);
    if (kt + 1 < nk) step(kt + 1, a1);
  }
  WgmmaWait<0>();
  row_lo = RowOf(st, blob, n0 + nl, gpr), row_hi = RowOf(st, blob, n0 + nl + 8, gpr);

  // The bias term Σ_g b'_g·S_g (S_g the group's sum of x') on the tensor cores, into the same
  // accumulators: k16 steps of 4 groups, slot k holding group 4j + (k & 7) / 2 with
  // A = b''_hi (k < 8) or b''_lo (k ≥ 8) and B = S'_hi (k even) or S'_lo (k odd), where
  // b'' = b'·2^(t + lg) and S' = S·2^-lg (the group's mean, below 2^15) are split into fp16
  // hi + lo: the four products carry ~22 bits of each. B is built per 4 steps in the stage
  // memory, which the main loop no longer needs.
  const int bsteps = (gpr + 3) / 4, per = group / 32;
  const float s_dn = __uint_as_float(static_cast<uint32_t>(127 - lg) << 23);
  const float bup[2] = {up_lo * __uint_as_float(static_cast<uint32_t>(127 + lg) << 23),
                        up_hi * __uint_as_float(static_cast<uint32_t>(127 + lg) << 23)};
  for (int c = 0; c * 4 < bsteps; ++c) {
    __syncthreads();  // every warpgroup's MMAs are done with the memory
    for (int u = tid; u < kTN * 4; u += kThreads) {
      const int n = u >> 2, jj = 4 * c + (u & 3);
      const bool live = m0 + n < rows;
      const int gr = row0 + m0 + n;
      const int64_t srow =
          live ? static_cast<int64_t>(gather != nullptr ? gather[gr] : gr) * sums_per_row : 0;
      uint32_t hl[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int g = 4 * jj + i;
        float sg = 0.0f;
        if (live && g < gpr)
          for (int h = 0; h < per; ++h) sg += sums[srow + g * per + h];
        sg *= s_dn;
        const __half hi = __float2half_rn(sg);
        hl[i] = Half2Bits(__halves2half2(hi, __float2half_rn(sg - __half2float(hi))));
      }
      uint8_t* const row = smem + n * 128;
      const int cc = 2 * (u & 3);
      *reinterpret_cast<uint4*>(row + ((cc ^ (n & 7)) << 4)) =
          make_uint4(hl[0], hl[1], hl[2], hl[3]);
      *reinterpret_cast<uint4*>(row + (((cc + 1) ^ (n & 7)) << 4)) =
          make_uint4(hl[0], hl[1], hl[2], hl[3]);
    }
    FenceProxyAsync();
    __syncthreads();
    // A: thread tig's slots (2tig, 2tig + 1) and (2tig + 8, 2tig + 9) are group 4j + tig, hi and
    // lo of b''; every step's registers stay intact until the wait.
    uint32_t ab[4][4];
#pragma unroll
    for (int j4 = 0; j4 < 4; ++j4) {
      const int g = 4 * (4 * c + j4) + tig;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const StackRow& sr = r ? row_hi : row_lo;
        float b = 0.0f;
        if (g < gpr && sr.ok)
          b = CenteredBias(Bf16Bits(sr.biases[g]), Bf16Bits(sr.scales[g]), kBits) * bup[r];
        const __half hi = __float2half_rn(b);
        ab[j4][r] = Half2Bits(__halves2half2(hi, hi));
        const __half lo = __float2half_rn(b - __half2float(hi));
        ab[j4][2 + r] = Half2Bits(__halves2half2(lo, lo));
      }
    }
    WgmmaFence();
#pragma unroll
    for (int j4 = 0; j4 < 4; ++j4)
      if (4 * c + j4 < bsteps) Wgmma(acc, ab[j4], PlaneDesc(smem + j4 * 32));
    WgmmaCommit();
    WgmmaWait<0>();
  }

  // y = acc·2^-t·2^-s per token; accumulator 4j + 2·(row hi) + e is (row, token 8j + 2·tig + e).
  const float dn[2] = {1.0f / up_lo, 1.0f / up_hi};
#pragma unroll
  for (int j = 0; j < kTN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = m0 + 8 * j + 2 * tig + e;
      if (r >= rows) continue;
      const int gr = row0 + r;
      const float down = row_down[gather != nullptr ? gather[gr] : gr];
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const StackRow& sr = hr ? row_hi : row_lo;
        if (sr.ok) sr.y[static_cast<int64_t>(gr) * sr.ld] = acc[4 * j + 2 * hr + e] * dn[hr] * down;
      }
    }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// What a launch multiplies (the arguments of LaunchAffineMatMulWgmma).
struct Product {
  const WgStack& st;
  const uint8_t* const* blobs;
  int groups;
  const int *row0s, *rowss;
  int64_t dense_rows, max_rows, total_rows;
  const int* gather;
  const XPlanes& x;
};

template <int kTN, int kBits, int kStages, int kMinBlocks>
cudaError_t LaunchTile(const Product& p, cudaStream_t s) {
  constexpr int kBytes = kStages * WgStage<kTN, kBits>::kBytes + 1024;  // + alignment
  auto* kernel = WgmmaMatMulKernel<kTN, kBits, kStages, kMinBlocks>;
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (attr != cudaSuccess) return attr;
  // Groups with a known row total take a tile list (at most total / kTN + groups tiles).
  const int64_t per_group = Blocks(p.max_rows, kTN);
  const int64_t listed = p.total_rows > 0 ? Blocks(p.total_rows, kTN) + p.groups : 0;
  const bool list = p.blobs != nullptr && listed > 0 && listed < p.groups * per_group;
  const dim3 grid(Blocks(p.st.rows, kBlockRows), static_cast<unsigned>(list ? listed : per_group),
                  list ? 1u : static_cast<unsigned>(p.groups));
  LaunchKernel(kernel, grid, kThreads, kBytes, s, p.st, p.blobs, p.row0s, p.rowss,
               static_cast<int>(p.dense_rows), list ? p.groups : 0, p.gather, p.x.planes,
               static_cast<int>(p.x.rows), p.x.sums, p.x.row_down);
  return cudaGetLastError();
}

template <int kTN, int kMinBlocks4, int kMinBlocks8>
cudaError_t LaunchTileBits(const Product& p, cudaStream_t s) {
  // At most ~160 KB of shared memory an SM: a kernel that needs more leaves the SMs configured
  // with less L1 for the decode kernels that follow (measured: decode 360 → 330 tok/s after a
  // prefill with 169 KB blocks), so 8-bit 128-token tiles keep 3 stages.
  constexpr int kStages8 = kTN == 128 ? 3 : 4;
  return p.st.w[0].bits == 4 ? LaunchTile<kTN, 4, 4, kMinBlocks4>(p, s)
                             : LaunchTile<kTN, 8, kStages8, kMinBlocks8>(p, s);
}

struct WgmmaConfig {
  bool sm90 = false;  // compute capability 9.0 exactly (sm_90a code)
  int sms = 0;
};

const WgmmaConfig& Config() {
  static const WgmmaConfig c = [] {
    WgmmaConfig c;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return c;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, dev);
    c.sm90 = major == 9 && minor == 0;
    return c;
  }();
  return c;
}

// The token tile of a dense product: the largest whose grid fills the GPU's block slots best
// (128 holds one block an SM, 64 two of 4-bit weights and one of 8-bit, 32 two).
int DenseTile(int64_t n, int64_t m, int bits, int sms) {
  int best = 32;
  double best_fill = 0;
  for (const int tn : {128, 64, 32}) {
    const int64_t blocks = Blocks(n, kBlockRows) * Blocks(m, tn);
    const int64_t slots = static_cast<int64_t>(sms) * (tn == 32 || (tn == 64 && bits == 4) ? 2 : 1);
    const int64_t waves = (blocks + slots - 1) / slots;
    // Smaller tiles re-read the weights more and amortize their dequantization less.
    const double fill = static_cast<double>(blocks) / static_cast<double>(waves * slots) *
                        (tn == 128  ? 1.0
                         : tn == 64 ? 0.9
                                    : 0.75);
    if (fill > best_fill + 1e-9) best = tn, best_fill = fill;
  }
  return best;
}

bool Supported(const DevMat& w, const XPlanes& x) {
  return Config().sm90 && CurrentTuning().wgmma && w.type == DevMat::kAffine &&
         (w.bits == 4 || w.bits == 8) && (w.group == 32 || w.group % 64 == 0) &&
         w.cols % w.group == 0 && w.cols == x.cols && x.parts == 2 && x.planes != nullptr &&
         x.row_down != nullptr && (reinterpret_cast<uintptr_t>(w.data) & 15u) == 0 &&
         w.rows * w.cols < (int64_t{1} << 31);
}

cudaError_t Launch(const Product& p, cudaStream_t s) {
  const WgmmaConfig& c = Config();
  const Tuning& t = CurrentTuning();
  int tn = 0;
  if (p.blobs != nullptr) {
    // Experts: 64-token tiles once the groups average 24 rows or more (a 512-token chunk's 4,096
    // rows over 128 experts: +2% prefill against 32), else 32 (fewer idle columns).
    tn = t.wgmma_expert_tile != 0                              ? t.wgmma_expert_tile
         : p.total_rows > 0 && p.total_rows >= 24LL * p.groups ? 64
                                                               : 32;
  } else {
    tn = t.wgmma_dense_tile != 0 ? t.wgmma_dense_tile
                                 : DenseTile(p.st.rows, p.dense_rows, p.st.w[0].bits, c.sms);
  }
  switch (tn) {
    case 128:
      CountPath(Path::kWgmmaTile128);
      return LaunchTileBits<128, 1, 1>(p, s);
    case 64:
      CountPath(Path::kWgmmaTile64);
      return LaunchTileBits<64, 2, 1>(p, s);
    default:
      CountPath(Path::kWgmmaTile32);
      return LaunchTileBits<32, 2, 2>(p, s);
  }
}

}  // namespace

cudaError_t LaunchAffineMatMulWgmma(const DevMat& w, const uint8_t* const* blobs, int groups,
                                    const int* row0s, const int* rowss, int64_t dense_rows,
                                    int64_t max_rows, const int* gather, const XPlanes& x, float* y,
                                    cudaStream_t s, int64_t total_rows) {
  if (!Supported(w, x)) return cudaErrorNotSupported;
  WgStack st;
  st.w[0] = w;
  st.y[0] = y;
  st.rows = static_cast<int>(w.rows);
  return Launch(
      Product{st, blobs, groups, row0s, rowss, dense_rows, max_rows, total_rows, gather, x}, s);
}

cudaError_t LaunchAffineMatMulWgmmaStack(const DevMat* w, float* const* y, int n,
                                         const uint8_t* const* blobs, int groups, const int* row0s,
                                         const int* rowss, int64_t dense_rows, int64_t max_rows,
                                         const int* gather, const XPlanes& x, cudaStream_t s,
                                         int64_t total_rows) {
  if (n < 1 || n > 3) return cudaErrorInvalidValue;
  WgStack st;
  st.n = n;
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    if (!Supported(w[i], x) || w[i].bits != w[0].bits || w[i].group != w[0].group)
      return cudaErrorNotSupported;
    st.w[i] = w[i];
    st.y[i] = y[i];
    rows += w[i].rows;
  }
  if (rows * w[0].cols >= (int64_t{1} << 31)) return cudaErrorNotSupported;
  st.rows = static_cast<int>(rows);
  return Launch(
      Product{st, blobs, groups, row0s, rowss, dense_rows, max_rows, total_rows, gather, x}, s);
}

}  // namespace rw::cuda
