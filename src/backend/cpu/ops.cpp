// Dispatch: argument checks, the choice of kernel table, and splitting work across threads.
#include "backend/cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/linear_avx512.h"
#include "backend/cpu/matvec_q8.h"
#include "base/check.h"

namespace rw::cpu {
namespace {

bool CpuHasAvx2() {
  __builtin_cpu_init();
  // F16C (the fp16 KV cache's loads) came before AVX2 on every x86 CPU that has both.
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool CpuHasAvx512() {
  __builtin_cpu_init();
  // F, BW, VL and DQ come together on every AVX-512 CPU but the Xeon Phi.
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

// REDWING_VNNI=0 keeps the AVX-512 table off VNNI (same bits either way; for A-B runs).
bool UseVnni() {
  const char* env = std::getenv("REDWING_VNNI");
  return detail::CpuHasAvx512Vnni() && !(env != nullptr && std::strcmp(env, "0") == 0);
}

const detail::KernelTable& TableFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return detail::Avx512Kernels();
    case Isa::kAvx2:
      return detail::Avx2Kernels();
    case Isa::kScalar:
      break;
  }
  return detail::ScalarKernels();
}

// Whether this CPU can run kernel set isa (each set in Isa's order needs the one before it).
bool Supports(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(DetectedIsa());
}

std::atomic<const detail::KernelTable*> g_active{nullptr};

const detail::KernelTable* InitialTable() {
  const char* env = std::getenv("REDWING_ISA");
  if (env != nullptr && std::strcmp(env, "scalar") == 0) return &detail::ScalarKernels();
  if (env != nullptr && std::strcmp(env, "avx2") == 0 && Supports(Isa::kAvx2))
    return &detail::Avx2Kernels();
  return &TableFor(DetectedIsa());
}

// At least `floats` floats of buf, 64-byte aligned (a cache line, and a 512-bit vector).
float* Aligned64(std::vector<float>& buf, int64_t floats) {
  const size_t need = static_cast<size_t>(floats) + 16;
  if (buf.size() < need) buf.resize(need);
  auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<float*>((addr + 63) & ~uintptr_t{63});
}

// Scratch for the prepared x of MatVec, per calling thread.
float* PrepScratch(int64_t floats) {
  thread_local std::vector<float> buf;
  return Aligned64(buf, floats);
}

// Below this much weight data per thread, waking another thread costs more than it saves.
constexpr int64_t kMinBytesPerThread = 96 * 1024;

int64_t RowGrain(const WeightView& w, int64_t min_rows) {
  const int64_t row_bytes = std::max<int64_t>(1, w.RowBytes());
  return std::max(min_rows, (kMinBytesPerThread + row_bytes - 1) / row_bytes);
}

// Matvec rows go out in several chunks per thread: the caller starts at once and a worker that
// wakes late takes what is left, instead of the caller waiting for it with half the rows.
constexpr int kMatVecChunksPerThread = 4;

// Prefill matmuls too: with equal halves, a thread slowed by the other hardware thread of its
// core (measured up to 1.6× on a shared 2-core VM) leaves the other idle. Each chunk repacks its
// X rows, a few percent of its work; 4 chunks per thread measured 8–18% faster (median) than 1.
constexpr int kMatMulChunksPerThread = 4;

bool UsePool(const ThreadPool* pool, int64_t n, int64_t grain) {
  return pool != nullptr && pool->size() > 1 && n >= 2 * grain;
}

// Whether a matvec of w runs the fast (int8 x) kernel.
bool Fast(const WeightView& w, Precision precision) {
  return precision == Precision::kFast && w.type == WeightType::kAffine;
}

// One matvec's kernel choice: the prepared x's size, its preparation and the row kernel, so the
// callers below split rows the same way for either precision.
struct MatVecPlan {
  const detail::KernelTable& kt;
  bool fast;
  int64_t PrepFloats(const WeightView& w) const {
    return fast ? detail::Q8LayoutFor(w).floats : kt.prep_floats(w);
  }
  void Prepare(const WeightView& w, const float* x, float* prep) const {
    if (fast)
      kt.prepare_x_q8(w, x, prep);
    else
      kt.prepare_x(w, x, prep);
  }
  void Rows(const WeightView& w, const float* x, const float* prep, float* y, int64_t r0,
            int64_t r1) const {
    if (fast)
      kt.matvec_q8_rows(w, prep, y, r0, r1);
    else
      kt.matvec_rows(w, x, prep, y, r0, r1);
  }
};

}  // namespace

// ---- Dispatch
// ------------------------------------------------------------------------------------

Isa DetectedIsa() {
  static const Isa isa = CpuHasAvx512() ? Isa::kAvx512 : CpuHasAvx2() ? Isa::kAvx2 : Isa::kScalar;
  return isa;
}

Isa ActiveIsa() {
  return detail::Active().isa;
}

void SetActiveIsa(Isa isa) {
  CHECK_MSG(Supports(isa), "CPU lacks {}", IsaName(isa));
  g_active.store(&TableFor(isa));
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

namespace detail {
bool CpuHasAvx512Vnni() {
  __builtin_cpu_init();
  return CpuHasAvx512() && __builtin_cpu_supports("avx512vnni");
}

float* PackScratch(int64_t floats) {
  thread_local std::vector<float> buf;
  return Aligned64(buf, floats);
}

namespace {
void PrefetchBytes(const void* p, int64_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = a & ~uintptr_t{63}; line < a + static_cast<uintptr_t>(bytes); line += 64)
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
}
}  // namespace

void PrefetchPanel(const WeightView& w, int64_t n0, int nr, int64_t kc, int kl) {
  for (int64_t r = n0; r < n0 + nr; ++r) {
    switch (w.type) {
      case WeightType::kF32:
        PrefetchBytes(static_cast<const float*>(w.data) + r * w.cols + kc, int64_t{kl} * 4);
        break;
      case WeightType::kBf16:
        PrefetchBytes(static_cast<const uint16_t*>(w.data) + r * w.cols + kc, int64_t{kl} * 2);
        break;
      case WeightType::kAffine: {
        const int64_t g0 = r * w.RowGroups() + kc / w.group, ng = (kl + w.group - 1) / w.group;
        PrefetchBytes(static_cast<const char*>(w.data) + r * w.RowWords() * 4 + kc * w.bits / 8,
                      int64_t{kl} * w.bits / 8);
        PrefetchBytes(w.scales + g0, ng * 2);
        PrefetchBytes(w.biases + g0, ng * 2);
        break;
      }
    }
  }
}

// The AVX2 set with the AVX-512 prefill matmul and affine matvec.
const KernelTable& Avx512Kernels() {
  static const KernelTable t = [] {
    KernelTable k = Avx2Kernels();
    k.isa = Isa::kAvx512;
    k.matmul_rows = avx512::MatMulRows;
    k.matmul_panel = 32;
    k.prep_floats = avx512::PrepFloats;
    k.prepare_x = avx512::PrepareX;
    k.matvec_rows = avx512::MatVecRows;
    k.matmul_prepped_rows = avx512::MatMulPreppedRows;
    k.matvec_q8_rows = UseVnni() ? avx512::MatVecQ8RowsVnni : avx512::MatVecQ8Rows;
    // The AVX2 table's 8 was measured on Zen 3 only; this kernel streams its weights once per
    // group of 4 rows, so it keeps packing from 5 rows on.
    k.small_m = 4;
    return k;
  }();
  return t;
}

const KernelTable& Active() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  if (t == nullptr) {
    t = InitialTable();
    const KernelTable* expected = nullptr;
    if (!g_active.compare_exchange_strong(expected, t)) t = expected;
  }
  return *t;
}
}  // namespace detail

