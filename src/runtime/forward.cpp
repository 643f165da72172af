#include "runtime/forward.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/cpu/ops.h"
#include "base/timer.h"
#include "base/trace.h"

namespace rw {
namespace {

using cpu::Linear;

WeightView NormWeight(const std::vector<float>& w) {
  return F32Weight(w.data(), 1, static_cast<int64_t>(w.size()));
}

}  // namespace

void RouteTopK(float* p, int num_experts, int k, const float* per_expert_scale, int* idx,
               float* w) {
  cpu::Softmax(p, num_experts);
  cpu::TopK(p, num_experts, k, idx);
  float sum = 0;
  for (int j = 0; j < k; ++j) sum += p[idx[j]];
  for (int j = 0; j < k; ++j) w[j] = p[idx[j]] / sum * per_expert_scale[idx[j]];
}

void ForwardStats::Add(const ForwardStats& o) {
  embed_s += o.embed_s;
  attention_s += o.attention_s;
  dense_s += o.dense_s;
  moe_s += o.moe_s;
  head_s += o.head_s;
  tokens += o.tokens;
  experts_run += o.experts_run;
  stall_s += o.stall_s;
  early_guessed += o.early_guessed;
  early_right += o.early_right;
  early_chosen += o.early_chosen;
}

uint64_t ForwardPass::ScratchBytes(const ModelConfig& c, int64_t M, int64_t max_span, int threads) {
  const int64_t H = c.hidden_size;
  const int64_t hd_max = std::max(c.sliding.head_dim, c.full.head_dim);
  const int64_t kv_max = std::max(int64_t{c.sliding.num_kv_heads} * c.sliding.head_dim,
                                  int64_t{c.full.num_kv_heads} * c.full.head_dim);
  int64_t floats = M * H * 7 + 2 * M * c.num_heads * hd_max + 2 * M * kv_max +
                   2 * M * c.intermediate_size +
                   2 * M * std::max(c.sliding.head_dim, c.full.head_dim);
  if (c.enable_moe) floats += M * c.num_experts + 2 * M * c.top_k;  // router logits, top-k
  floats += ExpertSchedule::ScratchFloats(c, M, threads);
  floats += 2 * int64_t{c.vocab_size};  // the last row's logits, and a copy for the caller
  // Layer-major calls: the residual and both RoPE tables of every token of the span.
  if (max_span > M) floats += max_span * (H + c.sliding.head_dim + c.full.head_dim);
  return static_cast<uint64_t>(floats) * sizeof(float);
}

ForwardPass::ForwardPass(const RuntimeModel& model, int64_t max_chunk)
    : model_(model),
      c_(model.config()),
      max_chunk_(max_chunk),
      dump_(Dumper::FromEnv()),
      experts_(model, max_chunk) {
  CHECK(max_chunk >= 1);
  const int64_t M = max_chunk, H = c_.hidden_size;
  const int64_t hd_max = std::max(c_.sliding.head_dim, c_.full.head_dim);
  const int64_t kv_max = std::max(int64_t{c_.sliding.num_kv_heads} * c_.sliding.head_dim,
                                  int64_t{c_.full.num_kv_heads} * c_.full.head_dim);
  x_.resize(M * H);
  a_.resize(M * H);
  q_.resize(M * c_.num_heads * hd_max);
  att_.resize(M * c_.num_heads * hd_max);
  k_.resize(M * kv_max);
  v_.resize(M * kv_max);
  o_.resize(M * H);
  g_.resize(M * c_.intermediate_size);
  u_.resize(M * c_.intermediate_size);
  m1_.resize(M * H);
  m2_.resize(M * H);
  r_.resize(M * H);
  if (c_.enable_moe) {
    const int64_t k = c_.top_k;
    router_logits_.resize(M * c_.num_experts);
    topk_idx_.resize(M * k);
    topk_w_.resize(M * k);
  }
  rope_cos_s_.resize(M * c_.sliding.head_dim / 2);
  rope_sin_s_.resize(M * c_.sliding.head_dim / 2);
  rope_cos_f_.resize(M * c_.full.head_dim / 2);
  rope_sin_f_.resize(M * c_.full.head_dim / 2);
}

Status ForwardPass::Run(KvCache& kv, const int* ids, int64_t m, int64_t pos0, LogitsRows rows,
                        float* logits, ThreadPool* pool, ForwardStats* stats,
                        const std::atomic<bool>* cancel) {
  CHECK_MSG(m >= 1 && m <= max_chunk_, "chunk of {} tokens (max {})", m, max_chunk_);
  ForwardStats local;
  ForwardStats* st = stats != nullptr ? stats : &local;
  Stopwatch sw;
  BeginTrace(m);
  BeginCapture(m);
  chunk_row0_ = 0;
  {
    TraceScope t("embed", "forward", "tokens", m);
    Embed(ids, m);
    RopeTables(pos0, m);
  }
  st->embed_s += sw.Seconds();
  return Layers(0, kv, m, pos0, rows, logits, pool, st, cancel);
}

Status ForwardPass::RunFrom(KvCache& kv, const float* x, int first_layer, int64_t m, int64_t pos0,
                            LogitsRows rows, float* logits, ThreadPool* pool, ForwardStats* stats) {
  CHECK_MSG(m >= 1 && m <= max_chunk_, "chunk of {} tokens (max {})", m, max_chunk_);
  CHECK(first_layer >= 0 && first_layer <= c_.num_layers);
  ForwardStats local;
  ForwardStats* st = stats != nullptr ? stats : &local;
  Stopwatch sw;
  std::copy_n(x, m * c_.hidden_size, x_.begin());
  chunk_row0_ = 0;
  RopeTables(pos0, m);
  st->embed_s += sw.Seconds();
  // The trace gets a call's tokens when it runs every layer; one that starts later has none.
  RoutingTrace* trace = std::exchange(trace_, first_layer > 0 ? nullptr : trace_);
  BeginTrace(m);
  BeginCapture(m);
  Status s = Layers(first_layer, kv, m, pos0, rows, logits, pool, st, /*cancel=*/nullptr);
  trace_ = trace;
  return s;
}

Status ForwardPass::Layers(int first, KvCache& kv, int64_t m, int64_t pos0, LogitsRows rows,
                           float* logits, ThreadPool* pool, ForwardStats* st,
                           const std::atomic<bool>* cancel) {
  // A layer fails only when the expert store cannot deliver (a streaming store's read error).
  for (int li = first; li < c_.num_layers; ++li) {
    if (before_layer_) before_layer_(li);
    // One layer of a 512-token chunk is under a second on two cores; a whole chunk is not.
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed))
      return Error(ErrorCode::kCancelled, "prefill cancelled at layer {}", li);
    RW_RETURN_IF_ERROR(DecoderLayer(li, kv, m, pos0, pool, st));
    CaptureLayer(li, 0, m);
  }
  Stopwatch sw;
  {
    TraceScope t("head", "forward", "tokens", m);
    if (rows == LogitsRows::kAll)
      Head(0, m, logits, pool);
    else if (rows == LogitsRows::kLast)
      Head(m - 1, 1, logits, pool);
  }
  st->head_s += sw.Seconds();
  st->tokens += m;
  return Status::Ok();
}

