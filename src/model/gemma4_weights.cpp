#include "model/gemma4_weights.h"

#include <array>
#include <cstdio>

namespace rw {
namespace {

using gemma4::Role;
using gemma4::TensorRow;

// Member pointers in table order: entry k binds row k of the table.
#define RW_LAYER_MEMBER(member, ...) &Gemma4LayerWeights::member,
#define RW_MODEL_MEMBER(member, ...) &Gemma4Weights::member,
constexpr const TensorDesc* Gemma4LayerWeights::*kLayerMembers[] = {
    RW_GEMMA4_LAYER_TENSORS(RW_LAYER_MEMBER)};
constexpr const TensorDesc* Gemma4Weights::*kModelMembers[] = {
    RW_GEMMA4_MODEL_TENSORS(RW_MODEL_MEMBER)};
#undef RW_LAYER_MEMBER
#undef RW_MODEL_MEMBER
static_assert(std::size(kLayerMembers) == std::size(gemma4::kLayerTensors));
static_assert(std::size(kModelMembers) == std::size(gemma4::kModelTensors));

// Shapes match when equal, or for vectors when the stored shape is [n] vs [1, n].
bool ShapeMatches(const TensorDesc& t, const std::vector<int64_t>& want) {
  if (t.shape == want) return true;
  return want.size() == 1 && t.numel() == want[0] && t.cols() == want[0];
}

Result<const TensorDesc*> Require(const CoreFile& core, const std::string& name,
                                  const std::vector<int64_t>& shape, Role role) {
  const std::string what = core.path();
  const TensorDesc* t = core.Find(name);
  if (t == nullptr) return Error(ErrorCode::kNotFound, "{}: missing tensor '{}'", what, name);
  if (!ShapeMatches(*t, shape))
    return Error(ErrorCode::kCorrupt, "{}: tensor '{}' has shape {}, the config implies {}", what,
                 name, gemma4::ShapeStr(t->shape), gemma4::ShapeStr(shape));
  RW_RETURN_IF_ERROR(gemma4::CheckType(*t, role, what));
  return t;
}

}  // namespace

const TensorDesc* Gemma4LayerWeights::Get(size_t row) const {
  return this->*kLayerMembers[row];
}

const TensorDesc* Gemma4Weights::Get(size_t row) const {
  return this->*kModelMembers[row];
}

Result<Gemma4Weights> BindGemma4Weights(const ModelConfig& c, const CoreFile& core) {
  Gemma4Weights w;
  for (size_t k = 0; k < std::size(gemma4::kModelTensors); ++k) {
    const TensorRow& row = gemma4::kModelTensors[k];
    RW_ASSIGN_OR_RETURN(w.*kModelMembers[k],
                        Require(core, std::string(row.name), gemma4::Shape(row, c, -1), row.role));
  }
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    for (size_t k = 0; k < std::size(gemma4::kLayerTensors); ++k) {
      const TensorRow& row = gemma4::kLayerTensors[k];
      if (!gemma4::Present(row, c, i)) continue;
      RW_ASSIGN_OR_RETURN(
          w.layers[i].*kLayerMembers[k],
          Require(core, gemma4::LayerName(row, i), gemma4::Shape(row, c, i), row.role));
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
  const TensorDesc* parts[] = {&layout.gate, &layout.up, &layout.down};
  static_assert(std::size(parts) == std::size(gemma4::kExpertTensors));
  for (size_t k = 0; k < std::size(parts); ++k) {
    const TensorDesc* t = parts[k];
    const std::vector<int64_t> shape = gemma4::Shape(gemma4::kExpertTensors[k], c);
    if (t->shape != shape)
      return Error(ErrorCode::kCorrupt,
                   "{}: expert tensor '{}' has shape {}, the config implies {}", what, t->name,
                   gemma4::ShapeStr(t->shape), gemma4::ShapeStr(shape));
    RW_RETURN_IF_ERROR(gemma4::CheckType(*t, Role::kExpert, what));
  }
  return Status::Ok();
}

}  // namespace rw
