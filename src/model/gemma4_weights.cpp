#include "model/gemma4_weights.h"

#include <cstdio>
#include <functional>

namespace rw {
namespace {

enum class Kind { kVector, kLinear };
// When a per-layer tensor is present.
enum class When { kAlways, kMoe, kHasVProj };

struct LayerEntry {
  const char* suffix;  // after "layers.{i}."
  const TensorDesc* Gemma4LayerWeights::*member;
  Kind kind;
  When when;
  // Expected logical shape from the config and this layer's attention geometry.
  std::function<std::vector<int64_t>(const ModelConfig&, const AttentionGeometry&)> shape;
};

using S = std::vector<int64_t>;
using L = Gemma4LayerWeights;

// The table: one row per per-layer tensor (reference/gemma4-model.md §3.1, renamed per the
// model-directory contract).
const std::vector<LayerEntry>& LayerTable() {
  static const std::vector<LayerEntry> table = {
      {"input_layernorm", &L::input_layernorm, Kind::kVector, When::kAlways,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"post_attention_layernorm", &L::post_attention_layernorm, Kind::kVector, When::kAlways,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"pre_feedforward_layernorm", &L::pre_feedforward_layernorm, Kind::kVector, When::kAlways,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"post_feedforward_layernorm", &L::post_feedforward_layernorm, Kind::kVector, When::kAlways,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"post_feedforward_layernorm_1", &L::post_feedforward_layernorm_1, Kind::kVector, When::kMoe,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"pre_feedforward_layernorm_2", &L::pre_feedforward_layernorm_2, Kind::kVector, When::kMoe,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"post_feedforward_layernorm_2", &L::post_feedforward_layernorm_2, Kind::kVector, When::kMoe,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"self_attn.q_proj", &L::q_proj, Kind::kLinear, When::kAlways,
       [](auto& c, auto& g) {
         return S{int64_t{c.num_heads} * g.head_dim, c.hidden_size};
       }},
      {"self_attn.k_proj", &L::k_proj, Kind::kLinear, When::kAlways,
       [](auto& c, auto& g) {
         return S{int64_t{g.num_kv_heads} * g.head_dim, c.hidden_size};
       }},
      {"self_attn.v_proj", &L::v_proj, Kind::kLinear, When::kHasVProj,
       [](auto& c, auto& g) {
         return S{int64_t{g.num_kv_heads} * g.head_dim, c.hidden_size};
       }},
      {"self_attn.o_proj", &L::o_proj, Kind::kLinear, When::kAlways,
       [](auto& c, auto& g) {
         return S{c.hidden_size, int64_t{c.num_heads} * g.head_dim};
       }},
      {"self_attn.q_norm", &L::q_norm, Kind::kVector, When::kAlways,
       [](auto&, auto& g) { return S{g.head_dim}; }},
      {"self_attn.k_norm", &L::k_norm, Kind::kVector, When::kAlways,
       [](auto&, auto& g) { return S{g.head_dim}; }},
      {"mlp.gate_proj", &L::gate_proj, Kind::kLinear, When::kAlways,
       [](auto& c, auto&) {
         return S{c.intermediate_size, c.hidden_size};
       }},
      {"mlp.up_proj", &L::up_proj, Kind::kLinear, When::kAlways,
       [](auto& c, auto&) {
         return S{c.intermediate_size, c.hidden_size};
       }},
      {"mlp.down_proj", &L::down_proj, Kind::kLinear, When::kAlways,
       [](auto& c, auto&) {
         return S{c.hidden_size, c.intermediate_size};
       }},
      {"router.proj", &L::router_proj, Kind::kLinear, When::kMoe,
       [](auto& c, auto&) {
         return S{c.num_experts, c.hidden_size};
       }},
      {"router.scale", &L::router_scale, Kind::kVector, When::kMoe,
       [](auto& c, auto&) { return S{c.hidden_size}; }},
      {"router.per_expert_scale", &L::router_per_expert_scale, Kind::kVector, When::kMoe,
       [](auto& c, auto&) { return S{c.num_experts}; }},
      {"layer_scalar", &L::layer_scalar, Kind::kVector, When::kAlways,
       [](auto&, auto&) { return S{1}; }},
  };
  return table;
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Status CheckType(const TensorDesc& t, Kind kind, const std::string& what) {
  if (kind == Kind::kVector) {
    if (t.type != TensorType::kF32 && t.type != TensorType::kBf16)
      return Error(ErrorCode::kUnsupported, "{}: tensor '{}' must be f32 or bf16, not {}", what,
                   t.name, TensorTypeName(t.type));
    return Status::Ok();
  }
  if (t.type != TensorType::kAffine) return Status::Ok();
  if (t.bits != 4 && t.bits != 8)
    return Error(ErrorCode::kUnsupported,
                 "{}: tensor '{}' has {}-bit affine weights (4 or 8 supported)", what, t.name,
                 t.bits);
  if (t.group_size != 32 && t.group_size != 64 && t.group_size != 128)
    return Error(ErrorCode::kUnsupported,
                 "{}: tensor '{}' has affine group {} (32, 64 or 128 supported)", what, t.name,
                 t.group_size);
  if (t.cols() % t.group_size != 0)
    return Error(ErrorCode::kCorrupt, "{}: tensor '{}' has {} columns, not a multiple of group {}",
                 what, t.name, t.cols(), t.group_size);
  return Status::Ok();
}

// Shapes match when equal, or for vectors when the stored shape is [n] vs [1, n].
bool ShapeMatches(const TensorDesc& t, const std::vector<int64_t>& want) {
  if (t.shape == want) return true;
  return want.size() == 1 && t.numel() == want[0] && t.cols() == want[0];
}

Result<const TensorDesc*> Require(const CoreFile& core, const std::string& name,
                                  const std::vector<int64_t>& shape, Kind kind) {
  const std::string what = core.path();
  const TensorDesc* t = core.Find(name);
  if (t == nullptr) return Error(ErrorCode::kNotFound, "{}: missing tensor '{}'", what, name);
  if (!ShapeMatches(*t, shape))
    return Error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}, the config implies {}", what,
                 name, ShapeStr(t->shape), ShapeStr(shape));
  RW_RETURN_IF_ERROR(CheckType(*t, kind, what));
  return t;
}

}  // namespace