Status ForwardPass::RunLayerMajor(KvCache& kv, const int* ids, int64_t n, int64_t pos0,
                                  LogitsRows rows, float* logits, ThreadPool* pool,
                                  ForwardStats* stats, const std::atomic<bool>* cancel) {
  CHECK_MSG(n >= 1, "layer-major call of {} tokens", n);
  ForwardStats local;
  ForwardStats* st = stats != nullptr ? stats : &local;
  const int64_t H = c_.hidden_size, M = max_chunk_, V = c_.vocab_size;
  const int64_t chunks = (n + M - 1) / M;
  auto chunk_rows = [&](int64_t c) { return std::min(M, n - c * M); };
  Stopwatch sw;
  BeginTrace(n);
  BeginCapture(n);
  span_x_.resize(static_cast<size_t>(n * H));
  for (int64_t c = 0; c < chunks; ++c) {
    TraceScope t("embed", "forward", "tokens", chunk_rows(c));
    Embed(ids + c * M, chunk_rows(c));
    std::copy_n(x_.data(), chunk_rows(c) * H, &span_x_[c * M * H]);
    RopeTables(pos0 + c * M, chunk_rows(c), c * M);
  }
  st->embed_s += sw.Seconds();
  // The chunks' residuals take turns in x_, where DecoderLayer works.
  for (int li = 0; li < c_.num_layers; ++li) {
    if (before_layer_) before_layer_(li);
    for (int64_t c = 0; c < chunks; ++c) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed))
        return Error(ErrorCode::kCancelled, "prefill cancelled at layer {}", li);
      const int64_t m = chunk_rows(c);
      chunk_row0_ = c * M;
      std::copy_n(&span_x_[c * M * H], m * H, x_.data());
      RW_RETURN_IF_ERROR(DecoderLayer(li, kv, m, pos0 + c * M, pool, st));
      CaptureLayer(li, c * M, m);
      std::copy_n(x_.data(), m * H, &span_x_[c * M * H]);
    }
  }
  sw.Reset();
  TraceScope head_scope("head", "forward", "tokens", rows == LogitsRows::kAll ? n : 1);
  if (rows == LogitsRows::kAll) {
    for (int64_t c = 0; c < chunks; ++c) {
      std::copy_n(&span_x_[c * M * H], chunk_rows(c) * H, x_.data());
      Head(0, chunk_rows(c), logits + c * M * V, pool);
    }
  } else if (rows == LogitsRows::kLast) {
    std::copy_n(&span_x_[(n - 1) * H], H, x_.data());
    Head(0, 1, logits, pool);
  }
  st->head_s += sw.Seconds();
  st->tokens += n;
  return Status::Ok();
}

