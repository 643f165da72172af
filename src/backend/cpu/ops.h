// CPU compute kernels. Every op has a scalar reference in rw::cpu::ref (simplest possible code,
// the oracle for every other backend) and a dispatched fast version in rw::cpu that picks the
// best kernel set the CPU supports at run time (AVX-512, AVX2+FMA, else portable scalar).
//
// Conventions: activations and accumulation are fp32. Shape mismatches are programming errors
// (CHECK). Elementwise ops allow in-place use (output == input). Buffers need only natural
// (4-byte) alignment. A null ThreadPool* means "run on the calling thread". The pool is not
// reentrant: do not call an op with a pool from inside that pool's ParallelFor.
#pragma once

#include <cstdint>

#include "backend/weight_view.h"
#include "base/thread_pool.h"

namespace rw::cpu {

// ---- Dispatch ----------------------------------------------------------------------------------

// kAvx512 is the AVX2 set with the prefill matmul and the affine matvec on 512-bit vectors.
enum class Isa { kScalar, kAvx2, kAvx512 };

// The best kernel set this CPU supports (AVX2 needs avx2 + fma; AVX-512 also avx512f/bw/vl/dq).
Isa DetectedIsa();
// The kernel set in use: DetectedIsa(), or a lesser one named by REDWING_ISA (scalar, avx2).
Isa ActiveIsa();
// Switches kernel sets (tests, benchmarks). CHECKs the CPU supports it. Not thread-safe with
// respect to ops running concurrently.
void SetActiveIsa(Isa isa);
const char* IsaName(Isa isa);

// ---- Linear
// --------------------------------------------------------------------------------------

// The affine matvecs' arithmetic. kExact (the default): weights dequantized to fp32 against
// fp32 x, the reference's math. kFast: x held as two int8 planes per block of 32 (a 16-bit
// code) and each block's dot an exact integer sum (backend/cpu/matvec_q8.h, which bounds the
// error: each x moves by at most max|x of its block|/32512). kFast applies to affine weights in
// MatVec, MatVecRows, MatVecMulti and MatVecBatch (Linear's decode and verify rows); f32/bf16
// weights and MatMul (prefill) stay exact, and a verify row still equals its decode row bit for
// bit.
enum class Precision { kExact, kFast };

// y[N] = W·x. x has K floats.
void MatVec(const WeightView& w, const float* x, float* y, ThreadPool* pool,
            Precision precision = Precision::kExact);
// Output rows [row_begin, row_end) only: y[r - row_begin] = (W·x)[r].
void MatVecRows(const WeightView& w, const float* x, float* y, int64_t row_begin, int64_t row_end,
                ThreadPool* pool, Precision precision = Precision::kExact);
// ys[i] = ws[i]·x for `count` matrices with the same K, as one parallel job (one wake-up of
// the pool, x prepared once per weight format): decode's q/k/v and gate/up projections.
void MatVecMulti(const WeightView* ws, int count, const float* x, float* const* ys,
                 ThreadPool* pool, Precision precision = Precision::kExact);
// Y[M, N] = X[M, K]·Wᵀ (row-major X and Y). Each dequantized weight tile is reused for all M
// rows, so this is much faster than M MatVec calls.
void MatMul(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool* pool);
// Up to this many rows, Linear and AttendBlock give every row the bits the one-row call (MatVec,
// AttendOne) gives it: a speculative verify of k <= kExactRows tokens yields exactly the logits
// of k decode steps, so it emits exactly plain decoding's tokens. 16: DFlash's block size.
inline constexpr int64_t kExactRows = 16;
// Y[M, N] = X[M, K]·Wᵀ for m <= kExactRows rows, each row bitwise MatVec's: the matvec kernel
// over several x rows, with each block of weights read from memory once for all of them.
void MatVecBatch(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool* pool,
                 Precision precision = Precision::kExact);
// y = W·x for m rows: MatVec for one row (decode), MatVecBatch for a verify's few, MatMul
// (packed panels, faster for many rows, rounded differently; always exact) for prefill.
inline void Linear(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool* pool,
                   Precision precision = Precision::kExact) {
  if (m == 1)
    MatVec(w, x, y, pool, precision);
  else if (m <= kExactRows)
    MatVecBatch(w, x, m, y, pool, precision);
  else
    MatMul(w, x, m, y, pool);
}
// out[K] = row `row` of W in fp32 (embedding lookup).
void DequantRow(const WeightView& w, int64_t row, float* out);
void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n);

// ---- Norms and activations
// -----------------------------------------------------------------------

// y = x · (mean(x²) + eps)^-½ · w. w is null (no weight) or an f32/bf16 view with rows = 1 and
// cols = n; it is used as stored (not 1 + w).
void RmsNorm(const float* x, float* y, int64_t n, const WeightView* w, float eps);
// The same for `rows` consecutive vectors of n (per-head q/k norms); one weight for all rows.
void RmsNormRows(const float* x, float* y, int64_t rows, int64_t n, const WeightView* w, float eps);
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated with std::tanh.
float GeluTanh(float x);
// gate[i] = GeluTanh(gate[i]) · up[i].
void GegluInPlace(float* gate, const float* up, int64_t n);
// Max-subtracted softmax in place.
void Softmax(float* x, int64_t n);
// x = cap · tanh(x / cap).
void Softcap(float* x, int64_t n, float cap);

// ---- RoPE (NeoX half split)
// ------------------------------------------------------------------------

