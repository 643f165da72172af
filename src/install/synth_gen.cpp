#include "install/synth_gen.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/bf16.h"
#include "base/check.h"

namespace rw::synth {
namespace {

constexpr uint64_t kPurposeCodes = 0;
constexpr uint64_t kPurposeScales = 1;
constexpr uint64_t kPurposeVector = 2;

float CodeStd(int bits) {
  double levels = std::ldexp(1.0, bits);
  return static_cast<float>(std::sqrt((levels * levels - 1) / 12.0));
}

}  // namespace

uint64_t TensorKey(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed with the seed
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return Mix64(Mix64(seed) ^ h);
}

void GenCodes(const MatrixSpec& m, int64_t r0, int64_t r1, uint8_t* out) {
  const uint64_t n = m.row_bytes();
  for (int64_t r = r0; r < r1; ++r) {
    Stream s(m.key, static_cast<uint64_t>(r), kPurposeCodes);
    uint8_t* row = out + static_cast<uint64_t>(r - r0) * n;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t v = s.Next();
      std::memcpy(row + i, &v, 8);
    }
    if (i < n) {
      uint64_t v = s.Next();
      std::memcpy(row + i, &v, n - i);
    }
  }
}

void GenScales(const MatrixSpec& m, int64_t r0, int64_t r1, uint16_t* scales, uint16_t* biases) {
  const int64_t g = m.groups();
  const float half_range = static_cast<float>((std::ldexp(1.0, m.bits) - 1) / 2);
  const float base = m.std / CodeStd(m.bits);
  for (int64_t r = r0; r < r1; ++r) {
    Stream s(m.key, static_cast<uint64_t>(r), kPurposeScales);
    float row_scale = base * (m.row_gain.empty() ? 1.0f : m.row_gain[r]);
    for (int64_t k = 0; k < g; ++k) {
      float jitter = 0.85f + 0.3f * s.Uniform();
      uint16_t sb = F32ToBf16(row_scale * jitter);
      uint64_t at = static_cast<uint64_t>(r - r0) * g + k;
      if (scales != nullptr) scales[at] = sb;
      if (biases != nullptr) biases[at] = F32ToBf16(-Bf16ToF32(sb) * half_range);
    }
  }
}

void GenBf16(const MatrixSpec& m, int64_t r0, int64_t r1, uint16_t* out) {
  std::vector<uint8_t> codes(m.row_bytes());
  std::vector<uint16_t> sc(m.groups()), bi(m.groups());
  const unsigned mask = (1u << m.bits) - 1;
  for (int64_t r = r0; r < r1; ++r) {
    GenCodes(m, r, r + 1, codes.data());
    GenScales(m, r, r + 1, sc.data(), bi.data());
    uint16_t* row = out + static_cast<uint64_t>(r - r0) * m.cols;
    for (int64_t c = 0; c < m.cols; ++c) {
      uint64_t bit = static_cast<uint64_t>(c) * m.bits;
      unsigned q = (codes[bit / 8] >> (bit % 8)) & mask;
      int64_t k = c / m.group;
      // The MLX dequantization: scale * q + bias in fp32, no fused multiply-add.
      float prod = Bf16ToF32(sc[k]) * static_cast<float>(q);
      row[c] = F32ToBf16(prod + Bf16ToF32(bi[k]));
    }
  }
}

int64_t VectorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void GenVector(const VectorSpec& v, uint16_t* out) {
  Stream s(v.key, 0, kPurposeVector);
  for (int64_t i = 0; i < v.numel(); ++i) {
    float x = v.lo + (v.hi - v.lo) * s.Uniform();
    if (v.random_sign && (s.Next() & 1)) x = -x;
    out[i] = F32ToBf16(x);
  }
}