// ---- Linear
// --------------------------------------------------------------------------------------

void MatVecRows(const WeightView& w, const float* x, float* y, int64_t row_begin, int64_t row_end,
                ThreadPool* pool, Precision precision) {
  CheckWeightView(w);
  CHECK_MSG(0 <= row_begin && row_begin <= row_end && row_end <= w.rows, "rows [{}, {}) of {}",
            row_begin, row_end, w.rows);
  const int64_t n = row_end - row_begin;
  if (n == 0) return;
  if (w.cols == 0) {
    std::fill(y, y + n, 0.0f);
    return;
  }
  const MatVecPlan plan{detail::Active(), Fast(w, precision)};
  float* prep = PrepScratch(plan.PrepFloats(w));
  plan.Prepare(w, x, prep);
  const int64_t grain = RowGrain(w, 16);
  if (!UsePool(pool, n, grain)) {
    plan.Rows(w, x, prep, y, row_begin, row_end);
    return;
  }
  pool->ParallelFor(
      static_cast<size_t>(n), static_cast<size_t>(grain),
      [&](size_t b, size_t e, int) {
        plan.Rows(w, x, prep, y + b, row_begin + static_cast<int64_t>(b),
                  row_begin + static_cast<int64_t>(e));
      },
      kMatVecChunksPerThread);
}

