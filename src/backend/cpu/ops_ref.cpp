// Scalar reference for every op: the simplest code that follows the math, the oracle the fast
// kernels (and other backends) are tested against. Speed does not matter here.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/bf16.h"
#include "base/check.h"

namespace rw::cpu {

float GeluTanh(float x) {
  const float kBeta = 0.7978845608028654f;  // √(2/π)
  const float kKappa = 0.044715f;
  float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

namespace ref {

float WeightAt(const WeightView& w, int64_t row, int64_t col) {
  switch (w.type) {
    case WeightType::kF32:
      return static_cast<const float*>(w.data)[row * w.cols + col];
    case WeightType::kBf16:
      return Bf16ToF32(static_cast<const uint16_t*>(w.data)[row * w.cols + col]);
    case WeightType::kAffine: {
      const uint32_t* words = static_cast<const uint32_t*>(w.data) + row * w.RowWords();
      const int per_word = 32 / w.bits;
      uint32_t word = words[col / per_word];
      uint32_t q = (word >> ((col % per_word) * w.bits)) & ((1u << w.bits) - 1u);
      int64_t g = row * w.RowGroups() + col / w.group;
      float s = Bf16ToF32(w.scales[g]);
      float b = Bf16ToF32(w.biases[g]);
      return s * static_cast<float>(q) + b;
    }
  }
  return 0.0f;
}

void MatVecRows(const WeightView& w, const float* x, float* y, int64_t row_begin, int64_t row_end) {
  CheckWeightView(w);
  CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.rows);
  for (int64_t r = row_begin; r < row_end; ++r) {
    float acc = 0.0f;
    for (int64_t k = 0; k < w.cols; ++k) acc += WeightAt(w, r, k) * x[k];
    y[r - row_begin] = acc;
  }
}

void MatVec(const WeightView& w, const float* x, float* y) {
  MatVecRows(w, x, y, 0, w.rows);
}

void MatMul(const WeightView& w, const float* x, int64_t m, float* y) {
  CHECK(m >= 0);
  std::vector<float> row(static_cast<size_t>(w.rows));
  for (int64_t i = 0; i < m; ++i) {
    MatVec(w, x + i * w.cols, row.data());
    std::copy(row.begin(), row.end(), y + i * w.rows);
  }
}

void DequantRow(const WeightView& w, int64_t row, float* out) {
  CheckWeightView(w);
  CHECK(0 <= row && row < w.rows);
  for (int64_t k = 0; k < w.cols; ++k) out[k] = WeightAt(w, row, k);
}

void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
}

static void CheckNormWeight(const WeightView* w, int64_t n) {
  if (w == nullptr) return;
  CHECK_MSG(w->type != WeightType::kAffine && w->rows == 1 && w->cols == n,
            "norm weight must be f32/bf16 [1, {}]", n);
}

void RmsNorm(const float* x, float* y, int64_t n, const WeightView* w, float eps) {
  CHECK(n > 0);
  CheckNormWeight(w, n);
  // Sum of squares in double: torch reduces with vectorized partial sums, far more accurately
  // than a sequential fp32 sum, and the oracle should not be the least accurate party.
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  float r = 1.0f / std::sqrt(static_cast<float>(ss) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    float wi = w != nullptr ? WeightAt(*w, 0, i) : 1.0f;
    y[i] = x[i] * r * wi;
  }
}

void RmsNormRows(const float* x, float* y, int64_t rows, int64_t n, const WeightView* w,
                 float eps) {
  for (int64_t r = 0; r < rows; ++r) RmsNorm(x + r * n, y + r * n, n, w, eps);
}

void GegluInPlace(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = GeluTanh(gate[i]) * up[i];
}

void Softmax(float* x, int64_t n) {
  CHECK(n > 0);
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  // The sum is kept in double: a sequential fp32 sum over a 262144-entry vocabulary would put
  // an n·eps error (~1e-4 relative) into every probability of the oracle.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float total = static_cast<float>(sum);
  for (int64_t i = 0; i < n; ++i) x[i] /= total;
}

void Softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void RopeNeox(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
  CHECK(head_dim % 2 == 0);
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      float a = xh[i], b = xh[i + half];
      xh[i] = a * cos[i] - b * sin[i];
      xh[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

void RopeTable(int64_t pos, const float* inv_freq, int half, float* cos, float* sin) {
  const float p = static_cast<float>(pos);
  for (int i = 0; i < half; ++i) {
    float angle = p * inv_freq[i];
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

void TopK(const float* x, int n, int k, int* idx) {
  CHECK(0 <= k && k <= n);
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // A strict weak order: NaN first, then larger values, ties by lower index.
  std::sort(order.begin(), order.end(), [x](int a, int b) {
    bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
    if (na != nb) return na;
    if (!na && x[a] != x[b]) return x[a] > x[b];
    return a < b;
  });
  std::copy(order.begin(), order.begin() + k, idx);
}

void Add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
void Mul(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= x[i];
}
void Scale(float* y, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}
void Axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// softmax over positions of scale·(q·k), then the weighted sum of V, for one query head.
// Row `slot` of head h of a cache of kv.type, widened to fp32.
static void CacheRow(const void* cache, const KvCacheView& kv, int h, int64_t slot, float* out) {
  const int hd = kv.head_dim;
  const int64_t at = (h * kv.capacity + slot) * hd;
  for (int d = 0; d < hd; ++d) {
    switch (kv.type) {
      case KvType::kF32:
        out[d] = static_cast<const float*>(cache)[at + d];
        break;
      case KvType::kBf16:
        out[d] = Bf16ToF32(static_cast<const uint16_t*>(cache)[at + d]);
        break;
      case KvType::kF16:
        out[d] = F16ToF32(static_cast<const uint16_t*>(cache)[at + d]);
        break;
    }
  }
}

static void AttendHead(const float* q, const KvCacheView& kv, int h, int64_t pos_begin,
                       int64_t pos_end, float scale, float* out) {
  const int hd = kv.head_dim;
  std::vector<float> s(static_cast<size_t>(pos_end - pos_begin)), row(static_cast<size_t>(hd));
  for (int64_t p = pos_begin; p < pos_end; ++p) {
    CacheRow(kv.k, kv, h, p % kv.capacity, row.data());
    s[p - pos_begin] = scale * Dot(q, row.data(), hd);
  }
  Softmax(s.data(), static_cast<int64_t>(s.size()));
  std::fill(out, out + hd, 0.0f);
  for (int64_t p = pos_begin; p < pos_end; ++p) {
    CacheRow(kv.v, kv, h, p % kv.capacity, row.data());
    Axpy(out, s[p - pos_begin], row.data(), hd);
  }
}

static void CheckAttention(int n_heads, const KvCacheView& kv) {
  CHECK(kv.n_kv_heads > 0 && n_heads % kv.n_kv_heads == 0);
  CHECK(kv.head_dim > 0 && kv.capacity > 0 && kv.k != nullptr && kv.v != nullptr);
}

void AttendOne(const float* q, int n_heads, const KvCacheView& kv, int64_t pos_begin,
               int64_t pos_end, float scale, float* out) {
  CheckAttention(n_heads, kv);
  CHECK(0 <= pos_begin && pos_begin < pos_end && pos_end - pos_begin <= kv.capacity);
  const int rep = n_heads / kv.n_kv_heads;
  for (int i = 0; i < n_heads; ++i) {
    AttendHead(q + static_cast<int64_t>(i) * kv.head_dim, kv, i / rep, pos_begin, pos_end, scale,
               out + static_cast<int64_t>(i) * kv.head_dim);
  }
}

void AttendBlock(const float* q, int64_t m, int64_t q_pos0, int n_heads, const KvCacheView& kv,
                 int64_t window, float scale, float* out) {
  const int64_t row = static_cast<int64_t>(n_heads) * kv.head_dim;
  for (int64_t i = 0; i < m; ++i) {
    int64_t p = q_pos0 + i;
    int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
    // Every key the block needs must still be resident in the ring.
    int64_t block_lo = window > 0 ? std::max<int64_t>(0, q_pos0 - window + 1) : 0;
    CHECK_MSG(q_pos0 + m - block_lo <= kv.capacity, "KV capacity {} too small for block",
              kv.capacity);
    AttendOne(q + i * row, n_heads, kv, lo, p + 1, scale, out + i * row);
  }
}

}  // namespace ref
}  // namespace rw::cpu