void ForwardPass::BeginTrace(int64_t n) {
  if (trace_ == nullptr) return;
  const int64_t L = c_.num_layers, k = c_.top_k;
  trace_->layers = static_cast<int>(L);
  trace_->top_k = static_cast<int>(k);
  trace_->num_experts = c_.num_experts;
  trace_base_ = trace_->tokens();
  trace_->ids.resize(trace_->ids.size() + static_cast<size_t>(n * L * k));
}

void ForwardPass::BeginCapture(int64_t n) {
  if (capture_ == nullptr || capture_->layers.empty()) return;
  capture_->tokens = n;
  capture_->rows.assign(static_cast<size_t>(n) * capture_->layers.size() * c_.hidden_size, 0.0f);
}

void ForwardPass::CaptureLayer(int li, int64_t row0, int64_t m) {
  if (capture_ == nullptr) return;
  const std::vector<int>& ls = capture_->layers;
  const auto it = std::lower_bound(ls.begin(), ls.end(), li);
  if (it == ls.end() || *it != li) return;
  const int64_t H = c_.hidden_size, L = static_cast<int64_t>(ls.size()), slot = it - ls.begin();
  for (int64_t t = 0; t < m; ++t)
    std::copy_n(&x_[t * H], H, &capture_->rows[static_cast<size_t>(((row0 + t) * L + slot) * H)]);
}

// E0 (Gemma4TextScaledWordEmbedding): h = E[id] · embed_scale.
void ForwardPass::Embed(const int* ids, int64_t m) {
  const int64_t H = c_.hidden_size;
  for (int64_t t = 0; t < m; ++t) {
    cpu::DequantRow(model_.embed(), ids[t], &x_[t * H]);
    cpu::Scale(&x_[t * H], c_.embed_scale, H);
  }
  dump_.Write("embed", -1, x_.data(), m, H);
}