Result<Gemma4Weights> BindGemma4Weights(const ModelConfig& c, const CoreFile& core) {
  Gemma4Weights w;
  RW_ASSIGN_OR_RETURN(w.embed_tokens,
                      Require(core, "embed_tokens", {c.vocab_size, c.hidden_size}, Kind::kLinear));
  RW_ASSIGN_OR_RETURN(w.norm, Require(core, "norm", {c.hidden_size}, Kind::kVector));
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    const AttentionGeometry& g = c.geometry(i);
    for (const LayerEntry& e : LayerTable()) {
      if (e.when == When::kMoe && !c.enable_moe) continue;
      if (e.when == When::kHasVProj && g.k_eq_v) continue;
      std::string name = fmt::format("layers.{}.{}", i, e.suffix);
      RW_ASSIGN_OR_RETURN(w.layers[i].*e.member, Require(core, name, e.shape(c, g), e.kind));
    }
  }
  return w;
}

Result<Gemma4Weights> BindGemma4Model(const ModelDir& dir) {
  const ModelConfig& c = dir.config();
  RW_ASSIGN_OR_RETURN(Gemma4Weights w, BindGemma4Weights(c, dir.core()));
  // A config that claims fewer layers than the weights hold (num_layers edited down) would run
  // as a different, truncated model.
  for (const TensorDesc& t : dir.core().tensors()) {
    int layer = -1;
    if (std::sscanf(t.name.c_str(), "layers.%d.", &layer) == 1 && layer >= c.num_layers)
      return Error(ErrorCode::kCorrupt,
                   "{}: tensor '{}' belongs to layer {}, but the config has {} layers",
                   dir.core().path(), t.name, layer, c.num_layers);
  }
  if (c.enable_moe) {
    const ExpertIndex* idx = dir.experts();
    if (idx == nullptr)
      return Error(ErrorCode::kCorrupt, "{}: MoE enabled but no experts", dir.path());
    for (int i = 0; i < c.num_layers; ++i)
      RW_RETURN_IF_ERROR(ValidateExpertLayout(c, idx->layers[i].layout,
                                              fmt::format("{} layer {}", dir.path(), i)));
  }
  return w;
}

Status ValidateExpertLayout(const ModelConfig& c, const ExpertLayout& layout,
                            const std::string& what) {
  const std::vector<int64_t> gu{c.moe_intermediate_size, c.hidden_size};
  const std::vector<int64_t> dn{c.hidden_size, c.moe_intermediate_size};
  for (auto [t, shape] :
       {std::pair{&layout.gate, gu}, std::pair{&layout.up, gu}, std::pair{&layout.down, dn}}) {
    if (t->shape != shape)
      return Error(ErrorCode::kCorrupt,
                   "{}: expert tensor '{}' has shape {}, the config implies {}", what, t->name,
                   ShapeStr(t->shape), ShapeStr(shape));
    RW_RETURN_IF_ERROR(CheckType(*t, Kind::kLinear, what));
  }
  return Status::Ok();
}

}  // namespace rw
