// The Gemma 4 forward pass on the CPU (fp32 activations and accumulation), written top to bottom
// as one function per reference module: Gemma4TextScaledWordEmbedding, Gemma4TextAttention,
// Gemma4TextMLP, Gemma4TextRouter, Gemma4TextExperts, Gemma4TextDecoderLayer and the tied,
// soft-capped head (reference/gemma4-model.md §2).
//
// A call processes a chunk of m consecutive tokens: m > 1 uses MatMul (each weight read once per
// chunk), m == 1 (decode) uses MatVec. How the routed experts are read and run (grouped by
// expert, batched, side by side, early reads) is ExpertSchedule's (runtime/expert_schedule.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "base/thread_pool.h"
#include "base/zeroed_floats.h"
#include "runtime/dump.h"
#include "runtime/expert_schedule.h"
#include "runtime/kv_cache.h"
#include "runtime/model.h"

namespace rw {

// Wall time per part of the forward pass, summed over calls.
struct ForwardStats {
  double embed_s = 0, attention_s = 0, dense_s = 0, moe_s = 0, head_s = 0;
  int64_t tokens = 0;
  int64_t experts_run = 0;  // (token, expert) pairs computed
  // Wall time in which no thread computed because one waited for an expert read: the part of
  // the forward time the reads did not hide (forward time minus this is the compute).
  double stall_s = 0;
  // Early reads (decode): experts guessed for the next layer, guessed right, chosen.
  int64_t early_guessed = 0, early_right = 0, early_chosen = 0;
  double total_s() const { return embed_s + attention_s + dense_s + moe_s + head_s; }
  void Add(const ForwardStats& o);
};

enum class LogitsRows { kNone, kLast, kAll };

// What a backend that picks on its device returns for one row of a verify
// (ForwardBackend::VerifyAndPick): the drawn token (unfiltered draw), or the row's top-k
// candidates (ids, values), or, when the candidates do not fit, the whole row (logits).
struct RowPick {
  int token = -1;
  std::vector<int> ids;
  std::vector<float> values;
  std::vector<float> logits;
};

// The residual stream after chosen decoder layers, for every token of the last call: what a
// drafter reads as context features. rows() is [tokens][layers.size()][hidden].
struct HiddenCapture {
  std::vector<int> layers;  // ascending decoder-layer indices
  int64_t tokens = 0;       // tokens of the last call that captured
  std::vector<float> rows;
};

// Gemma4TextRouter's choice for one token: probs = softmax(logits) (in place), idx = top-k of
// probs (ties to the lower index), w = probs[idx] / Σ probs[idx] · per_expert_scale[idx].
void RouteTopK(float* logits, int num_experts, int k, const float* per_expert_scale, int* idx,
               float* w);

class ForwardPass {
 public:
  // Scratch for chunks of up to max_chunk tokens.
  ForwardPass(const RuntimeModel& model, int64_t max_chunk);
  // Bytes of scratch a ForwardPass (and a session's logits) takes for chunks of max_chunk and
  // RunLayerMajor calls of up to max_span tokens (0: none), with `threads` computing experts.
  static uint64_t ScratchBytes(const ModelConfig& config, int64_t max_chunk, int64_t max_span = 0,
                               int threads = 1);

  int64_t max_chunk() const { return max_chunk_; }
  // Records every token's routing into trace (null: off); the caller keeps it alive.
  void set_routing_trace(RoutingTrace* trace) { trace_ = trace; }
  // Called with the layer's index before every decoder layer runs (null: none). For tests that
  // need to act at a given point of a call, such as cancelling part way through a chunk.
  void set_before_layer(std::function<void(int layer)> hook) { before_layer_ = std::move(hook); }
  // Copies the residual after capture->layers into capture->rows for every token of each call
  // from now on (null: off); the caller keeps it alive. A RunFrom call's layers before its
  // first_layer ran elsewhere: their rows are zero.
  void set_capture(HiddenCapture* capture) { capture_ = capture; }
  // The affine matvecs' arithmetic (cpu::Precision) for decode and verify rows, experts
  // included; the router and prefill's matmuls stay exact.
  void set_precision(cpu::Precision precision) {
    precision_ = precision;
    experts_.set_precision(precision);
  }

