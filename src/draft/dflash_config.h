// The DFlash draft model's hyperparameters, read from the Hugging Face config.json that z-lab
// publishes beside the weights (architectures ["DFlashDraftModel"], model_type "qwen3", the
// drafter's own fields under "dflash_config"). A drafter directory keeps that file as it is.
//
// Reference: github z-lab/dflash dflash/model.py at commit 10129599dffb338ff38cfd235a53ca6d3667b4dd
// (with the Gemma support: raw embedding rows × input_embedding_scale, output_multiplier and
// final_logit_softcapping in compute_logits). A field is read from dflash_config first, then
// from the top level, as the reference's _draft_value does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace rw {

struct DFlashConfig {
  int num_layers = 0;
  int64_t hidden = 0;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  // The window of sliding layers. As in transformers' Qwen3Config (which the reference loads the
  // config with), it applies only when use_sliding_window is true; otherwise sliding layers
  // differ from full ones only in being causal.
  int64_t sliding_window = 0;
  bool use_sliding_window = false;
  std::vector<bool> sliding;          // per layer: sliding_attention (else full_attention)
  int is_causal = -1;                 // the config's is_causal: -1 absent, else 0/1 for every layer
  int block_size = 16;                // the last accepted token and block_size − 1 drafts
  int mask_token_id = -1;             // the id filling the block's draft rows
  std::vector<int> target_layer_ids;  // the target's decoder layers read, ascending
  double input_embedding_scale = 1.0;
  double output_multiplier = 1.0;
  double final_logit_softcapping = 0;  // 0: none
  int64_t vocab_size = 0;              // as the config says (the target's is what counts)

  // The reference's masks per layer type: a layer is causal when the config's is_causal says
  // so, else exactly when it is a sliding layer (Qwen3DFlashAttention.__init__).
  bool causal(int layer) const {
    return is_causal >= 0 ? is_causal == 1 : static_cast<bool>(sliding[layer]);
  }
  int64_t window(int layer) const {
    return sliding[layer] && use_sliding_window ? sliding_window : 0;
  }

  // Reads config.json's object; every field range-checked, errors name the field.
  static Result<DFlashConfig> FromHf(const Json& j);
  // A config.json for this config (what synth writes; FromHf reads it back).
  Json ToHf() const;
  // The number of parameters (weights only).
  int64_t Parameters() const;
};

// Weight names inside a drafter (a checkpoint's keys without ".weight"), in a fixed order.
struct DFlashTensorName {
  std::string name;
  std::vector<int64_t> shape;
  bool linear = false;  // a matrix (quantized on install), else a norm weight
};
std::vector<DFlashTensorName> DFlashTensorNames(const DFlashConfig& c);

// The reference's build_target_layer_ids: `count` layers spread evenly over [1, num_layers − 3]
// (for 30 layers and 6 ids: 1, 6, 11, 17, 22, 27, the published drafter's), kept distinct and
// inside the model for small targets.
std::vector<int> SpreadTargetLayers(int num_target_layers, int count);

}  // namespace rw
