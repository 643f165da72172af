// Launchers for the CUDA forward pass's op set, with a plain interface (raw device pointers,
// cudaError_t, a stream): the .cu files include nothing nvcc's front end cannot digest, and the
// runtime wraps them. Every op mirrors one in backend/cpu/ops.h (its scalar reference is the
// oracle the tests compare against); activations and accumulation are fp32.
//
// Positions come from device memory (`pos0`: an int64 the caller uploads once per call) so a
// decode step can be captured in a CUDA graph and replayed at any position.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace rw::cuda {

// A weight matrix in device memory, laid out exactly as WeightView documents (mirrored here
// because weight_view.h pulls in fmt, which .cu files must not see).
struct DevMat {
  enum Type : int { kF32 = 0, kBf16 = 1, kAffine = 2 };
  int type = kF32;
  int bits = 0, group = 0;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  const uint16_t* scales = nullptr;
  const uint16_t* biases = nullptr;
};

// cudaErrorInvalidValue for an affine format no kernel reads (4/8-bit, groups of 32·j dividing
// the row); the launchers check every matrix with it.
inline cudaError_t CheckMat(const DevMat& w) {
  if (w.type != DevMat::kAffine) return cudaSuccess;
  if ((w.bits != 4 && w.bits != 8) || w.group % 32 != 0 || w.cols % w.group != 0)
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

// One routed expert's three matrices; data/scales/biases hold byte offsets from the expert's
// blob (the kernels add the blob's device address).
struct ExpertMats {
  DevMat gate, up, down;
};

// Whether this thread's later launches may overlap the kernel before them (programmatic
// dependent launch on sm_90+, see launch.cuh; REDWING_CUDA_PDL=0 turns it off everywhere). On
// by default; the forward pass turns it off for prefill, whose long kernels gain nothing from it
// (measured slower).
void SetOverlappedLaunches(bool on);

// ---- Linear (ops_matvec_dispatch.cu, ops_matmul_dispatch.cu, ops_matmul_planes.cu) --------------

// y[N] = W·x (decode).
cudaError_t LaunchMatVec(const DevMat& w, const float* x, float* y, cudaStream_t s);
// y[i] = w[i]·x for i < n (1..3 matrices with the same input: one launch for q/k/v, gate/up).
cudaError_t LaunchMatVecMulti(const DevMat* w, float* const* y, int n, const float* x,
                              cudaStream_t s);
// x split once for the prefill matmuls of affine weights (LaunchSplitX): `parts` planes
// [parts][rows][cols], each 32-column block's columns in the order the kernel's fragments take,
// and the sums over every 32 columns [rows][cols / 32]. parts = 2 (the default): fp16 hi and lo
// of x' = x·2^s per row, sums of x', and row_down[r] = 2^-s (see ops_matmul_planes.cu);
// parts = 3 (REDWING_CUDA_SPLIT=bf16x3): bf16 planes whose sum is x exactly, sums of x, no
// row_down.
struct XPlanes {
  const uint16_t* planes = nullptr;
  const float* sums = nullptr;
  const float* row_down = nullptr;
  int64_t rows = 0, cols = 0;
  int parts = 3;
};
// Bytes of scratch LaunchSplitX needs for x[rows][cols].
size_t SplitXBytes(int64_t rows, int64_t cols);
// Splits x into scratch and describes it in *out; parts 2 or 3, or 0 for the default (2 unless
// REDWING_CUDA_SPLIT=bf16x3). cudaErrorNotSupported when x or scratch is not 16-byte aligned or
// cols is not a multiple of 32 (the matmuls then read x itself).
cudaError_t LaunchSplitX(const float* x, int64_t rows, int64_t cols, void* scratch,
                         size_t scratch_bytes, XPlanes* out, cudaStream_t s, int parts = 0);

// The fewest rows a product takes the tensor-core kernels for (fewer: the fp32-FMA kernel).
// Two: a speculative verify of 2..16 tokens is weight-bound like a decode step, and the MMA
// kernels stream each weight tile once for all rows (partial row tiles are zero-filled), where
// the FMA kernel took ~245 us per dense product on the H200 (docs/PERFORMANCE.md).
constexpr int64_t kMinTensorCoreRows = 2;

// Y[m][N] = X[m][K]·Wᵀ (prefill): tiles of W dequantized into shared memory. xp, when given,
// is x split by LaunchSplitX (at least m rows): affine weights then take the planes kernel.
cudaError_t LaunchMatMul(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s,
                         const XPlanes* xp = nullptr);
// y[i] = X·w[i]ᵀ for i < n (1..3 matrices with the same input, e.g. q/k/v or gate/up): one
// launch over their rows stacked where the kernel allows it (REDWING_CUDA_STACK=0: never), else
// LaunchMatMul for each.
cudaError_t LaunchMatMulMulti(const DevMat* w, float* const* y, int n, const float* x, int64_t m,
                              cudaStream_t s, const XPlanes* xp = nullptr);

// The decode products for m input rows at once (a speculative verify, a short chunk):
// x[m][cols] → y[m][rows] (each matrix's), every row computed exactly as the one-row launch
// computes it (the integer tensor-core kernel over a grid of rows; else one launch per row), so
// a verify's rows are a decode step's bit for bit in these products. m <= 65535.
cudaError_t LaunchMatVecRows(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s);
cudaError_t LaunchMatVecMultiRows(const DevMat* w, float* const* y, int n, const float* x,
                                  int64_t m, cudaStream_t s);
cudaError_t LaunchGateUpGegluRows(const DevMat& gate, const DevMat& up, const float* x, int64_t m,
                                  float* h, cudaStream_t s);

// The dense MLP's first half (decode): h = gelu_tanh(gate·x) ⊙ (up·x).
cudaError_t LaunchGateUpGeglu(const DevMat& gate, const DevMat& up, const float* x, float* h,
                              cudaStream_t s);

// Routed experts, decode: slot j < n uses the blob blobs[idx[j]] when idx is given (a table of
// resident experts indexed by the router's choice, on the GPU) else blobs[j], and input
// x + j·x_stride: h[j] = gelu_tanh(gate·x) ⊙ (up·x) ([n][I]); then y[j] = down·h[j] ([n][H]).
// x_per > 1: slots j share input row j / x_per (x + (j / x_per)·x_stride): a verify's tokens
// with their k experts each.
cudaError_t LaunchExpertGateUp(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                               int n, const float* x, int64_t x_stride, float* h, cudaStream_t s,
                               int x_per = 1);
cudaError_t LaunchExpertDown(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                             int n, const float* h, float* y, cudaStream_t s);

// Routed experts, prefill: group i (< groups) is expert blob blobs[i] applied to rows
// [row0[i], row0[i] + rows[i]) of the grouped buffers; gather (may be null) maps a grouped row
// to its row of x (the token). max_rows bounds rows[i] (grid size); total_rows, when known
// (else 0), is the sum of rows[i] and lets the kernel size its grid by it.
// which: 0 gate, 1 up, 2 down.
cudaError_t LaunchExpertMatMul(const ExpertMats& e, int which, const uint8_t* const* blobs,
                               int groups, const int* row0, const int* rows, int max_rows,
                               const int* gather, const float* x, float* y, cudaStream_t s,
                               const XPlanes* xp = nullptr, int64_t total_rows = 0);
// The gate and up products of the same groups (gate and up of one input), in one launch over
// both matrices' rows where the kernel allows it (REDWING_CUDA_STACK=0: never).
cudaError_t LaunchExpertGateUpMatMul(const ExpertMats& e, const uint8_t* const* blobs, int groups,
                                     const int* row0, const int* rows, int max_rows,
                                     const int* gather, const float* x, float* gate, float* up,
                                     cudaStream_t s, const XPlanes* xp = nullptr,
                                     int64_t total_rows = 0);

// ---- Norms (ops_norm.cu), activations and elementwise (ops_elementwise.cu) ----------------------

// y = x · (mean(x²) + eps)^-½ · w per row of n (w null: weightless). In place allowed.
cudaError_t LaunchRmsNormRows(const float* x, float* y, int64_t rows, int n, const float* w,
                              float eps, cudaStream_t s);
// x = (x + RmsNorm(y)·w) · scalar per row (the residual updates A8 and F4/F5).
cudaError_t LaunchAddRmsNorm(float* x, const float* y, int64_t rows, int n, const float* w,
                             float eps, float scalar, cudaStream_t s);
// The router's input: r = RmsNorm_0(x) ⊙ scale · root per row.
cudaError_t LaunchRouterInput(const float* x, float* r, int64_t rows, int n, const float* scale,
                              float root, float eps, cudaStream_t s);
// The feed-forward inputs from one read of the residual: a = RmsNorm(x)·pre_ff,
// a2 = RmsNorm(x)·pre_ff2 and r = RmsNorm_0(x) ⊙ router_scale · root (a2, r may be null).
cudaError_t LaunchFfnInputs(const float* x, int64_t rows, int n, const float* pre_ff,
                            const float* pre_ff2, const float* router_scale, float root, float eps,
                            float* a, float* a2, float* r, cudaStream_t s);
// LaunchAddRmsNorm(x, o, post_attn, scalar 1) then LaunchFfnInputs on the new x, in one launch.
cudaError_t LaunchResidualFfnInputs(float* x, const float* o, int64_t rows, int n,
                                    const float* post_attn, const float* pre_ff,
                                    const float* pre_ff2, const float* router_scale, float root,
                                    float eps, float* a, float* a2, float* r, cudaStream_t s);
// gate = gelu_tanh(gate) · up.
cudaError_t LaunchGeglu(float* gate, const float* up, int64_t n, cudaStream_t s);
// x = cap · tanh(x / cap).
cudaError_t LaunchSoftcap(float* x, int64_t n, float cap, cudaStream_t s);
cudaError_t LaunchAdd(float* y, const float* x, int64_t n, cudaStream_t s);
cudaError_t LaunchScale(float* y, float a, int64_t n, cudaStream_t s);
cudaError_t LaunchAxpy(float* y, float a, const float* x, int64_t n, cudaStream_t s);
// out[t] = row ids[t] of the embedding, dequantized, × scale.
cudaError_t LaunchEmbed(const DevMat& e, const int* ids, int64_t m, float scale, float* out,
                        cudaStream_t s);

// ---- RoPE and the KV cache (ops_rope_kv.cu) -----------------------------------------------------

// cos/sin [m][half] of float(pos0 + t)·inv_freq[i].
cudaError_t LaunchRopeTable(const int64_t* pos0, int64_t m, const float* inv_freq, int half,
                            float* cos, float* sin, cudaStream_t s);
// x [m][n_heads][head_dim], NeoX pairs (i, i + d/2), table row t for token t.
cudaError_t LaunchRopeNeox(float* x, int64_t m, int n_heads, int head_dim, const float* cos,
                           const float* sin, cudaStream_t s);
// Stores k, v [m][n_kv][hd] at positions pos0 + t into caches [n_kv][capacity][hd], slot
// p % capacity. v may be null (not stored).
cudaError_t LaunchKvStore(const float* k, const float* v, float* k_cache, float* v_cache, int64_t m,
                          int n_kv, int head_dim, int64_t capacity, const int64_t* pos0,
                          cudaStream_t s);

// Fused decode/prefill step after the projections (A3–A4): per head, q = RoPE(RmsNorm(q)·q_norm),
// k = RoPE(RmsNorm(k)·k_norm), v = RmsNorm_0(v) (all in place), then k and v stored at
// positions pos0 + t. Same arithmetic as the separate kernels.
cudaError_t LaunchQkvPost(float* q, float* k, float* v, int64_t m, int n_heads, int n_kv,
                          int head_dim, const float* q_norm, const float* k_norm, const float* cos,
                          const float* sin, float* k_cache, float* v_cache, int64_t capacity,
                          const int64_t* pos0, float eps, cudaStream_t s);

// ---- Attention (ops_attention.cu, ops_attention_prefill.cu) -------------------------------------

// m queries at positions pos0 + t, q and out [m][n_heads][hd]; query t sees keys τ <= p with
// p − τ < window when window > 0; GQA (head i reads KV head i / (n_heads / n_kv)). The key
// range of each query is cut into `splits` parts computed in parallel and merged (split-KV);
// partial needs AttentionPartialFloats(m, n_heads, hd, splits) floats.
int64_t AttentionPartialFloats(int64_t m, int n_heads, int head_dim, int splits);
cudaError_t LaunchAttention(const float* q, int64_t m, int n_heads, const float* k_cache,
                            const float* v_cache, int n_kv, int head_dim, int64_t capacity,
                            const int64_t* pos0, int64_t window, float scale, int splits,
                            float* partial, float* out, cudaStream_t s);
// The tiled prefill kernel LaunchAttention takes for m > 1 with one split (no partial needed):
// a block per 32 queries of a head, each K/V tile read once for all of them.
// cudaErrorNotSupported when head_dim is not a multiple of 4 (or over 512), a pointer is not
// 16-byte aligned, or the device cannot give the kernel its shared memory.
cudaError_t LaunchPrefillAttention(const float* q, int64_t m, int n_heads, const float* k_cache,
                                   const float* v_cache, int n_kv, int head_dim, int64_t capacity,
                                   const int64_t* pos0, int64_t window, float scale, float* out,
                                   cudaStream_t s);

// ---- Router (ops_router.cu), expert plan, MoE sum (ops_moe_finish.cu) ---------------------------

// Per token (row of E logits): softmax, top-k (ties to the lower index, NaN first), weights
// renormalized to sum 1 × per_expert_scale. probs (may equal logits) receives the softmax.
cudaError_t LaunchRouteTopK(const float* logits, float* probs, int64_t m, int num_experts, int k,
                            const float* per_expert_scale, int* idx, float* w, cudaStream_t s);
// A chunk's expert plan on the GPU (ops_expert_plan.cu) from idx[m·k] (the router's choices):
// the pairs grouped by expert in pair order, gather[row] = token, row_of[t·k + j] = row, and per
// expert e (all of them, empty ones too) its first row row0[e] and count rows[e] — the host
// plan's layout without the compaction to used experts. At most kMaxPlanExperts experts.
constexpr int kMaxPlanExperts = 256;
cudaError_t LaunchExpertPlan(const int* idx, int64_t m, int k, int num_experts, int* gather,
                             int* row_of, int* row0, int* rows, cudaStream_t s);
// out[t] = Σ_j w[t][j] · y[row(t, j)] summed in ascending expert index order, row(t, j) =
// rows ? rows[t·k + j] : t·k + j.
cudaError_t LaunchMoeCombine(const int* idx, const float* w, const int* rows, const float* y,
                             int64_t m, int k, int n, float* out, cudaStream_t s);
// The end of a MoE layer per token (F1's tail, F3–F5): moe as LaunchMoeCombine,
// m1 = RmsNorm(m1)·post_ff1 (m1 as is when post_ff1 is null) + RmsNorm(moe)·post_ff2,
// x = (x + RmsNorm(m1)·post_ff)·scalar.
cudaError_t LaunchMoeFinish(const int* idx, const float* w, const int* rows, const float* y,
                            int64_t m, int k, int n, const float* post_ff1, const float* post_ff2,
                            float* m1, const float* post_ff, float* x, float eps, float scalar,
                            cudaStream_t s);
// LaunchMoeFinish, then next_out = RmsNorm(x)·next_norm (the next layer's input norm).
cudaError_t LaunchMoeFinishNorm(const int* idx, const float* w, const int* rows, const float* y,
                                int64_t m, int k, int n, const float* post_ff1,
                                const float* post_ff2, float* m1, const float* post_ff, float* x,
                                float eps, float scalar, const float* next_norm, float* next_out,
                                cudaStream_t s);

// ---- Sampling (ops_sample.cu, ops_topk.cu) ------------------------------------------------------

// The token the CPU sampler draws at `temperature` (> 0) with nothing filtered (Gumbel-max with
// the counter noise of sample/sampler.cpp over logit/temperature at `position`; 0 when all are
// NaN), written to *out (device memory). scratch: GumbelSampleScratchBytes() of device memory.
size_t GumbelSampleScratchBytes();
cudaError_t LaunchGumbelSample(const float* logits, int64_t n, uint64_t seed, int64_t position,
                               double temperature, void* scratch, int* out, cudaStream_t s);

// The repetition penalty on a row of n logits, as the CPU sampler applies it: for each of the
// `count` distinct ids (device memory; ids outside [0, n) skipped), a positive logit is divided
// by `penalty`, a negative one multiplied.
cudaError_t LaunchRepetitionPenalty(float* logits, int64_t n, const int* ids, int count,
                                    float penalty, cudaStream_t s);

// Every logit at or above the k-th largest of the n (NaN skipped; all non-NaN ones when fewer
// than k), as ids and values in out_ids/out_vals (the first min(count, cap), by value
// descending, then id ascending) and their count in *out_count, all device memory; INT_MAX
// there when the ties of some 2,048-logit chunk exceed what it keeps (the caller then reads the
// whole row). k in [1, kMaxTopK]; cudaErrorNotSupported beyond 524,288 logits.
// scratch: TopKScratchBytes() of device memory.
constexpr int kMaxTopK = 64;
size_t TopKScratchBytes();
cudaError_t LaunchTopKCandidates(const float* logits, int64_t n, int k, void* scratch, int cap,
                                 int* out_ids, float* out_vals, int* out_count, cudaStream_t s);

}  // namespace rw::cuda