// cos/sin of float(pos)·inv_freq for both attention kinds (Gemma4TextRotaryEmbedding), once
// per chunk for all layers.
void ForwardPass::RopeTables(int64_t pos0, int64_t m, int64_t row0) {
  const int hs = c_.sliding.head_dim / 2, hf = c_.full.head_dim / 2;
  const size_t rows = static_cast<size_t>(row0 + m);
  if (rope_cos_s_.size() < rows * hs) {
    rope_cos_s_.resize(rows * hs);
    rope_sin_s_.resize(rows * hs);
    rope_cos_f_.resize(rows * hf);
    rope_sin_f_.resize(rows * hf);
  }
  for (int64_t r = row0; r < row0 + m; ++r) {
    const int64_t pos = pos0 + (r - row0);
    cpu::RopeTable(pos, model_.inv_freq(false).data(), hs, &rope_cos_s_[r * hs],
                   &rope_sin_s_[r * hs]);
    cpu::RopeTable(pos, model_.inv_freq(true).data(), hf, &rope_cos_f_[r * hf],
                   &rope_sin_f_[r * hf]);
  }
}

// Gemma4TextDecoderLayer: attention block, then the dense MLP and the routed experts read the
// same residual h; h += RMS_post_ff(m1 + m2); h *= layer_scalar.
Status ForwardPass::DecoderLayer(int li, KvCache& kv, int64_t m, int64_t pos0, ThreadPool* pool,
                                 ForwardStats* st) {
  const LayerView& L = model_.layer(li);
  const int64_t H = c_.hidden_size;
  Stopwatch sw;
  {
    TraceScope t("attention", "forward", "layer", li);
    Attention(li, kv, m, pos0, pool);
  }
  st->attention_s += sw.Seconds();
  sw.Reset();
  if (c_.enable_moe) {
    // Route first: the store starts reading missing experts while the dense MLP runs.
    TraceScope t("route", "forward", "layer", li);
    Router(li, m, pool);
    RW_RETURN_IF_ERROR(experts_.Begin(li, m, topk_idx_.data(), topk_w_.data(), x_.data()));
  }
  st->moe_s += sw.Seconds();
  sw.Reset();
  {
    TraceScope t("dense_mlp", "forward", "layer", li);
    DenseMlp(li, m, pool);
  }
  st->dense_s += sw.Seconds();
  sw.Reset();
  if (c_.enable_moe) {
    TraceScope t("experts", "forward", "layer", li);
    RW_RETURN_IF_ERROR(Experts(li, m, pool, st));
    cpu::Add(m1_.data(), m2_.data(), m * H);  // F4: m1 + m2
  }
  // F4/F5.
  const WeightView post_ff = NormWeight(L.post_ff_ln);
  cpu::RmsNormRows(m1_.data(), m1_.data(), m, H, &post_ff, static_cast<float>(c_.rms_norm_eps));
  cpu::Add(x_.data(), m1_.data(), m * H);
  cpu::Scale(x_.data(), L.layer_scalar, m * H);
  st->moe_s += sw.Seconds();
  dump_.Write("out", li, x_.data(), m, H);
  return Status::Ok();
}

