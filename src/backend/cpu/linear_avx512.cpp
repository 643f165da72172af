// AVX-512 prefill matmul: the AVX2 packed-panel matmul (linear_avx2.cpp) with 32-row weight
// panels and a 12×32 register-blocked micro-kernel on 512-bit vectors (24 accumulators + 2
// panel vectors + 1 broadcast of the 32 registers), twice the FMA work per instruction. Panels
// are packed by the AVX2 code (two 16-row halves side by side), so the products and their order
// are the AVX2 kernel's: the results are bit-identical to it. X is packed too, per micro-tile
// as [k][12], so the kernel broadcasts from one pointer instead of twelve row pointers (which
// spilled to the stack inside the loop). Compiled with -mavx512f; the same rules as the AVX2
// files apply (intrinsics and plain headers only, see kernels.h).
#include "backend/cpu/linear_avx512.h"

#include <immintrin.h>

#include "backend/cpu/avx512_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear_avx2.h"

namespace rw::cpu::avx512 {
namespace {

using detail::PackScratch;
using detail::PrefetchPanel;

constexpr int kNr = 32;        // weight rows per panel (two 16-lane vectors)
constexpr int kMr = 12;        // X rows per micro-tile
constexpr int kKc = 256;       // panel depth: 32 KB of fp32 (L1 holds 48 KB on the CPUs with it)
constexpr int kMc = 43 * kMr;  // X rows packed at once: ~5.8 MB at K = 2,816 (L2/L3)

// c[i][0..32) (+)= Σ_k a[k][i]·bp[k][0..32) for i < kRows (a packed as [k][kMr]).
template <int kRows>
void MicroKernel(const float* a, const float* bp, int kl, float* c, int64_t ldc, bool accumulate) {
  __m512 c0[kRows], c1[kRows];
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    c0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    c1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int k = 0; k < kl; ++k) {
    const __m512 b0 = _mm512_load_ps(bp + k * kNr);
    const __m512 b1 = _mm512_load_ps(bp + k * kNr + 16);
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const __m512 av = _mm512_set1_ps(a[k * kMr + i]);
      c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
    }
  }
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    _mm512_storeu_ps(c + i * ldc, c0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, c1[i]);
  }
}

template <int kRows>
void RunMicroAt(int rows, const float* a, const float* bp, int kl, float* c, int64_t ldc,
                bool accumulate) {
  if constexpr (kRows > 1) {
    if (rows < kRows) {
      RunMicroAt<kRows - 1>(rows, a, bp, kl, c, ldc, accumulate);
      return;
    }
  }
  MicroKernel<kRows>(a, bp, kl, c, ldc, accumulate);
}

// X rows [0, rows) (rows ≤ kMr, row stride k_total) × columns [kc, kc + kl) into a[k][kMr]
// (a 64-byte aligned): 4×4 blocks transposed in registers, the ragged edges one by one.
void PackX(const float* x, int64_t k_total, int rows, int64_t kc, int kl, float* a) {
  const int rows4 = rows & ~3, kl4 = kl & ~3;
  for (int i = 0; i < rows4; i += 4) {
    const float* src = x + i * k_total + kc;
    for (int k = 0; k < kl4; k += 4) {
      __m128 r0 = _mm_loadu_ps(src + k), r1 = _mm_loadu_ps(src + k_total + k);
      __m128 r2 = _mm_loadu_ps(src + 2 * k_total + k), r3 = _mm_loadu_ps(src + 3 * k_total + k);
      _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
      _mm_store_ps(a + k * kMr + i, r0);
      _mm_store_ps(a + (k + 1) * kMr + i, r1);
      _mm_store_ps(a + (k + 2) * kMr + i, r2);
      _mm_store_ps(a + (k + 3) * kMr + i, r3);
    }
    for (int k = kl4; k < kl; ++k)
      for (int j = 0; j < 4; ++j) a[k * kMr + i + j] = src[j * k_total + k];
  }
  for (int i = rows4; i < rows; ++i) {
    const float* src = x + i * k_total + kc;
    for (int k = 0; k < kl; ++k) a[k * kMr + i] = src[k];
  }
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Transposes 16 vectors of 16 32-bit lanes: r[i][j] becomes r[j][i].
inline void Transpose16x16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // Now r[4a + b] holds, in each 128-bit lane L, elements b of rows 4a..4a+3 for columns
  // 4L..4L+3: move the 128-bit lanes into place.
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      t[8 * j + i] = _mm512_shuffle_i32x4(r[i + 8 * j], r[i + 4 + 8 * j], 0x88);
      t[8 * j + i + 4] = _mm512_shuffle_i32x4(r[i + 8 * j], r[i + 4 + 8 * j], 0xDD);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
  }
}

