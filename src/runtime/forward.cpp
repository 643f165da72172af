#include "runtime/forward.h"

#include <mutex>

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/cpu/ops.h"
#include "base/timer.h"
#include "base/trace.h"

namespace rw {
namespace {

// y = W·x for m rows: MatVec for one row (decode), MatMul (weights reused across rows) otherwise.
void Linear(const WeightView& w, const float* x, int64_t m, float* y, ThreadPool* pool) {
  if (m == 1)
    cpu::MatVec(w, x, y, pool);
  else
    cpu::MatMul(w, x, m, y, pool);
}

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
}

uint64_t ForwardPass::ScratchBytes(const ModelConfig& c, int64_t M, int64_t max_span, int threads) {
  const int64_t H = c.hidden_size;
  const int64_t hd_max = std::max(c.sliding.head_dim, c.full.head_dim);
  const int64_t kv_max = std::max(int64_t{c.sliding.num_kv_heads} * c.sliding.head_dim,
                                  int64_t{c.full.num_kv_heads} * c.full.head_dim);
  int64_t floats = M * H * 7 + 2 * M * c.num_heads * hd_max + 2 * M * kv_max +
                   2 * M * c.intermediate_size +
                   2 * M * std::max(c.sliding.head_dim, c.full.head_dim);
  if (c.enable_moe) {
    floats += M * c.num_experts + 2 * M * c.top_k + M * c.top_k * H;
    // Each thread's expert scratch (RunExpert).
    floats += std::max(threads, 1) * M * (H + 2 * c.moe_intermediate_size);
  }
  floats += 2 * int64_t{c.vocab_size};  // the last row's logits, and a copy for the caller
  // Layer-major calls: the residual and both RoPE tables of every token of the span.
  if (max_span > M) floats += max_span * (H + c.sliding.head_dim + c.full.head_dim);
  return static_cast<uint64_t>(floats) * sizeof(float);
}

ForwardPass::ForwardPass(const RuntimeModel& model, int64_t max_chunk)
    : model_(model), c_(model.config()), max_chunk_(max_chunk), dump_(Dumper::FromEnv()) {
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
    ex_y_.resize(M * k * H);  // every (token, expert) output until they are summed
    early_r_.resize(H);
    early_logits_.resize(c_.num_experts);
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
    RW_RETURN_IF_ERROR(ExpertsBegin(li, m));
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
    cpu::MatVecMulti(ws, g.k_eq_v ? 2 : 3, a_.data(), ys, pool);
  } else {
    Linear(L.q, a_.data(), m, q_.data(), pool);
    Linear(L.k, a_.data(), m, k_.data(), pool);
    if (!g.k_eq_v) Linear(L.v, a_.data(), m, v_.data(), pool);
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
    cpu::KvStore(kv.k(li), kv.v(li), static_cast<int>(nkv), static_cast<int>(hd), kv.capacity(li),
                 pos0 + t, &k_[t * kvdim], &v_[t * kvdim]);
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
  Linear(L.o, att_.data(), m, o_.data(), pool);
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
    cpu::MatVecMulti(ws, 2, a_.data(), ys, pool);
  } else {
    Linear(L.gate, a_.data(), m, g_.data(), pool);
    Linear(L.up, a_.data(), m, u_.data(), pool);
  }
  cpu::GegluInPlace(g_.data(), u_.data(), m * I);
  Linear(L.down, g_.data(), m, m1_.data(), pool);
  if (c_.enable_moe) {
    const WeightView post1 = NormWeight(L.post_ff_ln1);
    cpu::RmsNormRows(m1_.data(), m1_.data(), m, H, &post1, eps);
  }
  dump_.Write("mlp", li, m1_.data(), m, H);
}

// Gemma4TextRouter (F2), on the raw residual h: r = RMS_0(h) ⊙ scale · H^-½; P = softmax(proj·r);
// top-k of P, renormalized to sum 1, times per_expert_scale.
void ForwardPass::Router(int li, int64_t m, ThreadPool* pool) {
  const LayerView& L = model_.layer(li);
  const int64_t H = c_.hidden_size, E = c_.num_experts, k = c_.top_k;
  const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  cpu::RmsNormRows(x_.data(), r_.data(), m, H, nullptr, static_cast<float>(c_.rms_norm_eps));
  for (int64_t t = 0; t < m; ++t) {
    cpu::Mul(&r_[t * H], L.router_scale.data(), H);
    cpu::Scale(&r_[t * H], root, H);
  }
  Linear(L.router, r_.data(), m, router_logits_.data(), pool);
  for (int64_t t = 0; t < m; ++t)
    RouteTopK(&router_logits_[t * E], static_cast<int>(E), static_cast<int>(k),
              L.per_expert_scale.data(), &topk_idx_[t * k], &topk_w_[t * k]);
  dump_.Write("router_probs", li, router_logits_.data(), m, E);
}

