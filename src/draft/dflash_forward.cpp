#include "draft/dflash_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/ops.h"
#include "base/check.h"

namespace rw {

namespace {

// Context rows a sliding layer keeps beyond its window, so that cutting the context back by a
// rejected block (or a short rewind) finds its keys still there.
constexpr int64_t kSlidingSlack = 256;

WeightView NormView(const std::vector<float>& w) {
  return F32Weight(w.data(), 1, static_cast<int64_t>(w.size()));
}

void RmsRows(const float* x, float* y, int64_t rows, const std::vector<float>& w, double eps) {
  const WeightView v = NormView(w);
  cpu::RmsNormRows(x, y, rows, static_cast<int64_t>(w.size()), &v, static_cast<float>(eps));
}

void ParallelOrInline(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (pool == nullptr || n < 2) {
    fn(0, n);
    return;
  }
  pool->ParallelFor(n, 1, [&](size_t b, size_t e, int) { fn(b, e); });
}

}  // namespace

DFlashState::DFlashState(const DFlashModel& model, DFlashTarget target, ThreadPool* pool)
    : model_(model), c_(model.config()), target_(target), pool_(pool) {
  CHECK(target_.embed.cols == c_.hidden && target_.lm_head.cols == c_.hidden);
  cache_.resize(static_cast<size_t>(c_.num_layers));
}

void DFlashState::Truncate(int64_t pos) {
  pos = std::max<int64_t>(0, pos);
  if (pos >= end_) return;
  const int64_t row = int64_t{c_.num_kv_heads} * c_.head_dim;
  for (LayerCache& L : cache_) {
    const int64_t keep = std::max<int64_t>(0, pos - L.first);
    L.k.resize(static_cast<size_t>(keep * row));
    L.v.resize(static_cast<size_t>(keep * row));
    if (keep == 0) L.first = pos;
  }
  end_ = pos;
}

// DFlashDraftModel.forward: target_hidden = self.hidden_norm(self.fc(target_hidden)), where
// target_hidden is the concatenation of the target's hidden states at target_layer_ids
// (extract_context_feature; HiddenCapture rows are already laid out that way).
void DFlashState::ContextFeatures(const float* features, int64_t n, float* out) {
  cpu::Linear(model_.fc(), features, n, out, pool_);
  RmsRows(out, out, n, model_.hidden_norm(), c_.rms_norm_eps);
}

void DFlashState::NormRope(const std::vector<float>& norm, float* x, int64_t rows, int heads,
                           int64_t pos0) {
  const int hd = c_.head_dim, half = hd / 2;
  RmsRows(x, x, rows * heads, norm, c_.rms_norm_eps);
  std::vector<float> cs(static_cast<size_t>(hd));
  for (int64_t r = 0; r < rows; ++r) {
    cpu::RopeTable(pos0 + r, model_.inv_freq().data(), half, cs.data(), cs.data() + half);
    cpu::RopeNeox(x + r * heads * hd, heads, hd, cs.data(), cs.data() + half);
  }
}

void DFlashState::TrimSliding(int li) {
  const int64_t w = c_.window(li);
  if (w <= 0) return;
  LayerCache& L = cache_[static_cast<size_t>(li)];
  const int64_t row = int64_t{c_.num_kv_heads} * c_.head_dim;
  const int64_t drop = end_ - w - kSlidingSlack - L.first;
  // Erase in bulk only once the excess is large, so appends stay amortized O(1).
  if (drop < kSlidingSlack) return;
  L.k.erase(L.k.begin(), L.k.begin() + drop * row);
  L.v.erase(L.v.begin(), L.v.begin() + drop * row);
  L.first += drop;
}

void DFlashState::AddContext(const float* features, int64_t n, int64_t pos0) {
  if (n <= 0) return;
  if (pos0 < end_) Truncate(pos0);
  if (pos0 > end_) {
    // Positions the drafter never saw (a cached prefix from before it was attached): start the
    // context over at pos0. Drafts are only guesses; the target decides every token.
    for (LayerCache& L : cache_) {
      L.k.clear();
      L.v.clear();
      L.first = pos0;
    }
    end_ = pos0;
  }
  const int64_t H = c_.hidden, kvw = int64_t{c_.num_kv_heads} * c_.head_dim;
  std::vector<float> ctx(static_cast<size_t>(n * H)), k(static_cast<size_t>(n * kvw)),
      v(static_cast<size_t>(n * kvw));
  ContextFeatures(features, n, ctx.data());
  for (int li = 0; li < c_.num_layers; ++li) {
    // Qwen3DFlashAttention: k_ctx = k_proj(target_hidden), v_ctx = v_proj(target_hidden) (the
    // context is not passed through input_layernorm), then k_norm per head and RoPE at the
    // context's absolute positions; the cache keeps them as they are.
    const DFlashLayer& L = model_.layer(li);
    cpu::Linear(L.k, ctx.data(), n, k.data(), pool_);
    cpu::Linear(L.v, ctx.data(), n, v.data(), pool_);
    NormRope(L.k_norm, k.data(), n, c_.num_kv_heads, pos0);
    LayerCache& C = cache_[static_cast<size_t>(li)];
    C.k.insert(C.k.end(), k.begin(), k.end());
    C.v.insert(C.v.end(), v.begin(), v.end());
  }
  end_ = pos0 + n;
  for (int li = 0; li < c_.num_layers; ++li) TrimSliding(li);
}

// Qwen3DFlashAttention.forward for the block's rows: q from the block only (q_norm, RoPE at the
// block's positions); keys and values are [cached context ; block] (k_norm over both, RoPE at
// absolute positions), one softmax per query over every visible key. Visibility is the
// reference's _attention_mask over positions: causal layers see keys at or before the query;
// sliding layers only keys less than the window away (on both sides when not causal); a full,
// non-causal layer sees everything.
void DFlashState::Attention(int li, const float* x, int64_t b, int64_t pos0, float* out) {
  const DFlashLayer& L = model_.layer(li);
  const LayerCache& C = cache_[static_cast<size_t>(li)];
  const int nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
  const int64_t qw = int64_t{nh} * hd, kvw = int64_t{nkv} * hd;
  std::vector<float> q(static_cast<size_t>(b * qw)), kb(static_cast<size_t>(b * kvw)),
      vb(static_cast<size_t>(b * kvw)), att(static_cast<size_t>(b * qw));
  cpu::Linear(L.q, x, b, q.data(), pool_);
  cpu::Linear(L.k, x, b, kb.data(), pool_);
  cpu::Linear(L.v, x, b, vb.data(), pool_);
  NormRope(L.q_norm, q.data(), b, nh, pos0);
  NormRope(L.k_norm, kb.data(), b, nkv, pos0);

  const int64_t cached = static_cast<int64_t>(C.k.size()) / kvw;
  const int64_t total = cached + b;
  const bool causal = c_.causal(li);
  const int64_t window = c_.window(li);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int group = nh / nkv;
  auto key_pos = [&](int64_t j) { return j < cached ? C.first + j : pos0 + (j - cached); };
  auto visible = [&](int64_t kp, int64_t qp) {
    if (causal && kp > qp) return false;
    if (window > 0) {
      if (qp - kp >= window) return false;
      if (!causal && kp - qp >= window) return false;
    }
    return true;
  };
  ParallelOrInline(pool_, static_cast<size_t>(b * nh), [&](size_t begin, size_t end) {
    std::vector<float> s(static_cast<size_t>(total));
    for (size_t task = begin; task < end; ++task) {
      const int64_t i = static_cast<int64_t>(task) / nh;
      const int h = static_cast<int>(task % static_cast<size_t>(nh)), g = h / group;
      const int64_t qp = pos0 + i;
      const float* qi = &q[static_cast<size_t>(i * qw + int64_t{h} * hd)];
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < total; ++j) {
        if (!visible(key_pos(j), qp)) {
          s[j] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const float* kj = j < cached ? &C.k[static_cast<size_t>(j * kvw + int64_t{g} * hd)]
                                     : &kb[static_cast<size_t>((j - cached) * kvw + g * hd)];
        s[j] = cpu::Dot(qi, kj, hd) * scale;
        mx = std::max(mx, s[j]);
      }
      float* o = &att[static_cast<size_t>(i * qw + int64_t{h} * hd)];
      std::fill(o, o + hd, 0.0f);
      double sum = 0;
      for (int64_t j = 0; j < total; ++j) {
        if (s[j] == -std::numeric_limits<float>::infinity()) continue;
        const float p = std::exp(s[j] - mx);
        sum += p;
        const float* vj = j < cached ? &C.v[static_cast<size_t>(j * kvw + int64_t{g} * hd)]
                                     : &vb[static_cast<size_t>((j - cached) * kvw + g * hd)];
        cpu::Axpy(o, p, vj, hd);
      }
      cpu::Scale(o, static_cast<float>(1.0 / sum), hd);
    }
  });
  cpu::Linear(L.o, att.data(), b, out, pool_);
}

// Qwen3MLP: down_proj(silu(gate_proj(x)) · up_proj(x)).
void DFlashState::Mlp(int li, const float* x, int64_t b, float* out) {
  const DFlashLayer& L = model_.layer(li);
  const int64_t I = c_.intermediate;
  std::vector<float> g(static_cast<size_t>(b * I)), u(static_cast<size_t>(b * I));
  cpu::Linear(L.gate, x, b, g.data(), pool_);
  cpu::Linear(L.up, x, b, u.data(), pool_);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  cpu::Linear(L.down, g.data(), b, out, pool_);
}

// DFlashDraftModel.forward over the block: noise_embedding (the target's raw embedding rows of
// the block's ids × input_embedding_scale, _raw_input_embeddings; not Gemma's ×√hidden), then
// each Qwen3DFlashDecoderLayer (x += attn(input_layernorm(x)); x += mlp(post_attention_
// layernorm(x))), then the drafter's own final norm.
std::vector<float> DFlashState::Block(std::span<const int> ids, int64_t pos0) {
  const int64_t b = static_cast<int64_t>(ids.size()), H = c_.hidden;
  CHECK(b >= 1);
  std::vector<float> x(static_cast<size_t>(b * H)), a(x.size()), o(x.size());
  for (int64_t i = 0; i < b; ++i) {
    CHECK(ids[i] >= 0 && ids[i] < target_.embed.rows);
    cpu::DequantRow(target_.embed, ids[i], &x[static_cast<size_t>(i * H)]);
  }
  if (c_.input_embedding_scale != 1.0)
    cpu::Scale(x.data(), static_cast<float>(c_.input_embedding_scale), b * H);
  if (pos0 < end_) pos0 = end_;
  for (int li = 0; li < c_.num_layers; ++li) {
    const DFlashLayer& L = model_.layer(li);
    RmsRows(x.data(), a.data(), b, L.input_ln, c_.rms_norm_eps);
    Attention(li, a.data(), b, pos0, o.data());
    cpu::Add(x.data(), o.data(), b * H);
    RmsRows(x.data(), a.data(), b, L.post_attn_ln, c_.rms_norm_eps);
    Mlp(li, a.data(), b, o.data());
    cpu::Add(x.data(), o.data(), b * H);
  }
  RmsRows(x.data(), x.data(), b, model_.norm(), c_.rms_norm_eps);
  return x;
}

const WeightView& DFlashState::HotView(std::span<const int> hot_ids) {
  if (hot_.ids.size() == hot_ids.size() &&
      std::equal(hot_ids.begin(), hot_ids.end(), hot_.ids.begin()))
    return hot_.view;
  const WeightView& w = target_.lm_head;
  const int64_t n = static_cast<int64_t>(hot_ids.size());
  hot_.ids.assign(hot_ids.begin(), hot_ids.end());
  // Bytes per row of each part, as the kernels index them.
  int64_t data_row = 0, group_row = 0;
  switch (w.type) {
    case WeightType::kF32:
      data_row = w.cols * 4;
      break;
    case WeightType::kBf16:
      data_row = w.cols * 2;
      break;
    case WeightType::kAffine:
      data_row = w.RowWords() * 4;
      group_row = w.RowGroups() * 2;
      break;
  }
  hot_.data.resize(static_cast<size_t>(n * data_row));
  hot_.scales.resize(static_cast<size_t>(n * group_row));
  hot_.biases.resize(static_cast<size_t>(n * group_row));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = hot_ids[static_cast<size_t>(i)];
    CHECK(id >= 0 && id < w.rows);
    std::memcpy(&hot_.data[i * data_row], static_cast<const uint8_t*>(w.data) + id * data_row,
                static_cast<size_t>(data_row));
    if (group_row > 0) {
      std::memcpy(&hot_.scales[i * group_row],
                  reinterpret_cast<const uint8_t*>(w.scales) + id * group_row,
                  static_cast<size_t>(group_row));
      std::memcpy(&hot_.biases[i * group_row],
                  reinterpret_cast<const uint8_t*>(w.biases) + id * group_row,
                  static_cast<size_t>(group_row));
    }
  }
  hot_.view = w;
  hot_.view.rows = n;
  hot_.view.data = hot_.data.data();
  if (group_row > 0) {
    hot_.view.scales = reinterpret_cast<const uint16_t*>(hot_.scales.data());
    hot_.view.biases = reinterpret_cast<const uint16_t*>(hot_.biases.data());
  }
  return hot_.view;
}

