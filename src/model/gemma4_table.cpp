#include "model/gemma4_table.h"

#include "base/check.h"

namespace rw::gemma4 {

int64_t DimValue(Dim d, const ModelConfig& c, int layer) {
  auto geometry = [&]() -> const AttentionGeometry& {
    CHECK(layer >= 0 && layer < c.num_layers);
    return c.geometry(layer);
  };
  switch (d) {
    case Dim::kNone:
      break;
    case Dim::kOne:
      return 1;
    case Dim::kVocab:
      return c.vocab_size;
    case Dim::kHidden:
      return c.hidden_size;
    case Dim::kQ:
      return int64_t{c.num_heads} * geometry().head_dim;
    case Dim::kKv:
      return int64_t{geometry().num_kv_heads} * geometry().head_dim;
    case Dim::kHeadDim:
      return geometry().head_dim;
    case Dim::kInter:
      return c.intermediate_size;
    case Dim::kExperts:
      return c.num_experts;
    case Dim::kMoeInter:
      return c.moe_intermediate_size;
  }
  CHECK(false);
  return 0;
}

std::vector<int64_t> Shape(const TensorRow& row, const ModelConfig& c, int layer) {
  std::vector<int64_t> s{DimValue(row.rows, c, layer)};
  if (row.cols != Dim::kNone) s.push_back(DimValue(row.cols, c, layer));
  return s;
}

std::vector<int64_t> Shape(const ExpertRow& row, const ModelConfig& c) {
  return {DimValue(row.rows, c, -1), DimValue(row.cols, c, -1)};
}

bool Present(const TensorRow& row, const ModelConfig& c, int layer) {
  switch (row.when) {
    case When::kAlways:
      return true;
    case When::kMoe:
      return c.enable_moe;
    case When::kHasVProj:
      return !c.geometry(layer).k_eq_v;
  }
  return false;
}

std::string LayerName(const TensorRow& row, int layer) {
  return fmt::format("layers.{}.{}", layer, row.name);
}

bool SupportedAffine(int bits, int group) {
  return (bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128);
}

Status CheckType(const TensorDesc& t, Role role, const std::string& what) {
  if (role == Role::kVector) {
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
  if (!SupportedAffine(t.bits, t.group_size))
    return Error(ErrorCode::kUnsupported,
                 "{}: tensor '{}' has affine group {} (32, 64 or 128 supported)", what, t.name,
                 t.group_size);
  if (t.cols() % t.group_size != 0)
    return Error(ErrorCode::kCorrupt, "{}: tensor '{}' has {} columns, not a multiple of group {}",
                 what, t.name, t.cols(), t.group_size);
  return Status::Ok();
}

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace rw::gemma4
