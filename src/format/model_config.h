// The model's hyperparameters, normalized: everything the runtime needs, independent of how the
// source checkpoint spelled it. Stored as the "config" object of manifest.json.
#pragma once

#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace rw {

enum class LayerKind { kSliding, kFull };

// Geometry of one attention kind (sliding or full layers).
struct AttentionGeometry {
  int head_dim = 0;
  int num_kv_heads = 0;
  double rope_theta = 10000.0;
  // Fraction of rotated dims (1.0 = all). "proportional" RoPE rotates
  // int(partial * head_dim / 2) pairs with exponent denominator head_dim.
  double partial_rotary_factor = 1.0;
  std::string rope_type = "default";  // "default" or "proportional"
  bool k_eq_v = false;                // no v_proj: V = RMS_0(raw K projection)
};

struct ModelConfig {
  std::string architecture = "gemma4_text";
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  std::vector<LayerKind> layer_types;
  AttentionGeometry sliding;
  AttentionGeometry full;
  int sliding_window = 0;
  int intermediate_size = 0;  // dense GeGLU MLP
  bool enable_moe = false;
  int num_experts = 0;
  int top_k = 0;
  int moe_intermediate_size = 0;
  double rms_norm_eps = 1e-6;
  double final_logit_softcapping = 0.0;  // 0 = none
  // sqrt(hidden_size) rounded to the checkpoint's dtype (53.0 for bf16 at hidden 2816).
  float embed_scale = 0.0f;
  std::string activation = "gelu_pytorch_tanh";
  bool tie_word_embeddings = true;
  int max_position_embeddings = 0;
  int bos_token_id = 2;
  int pad_token_id = 0;
  std::vector<int> eos_token_ids;

  const AttentionGeometry& geometry(int layer) const {
    return layer_types[layer] == LayerKind::kFull ? full : sliding;
  }
  bool is_full(int layer) const { return layer_types[layer] == LayerKind::kFull; }

  Json ToJson() const;
  static Result<ModelConfig> FromJson(const Json& j, const std::string& what);
  // Rejects impossible geometry with a message naming the field.
  Status Validate() const;
};

// Reads a Hugging Face Gemma 4 config.json (Gemma4Config with text_config, or Gemma4TextConfig),
// accepting both spellings of the full-attention geometry (global_head_dim /
// num_global_key_value_heads, or per_layer_config). weight_dtype ("bfloat16", "float32", ...)
// decides how the embedding scale is rounded.
Result<ModelConfig> ModelConfigFromHf(const Json& config, const std::string& weight_dtype,
                                      const std::string& what);

// sqrt(hidden) rounded to dtype, as transformers casts the scale to the weight dtype.
float EmbedScaleFor(int hidden_size, const std::string& weight_dtype);

}  // namespace rw