// Affine rows [n0, n0 + valid) (valid ≤ 16) × columns [kc, kc + kl) into bp[k][kNr] lanes
// 0..15 (bp offset to the half): the AVX2 packer's values (s·q + b as one FMA), 16 rows a
// vector; 16 words of 16 rows transposed in registers, a gather for a last partial block.
template <int kBits>
void PackAffine16(const WeightView& w, int64_t n0, int valid, int64_t kc, int kl, float* bp) {
  constexpr int kEpl = 32 / kBits;
  const int64_t group = w.group, groups = w.cols / group;
  const int64_t row_words = w.cols / kEpl;
  alignas(64) int32_t idx[16];
  for (int i = 0; i < 16; ++i)
    idx[i] = static_cast<int32_t>((i < valid ? i : valid - 1) * row_words);
  const __m512i vidx = _mm512_load_si512(idx);
  const int ngl = static_cast<int>(kl / group);  // ≤ 8
  __m512 sv[8], bv[8];
  for (int gl = 0; gl < ngl; ++gl) {
    alignas(64) float sc[16], bi[16];
    const int64_t g = kc / group + gl;
    for (int i = 0; i < 16; ++i) {
      sc[i] = i < valid ? Bf16ToFloat(w.scales[(n0 + i) * groups + g]) : 0.0f;
      bi[i] = i < valid ? Bf16ToFloat(w.biases[(n0 + i) * groups + g]) : 0.0f;
    }
    sv[gl] = _mm512_load_ps(sc);
    bv[gl] = _mm512_load_ps(bi);
  }
  const int* base = reinterpret_cast<const int*>(static_cast<const uint32_t*>(w.data) +
                                                 n0 * row_words + kc / kEpl);
  const __m512i mask = _mm512_set1_epi32((1 << kBits) - 1);
  auto emit = [&](int wd, __m512i v) {
    const int gl = static_cast<int>(wd * kEpl / group);
    float* dst = bp + wd * kEpl * kNr;
    RW_UNROLL
    for (int j = 0; j < kEpl; ++j) {
      __m512i q = _mm512_srli_epi32(v, j * kBits);
      if (j + 1 < kEpl) q = _mm512_and_si512(q, mask);
      _mm512_store_ps(dst + j * kNr, _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), sv[gl], bv[gl]));
    }
  };
  const int words = kl / kEpl;
  int wd = 0;
  for (; wd + 16 <= words; wd += 16) {
    __m512i r[16];
    RW_UNROLL
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(base + idx[i] + wd);
    Transpose16x16(r);
    RW_UNROLL
    for (int j = 0; j < 16; ++j) emit(wd + j, r[j]);
  }
  for (; wd < words; ++wd) emit(wd, _mm512_i32gather_epi32(vidx, base + wd, 4));
}

// The panel's two 16-row halves into bp[k][32]: affine weights here, others by the AVX2 packer.
void PackPanel(const WeightView& w, int64_t n0, int nr, int64_t kc, int kl, float* bp) {
  for (int h = 0; h < 2; ++h) {
    const int valid = nr - 16 * h < 0 ? 0 : (nr - 16 * h > 16 ? 16 : nr - 16 * h);
    float* dst = bp + 16 * h;
    if (valid > 0 && w.type == WeightType::kAffine) {
      if (w.bits == 4) {
        PackAffine16<4>(w, n0 + 16 * h, valid, kc, kl, dst);
      } else {
        PackAffine16<8>(w, n0 + 16 * h, valid, kc, kl, dst);
      }
    } else {
      avx2::PackPanel16(w, n0 + 16 * h, valid, kc, kl, dst, kNr);
    }
  }
}

}  // namespace

void MatMulRows(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1) {
  alignas(64) float bp[kKc * kNr];
  alignas(64) float tile[kMr * kNr];
  const int64_t k_total = w.cols, n_total = w.rows;
  const int64_t kblocks = (k_total + kKc - 1) / kKc;
  for (int64_t m0 = 0; m0 < m; m0 += kMc) {
    const int64_t mc = Min64(kMc, m - m0);
    // Rows in ceil(mc/12) tiles of near-equal height, each packed as [kc block][k][12].
    const int64_t tiles = (mc + kMr - 1) / kMr;
    float* const ap = PackScratch(tiles * kblocks * kKc * kMr);
    auto tile_rows = [&](int64_t t, int64_t* mb) {
      *mb = m0 + mc * t / tiles;
      return static_cast<int>(m0 + mc * (t + 1) / tiles - *mb);
    };
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t mb = 0;
      const int mr = tile_rows(t, &mb);
      for (int64_t b = 0; b < kblocks; ++b) {
        const int kl = static_cast<int>(Min64(kKc, k_total - b * kKc));
        PackX(x + mb * k_total, k_total, mr, b * kKc, kl, ap + (t * kblocks + b) * kKc * kMr);
      }
    }
    for (int64_t n0 = r0; n0 < r1; n0 += kNr) {
      const int nr = static_cast<int>(Min64(kNr, r1 - n0));
      for (int64_t b = 0; b < kblocks; ++b) {
        const int64_t kc = b * kKc;
        const int kl = static_cast<int>(Min64(kKc, k_total - kc));
        if (b + 1 < kblocks) {
          PrefetchPanel(w, n0, nr, kc + kKc, static_cast<int>(Min64(kKc, k_total - kc - kKc)));
        } else if (n0 + kNr < r1) {
          PrefetchPanel(w, n0 + kNr, static_cast<int>(Min64(kNr, r1 - n0 - kNr)), 0,
                        static_cast<int>(Min64(kKc, k_total)));
        }
        PackPanel(w, n0, nr, kc, kl, bp);
        for (int64_t t = 0; t < tiles; ++t) {
          int64_t mb = 0;
          const int mr = tile_rows(t, &mb);
          const float* a = ap + (t * kblocks + b) * kKc * kMr;
          float* yc = y + mb * n_total + n0;
          if (nr == kNr) {
            RunMicroAt<kMr>(mr, a, bp, kl, yc, n_total, kc > 0);
            continue;
          }
          // A partial panel goes through a 32-wide tile so stores stay inside Y.
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < kNr; ++j)
              tile[i * kNr + j] = j < nr && kc > 0 ? yc[i * n_total + j] : 0.0f;
          RunMicroAt<kMr>(mr, a, bp, kl, tile, kNr, kc > 0);
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j) yc[i * n_total + j] = tile[i * kNr + j];
        }
      }
    }
  }
}

}  // namespace rw::cpu::avx512