void MatVec(const WeightView& w, const float* x, float* y, ThreadPool* pool, Precision precision) {
  MatVecRows(w, x, y, 0, w.rows, pool, precision);
}

void MatVecMulti(const WeightView* ws, int count, const float* x, float* const* ys,
                 ThreadPool* pool, Precision precision) {
  constexpr int kMaxMulti = 4;
  CHECK_MSG(0 < count && count <= kMaxMulti, "MatVecMulti takes 1 to {} matrices", kMaxMulti);
  const auto& kt = detail::Active();
  const MatVecPlan plan[kMaxMulti] = {{kt, Fast(ws[0], precision)},
                                      {kt, count > 1 && Fast(ws[1], precision)},
                                      {kt, count > 2 && Fast(ws[2], precision)},
                                      {kt, count > 3 && Fast(ws[3], precision)}};
  // One prepared x per weight format (the layout depends on the type, bits and group).
  int64_t offset[kMaxMulti], total = 0, rows = 0;
  for (int i = 0; i < count; ++i) {
    CheckWeightView(ws[i]);
    CHECK_MSG(ws[i].cols == ws[0].cols, "MatVecMulti: K {} vs {}", ws[i].cols, ws[0].cols);
    const bool same_as_previous = i > 0 && ws[i].type == ws[i - 1].type &&
                                  ws[i].bits == ws[i - 1].bits && ws[i].group == ws[i - 1].group;
    offset[i] = same_as_previous ? offset[i - 1] : total;
    if (!same_as_previous) total += (plan[i].PrepFloats(ws[i]) + 15) / 16 * 16;
    rows += ws[i].rows;
  }
  if (rows == 0) return;
  if (ws[0].cols == 0) {
    for (int i = 0; i < count; ++i) std::fill(ys[i], ys[i] + ws[i].rows, 0.0f);
    return;
  }
  float* prep = PrepScratch(total);
  for (int i = 0; i < count; ++i)
    if (i == 0 || offset[i] != offset[i - 1]) plan[i].Prepare(ws[i], x, prep + offset[i]);
  // Rows [b, e) of the matrices stacked in order.
  auto run = [&](int64_t b, int64_t e) {
    int64_t base = 0;
    for (int i = 0; i < count && base < e; base += ws[i].rows, ++i) {
      const int64_t r0 = std::max<int64_t>(b - base, 0);
      const int64_t r1 = std::min<int64_t>(e - base, ws[i].rows);
      if (r0 < r1) plan[i].Rows(ws[i], x, prep + offset[i], ys[i] + r0, r0, r1);
    }
  };
  const int64_t grain = RowGrain(ws[0], 16);
  if (!UsePool(pool, rows, grain)) {
    run(0, rows);
    return;
  }
  pool->ParallelFor(
      static_cast<size_t>(rows), static_cast<size_t>(grain),
      [&](size_t b, size_t e, int) { run(static_cast<int64_t>(b), static_cast<int64_t>(e)); },
      kMatVecChunksPerThread);
}

