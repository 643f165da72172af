#include "install/synth_gen.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/bf16.h"
#include "base/check.h"
#include "model/gemma4_table.h"

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
  CHECK(which >= 0 && which < static_cast<int>(std::size(gemma4::kExpertTensors)));
  const gemma4::ExpertRow& row = gemma4::kExpertTensors[which];
  const std::vector<int64_t> shape = gemma4::Shape(row, config);
  MatrixSpec m;
  m.name = fmt::format("layers.{}.experts.{}.{}", layer, expert, row.name);
  m.rows = shape[0];
  m.cols = shape[1];
  m.bits = quant.experts.bits;
  m.group = quant.experts.group;
  m.std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(m.cols)));
  m.key = TensorKey(seed, m.name);
  return m;
}

namespace {

SynthQuant QuantOf(const SynthQuantTable& q, gemma4::Role role) {
  using R = gemma4::Role;
  return role == R::kEmbedding   ? q.embed
         : role == R::kAttention ? q.attn
         : role == R::kMlp       ? q.mlp
         : role == R::kRouter    ? q.router
                                 : q.experts;
}

// How synth draws a core tensor of the table (layer -1: a model-level one).
CoreEntry DrawCoreTensor(const SynthPlan& p, const gemma4::TensorRow& row, int layer) {
  const ModelConfig& c = p.config;
  const std::vector<int64_t> shape = gemma4::Shape(row, c, layer);
  const std::string lead = layer < 0 ? "" : fmt::format("layers.{}.", layer);
  CoreEntry e;
  e.layer = layer;
  e.source = lead + std::string(row.source);
  auto inv_sqrt = [](int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  if (row.role == gemma4::Role::kVector) {
    VectorSpec& v = e.v;
    v.name = lead + std::string(row.name);
    v.shape = {shape[0]};  // values in [0.5, 1.5) unless set below
    if (row.name == "self_attn.q_norm" || row.name == "self_attn.k_norm") {
      // The attention scale is 1.0, so q·k sums head_dim products of RMS-normed vectors: q/k
      // norm weights around 1.4·hd^-1/4 keep the scores' std near 2 (peaked but not one-hot).
      const int64_t hd = shape[0];
      float qk = static_cast<float>(1.4 / std::pow(static_cast<double>(hd), 0.25));
      v.lo = 0.5f * qk;
      v.hi = 1.5f * qk;
    } else if (row.name == "layer_scalar") {
      // Each layer adds two RMS-normed terms (~1 each) and then scales the whole stream:
      // scalars below 1 keep the residual bounded (steady-state RMS ~2) over any number of
      // layers.
      v.lo = 0.6f;
      v.hi = 1.0f;
    } else if (&row == &gemma4::kFinalNorm) {
      // The head is tied: the current token's own embedding, still in the residual, would give
      // its own logit a large positive term through positive final-norm weights, and greedy
      // decoding would repeat the input forever. Random signs make that term average zero.
      v.random_sign = true;
    }
    v.key = TensorKey(p.seed, v.name);
    return e;
  }
  e.is_matrix = true;
  MatrixSpec& m = e.m;
  m.name = lead + std::string(row.name);
  m.rows = shape[0];
  m.cols = shape[1];
  const SynthQuant q = QuantOf(p.quant, row.role);
  m.bits = q.bits;
  m.group = q.group;
  double std = inv_sqrt(m.cols);
  if (row.role == gemma4::Role::kEmbedding) {
    // Embedding rows of RMS 2/sqrt(H): the scaled embedding (×sqrt(H)) enters the residual with
    // RMS ~2, comparable to what each layer adds, and tied-head logits have a std of ~2 so
    // greedy decoding depends on the state instead of sitting on one token.
    std = 2.0 * inv_sqrt(c.hidden_size);
  } else if (row.role == gemma4::Role::kRouter) {
    // Router input RMS is ~|scale|·H^-1/2 per element, so a row std of 1.5 gives logits of
    // std ~1.5: routing clearly prefers some experts per token without being one-hot.
    std = 1.5;
    m.row_gain = RouterRowGains(p.seed, layer, c.num_experts, p.routing_skew);
  }
  m.std = static_cast<float>(std);
  m.key = TensorKey(p.seed, m.name);
  return e;
}

}  // namespace

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
  // The table's tensors in the forward order: the embedding, each layer, the final norm.
  p.core.push_back(DrawCoreTensor(p, gemma4::kEmbedTokens, -1));
  for (int l = 0; l < c.num_layers; ++l) {
    for (const gemma4::TensorRow& row : gemma4::kLayerTensors)
      if (gemma4::Present(row, c, l)) p.core.push_back(DrawCoreTensor(p, row, l));
  }
  p.core.push_back(DrawCoreTensor(p, gemma4::kFinalNorm, -1));
  return p;
}

}  // namespace rw::synth