// Gemma4TextExperts (F3): moe = Σ_e w_e · down_e(gelu_tanh(gate_e u2) ⊙ up_e u2) with
// u2 = RMS_pre_ff_2(h); m2 = RMS_post_ff_2(moe). Each expert's weights are read once per chunk
// for all the tokens that chose it; outputs are summed in ascending expert index order whatever
// order the experts were computed in (resident ones first), so every store gives the same bits.
Status ForwardPass::ExpertsBegin(int li, int64_t m) {
  const int64_t k = c_.top_k, E = c_.num_experts;
  single_token_ = m == 1;
  if (trace_ != nullptr) {
    const int64_t L = c_.num_layers, base = trace_base_ + chunk_row0_;
    for (int64_t t = 0; t < m; ++t)
      std::copy_n(&topk_idx_[t * k], k, &trace_->ids[((base + t) * L + li) * k]);
  }
  users_.resize(E);
  for (auto& u : users_) u.clear();
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < k; ++j)
      users_[topk_idx_[t * k + j]].push_back({static_cast<int>(t), topk_w_[t * k + j]});
  used_.clear();
  row0_.clear();
  int64_t rows = 0;
  for (int e = 0; e < E; ++e) {
    if (users_[e].empty()) continue;
    used_.push_back(e);
    row0_.push_back(rows);
    rows += static_cast<int64_t>(users_[e].size());
  }
  // A store with fewer slots than the chunk's distinct experts gets them in batches.
  ExpertStore* store = model_.experts();
  const size_t cap = static_cast<size_t>(std::max(1, store->capacity_per_layer()));
  batches_.clear();
  for (size_t i = 0; i < used_.size(); i += cap)
    batches_.push_back({i, std::min(used_.size(), i + cap)});
  resident_.assign(used_.size(), 0);
  const auto [b0, b1] = batches_[0];
  RW_RETURN_IF_ERROR(store->Begin(li, std::span<const int>(&used_[b0], b1 - b0), &resident_[b0]));
  if (m == 1 && li + 1 < c_.num_layers) {
    if (model_.early_reads_by_router()) {
      EarlyReads(li + 1);
    } else if (const ExpertPredictor* p = model_.predictor()) {
      p->Predict(li, std::span<const int>(topk_idx_.data(), k), static_cast<int>(k), &early_guess_);
      store->Prefetch(li + 1, early_guess_);
    }
  }
  return Status::Ok();
}

// Guesses layer `next`'s experts by applying its router to the current residual (the real input
// will differ by this layer's update) and asks the store to read them at low priority.
void ForwardPass::EarlyReads(int next) {
  const LayerView& N = model_.layer(next);
  const int64_t H = c_.hidden_size, E = c_.num_experts, k = c_.top_k;
  cpu::RmsNormRows(x_.data(), early_r_.data(), 1, H, nullptr, static_cast<float>(c_.rms_norm_eps));
  cpu::Mul(early_r_.data(), N.router_scale.data(), H);
  cpu::Scale(early_r_.data(), static_cast<float>(std::pow(static_cast<double>(H), -0.5)), H);
  cpu::MatVec(N.router, early_r_.data(), early_logits_.data(), nullptr);
  std::vector<int> idx(k);
  std::vector<float> w(k);
  RouteTopK(early_logits_.data(), static_cast<int>(E), static_cast<int>(k),
            N.per_expert_scale.data(), idx.data(), w.data());
  model_.experts()->Prefetch(next, idx);
}

// Expert i's output rows for its users: gate and up, GeGLU, down into ex_y_ (Gemma4TextExperts,
// one expert). One user reads its row of u2 in place (two matvecs share it); several are
// gathered into the scratch first. pool: null when the caller runs experts side by side.
void ForwardPass::RunExpert(size_t i, const ExpertRef& ref, ExpertScratch& s, ThreadPool* pool) {
  const int64_t H = c_.hidden_size, I = c_.moe_intermediate_size;
  const auto& list = users_[used_[i]];
  const int64_t n = static_cast<int64_t>(list.size());
  const WeightView gate = ViewOf(ref.blob, ref.layout->gate);
  const WeightView up = ViewOf(ref.blob, ref.layout->up);
  float* const y = &ex_y_[row0_[i] * H];
  if (n == 1) {
    const WeightView gate_up[2] = {gate, up};
    float* const outs[2] = {s.g.data(), s.u.data()};
    cpu::MatVecMulti(gate_up, 2, &a_[list[0].first * H], outs, pool);
    cpu::GegluInPlace(s.g.data(), s.u.data(), I);
    cpu::MatVec(ViewOf(ref.blob, ref.layout->down), s.g.data(), y, pool);
    return;
  }
  for (int64_t r = 0; r < n; ++r) std::copy_n(&a_[list[r].first * H], H, &s.in[r * H]);
  Linear(gate, s.in.data(), n, s.g.data(), pool);
  Linear(up, s.in.data(), n, s.u.data(), pool);
  cpu::GegluInPlace(s.g.data(), s.u.data(), n * I);
  Linear(ViewOf(ref.blob, ref.layout->down), s.g.data(), n, y, pool);
}