void MatVecBatch(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool* pool,
                 Precision precision) {
  CheckWeightView(w);
  CHECK_MSG(1 <= m && m <= kExactRows, "MatVecBatch of {} rows (1 to {})", m, kExactRows);
  if (w.rows == 0) return;
  if (m == 1) {
    MatVec(w, x, y, pool, precision);
    return;
  }
  if (w.cols == 0) {
    std::fill(y, y + m * w.rows, 0.0f);
    return;
  }
  const auto& kt = detail::Active();
  const MatVecPlan plan{kt, Fast(w, precision)};
  const int64_t stride = (plan.PrepFloats(w) + 15) / 16 * 16;
  float* prep = PrepScratch(std::max<int64_t>(1, stride * m));
  for (int64_t i = 0; i < m; ++i) plan.Prepare(w, x + i * w.cols, prep + i * stride);
  // Affine weights, exact: the kernel that unpacks each block once for up to 4 rows of x (per
  // row the matvec's instruction sequence). Otherwise (fast too) the matvec itself, row by row
  // of x over blocks of weight rows small enough to stay in L2, so the weights still come from
  // memory once.
  const bool shared =
      !plan.fast && w.type == WeightType::kAffine && kt.matmul_prepped_rows != nullptr;
  const int64_t block = std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, w.RowBytes()));
  auto run = [&](int64_t r0, int64_t r1) {
    if (shared) {
      kt.matmul_prepped_rows(w, x, m, prep, stride, y, r0, r1);
      return;
    }
    for (int64_t rb = r0; rb < r1; rb += block) {
      const int64_t re = std::min(r1, rb + block);
      for (int64_t i = 0; i < m; ++i)
        plan.Rows(w, x + i * w.cols, prep + i * stride, y + i * w.rows + rb, rb, re);
    }
  };
  // Every row of y is computed alone, so how the rows are split does not change any result.
  const int64_t grain = std::max<int64_t>(8, RowGrain(w, 16) / m);
  if (!UsePool(pool, w.rows, grain)) {
    run(0, w.rows);
    return;
  }
  pool->ParallelFor(
      static_cast<size_t>(w.rows), static_cast<size_t>(grain),
      [&](size_t b, size_t e, int) { run(static_cast<int64_t>(b), static_cast<int64_t>(e)); },
      kMatVecChunksPerThread);
}

void MatMul(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool* pool) {
  CheckWeightView(w);
  CHECK(m >= 0);
  if (m == 0 || w.rows == 0) return;
  if (m == 1) {
    MatVec(w, x, y, pool);
    return;
  }
  if (w.cols == 0) {
    std::fill(y, y + m * w.rows, 0.0f);
    return;
  }
  const auto& kt = detail::Active();
  if (w.type == WeightType::kAffine && m <= kt.small_m) {
    const int64_t stride = (kt.prep_floats(w) + 15) / 16 * 16;
    float* prep = PrepScratch(stride * m);
    for (int64_t i = 0; i < m; ++i) kt.prepare_x(w, x + i * w.cols, prep + i * stride);
    const int64_t grain = std::max<int64_t>(4, RowGrain(w, 16) / m);
    if (!UsePool(pool, w.rows, grain)) {
      kt.matmul_prepped_rows(w, x, m, prep, stride, y, 0, w.rows);
      return;
    }
    pool->ParallelFor(
        static_cast<size_t>(w.rows), static_cast<size_t>(grain),
        [&](size_t b, size_t e, int) {
          kt.matmul_prepped_rows(w, x, m, prep, stride, y, static_cast<int64_t>(b),
                                 static_cast<int64_t>(e));
        },
        kMatVecChunksPerThread);
    return;
  }
  // Threads split the weight rows in whole panels (the micro-kernel's width).
  const int64_t panel = kt.matmul_panel;
  const int64_t panels = (w.rows + panel - 1) / panel;
  const int64_t grain = std::max<int64_t>(1, RowGrain(w, panel) / std::max<int64_t>(1, m) / panel);
  if (!UsePool(pool, panels, grain)) {
    kt.matmul_rows(w, x, m, y, 0, w.rows);
    return;
  }
  pool->ParallelFor(
      static_cast<size_t>(panels), static_cast<size_t>(grain),
      [&](size_t b, size_t e, int) {
        const int64_t r0 = static_cast<int64_t>(b) * panel;
        const int64_t r1 = std::min(w.rows, static_cast<int64_t>(e) * panel);
        kt.matmul_rows(w, x, m, y, r0, r1);
      },
      kMatMulChunksPerThread);
}

