// The Gemma 4 weight table, declared once: every core tensor the forward pass reads, its name in
// the model directory, the shape the config implies, and whether it is a small vector (norm
// weights, scales) or a linear weight. BindGemma4Weights checks a core file against the table
// and returns descriptors the runtime turns into kernel views.
#pragma once

#include <vector>

#include "format/core_file.h"
#include "format/expert_file.h"
#include "format/model_config.h"
#include "format/model_dir.h"

namespace rw {

// Descriptors of one decoder layer (Gemma4TextDecoderLayer). Pointers into the CoreFile's
// directory; null only where the table marks a tensor optional for this layer.
struct Gemma4LayerWeights {
  // Norm weights [hidden] (bf16 or f32).
  const TensorDesc* input_layernorm = nullptr;
  const TensorDesc* post_attention_layernorm = nullptr;
  const TensorDesc* pre_feedforward_layernorm = nullptr;
  const TensorDesc* post_feedforward_layernorm = nullptr;
  const TensorDesc* post_feedforward_layernorm_1 = nullptr;  // MoE layers only
  const TensorDesc* pre_feedforward_layernorm_2 = nullptr;   // MoE layers only
  const TensorDesc* post_feedforward_layernorm_2 = nullptr;  // MoE layers only
  // Gemma4TextAttention.
  const TensorDesc* q_proj = nullptr;  // [heads*hd, hidden]
  const TensorDesc* k_proj = nullptr;  // [kv*hd, hidden]
  const TensorDesc* v_proj = nullptr;  // [kv*hd, hidden]; null when the geometry has k_eq_v
  const TensorDesc* o_proj = nullptr;  // [hidden, heads*hd]
  const TensorDesc* q_norm = nullptr;  // [hd]
  const TensorDesc* k_norm = nullptr;  // [hd]
  // Gemma4TextMLP (dense).
  const TensorDesc* gate_proj = nullptr;  // [inter, hidden]
  const TensorDesc* up_proj = nullptr;    // [inter, hidden]
  const TensorDesc* down_proj = nullptr;  // [hidden, inter]
  // Gemma4TextRouter (MoE layers only).
  const TensorDesc* router_proj = nullptr;              // [experts, hidden]
  const TensorDesc* router_scale = nullptr;             // [hidden]
  const TensorDesc* router_per_expert_scale = nullptr;  // [experts]
  const TensorDesc* layer_scalar = nullptr;             // [1]
};

struct Gemma4Weights {
  const TensorDesc* embed_tokens = nullptr;  // [vocab, hidden]; also the tied LM head
  const TensorDesc* norm = nullptr;          // [hidden]
  std::vector<Gemma4LayerWeights> layers;
};

// Validates presence, shape and type of every tensor the config needs; errors name the tensor.
// Vectors must be f32 or bf16; linear weights f32, bf16 or affine (4/8 bits, group 32/64/128).
Result<Gemma4Weights> BindGemma4Weights(const ModelConfig& config, const CoreFile& core);

// Checks an expert blob layout against the config (gate/up [moe_inter, hidden], down
// [hidden, moe_inter], supported types). `what` names the layer in errors.
Status ValidateExpertLayout(const ModelConfig& config, const ExpertLayout& layout,
                            const std::string& what);

// Everything opening a model for inference checks beyond ModelDir::Open: the core's tensors
// against the config (BindGemma4Weights, and no tensor of a layer the config lacks), and every
// expert layer's layout. `redwing run` and `redwing verify` both go through this.
Result<Gemma4Weights> BindGemma4Model(const ModelDir& dir);

}  // namespace rw