// Whether batch [b0, b1) runs one expert per thread at a time rather than each expert split
// across the threads: it saves three pool dispatches per expert and every thread packing the
// same input rows, and it pays when the work is spread over many experts (always for one token,
// and for a prefill chunk unless one expert takes a large share of its tokens).
bool ForwardPass::ExpertsSideBySide(size_t b0, size_t b1, int threads) const {
  if (threads <= 1) return false;
  if (single_token_) return true;
  size_t total = 0, largest = 0;
  for (size_t i = b0; i < b1; ++i) {
    const size_t n = users_[used_[i]].size();
    total += n;
    largest = std::max(largest, n);
  }
  return largest * 4 * static_cast<size_t>(threads) <= total;
}

// Computes batch b (already Begun): experts that were resident first, the rest as they arrive.
Status ForwardPass::RunExpertBatch(int li, size_t b, ThreadPool* pool) {
  ExpertStore* store = model_.experts();
  const auto [b0, b1] = batches_[b];
  std::vector<size_t> order;
  for (size_t i = b0; i < b1; ++i)
    if (resident_[i]) order.push_back(i);
  for (size_t i = b0; i < b1; ++i)
    if (!resident_[i]) order.push_back(i);
  const int threads = pool != nullptr ? pool->size() : 1;
  auto wait = [&](size_t i) {
    TraceScope t("wait", "experts", "layer", li, "expert", used_[i]);
    return store->Wait(li, i - b0);
  };
  if (ExpertsSideBySide(b0, b1, threads)) {
    // Every expert is its own chunk, taken by whichever thread is free (a late-waking worker,
    // or a thread waiting on a read, takes fewer). Each thread has its own scratch.
    EnsureExpertScratch(threads);
    std::mutex mu;
    Status first_error;
    pool->ParallelFor(
        order.size(), 1,
        [&](size_t s, size_t e, int thread) {
          for (size_t q = s; q < e; ++q) {
            const size_t i = order[q];
            Result<ExpertRef> ref = wait(i);
            if (!ref.ok()) {
              std::lock_guard<std::mutex> lock(mu);
              if (first_error.ok()) first_error = ref.status();
              continue;
            }
            TraceScope t("expert", "experts", "layer", li, "expert", used_[i]);
            RunExpert(i, *ref, ex_scratch_[thread], nullptr);
          }
        },
        static_cast<int>(order.size()));
    return first_error;
  }
  EnsureExpertScratch(1);
  for (size_t i : order) {
    RW_ASSIGN_OR_RETURN(ExpertRef ref, wait(i));
    TraceScope t("expert", "experts", "layer", li, "expert", used_[i]);
    RunExpert(i, ref, ex_scratch_[0], pool);
  }
  return Status::Ok();
}

// Per-thread expert scratch, each sized for a whole chunk choosing one expert.
void ForwardPass::EnsureExpertScratch(int threads) {
  const int64_t rows = std::max<int64_t>(max_chunk_, 1);
  while (static_cast<int>(ex_scratch_.size()) < threads) {
    ExpertScratch s;
    s.in.resize(rows * c_.hidden_size);
    s.g.resize(rows * c_.moe_intermediate_size);
    s.u.resize(rows * c_.moe_intermediate_size);
    ex_scratch_.push_back(std::move(s));
  }
}

Status ForwardPass::Experts(int li, int64_t m, ThreadPool* pool, ForwardStats* st) {
  const LayerView& L = model_.layer(li);
  const int64_t H = c_.hidden_size;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const WeightView pre2 = NormWeight(L.pre_ff_ln2);
  cpu::RmsNormRows(x_.data(), a_.data(), m, H, &pre2, eps);  // u2
  ExpertStore* store = model_.experts();
  for (size_t b = 0; b < batches_.size(); ++b) {
    if (b > 0) {
      const auto [b0, b1] = batches_[b];
      RW_RETURN_IF_ERROR(
          store->Begin(li, std::span<const int>(&used_[b0], b1 - b0), &resident_[b0]));
    }
    Status s = RunExpertBatch(li, b, pool);
    store->Release(li);
    RW_RETURN_IF_ERROR(s);
  }
  std::fill(m2_.begin(), m2_.begin() + m * H, 0.0f);
  for (size_t i = 0; i < used_.size(); ++i) {
    const auto& list = users_[used_[i]];
    for (size_t r = 0; r < list.size(); ++r)
      cpu::Axpy(&m2_[list[r].first * H], list[r].second, &ex_y_[(row0_[i] + r) * H], H);
    st->experts_run += static_cast<int64_t>(list.size());
  }
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
  Linear(model_.embed(), a_.data(), rows, logits, pool);
  if (c_.final_logit_softcapping > 0)
    cpu::Softcap(logits, rows * V, static_cast<float>(c_.final_logit_softcapping));
}

}  // namespace rw
