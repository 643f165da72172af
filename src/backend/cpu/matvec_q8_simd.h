// The fast affine matvec's row loop (matvec_q8.h), shared by the AVX2 and AVX-512 kernels: they
// differ only in how they form a chunk's 8 per-block integer sums (the Sums policy); the fp32
// combination is this one, 256 bits wide, in the definition's order.
//
// Include ONLY from files compiled with -mavx2 -mfma (the AVX-512 ones are too): everything here
// has internal linkage, so none of it can be picked by the linker for portable code.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/avx2_math.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matvec_q8.h"

namespace rw::cpu::q8simd {
namespace {

using avx2::Bf16Scalar;
using avx2::HorizontalSum;
using avx2::LoadBf16x8;
using detail::Q8ConstPlanesOf;
using detail::Q8Layout;

// A chunk is 8 blocks of 32 weights: 128 bytes of a q4 row, 256 of a q8 row.
constexpr int kChunk = 256;

inline int64_t Min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Up to 8 bf16 values as fp32 lanes, zeros beyond n; reads a whole 8 when that stays before end.
inline __m256 LoadBf16Upto8(const uint16_t* p, int64_t n, const uint16_t* end) {
  if (n >= 8) return LoadBf16x8(p);
  if (p + 8 <= end) return _mm256_and_ps(LoadBf16x8(p), _mm256_castsi256_ps(avx2::TailMask(n)));
  alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) tmp[i] = Bf16Scalar(p[i]);
  return _mm256_load_ps(tmp);
}

// The scale of each of chunk c's 8 blocks (lane b: block 8c + b), zero past the last group.
template <int kGroup>
inline __m256 ChunkScales(const uint16_t* sr, int64_t groups, int64_t c, const uint16_t* end) {
  constexpr int kPer = kChunk / kGroup;  // groups per chunk: 8, 4 or 2
  const int64_t g0 = c * kPer;
  const __m256 s = LoadBf16Upto8(sr + g0, Min64(kPer, groups - g0), end);
  if constexpr (kGroup == 32) return s;
  if constexpr (kGroup == 64)
    return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// How far ahead the weight stream is prefetched: ~6 KB and at least two rows, as the exact
// matvec (linear_avx2.cpp, PrefetchWords).
inline int64_t PrefetchBytes(int64_t row_bytes) {
  const int64_t rows = (6144 + row_bytes - 1) / row_bytes;
  return (rows < 2 ? 2 : rows > 16 ? 16 : rows) * row_bytes;
}

// kRows (1 or 2) weight rows r and r + stride into y[0] and y[stride]; both share every x load.
template <class Sums, int kBits, int kGroup, int kRows>
void Rows(const WeightView& w, const char* base, const Q8Layout& l, float* y, int64_t r,
          int64_t stride) {
  constexpr int kChunkBytes = kChunk * kBits / 8;
  const int64_t groups = w.cols / kGroup, blocks = w.cols / 32;
  const int64_t row_bytes = w.cols * kBits / 8;
  const int64_t ahead = PrefetchBytes(row_bytes);
  const auto [xa, xc, d, qs, sx] = Q8ConstPlanesOf(base, l);
  const uint16_t* const scales_end = w.scales + w.rows * groups;
  const uint16_t* const biases_end = w.biases + w.rows * groups;
  const uint8_t* wr[kRows];
  const uint16_t *sr[kRows], *br[kRows];
  __m256 acc[kRows], bacc[kRows];
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) {
    wr[i] = static_cast<const uint8_t*>(w.data) + (r + i * stride) * row_bytes;
    sr[i] = w.scales + (r + i * stride) * groups;
    br[i] = w.biases + (r + i * stride) * groups;
    acc[i] = _mm256_setzero_ps();
    bacc[i] = _mm256_setzero_ps();
  }
  const int64_t chunks = (blocks + 7) / 8;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t off = c * kChunkBytes;
    const uint8_t* wc[kRows];
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      wc[i] = wr[i] + off;
      for (int b = 0; b < kChunkBytes; b += 64)
        _mm_prefetch(reinterpret_cast<const char*>(wc[i] + b + ahead), _MM_HINT_T0);
    }
    __m256i isum[kRows];
    const int nbt = static_cast<int>(Min64(8, blocks - 8 * c));
    if (nbt == 8)
      Sums::template Chunk<kBits, kRows, true>(wc, xa + c * kChunk, xc + c * kChunk, qs + 8 * c, 8,
                                               isum);
    else
      Sums::template Chunk<kBits, kRows, false>(wc, xa + c * kChunk, xc + c * kChunk, qs + 8 * c,
                                                nbt, isum);
    const __m256 dv = _mm256_load_ps(d + 8 * c);
    RW_UNROLL
    for (int i = 0; i < kRows; ++i) {
      const __m256 cs = _mm256_mul_ps(ChunkScales<kGroup>(sr[i], groups, c, scales_end), dv);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), cs, acc[i]);
    }
  }
  for (int64_t g0 = 0; g0 < groups; g0 += 8) {
    const __m256 xs = _mm256_loadu_ps(sx + g0);
    const int64_t ng = Min64(8, groups - g0);
    RW_UNROLL
    for (int i = 0; i < kRows; ++i)
      bacc[i] = _mm256_fmadd_ps(LoadBf16Upto8(br[i] + g0, ng, biases_end), xs, bacc[i]);
  }
  RW_UNROLL
  for (int i = 0; i < kRows; ++i) y[i * stride] = HorizontalSum(acc[i]) + HorizontalSum(bacc[i]);
}