// Routing skew. Gemma 4's router has no bias (logits = W·RMS_0(h)·scale·H^-1/2), so popularity
// is shaped through the weights: expert e's router row is scaled by gain_e. For hidden states
// without a preferred direction a logit is then ~N(0, gain_e²·c), and a wider logit
// distribution wins the top-k more often. Ranks are a per-layer random permutation (hot experts
// differ by layer, as in real models), gain = (rank + 1)^(-skew/2), normalized to RMS 1 so the
// overall logit scale does not change with the skew.
std::vector<float> RouterRowGains(uint64_t seed, int layer, int num_experts, double skew) {
  std::vector<float> gains(num_experts, 1.0f);
  if (skew <= 0) return gains;
  std::vector<int> rank(num_experts);
  std::iota(rank.begin(), rank.end(), 0);
  Stream s(TensorKey(seed, "router_popularity"), static_cast<uint64_t>(layer), 0);
  for (int i = num_experts - 1; i > 0; --i) std::swap(rank[i], rank[s.Next() % (i + 1)]);
  double sum_sq = 0;
  for (int e = 0; e < num_experts; ++e) {
    gains[e] = static_cast<float>(std::pow(rank[e] + 1.0, -skew / 2));
    sum_sq += static_cast<double>(gains[e]) * gains[e];
  }
  float norm = static_cast<float>(1.0 / std::sqrt(sum_sq / num_experts));
  for (float& g : gains) g *= norm;
  return gains;
}

MatrixSpec SynthPlan::Expert(int layer, int expert, int which) const {
  static const char* kNames[] = {"gate", "up", "down"};
  CHECK(which >= 0 && which < 3);
  MatrixSpec m;
  m.name = fmt::format("layers.{}.experts.{}.{}", layer, expert, kNames[which]);
  const int64_t h = config.hidden_size, i = config.moe_intermediate_size;
  m.rows = which == 2 ? h : i;
  m.cols = which == 2 ? i : h;
  m.bits = quant.experts.bits;
  m.group = quant.experts.group;
  m.std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(m.cols)));
  m.key = TensorKey(seed, m.name);
  return m;
}

