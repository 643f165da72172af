#include "draft/dflash_model.h"

#include <fmt/format.h>

#include "base/file.h"
#include "runtime/model.h"

namespace rw {

bool DFlashModel::IsDrafterDir(const std::string& dir) {
  return PathExists(JoinPath(dir, kDrafterManifest));
}

Result<std::unique_ptr<DFlashModel>> DFlashModel::Open(const std::string& dir) {
  const std::string manifest_path = JoinPath(dir, kDrafterManifest);
  if (!PathExists(manifest_path))
    return Error(ErrorCode::kNotFound,
                 "{} is not a drafter directory (no {}; install one with `redwing install "
                 "<repo> --output {}`)",
                 dir, kDrafterManifest, dir);
  RW_ASSIGN_OR_RETURN(std::string mtext, ReadFileToString(manifest_path, 4 << 20));
  RW_ASSIGN_OR_RETURN(Json manifest, ParseJson(mtext, manifest_path));
  if (!manifest.is_object() || manifest.value("format", "") != kDrafterFormat)
    return Error(ErrorCode::kCorrupt, "{}: format is not \"{}\"", manifest_path, kDrafterFormat);
  if (manifest.value("format_version", 0) != 1)
    return Error(ErrorCode::kCorrupt, "{}: format_version must be 1", manifest_path);

  std::unique_ptr<DFlashModel> m(new DFlashModel());
  m->dir_ = dir;
  m->quantize_ = manifest.value("quantize", "");
  const std::string config_path = JoinPath(dir, "config.json");
  RW_ASSIGN_OR_RETURN(std::string ctext, ReadFileToString(config_path, 4 << 20));
  RW_ASSIGN_OR_RETURN(Json cj, ParseJson(ctext, config_path));
  RW_ASSIGN_OR_RETURN(m->config_, DFlashConfig::FromHf(cj));
  RW_ASSIGN_OR_RETURN(m->core_, CoreFile::Open(JoinPath(dir, "core.bin")));

  const uint8_t* base = m->core_.base();
  for (const DFlashTensorName& t : DFlashTensorNames(m->config_)) {
    const TensorDesc* d = m->core_.Find(t.name);
    if (d == nullptr)
      return Error(ErrorCode::kCorrupt, "{}: drafter tensor {} is missing", m->core_.path(),
                   t.name);
    if (d->shape != t.shape)
      return Error(ErrorCode::kCorrupt, "{}: drafter tensor {} has shape [{}], expected [{}]",
                   m->core_.path(), t.name, fmt::join(d->shape, ", "), fmt::join(t.shape, ", "));
    if (!t.linear && d->type == TensorType::kAffine)
      return Error(ErrorCode::kCorrupt, "{}: drafter norm {} must not be quantized",
                   m->core_.path(), t.name);
  }
  auto view = [&](const std::string& name) { return ViewOf(base, *m->core_.Find(name)); };
  auto vec = [&](const std::string& name) { return VectorToF32(base, *m->core_.Find(name)); };
  const DFlashConfig& c = m->config_;
  m->fc_ = view("fc");
  m->hidden_norm_ = vec("hidden_norm");
  m->norm_ = vec("norm");
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    DFlashLayer L;
    L.q = view(p + "self_attn.q_proj");
    L.k = view(p + "self_attn.k_proj");
    L.v = view(p + "self_attn.v_proj");
    L.o = view(p + "self_attn.o_proj");
    L.gate = view(p + "mlp.gate_proj");
    L.up = view(p + "mlp.up_proj");
    L.down = view(p + "mlp.down_proj");
    L.input_ln = vec(p + "input_layernorm");
    L.post_attn_ln = vec(p + "post_attention_layernorm");
    L.q_norm = vec(p + "self_attn.q_norm");
    L.k_norm = vec(p + "self_attn.k_norm");
    m->layers_.push_back(std::move(L));
  }
  AttentionGeometry g;
  g.head_dim = c.head_dim;
  g.rope_theta = c.rope_theta;
  m->inv_freq_ = RopeInvFreq(g);
  return m;
}

}  // namespace rw