// Rows [r0, r1) in pairs: far pairs (i, i + half) for long ranges of long rows, else adjacent,
// as the exact matvec (kernels.h, kFarPairMinRows).
template <class Sums, int kBits, int kGroup>
void RowsG(const WeightView& w, const char* base, const Q8Layout& l, float* y, int64_t r0,
           int64_t r1) {
  const int64_t n = r1 - r0;
  if (w.cols * kBits / 8 >= detail::kFarPairMinRowBytes && n >= detail::kFarPairMinRows) {
    const int64_t half = n / 2;
    for (int64_t i = 0; i < half; ++i)
      Rows<Sums, kBits, kGroup, 2>(w, base, l, y + i, r0 + i, half);
    if (n % 2 != 0) Rows<Sums, kBits, kGroup, 1>(w, base, l, y + n - 1, r1 - 1, 0);
    return;
  }
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) Rows<Sums, kBits, kGroup, 2>(w, base, l, y + (r - r0), r, 1);
  if (r < r1) Rows<Sums, kBits, kGroup, 1>(w, base, l, y + (r - r0), r, 0);
}

template <class Sums, int kBits>
void RowsB(const WeightView& w, const char* base, const Q8Layout& l, float* y, int64_t r0,
           int64_t r1) {
  switch (w.group) {
    case 32:
      RowsG<Sums, kBits, 32>(w, base, l, y, r0, r1);
      break;
    case 64:
      RowsG<Sums, kBits, 64>(w, base, l, y, r0, r1);
      break;
    default:
      RowsG<Sums, kBits, 128>(w, base, l, y, r0, r1);
      break;
  }
}

template <class Sums>
void MatVecRows(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  const Q8Layout l = detail::Q8LayoutFor(w);
  const auto* base = reinterpret_cast<const char*>(prep);
  if (w.bits == 4)
    RowsB<Sums, 4>(w, base, l, y, r0, r1);
  else
    RowsB<Sums, 8>(w, base, l, y, r0, r1);
}

// Per-block sums from the 256-bit partial sums the kernels form. q4: part[p] holds blocks 2p
// (lanes 0-3) and 2p + 1 (lanes 4-7). q8: part[b] holds block b in all 8 lanes. Both return
// lane b = block b's sum (integer adds: any order gives the same value).
inline __m256i ReduceQ4(const __m256i* part) {
  const __m256i h =
      _mm256_hadd_epi32(_mm256_hadd_epi32(part[0], part[1]), _mm256_hadd_epi32(part[2], part[3]));
  // h = [b0 b2 b4 b6 | b1 b3 b5 b7].
  return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline __m256i ReduceQ8(const __m256i* part) {
  const __m256i lo =
      _mm256_hadd_epi32(_mm256_hadd_epi32(part[0], part[1]), _mm256_hadd_epi32(part[2], part[3]));
  const __m256i hi =
      _mm256_hadd_epi32(_mm256_hadd_epi32(part[4], part[5]), _mm256_hadd_epi32(part[6], part[7]));
  // lo = [b0 b1 b2 b3 | b0 b1 b2 b3] (each half a partial sum), hi the same for b4..b7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                          _mm256_permute2x128_si256(lo, hi, 0x31));
}

}  // namespace
}  // namespace rw::cpu::q8simd