// compute_logits: output_head(hidden) (the target's lm_head: no final norm of the target's, the
// drafter's norm came last in Block), × output_multiplier, then cap · tanh(logits / cap).
void DFlashState::Logits(const float* hidden, int64_t rows, std::span<const int> hot_ids,
                         float* out) {
  const WeightView& head = target_.lm_head;
  int64_t n = head.rows;
  if (hot_ids.empty()) {
    cpu::Linear(head, hidden, rows, out, pool_);
  } else {
    n = static_cast<int64_t>(hot_ids.size());
    cpu::Linear(HotView(hot_ids), hidden, rows, out, pool_);
  }
  if (c_.output_multiplier != 1.0)
    cpu::Scale(out, static_cast<float>(c_.output_multiplier), rows * n);
  if (c_.final_logit_softcapping > 0)
    cpu::Softcap(out, rows * n, static_cast<float>(c_.final_logit_softcapping));
}

std::vector<int> DFlashState::Draft(int last, int n, std::span<const int> hot_ids, int64_t pos0) {
  if (n <= 0) return {};
  std::vector<int> block(static_cast<size_t>(n + 1), c_.mask_token_id);
  block[0] = last;
  const std::vector<float> hidden = Block(block, pos0);
  const int64_t H = c_.hidden;
  const int64_t width = hot_ids.empty() ? target_.lm_head.rows : int64_t(hot_ids.size());
  std::vector<float> logits(static_cast<size_t>(n * width));
  Logits(&hidden[static_cast<size_t>(H)], n, hot_ids, logits.data());
  std::vector<int> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const float* row = &logits[static_cast<size_t>(i * width)];
    int64_t best = 0;
    for (int64_t j = 1; j < width; ++j)
      if (row[j] > row[best]) best = j;
    out[static_cast<size_t>(i)] = hot_ids.empty() ? static_cast<int>(best) : hot_ids[best];
  }
  return out;
}

}  // namespace rw