void DequantRow(const WeightView& w, int64_t row, float* out) {
  CheckWeightView(w);
  CHECK(0 <= row && row < w.rows);
  detail::Active().dequant_row(w, row, out);
}

void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n) {
  detail::Active().bf16_to_f32(src, dst, n);
}

// ---- Norms and activations
// -----------------------------------------------------------------------

static void CheckNormWeight(const WeightView* w, int64_t n) {
  if (w == nullptr) return;
  CHECK_MSG(w->type != WeightType::kAffine && w->rows == 1 && w->cols == n,
            "norm weight must be f32/bf16 [1, {}]", n);
}

void RmsNorm(const float* x, float* y, int64_t n, const WeightView* w, float eps) {
  RmsNormRows(x, y, 1, n, w, eps);
}

void RmsNormRows(const float* x, float* y, int64_t rows, int64_t n, const WeightView* w,
                 float eps) {
  CHECK(n > 0 && rows >= 0);
  CheckNormWeight(w, n);
  const auto& kt = detail::Active();
  for (int64_t r = 0; r < rows; ++r) {
    const float ss = kt.sum_squares(x + r * n, n);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    kt.scale_by_weight(x + r * n, inv, w, y + r * n, n);
  }
}

void GegluInPlace(float* gate, const float* up, int64_t n) {
  detail::Active().geglu(gate, up, n);
}

void Softmax(float* x, int64_t n) {
  CHECK(n > 0);
  const auto& kt = detail::Active();
  const float m = kt.max(x, n);
  const float sum = kt.exp_sub_sum(x, n, m);
  kt.scale(x, 1.0f / sum, n);
}

void Softcap(float* x, int64_t n, float cap) {
  CHECK(cap > 0.0f);
  detail::Active().softcap(x, n, cap);
}

void RopeNeox(float* x, int n_heads, int head_dim, const float* cos, const float* sin) {
  CHECK(head_dim % 2 == 0 && n_heads >= 0);
  detail::Active().rope(x, n_heads, head_dim, cos, sin);
}

void RopeTable(int64_t pos, const float* inv_freq, int half, float* cos, float* sin) {
  ref::RopeTable(pos, inv_freq, half, cos, sin);  // libm cosf/sinf: a few per layer and token
}

// ---- Small helpers
// ---------------------------------------------------------------------------------

void TopK(const float* x, int n, int k, int* idx) {
  CHECK(0 <= k && k <= n);
  if (k == 0) return;
  // `a` ranks before `b`: NaN first, then larger values, ties by lower index.
  auto before = [x](int a, int b) {
    const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
    if (na != nb) return na;
    if (!na && x[a] != x[b]) return x[a] > x[b];
    return a < b;
  };
  if (k > 64) {
    std::vector<int> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    std::copy(order.begin(), order.begin() + k, idx);
    return;
  }
  // Small k (router top-8, sampling top-k): insertion into a sorted list of the best k so far.
  int count = 0;
  for (int i = 0; i < n; ++i) {
    if (count == k && !before(i, idx[k - 1])) continue;
    int pos = count < k ? count++ : k - 1;
    while (pos > 0 && before(i, idx[pos - 1])) {
      idx[pos] = idx[pos - 1];
      --pos;
    }
    idx[pos] = i;
  }
}

void Add(float* y, const float* x, int64_t n) {
  detail::Active().add(y, x, n);
}
void Mul(float* y, const float* x, int64_t n) {
  detail::Active().mul(y, x, n);
}
void Scale(float* y, float s, int64_t n) {
  detail::Active().scale(y, s, n);
}
void Axpy(float* y, float a, const float* x, int64_t n) {
  detail::Active().axpy(y, a, x, n);
}
float Dot(const float* a, const float* b, int64_t n) {
  return detail::Active().dot(a, b, n);
}

}  // namespace rw::cpu