// Gemma4TextAttention (A1–A8): h += RMS_post_attn(o_proj(attn(RoPE(q_norm(q)), RoPE(k_norm(k)),
// RMS_0(v)))), scale 1.0, causal, sliding window on sliding layers, GQA.
void ForwardPass::Attention(int li, KvCache& kv, int64_t m, int64_t pos0, ThreadPool* pool) {
  const LayerView& L = model_.layer(li);
  const AttentionGeometry& g = c_.geometry(li);
  const int64_t H = c_.hidden_size, hd = g.head_dim, nh = c_.num_heads, nkv = g.num_kv_heads;
  const int64_t qdim = nh * hd, kvdim = nkv * hd;
  const float eps = static_cast<float>(c_.rms_norm_eps);

  // A1.
  const WeightView in_ln = NormWeight(L.input_ln);
  cpu::RmsNormRows(x_.data(), a_.data(), m, H, &in_ln, eps);
  // A2–A4: projections; V from v_proj, or (k_eq_v) from the raw K before k_norm.
  if (m == 1) {
    // Decode: the projections as one parallel job.
    const WeightView ws[3] = {L.q, L.k, L.v};
    float* const ys[3] = {q_.data(), k_.data(), v_.data()};
    cpu::MatVecMulti(ws, g.k_eq_v ? 2 : 3, a_.data(), ys, pool, precision_);
  } else {
    Linear(L.q, a_.data(), m, q_.data(), pool, precision_);
    Linear(L.k, a_.data(), m, k_.data(), pool, precision_);
    if (!g.k_eq_v) Linear(L.v, a_.data(), m, v_.data(), pool, precision_);
  }
  if (g.k_eq_v) std::copy(k_.begin(), k_.begin() + m * kvdim, v_.begin());
  const WeightView qn = NormWeight(L.q_norm), kn = NormWeight(L.k_norm);
  cpu::RmsNormRows(q_.data(), q_.data(), m * nh, hd, &qn, eps);
  cpu::RmsNormRows(k_.data(), k_.data(), m * nkv, hd, &kn, eps);
  cpu::RmsNormRows(v_.data(), v_.data(), m * nkv, hd, nullptr, eps);
  const int half = static_cast<int>(hd / 2);
  const float* cos = (L.full ? rope_cos_f_.data() : rope_cos_s_.data()) + chunk_row0_ * half;
  const float* sin = (L.full ? rope_sin_f_.data() : rope_sin_s_.data()) + chunk_row0_ * half;
  for (int64_t t = 0; t < m; ++t) {
    cpu::RopeNeox(&q_[t * qdim], static_cast<int>(nh), static_cast<int>(hd), cos + t * half,
                  sin + t * half);
    cpu::RopeNeox(&k_[t * kvdim], static_cast<int>(nkv), static_cast<int>(hd), cos + t * half,
                  sin + t * half);
    cpu::KvStore(kv.k_data(li), kv.v_data(li), kv.type(), static_cast<int>(nkv),
                 static_cast<int>(hd), kv.capacity(li), pos0 + t, &k_[t * kvdim], &v_[t * kvdim]);
  }
  dump_.Write("q", li, q_.data(), m, qdim);
  dump_.Write("k", li, k_.data(), m, kvdim);
  dump_.Write("v", li, v_.data(), m, kvdim);
  // A5–A7.
  const int64_t window = L.full ? 0 : c_.sliding_window;
  const cpu::KvCacheView view = kv.View(li);
  if (m == 1) {
    const int64_t begin = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0;
    cpu::AttendOne(q_.data(), static_cast<int>(nh), view, begin, pos0 + 1, 1.0f, att_.data(), pool);
  } else {
    cpu::AttendBlock(q_.data(), m, pos0, static_cast<int>(nh), view, window, 1.0f, att_.data(),
                     pool);
  }
  dump_.Write("attn", li, att_.data(), m, qdim);
  Linear(L.o, att_.data(), m, o_.data(), pool, precision_);
  // A8.
  const WeightView post = NormWeight(L.post_attn_ln);
  cpu::RmsNormRows(o_.data(), o_.data(), m, H, &post, eps);
  cpu::Add(x_.data(), o_.data(), m * H);
  dump_.Write("h_attn", li, x_.data(), m, H);
}

// Gemma4TextMLP (F1): m1 = RMS_post_ff_1(down(gelu_tanh(gate u) ⊙ up u)), u = RMS_pre_ff(h).
// Without MoE the layer has no post_feedforward_layernorm_1 and m1 is the raw MLP output.
void ForwardPass::DenseMlp(int li, int64_t m, ThreadPool* pool) {
  const LayerView& L = model_.layer(li);
  const int64_t H = c_.hidden_size, I = c_.intermediate_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const WeightView pre = NormWeight(L.pre_ff_ln);
  cpu::RmsNormRows(x_.data(), a_.data(), m, H, &pre, eps);
  if (m == 1) {
    const WeightView ws[2] = {L.gate, L.up};
    float* const ys[2] = {g_.data(), u_.data()};
    cpu::MatVecMulti(ws, 2, a_.data(), ys, pool, precision_);
  } else {
    Linear(L.gate, a_.data(), m, g_.data(), pool, precision_);
    Linear(L.up, a_.data(), m, u_.data(), pool, precision_);
  }
  cpu::GegluInPlace(g_.data(), u_.data(), m * I);
  Linear(L.down, g_.data(), m, m1_.data(), pool, precision_);
  if (c_.enable_moe) {
    const WeightView post1 = NormWeight(L.post_ff_ln1);
    cpu::RmsNormRows(m1_.data(), m1_.data(), m, H, &post1, eps);
  }
  dump_.Write("mlp", li, m1_.data(), m, H);
}

