// Portable kernel table: used on CPUs without AVX2 (or with REDWING_ISA=scalar). The matrix
// kernels decode a whole group at a time but keep the reference's arithmetic order, so their
// results are bitwise equal to ref:: (the tests rely on that).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matvec_q8.h"
#include "base/bf16.h"

namespace rw::cpu::detail {
namespace {

// Row r of W in fp32, with the reference's formula (s·q + b, two roundings).
void DecodeRow(const WeightView& w, int64_t r, float* out) {
  switch (w.type) {
    case WeightType::kF32: {
      const float* src = static_cast<const float*>(w.data) + r * w.cols;
      std::copy(src, src + w.cols, out);
      return;
    }
    case WeightType::kBf16: {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * w.cols;
      for (int64_t k = 0; k < w.cols; ++k) out[k] = Bf16ToF32(src[k]);
      return;
    }
    case WeightType::kAffine: {
      const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * w.RowWords();
      const int per_word = 32 / w.bits;
      const uint32_t mask = (1u << w.bits) - 1u;
      const int64_t groups = w.RowGroups();
      for (int64_t g = 0; g < groups; ++g) {
        float s = Bf16ToF32(w.scales[r * groups + g]);
        float b = Bf16ToF32(w.biases[r * groups + g]);
        for (int64_t k = g * w.group; k < (g + 1) * w.group; ++k) {
          uint32_t q = (words[k / per_word] >> ((k % per_word) * w.bits)) & mask;
          out[k] = s * static_cast<float>(q) + b;
        }
      }
      return;
    }
  }
}

thread_local std::vector<float> tl_row;

float* RowBuffer(int64_t n) {
  if (static_cast<int64_t>(tl_row.size()) < n) tl_row.resize(static_cast<size_t>(n));
  return tl_row.data();
}

int64_t PrepFloats(const WeightView&) {
  return 0;
}
void PrepareX(const WeightView&, const float*, float*) {}

void MatVecRows(const WeightView& w, const float* x, const float*, float* y, int64_t r0,
                int64_t r1) {
  float* row = RowBuffer(w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    DecodeRow(w, r, row);
    float acc = 0.0f;
    for (int64_t k = 0; k < w.cols; ++k) acc += row[k] * x[k];
    y[r - r0] = acc;
  }
}

void MatMulRows(const WeightView& w, const float* x, int64_t m, float* y, int64_t r0, int64_t r1) {
  float* row = RowBuffer(w.cols);
  for (int64_t r = r0; r < r1; ++r) {
    DecodeRow(w, r, row);
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * w.cols;
      float acc = 0.0f;
      for (int64_t k = 0; k < w.cols; ++k) acc += row[k] * xi[k];
      y[i * w.rows + r] = acc;
    }
  }
}

float SumSquares(const float* x, int64_t n) {
  double ss = 0.0;  // as the reference
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(ss);
}

void ScaleByWeight(const float* x, float s, const WeightView* w, float* y, int64_t n) {
  if (w == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * 1.0f;
  } else if (w->type == WeightType::kF32) {
    const float* wf = static_cast<const float*>(w->data);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * wf[i];
  } else {
    const uint16_t* wb = static_cast<const uint16_t*>(w->data);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * Bf16ToF32(wb[i]);
  }
}

float Max(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float ExpSubSum(float* x, int64_t n, float m) {
  double sum = 0.0;  // as the reference: no n·eps error over a whole vocabulary
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return static_cast<float>(sum);
}

void Scores(const float* const* q, int nq, const float* k, int64_t n, int hd, float scale, float* s,
            int64_t lds) {
  for (int i = 0; i < nq; ++i)
    for (int64_t t = 0; t < n; ++t) s[i * lds + t] = scale * ref::Dot(q[i], k + t * hd, hd);
}

void Pv(const float* p, int64_t ldp, int nq, int64_t n, const float* v, int hd, float* const* o) {
  for (int i = 0; i < nq; ++i)
    for (int64_t t = 0; t < n; ++t) ref::Axpy(o[i], p[i * ldp + t], v + t * hd, hd);
}

// A half-precision cache: each row widened into a small buffer, then the fp32 loops.
template <float (*Widen)(uint16_t)>
void ScoresHalf(const float* const* q, int nq, const uint16_t* k, int64_t n, int hd, float scale,
                float* s, int64_t lds) {
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t t = 0; t < n; ++t) {
    for (int d = 0; d < hd; ++d) row[d] = Widen(k[t * hd + d]);
    for (int i = 0; i < nq; ++i) s[i * lds + t] = scale * ref::Dot(q[i], row.data(), hd);
  }
}

template <float (*Widen)(uint16_t)>
void PvHalf(const float* p, int64_t ldp, int nq, int64_t n, const uint16_t* v, int hd,
            float* const* o) {
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t t = 0; t < n; ++t) {
    for (int d = 0; d < hd; ++d) row[d] = Widen(v[t * hd + d]);
    for (int i = 0; i < nq; ++i) ref::Axpy(o[i], p[i * ldp + t], row.data(), hd);
  }
}

