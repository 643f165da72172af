// The Gemma 4 tensor table, declared once: every tensor of the text model with its name in a
// redwing model directory, its key in Hugging Face and MLX checkpoints, the shape the config
// implies, what it is (which decides the types it may have and how quantizers treat it) and
// which layers have it. The model binding (gemma4_weights.h), the convert plan and synth are
// generated from it (reference/gemma4-model.md §3).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/model_config.h"
#include "format/tensor.h"

namespace rw::gemma4 {

// A dimension of a tensor's shape, resolved against the config and the layer's attention
// geometry. kNone ends a vector's shape.
enum class Dim : uint8_t {
  kNone,
  kOne,
  kVocab,
  kHidden,
  kQ,
  kKv,
  kHeadDim,
  kInter,
  kExperts,
  kMoeInter
};

// What a tensor is. kVector (norm weights, scales, layer_scalar) always keeps a float type; the
// others are linear weights [out, in], float or MLX affine, told apart for quantizers (the
// router gets 8 bits where the rest get 4) and for synth's per-block quantization.
enum class Role : uint8_t { kVector, kEmbedding, kAttention, kMlp, kRouter, kExpert };

// Which layers have a tensor.
enum class When : uint8_t {
  kAlways,
  kMoe,       // layers of a config with enable_moe
  kHasVProj,  // layers whose attention geometry has no k_eq_v (K=V layers have no v_proj)
};

struct TensorRow {
  std::string_view name;    // in the model directory (after "layers.{i}." for layer tensors)
  std::string_view source;  // checkpoint key after the prefix: a vector's whole key, a
                            // linear's module (+ ".weight", or ".weight"/".scales"/".biases")
  Role role;
  When when;
  Dim rows;
  Dim cols;  // kNone for vectors
};

// X(member, name, source, role, when, rows, cols). The binding generates its struct members
// from these lists, so a tensor is added in exactly one place.
//
// Model-level tensors: the embedding (also the tied LM head) and the final norm.
#define RW_GEMMA4_MODEL_TENSORS(X)                                                      \
  X(embed_tokens, "embed_tokens", "embed_tokens", kEmbedding, kAlways, kVocab, kHidden) \
  X(norm, "norm", "norm.weight", kVector, kAlways, kHidden, kNone)

// One decoder layer (Gemma4TextDecoderLayer), in the reference's module order.
#define RW_GEMMA4_LAYER_TENSORS(X)                                                                 \
  X(input_layernorm, "input_layernorm", "input_layernorm.weight", kVector, kAlways, kHidden,       \
    kNone)                                                                                         \
  X(q_proj, "self_attn.q_proj", "self_attn.q_proj", kAttention, kAlways, kQ, kHidden)              \
  X(k_proj, "self_attn.k_proj", "self_attn.k_proj", kAttention, kAlways, kKv, kHidden)             \
  X(v_proj, "self_attn.v_proj", "self_attn.v_proj", kAttention, kHasVProj, kKv, kHidden)           \
  X(o_proj, "self_attn.o_proj", "self_attn.o_proj", kAttention, kAlways, kHidden, kQ)              \
  X(q_norm, "self_attn.q_norm", "self_attn.q_norm.weight", kVector, kAlways, kHeadDim, kNone)      \
  X(k_norm, "self_attn.k_norm", "self_attn.k_norm.weight", kVector, kAlways, kHeadDim, kNone)      \
  X(post_attention_layernorm, "post_attention_layernorm", "post_attention_layernorm.weight",       \
    kVector, kAlways, kHidden, kNone)                                                              \
  X(pre_feedforward_layernorm, "pre_feedforward_layernorm", "pre_feedforward_layernorm.weight",    \
    kVector, kAlways, kHidden, kNone)                                                              \
  X(gate_proj, "mlp.gate_proj", "mlp.gate_proj", kMlp, kAlways, kInter, kHidden)                   \
  X(up_proj, "mlp.up_proj", "mlp.up_proj", kMlp, kAlways, kInter, kHidden)                         \
  X(down_proj, "mlp.down_proj", "mlp.down_proj", kMlp, kAlways, kHidden, kInter)                   \
  X(post_feedforward_layernorm_1, "post_feedforward_layernorm_1",                                  \
    "post_feedforward_layernorm_1.weight", kVector, kMoe, kHidden, kNone)                          \
  X(router_proj, "router.proj", "router.proj", kRouter, kMoe, kExperts, kHidden)                   \
  X(router_scale, "router.scale", "router.scale", kVector, kMoe, kHidden, kNone)                   \
  X(router_per_expert_scale, "router.per_expert_scale", "router.per_expert_scale", kVector, kMoe,  \
    kExperts, kNone)                                                                               \
  X(pre_feedforward_layernorm_2, "pre_feedforward_layernorm_2",                                    \
    "pre_feedforward_layernorm_2.weight", kVector, kMoe, kHidden, kNone)                           \
  X(post_feedforward_layernorm_2, "post_feedforward_layernorm_2",                                  \
    "post_feedforward_layernorm_2.weight", kVector, kMoe, kHidden, kNone)                          \
  X(post_feedforward_layernorm, "post_feedforward_layernorm", "post_feedforward_layernorm.weight", \
    kVector, kAlways, kHidden, kNone)                                                              \
  X(layer_scalar, "layer_scalar", "layer_scalar", kVector, kAlways, kOne, kNone)

#define RW_GEMMA4_ROW(member, name, source, role, when, rows, cols) \
  TensorRow{name, source, Role::role, When::when, Dim::rows, Dim::cols},
inline constexpr TensorRow kModelTensors[] = {RW_GEMMA4_MODEL_TENSORS(RW_GEMMA4_ROW)};
inline constexpr TensorRow kLayerTensors[] = {RW_GEMMA4_LAYER_TENSORS(RW_GEMMA4_ROW)};
#undef RW_GEMMA4_ROW
// Every writer lays out the core in the forward order: the embedding, the layers, the final norm.
inline constexpr const TensorRow& kEmbedTokens = kModelTensors[0];
inline constexpr const TensorRow& kFinalNorm = kModelTensors[1];

// The routed experts of a MoE layer: one blob per expert holding these three parts.
struct ExpertRow {
  std::string_view name;        // the part's name in the expert layout
  std::string_view mlx_module;  // MLX: after "layers.{i}.experts.", [E, out, in] per module
  std::string_view
      hf_tensor;  // Hugging Face: after "layers.{i}.experts.", fused [E, parts*out, in]
  int hf_part;    // which block of rows of hf_tensor, of hf_parts
  int hf_parts;
  Dim rows;
  Dim cols;
};
inline constexpr ExpertRow kExpertTensors[] = {
    {"gate", "switch_glu.gate_proj", "gate_up_proj", 0, 2, Dim::kMoeInter, Dim::kHidden},
    {"up", "switch_glu.up_proj", "gate_up_proj", 1, 2, Dim::kMoeInter, Dim::kHidden},
    {"down", "switch_glu.down_proj", "down_proj", 0, 1, Dim::kHidden, Dim::kMoeInter},
};

// Key prefixes of the language model in checkpoints: Gemma4ForConditionalGeneration (HF),
// mlx-vlm's layout (MLX) and Gemma4ForCausalLM (HF, text only).
inline constexpr std::string_view kHfPrefix = "model.language_model.";
inline constexpr std::string_view kMlxPrefix = "language_model.model.";
inline constexpr std::string_view kCausalLmPrefix = "model.";

// The value of a dimension for layer `layer` (-1: model-level tensors, which use no per-layer
// geometry).
int64_t DimValue(Dim d, const ModelConfig& c, int layer);
// The logical shape of a row ([rows] for vectors, [rows, cols] for linears).
std::vector<int64_t> Shape(const TensorRow& row, const ModelConfig& c, int layer);
std::vector<int64_t> Shape(const ExpertRow& row, const ModelConfig& c);
// Whether layer `layer` of config `c` has the tensor.
bool Present(const TensorRow& row, const ModelConfig& c, int layer);
// The model-directory name of a layer tensor: "layers.{layer}.{row.name}".
std::string LayerName(const TensorRow& row, int layer);

// Affine quantization the kernels read: 4 or 8 bits, groups of 32, 64 or 128.
bool SupportedAffine(int bits, int group);
// Checks a tensor's type against its role; errors name `what` and the tensor.
// Vectors: f32 or bf16. Linears: f32, bf16 or supported affine whose columns fill whole groups.
Status CheckType(const TensorDesc& t, Role role, const std::string& what);
// "[a, b]" for messages.
std::string ShapeStr(const std::vector<int64_t>& s);

}  // namespace rw::gemma4