Result<SynthPlan> MakeSynthPlan(const std::string& geometry, uint64_t seed, double routing_skew,
                                int64_t vocab_size) {
  if (!(routing_skew >= 0) || routing_skew > 100)
    return Error(ErrorCode::kInvalidArgument, "routing skew must be in [0, 100], got {}",
                 routing_skew);
  SynthPlan p;
  RW_ASSIGN_OR_RETURN(p.config, SynthGeometry(geometry));
  if (vocab_size != 0) {
    if (vocab_size < 256 || vocab_size > (int64_t{1} << 20))
      return Error(ErrorCode::kInvalidArgument, "vocabulary size must be in [256, 1048576], got {}",
                   vocab_size);
    p.config.vocab_size = static_cast<int>(vocab_size);
  }
  p.geometry = geometry;
  p.seed = seed;
  p.routing_skew = routing_skew;
  p.quant = SynthQuantFor(geometry);
  const ModelConfig& c = p.config;
  const int64_t h = c.hidden_size;

  auto matrix = [&](std::string name, int64_t rows, int64_t cols, SynthQuant q, double std) {
    CoreEntry e;
    e.is_matrix = true;
    e.m.name = std::move(name);
    e.m.rows = rows;
    e.m.cols = cols;
    e.m.bits = q.bits;
    e.m.group = q.group;
    e.m.std = static_cast<float>(std);
    e.m.key = TensorKey(seed, e.m.name);
    p.core.push_back(std::move(e));
    return &p.core.back().m;
  };
  auto vector = [&](std::string name, int64_t n, float lo, float hi, bool hf_weight = true) {
    CoreEntry e;
    e.v.name = std::move(name);
    e.v.shape = {n};
    e.v.lo = lo;
    e.v.hi = hi;
    e.v.hf_weight = hf_weight;
    e.v.key = TensorKey(seed, e.v.name);
    p.core.push_back(std::move(e));
  };
  auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };

  // Embedding rows of RMS 2/sqrt(H): the scaled embedding (×sqrt(H)) enters the residual with
  // RMS ~2, comparable to what each layer adds, and tied-head logits have a std of ~2 so greedy
  // decoding depends on the state instead of sitting on one token.
  matrix("embed_tokens", c.vocab_size, h, p.quant.embed, 2.0 * inv_sqrt(h));
  for (int l = 0; l < c.num_layers; ++l) {
    const AttentionGeometry& g = c.geometry(l);
    const std::string pre = fmt::format("layers.{}.", l);
    const int64_t q_rows = static_cast<int64_t>(c.num_heads) * g.head_dim;
    const int64_t kv_rows = static_cast<int64_t>(g.num_kv_heads) * g.head_dim;
    vector(pre + "input_layernorm", h, 0.5f, 1.5f);
    matrix(pre + "self_attn.q_proj", q_rows, h, p.quant.attn, inv_sqrt(h));
    matrix(pre + "self_attn.k_proj", kv_rows, h, p.quant.attn, inv_sqrt(h));
    if (!g.k_eq_v) matrix(pre + "self_attn.v_proj", kv_rows, h, p.quant.attn, inv_sqrt(h));
    matrix(pre + "self_attn.o_proj", h, q_rows, p.quant.attn, inv_sqrt(q_rows));
    // The attention scale is 1.0, so q·k sums head_dim products of RMS-normed vectors: q/k norm
    // weights around 1.4·hd^-1/4 keep the scores' std near 2 (peaked but not one-hot).
    float qk = static_cast<float>(1.4 / std::pow(static_cast<double>(g.head_dim), 0.25));
    vector(pre + "self_attn.q_norm", g.head_dim, 0.5f * qk, 1.5f * qk);
    vector(pre + "self_attn.k_norm", g.head_dim, 0.5f * qk, 1.5f * qk);
    vector(pre + "post_attention_layernorm", h, 0.5f, 1.5f);
    vector(pre + "pre_feedforward_layernorm", h, 0.5f, 1.5f);
    matrix(pre + "mlp.gate_proj", c.intermediate_size, h, p.quant.mlp, inv_sqrt(h));
    matrix(pre + "mlp.up_proj", c.intermediate_size, h, p.quant.mlp, inv_sqrt(h));
    matrix(pre + "mlp.down_proj", h, c.intermediate_size, p.quant.mlp,
           inv_sqrt(c.intermediate_size));
    vector(pre + "post_feedforward_layernorm_1", h, 0.5f, 1.5f);
    if (c.enable_moe) {
      // Router input RMS is ~|scale|·H^-1/2 per element, so a row std of 1.5 gives logits of
      // std ~1.5: routing clearly prefers some experts per token without being one-hot.
      MatrixSpec* r = matrix(pre + "router.proj", c.num_experts, h, p.quant.router, 1.5);
      r->row_gain = RouterRowGains(seed, l, c.num_experts, routing_skew);
      vector(pre + "router.scale", h, 0.5f, 1.5f, false);
      vector(pre + "router.per_expert_scale", c.num_experts, 0.5f, 1.5f, false);
      vector(pre + "pre_feedforward_layernorm_2", h, 0.5f, 1.5f);
      vector(pre + "post_feedforward_layernorm_2", h, 0.5f, 1.5f);
    }
    vector(pre + "post_feedforward_layernorm", h, 0.5f, 1.5f);
    // Each layer adds two RMS-normed terms (~1 each) and then scales the whole stream: scalars
    // below 1 keep the residual bounded (steady-state RMS ~2) over any number of layers.
    vector(pre + "layer_scalar", 1, 0.6f, 1.0f, false);
  }
  // The head is tied: the current token's own embedding, still in the residual, would give its
  // own logit a large positive term through positive final-norm weights, and greedy decoding
  // would repeat the input forever. Random signs make that term average zero.
  vector("norm", h, 0.5f, 1.5f);
  p.core.back().v.random_sign = true;
  return p;
}

}  // namespace rw::synth