void DequantRow(const WeightView& w, int64_t row, float* out) {
  DecodeRow(w, row, out);
}

// ---- The fast affine matvec: matvec_q8.h's definition, written out plainly. -------------------

// Hsum: the 8-lane reduction order of the AVX2 HorizontalSum.
float Hsum8(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

void PrepareXQ8(const WeightView& w, const float* x, float* prep) {
  const Q8Layout l = Q8LayoutFor(w);
  const auto [xa, xc, e, qs, sx] = Q8PlanesOf(prep, l);
  std::fill(xa, xa + l.kp, int8_t{0});
  std::fill(xc, xc + l.kp, int8_t{0});
  for (int64_t b = 0; b < l.blocks; ++b) {
    e[b] = 0.0f;
    qs[b] = 0;
    if (b * 32 >= w.cols) continue;
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax < kQ8TinyMax ? 0.0f : amax / 127.0f;
    const float id = db != 0.0f ? 1.0f / db : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const float a = std::nearbyint(xb[i] * id);
      const float r = xb[i] - a * db;
      const float c = std::clamp(std::nearbyint((r * id) * 256.0f), -127.0f, 127.0f);
      const int64_t slot = Q8Slot(w.bits, b * 32 + i);
      xa[slot] = static_cast<int8_t>(a);
      xc[slot] = static_cast<int8_t>(c);
      sum += 256 * static_cast<int32_t>(a) + static_cast<int32_t>(c);
    }
    e[b] = db / 256.0f;
    qs[b] = sum;
  }
  const int64_t groups = w.RowGroups();
  for (int64_t g = 0; g < l.sx_count; ++g) {
    if (g >= groups) {
      sx[g] = 0.0f;
      continue;
    }
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t k = 0; k < w.group; ++k) lane[k % 8] += x[g * w.group + k];
    sx[g] = Hsum8(lane);
  }
}

void MatVecQ8Rows(const WeightView& w, const float* prep, float* y, int64_t r0, int64_t r1) {
  const Q8Layout l = Q8LayoutFor(w);
  const auto [xa, xc, e, qs, sx] = Q8ConstPlanesOf(prep, l);
  const int per_word = 32 / w.bits;
  const uint32_t mask = (1u << w.bits) - 1u;
  const int64_t groups = w.RowGroups(), blocks = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * w.RowWords();
    const uint16_t* sr = w.scales + r * groups;
    const uint16_t* br = w.biases + r * groups;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, bacc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < blocks; ++b) {
      int32_t isum = 0;
      for (int64_t k = b * 32; k < b * 32 + 32; ++k) {
        const auto q =
            static_cast<int32_t>((words[k / per_word] >> ((k % per_word) * w.bits)) & mask);
        const int64_t slot = Q8Slot(w.bits, k);
        isum += q * (256 * xa[slot] + xc[slot]);
      }
      const float c = Bf16ToF32(sr[b * 32 / w.group]) * e[b];
      acc[b % 8] = std::fma(static_cast<float>(isum), c, acc[b % 8]);
    }
    for (int64_t g = 0; g < groups; ++g)
      bacc[g % 8] = std::fma(Bf16ToF32(br[g]), sx[g], bacc[g % 8]);
    y[r - r0] = Hsum8(acc) + Hsum8(bacc);
  }
}

const KernelTable kScalar = {
    Isa::kScalar,
    PrepFloats,
    PrepareX,
    MatVecRows,
    MatMulRows,
    16,
    0,
    nullptr,
    DequantRow,
    ref::ConvertBf16ToF32,
    SumSquares,
    ScaleByWeight,
    ref::GegluInPlace,
    Max,
    ExpSubSum,
    ref::Softcap,
    ref::RopeNeox,
    ref::Add,
    ref::Mul,
    ref::Scale,
    ref::Axpy,
    ref::Dot,
    Scores,
    Pv,
    ScoresHalf<Bf16ToF32>,
    PvHalf<Bf16ToF32>,
    ScoresHalf<F16ToF32>,
    PvHalf<F16ToF32>,
    PrepareXQ8,
    MatVecQ8Rows,
};

}  // namespace

const KernelTable& ScalarKernels() {
  return kScalar;
}

}  // namespace rw::cpu::detail
