// AVX2 + FMA elementwise kernels and the AVX2 kernel table (the attention loops are in
// attention_avx2.cpp). Compiled with -mavx2 -mfma -ffp-contract=off (explicit FMAs only, so
// operations written as separate multiply and add round exactly like the reference). Same
// restrictions as linear_avx2.cpp: intrinsics and local helpers only.
#include <immintrin.h>

#include "backend/cpu/attention_avx2.h"
#include "backend/cpu/avx2_math.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/linear_avx2.h"
#include "backend/cpu/matvec_q8.h"

namespace rw::cpu::avx2 {
namespace {

float SumSquares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  if (i + 8 <= n) {
    const __m256 v0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    i += 8;
  }
  float s = HorizontalSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

// y = (x·s)·w, the reference's order, so the result is bitwise equal to it.
void ScaleByWeight(const float* x, float s, const WeightView* w, float* y, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  const float* wf =
      w != nullptr && w->type == WeightType::kF32 ? static_cast<const float*>(w->data) : nullptr;
  const uint16_t* wb = w != nullptr && w->type == WeightType::kBf16
                           ? static_cast<const uint16_t*>(w->data)
                           : nullptr;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sv);
    if (wf != nullptr) v = _mm256_mul_ps(v, _mm256_loadu_ps(wf + i));
    if (wb != nullptr) v = _mm256_mul_ps(v, LoadBf16x8(wb + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; ++i) {
    float v = x[i] * s;
    if (wf != nullptr) v *= wf[i];
    if (wb != nullptr) v *= Bf16Scalar(wb[i]);
    y[i] = v;
  }
}

// Applies f to n floats in place 8 at a time; the tail goes through a masked load/store so it
// uses the same vector math as the body.
template <typename F>
void MapInPlace(float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i), i));
  if (i < n) {
    const __m256i m = TailMask(n - i);
    _mm256_maskstore_ps(x + i, m, f(_mm256_maskload_ps(x + i, m), i));
  }
}

void Geglu(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i,
                     _mm256_mul_ps(GeluTanh(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i m = TailMask(n - i);
    const __m256 v =
        _mm256_mul_ps(GeluTanh(_mm256_maskload_ps(gate + i, m)), _mm256_maskload_ps(up + i, m));
    _mm256_maskstore_ps(gate + i, m, v);
  }
}

float Max(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = HorizontalMax(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

// Sums in blocks of 2048 elements folded into a total, so the rounding error of the sum grows
// with √n rather than n (a 262144-entry vocabulary stays at ~1e-6 relative).
float ExpSubSum(float* x, int64_t n, float mx) {
  const __m256 mv = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  while (i + 8 <= n) {
    __m256 block = _mm256_setzero_ps();
    const int64_t end = i + 2048 < n ? i + 2048 : n;
    for (; i + 8 <= end; i += 8) {
      const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
      _mm256_storeu_ps(x + i, e);
      block = _mm256_add_ps(block, e);
    }
    sum = _mm256_add_ps(sum, block);
  }
  if (i < n) {
    const __m256i m = TailMask(n - i);
    const __m256 e =
        _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mv)), _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    sum = _mm256_add_ps(sum, e);
  }
  return HorizontalSum(sum);
}

void Softcap(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  MapInPlace(x, n, [&](__m256 v, int64_t) { return _mm256_mul_ps(c, Tanh(_mm256_div_ps(v, c))); });
}

// Separate multiplies and subtract/add, the reference's rounding.
void Rope(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* a = x + static_cast<int64_t>(h) * head_dim;
    float* b = a + half;
    int i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 av = _mm256_loadu_ps(a + i), bv = _mm256_loadu_ps(b + i);
      const __m256 c = _mm256_loadu_ps(cos + i), s = _mm256_loadu_ps(sin + i);
      _mm256_storeu_ps(a + i, _mm256_sub_ps(_mm256_mul_ps(av, c), _mm256_mul_ps(bv, s)));
      _mm256_storeu_ps(b + i, _mm256_add_ps(_mm256_mul_ps(bv, c), _mm256_mul_ps(av, s)));
    }
    for (; i < half; ++i) {
      const float av = a[i], bv = b[i];
      a[i] = av * cos[i] - bv * sin[i];
      b[i] = bv * cos[i] + av * sin[i];
    }
  }
}

void Add(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

void Mul(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] *= x[i];
}

void Scale(float* y, float s, int64_t n) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), sv));
  for (; i < n; ++i) y[i] *= s;
}

void Axpy(float* y, float a, const float* x, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  if (i + 8 <= n) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    i += 8;
  }
  float s = HorizontalSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Up to this many X rows, MatMul on affine weights runs the shared-unpack matvec kernel (in
// groups of up to 4 rows) instead of packing panels: a prefill of ~128 tokens gives each expert
// 5-8 of them. One thread, weights from DRAM, M = 5-8 on an expert's [704 × 2816] and
// [2816 × 704] q4: +8% to +55% over the packed path (Zen 3); at M = 12 it lost 17%.
constexpr int kSmallM = 8;

const detail::KernelTable kAvx2 = {
    Isa::kAvx2, PrepFloats,   PrepareX,   MatVecRows,
    MatMulRows, 16,           kSmallM,    MatMulPreppedRows,
    DequantRow, Bf16ToF32,    SumSquares, ScaleByWeight,
    Geglu,      Max,          ExpSubSum,  Softcap,
    Rope,       Add,          Mul,        Scale,
    Axpy,       Dot,          Scores,     Pv,
    ScoresBf16, PvBf16,       ScoresF16,  PvF16,
    PrepareXQ8, MatVecQ8Rows,
};

}  // namespace
}  // namespace rw::cpu::avx2

namespace rw::cpu::detail {
const KernelTable& Avx2Kernels() {
  return avx2::kAvx2;
}
}  // namespace rw::cpu::detail