// Gemma4TextRouter (F2), on the raw residual h: r = RMS_0(h) ⊙ scale · H^-½; P = softmax(proj·r);
// top-k of P, renormalized to sum 1, times per_expert_scale. The choice goes to the routing
// trace when one is set.
void ForwardPass::Router(int li, int64_t m, ThreadPool* pool) {
  const LayerView& L = model_.layer(li);
  const int64_t H = c_.hidden_size, E = c_.num_experts, k = c_.top_k;
  const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  cpu::RmsNormRows(x_.data(), r_.data(), m, H, nullptr, static_cast<float>(c_.rms_norm_eps));
  for (int64_t t = 0; t < m; ++t) {
    cpu::Mul(&r_[t * H], L.router_scale.data(), H);
    cpu::Scale(&r_[t * H], root, H);
  }
  // Always exact: a tiny matrix, and its rounding would move which experts run.
  Linear(L.router, r_.data(), m, router_logits_.data(), pool);
  for (int64_t t = 0; t < m; ++t)
    RouteTopK(&router_logits_[t * E], static_cast<int>(E), static_cast<int>(k),
              L.per_expert_scale.data(), &topk_idx_[t * k], &topk_w_[t * k]);
  dump_.Write("router_probs", li, router_logits_.data(), m, E);
  if (trace_ != nullptr) {
    const int64_t layers = c_.num_layers, base = trace_base_ + chunk_row0_;
    for (int64_t t = 0; t < m; ++t)
      std::copy_n(&topk_idx_[t * k], k, &trace_->ids[((base + t) * layers + li) * k]);
  }
}

// Gemma4TextExperts (F3): moe = Σ_e w_e · down_e(gelu_tanh(gate_e u2) ⊙ up_e u2) with
// u2 = RMS_pre_ff_2(h); m2 = RMS_post_ff_2(moe). The schedule (Begun after the router, so the
// store reads while the dense MLP runs) reads each expert once per chunk for all the tokens that
// chose it and sums in ascending expert order, so every store gives the same bits.
Status ForwardPass::Experts(int li, int64_t m, ThreadPool* pool, ForwardStats* st) {
  const LayerView& L = model_.layer(li);
  const int64_t H = c_.hidden_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const WeightView pre2 = NormWeight(L.pre_ff_ln2);
  cpu::RmsNormRows(x_.data(), a_.data(), m, H, &pre2, eps);  // u2
  RW_RETURN_IF_ERROR(
      experts_.Run(li, m, a_.data(), m2_.data(), pool, &st->experts_run, &st->stall_s));
  const ExpertSchedule::EarlyCounts ec = experts_.TakeEarlyCounts();
  st->early_guessed += ec.guessed;
  st->early_right += ec.right;
  st->early_chosen += ec.chosen;
  dump_.Write("moe", li, m2_.data(), m, H);
  const WeightView post2 = NormWeight(L.post_ff_ln2);
  cpu::RmsNormRows(m2_.data(), m2_.data(), m, H, &post2, eps);
  return Status::Ok();
}

// Final norm, tied LM head (a matvec over the embedding), 30·tanh(z/30).
void ForwardPass::Head(int64_t row0, int64_t rows, float* logits, ThreadPool* pool) {
  const int64_t H = c_.hidden_size, V = c_.vocab_size;
  const WeightView norm = NormWeight(model_.final_norm());
  cpu::RmsNormRows(&x_[row0 * H], a_.data(), rows, H, &norm, static_cast<float>(c_.rms_norm_eps));
  dump_.Write("final_norm", -1, a_.data(), rows, H);
  Linear(model_.embed(), a_.data(), rows, logits, pool, precision_);
  if (c_.final_logit_softcapping > 0)
    cpu::Softcap(logits, rows * V, static_cast<float>(c_.final_logit_softcapping));
}

}  // namespace rw
