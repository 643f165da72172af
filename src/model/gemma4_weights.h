// The Gemma 4 weights of a model directory, bound through the tensor table (gemma4_table.h):
// BindGemma4Weights checks a core file against the table and returns descriptors the runtime
// turns into kernel views.
#pragma once

#include <vector>

#include "format/core_file.h"
#include "format/expert_file.h"
#include "format/model_config.h"
#include "format/model_dir.h"
#include "model/gemma4_table.h"

namespace rw {

#define RW_GEMMA4_MEMBER(member, ...) const TensorDesc* member = nullptr;

// Descriptors of one decoder layer, a member per row of gemma4::kLayerTensors (same name, same
// order). Pointers into the CoreFile's directory; null where the layer does not have the tensor.
struct Gemma4LayerWeights {
  RW_GEMMA4_LAYER_TENSORS(RW_GEMMA4_MEMBER)
  // The descriptor of gemma4::kLayerTensors[row].
  const TensorDesc* Get(size_t row) const;
};

// The model-level tensors (gemma4::kModelTensors) and the layers.
struct Gemma4Weights {
  RW_GEMMA4_MODEL_TENSORS(RW_GEMMA4_MEMBER)
  std::vector<Gemma4LayerWeights> layers;
  // The descriptor of gemma4::kModelTensors[row].
  const TensorDesc* Get(size_t row) const;
};

#undef RW_GEMMA4_MEMBER

// Validates presence, shape and type of every tensor the config needs; errors name the tensor.
// Vectors must be f32 or bf16; linear weights f32, bf16 or affine (4/8 bits, group 32/64/128).
Result<Gemma4Weights> BindGemma4Weights(const ModelConfig& config, const CoreFile& core);

// Checks an expert blob layout against the table (gemma4::kExpertTensors: gate/up
// [moe_inter, hidden], down [hidden, moe_inter]) and its types. `what` names the layer in errors.
Status ValidateExpertLayout(const ModelConfig& config, const ExpertLayout& layout,
                            const std::string& what);

// Everything opening a model for inference checks beyond ModelDir::Open: the core's tensors
// against the config (BindGemma4Weights, and no tensor of a layer the config lacks), and every
// expert layer's layout. `redwing run` and `redwing verify` both go through this.
Result<Gemma4Weights> BindGemma4Model(const ModelDir& dir);

}  // namespace rw