// x is [n_heads, head_dim]; cos/sin are [head_dim/2] for one position. Pairs (i, i + d/2):
// x'_i = x_i·cos_i − x_{i+d/2}·sin_i;  x'_{i+d/2} = x_{i+d/2}·cos_i + x_i·sin_i.
void RopeNeox(float* x, int n_heads, int head_dim, const float* cos, const float* sin);
// cos[i], sin[i] of the fp32 angle float(pos)·inv_freq[i] (as torch computes it), i < half.
// inv_freq[i] = 0 gives the identity rotation (proportional RoPE).
void RopeTable(int64_t pos, const float* inv_freq, int half, float* cos, float* sin);

// ---- Small helpers
// ---------------------------------------------------------------------------------

// Indices of the k largest values, sorted by descending value; equal values are ordered by
// ascending index (torch.topk does not promise an order for ties). NaN ranks above everything.
void TopK(const float* x, int n, int k, int* idx);
void Add(float* y, const float* x, int64_t n);            // y += x
void Mul(float* y, const float* x, int64_t n);            // y *= x (elementwise)
void Scale(float* y, float s, int64_t n);                 // y *= s
void Axpy(float* y, float a, const float* x, int64_t n);  // y += a·x
float Dot(const float* a, const float* b, int64_t n);

// ---- Attention
// -----------------------------------------------------------------------------------
//
// KV cache of one layer. K and V are each fp32 [n_kv_heads][capacity][head_dim] (head-major: the
// keys of one head are contiguous, which is what the score and PV loops stream). Logical
// position p lives in slot p % capacity, so a sliding-window layer is a ring buffer and a full
// layer uses capacity >= max context (slot == position).
// The cache's element type: fp32 (the reference), bf16 or IEEE fp16 (half the bytes; values are
// rounded to nearest even when stored, and the kernels widen them to fp32 as they read them).
enum class KvType { kF32, kBf16, kF16 };
inline int64_t KvTypeBytes(KvType t) {
  return t == KvType::kF32 ? 4 : 2;
}

struct KvCacheView {
  const void* k = nullptr;  // KvType elements
  const void* v = nullptr;
  int n_kv_heads = 0;
  int head_dim = 0;
  int64_t capacity = 0;
  KvType type = KvType::kF32;
};

// Writes position pos: k and v are [n_kv_heads][head_dim] fp32 (either may be null to skip it),
// stored as `type`.
void KvStore(void* k_cache, void* v_cache, KvType type, int n_kv_heads, int head_dim,
             int64_t capacity, int64_t pos, const float* k, const float* v);
// The fp32 reference's store (type kF32).
inline void KvStore(float* k_cache, float* v_cache, int n_kv_heads, int head_dim, int64_t capacity,
                    int64_t pos, const float* k, const float* v) {
  KvStore(k_cache, v_cache, KvType::kF32, n_kv_heads, head_dim, capacity, pos, k, v);
}

// One query (decode). q and out are [n_heads][head_dim]; query head i uses KV head
// i / (n_heads / n_kv_heads). Attends to logical positions [pos_begin, pos_end), which must be
// non-empty and all resident (pos_end − pos_begin <= capacity). Scores are scale·(q·k).
void AttendOne(const float* q, int n_heads, const KvCacheView& kv, int64_t pos_begin,
               int64_t pos_end, float scale, float* out, ThreadPool* pool);

// A block of m queries at positions q_pos0 … q_pos0+m−1 (prefill, verify). For m <= kExactRows
// each row is bitwise what AttendOne gives that query over its window. q and out are
// [m][n_heads][head_dim]. Query at position p sees keys τ with τ <= p and, when window > 0,
// p − τ < window. The block's own K/V must already be stored, and every needed key must still
// be resident: for a ring buffer that means capacity >= window + m − 1.
void AttendBlock(const float* q, int64_t m, int64_t q_pos0, int n_heads, const KvCacheView& kv,
                 int64_t window, float scale, float* out, ThreadPool* pool);

// ---- Scalar reference
// ------------------------------------------------------------------------------

namespace ref {
void MatVec(const WeightView& w, const float* x, float* y);
void MatVecRows(const WeightView& w, const float* x, float* y, int64_t row_begin, int64_t row_end);
void MatMul(const WeightView& w, const float* x, int64_t m, float* y);
void DequantRow(const WeightView& w, int64_t row, float* out);
// One weight element (the format definition, in fp32).
float WeightAt(const WeightView& w, int64_t row, int64_t col);
void ConvertBf16ToF32(const uint16_t* src, float* dst, int64_t n);
void RmsNorm(const float* x, float* y, int64_t n, const WeightView* w, float eps);
void RmsNormRows(const float* x, float* y, int64_t rows, int64_t n, const WeightView* w, float eps);
void GegluInPlace(float* gate, const float* up, int64_t n);
void Softmax(float* x, int64_t n);
void Softcap(float* x, int64_t n, float cap);
void RopeNeox(float* x, int n_heads, int head_dim, const float* cos, const float* sin);
void RopeTable(int64_t pos, const float* inv_freq, int half, float* cos, float* sin);
void TopK(const float* x, int n, int k, int* idx);
void Add(float* y, const float* x, int64_t n);
void Mul(float* y, const float* x, int64_t n);
void Scale(float* y, float s, int64_t n);
void Axpy(float* y, float a, const float* x, int64_t n);
float Dot(const float* a, const float* b, int64_t n);
void AttendOne(const float* q, int n_heads, const KvCacheView& kv, int64_t pos_begin,
               int64_t pos_end, float scale, float* out);
void AttendBlock(const float* q, int64_t m, int64_t q_pos0, int n_heads, const KvCacheView& kv,
                 int64_t window, float scale, float* out);
}  // namespace ref

}  // namespace rw::cpu