  // Runs tokens ids[0..m) at positions pos0..pos0+m−1 (1 <= m <= max_chunk), stores their K/V
  // in kv, and writes logits: kAll → m rows, kLast → the last row, kNone → nothing. The caller
  // has validated ids, positions and the cache's history (positions before pos0 present).
  // `cancel` (may be null) is polled before every layer; a cancelled call returns kCancelled
  // having written K/V of positions pos0.. in the layers before, which the cache's history
  // does not include: the positions before pos0 stay intact (a sliding ring has room for a
  // whole chunk past its window), so the timeline simply stays at pos0.
  Status Run(KvCache& kv, const int* ids, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
             ThreadPool* pool, ForwardStats* stats, const std::atomic<bool>* cancel = nullptr);
  // Runs ids[0..n) (any n >= 1) layer by layer: every chunk of up to max_chunk tokens goes
  // through layer L before any goes through layer L+1, so the routed experts a long prompt uses
  // are wanted once per layer instead of once per chunk (a streaming store holds one layer's
  // experts meanwhile, not the whole model's). The residual of all n tokens is kept (n·hidden
  // floats). Logits are bit-identical to Run over the same chunks. `cancel` (may be null) is
  // polled between chunks; a cancelled or failed call leaves the cache partly updated (layers
  // before the failing one hold the new positions), so the caller must start its timeline over.
  Status RunLayerMajor(KvCache& kv, const int* ids, int64_t n, int64_t pos0, LogitsRows rows,
                       float* logits, ThreadPool* pool, ForwardStats* stats,
                       const std::atomic<bool>* cancel);

  // The same call from the middle: x is the residual entering layer first_layer ([m][hidden],
  // as another backend left it; first_layer == num_layers runs the head alone), kv holds every
  // earlier layer's K/V of these positions. Runs layers first_layer.. and the head. (The routing
  // trace skips such a call: its first layers ran elsewhere.)
  Status RunFrom(KvCache& kv, const float* x, int first_layer, int64_t m, int64_t pos0,
                 LogitsRows rows, float* logits, ThreadPool* pool, ForwardStats* stats);

 private:
  void Embed(const int* ids, int64_t m);
  // cos/sin rows for positions pos0..pos0+m−1, written at table row `row0` (tables grow as needed).
  void RopeTables(int64_t pos0, int64_t m, int64_t row0 = 0);
  // Reserves the routing trace's rows for a call of n tokens.
  void BeginTrace(int64_t n);
  // Layers first.. and the head over the residual in x_ (Run and RunFrom's common part).
  Status Layers(int first, KvCache& kv, int64_t m, int64_t pos0, LogitsRows rows, float* logits,
                ThreadPool* pool, ForwardStats* st, const std::atomic<bool>* cancel);
  // Sizes capture_->rows for a call of n tokens (zeroed), when capturing.
  void BeginCapture(int64_t n);
  // Copies x_ (m rows after layer li) to the capture at token row0, when li is captured.
  void CaptureLayer(int li, int64_t row0, int64_t m);
  Status DecoderLayer(int li, KvCache& kv, int64_t m, int64_t pos0, ThreadPool* pool,
                      ForwardStats* st);
  void Attention(int li, KvCache& kv, int64_t m, int64_t pos0, ThreadPool* pool);
  void DenseMlp(int li, int64_t m, ThreadPool* pool);
  void Router(int li, int64_t m, ThreadPool* pool);
  // Gemma4TextExperts: RMS_pre_ff_2, the experts (Begun by DecoderLayer), RMS_post_ff_2.
  Status Experts(int li, int64_t m, ThreadPool* pool, ForwardStats* st);
  void Head(int64_t row0, int64_t rows, float* logits, ThreadPool* pool);

  const RuntimeModel& model_;
  const ModelConfig& c_;
  int64_t max_chunk_;
  Dumper dump_;
  // Activations, [rows][width] row-major.
  ZeroedFloats x_;                // residual stream h [m][H]
  ZeroedFloats a_;                // normed input / scratch [m][H]
  ZeroedFloats q_, k_, v_, att_;  // [m][heads|kv][hd]
  ZeroedFloats o_;                // [m][H]
  ZeroedFloats g_, u_;            // dense GeGLU [m][inter]
  ZeroedFloats m1_, m2_, r_;      // [m][H]
  ZeroedFloats router_logits_;    // [m][E]
  std::vector<int> topk_idx_;     // [m][k]
  ZeroedFloats topk_w_;           // [m][k]
  // The routed experts' plan, reads and compute (DecoderLayer begins, Experts runs).
  ExpertSchedule experts_;
  cpu::Precision precision_ = cpu::Precision::kExact;
  RoutingTrace* trace_ = nullptr;
  HiddenCapture* capture_ = nullptr;
  std::function<void(int)> before_layer_;
  int64_t trace_base_ = 0;  // the first token of this call in trace_
  // The current chunk's first token within the call (layer-major calls run several chunks):
  // its row in the RoPE tables and, after trace_base_, in the routing trace.
  int64_t chunk_row0_ = 0;
  ZeroedFloats rope_cos_s_, rope_sin_s_, rope_cos_f_, rope_sin_f_;  // [rows][hd/2]
  ZeroedFloats span_x_;  // RunLayerMajor: the residual of every token of the call [n][H]
};

}  // namespace rw
