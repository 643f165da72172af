#include "install/convert_plan.h"

#include <algorithm>
#include <limits>
#include <set>

#include "model/gemma4_table.h"

namespace rw {
namespace {

using gemma4::Role;
using gemma4::TensorRow;

// Key prefixes of the language model, longest first ("model." is a prefix of the first).
constexpr std::string_view kPrefixes[] = {gemma4::kHfPrefix, gemma4::kMlxPrefix,
                                          gemma4::kCausalLmPrefix};
// Top-level modules of the multimodal wrapper that a text engine does not use.
constexpr const char* kMultimodalRoots[] = {"vision_tower", "embed_vision",          "audio_tower",
                                            "embed_audio",  "multi_modal_projector", "vision_model",
                                            "audio_model",  "mm_projector"};

// The order of a layer's core tensors in converted directories: the layer norms first (those
// every layer has before the MoE ones), then the rest in table order. Kept from before the table
// so conversions stay byte-identical.
const std::vector<const TensorRow*>& ConvertLayerOrder() {
  static const std::vector<const TensorRow*> order = [] {
    auto rank = [](const TensorRow* r) {
      if (r->name.find("layernorm") == std::string_view::npos) return 2;
      return r->when == gemma4::When::kMoe ? 1 : 0;
    };
    std::vector<const TensorRow*> rows;
    for (const TensorRow& r : gemma4::kLayerTensors) rows.push_back(&r);
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const TensorRow* a, const TensorRow* b) { return rank(a) < rank(b); });
    return rows;
  }();
  return order;
}

std::string DTypeToTorchName(StDType t) {
  switch (t) {
    case StDType::kBF16:
      return "bfloat16";
    case StDType::kF32:
      return "float32";
    case StDType::kF16:
      return "float16";
    default:
      return StDTypeName(t);
  }
}

TensorType FloatTypeOf(StDType t) {
  return t == StDType::kF32 ? TensorType::kF32 : TensorType::kBf16;
}

// Where a multimodal or tied-head tensor is skipped: returns the prefix it is grouped under and
// the reason, or false for language-model tensors.
bool SkipReason(const std::string& name, std::string* prefix, std::string* reason) {
  size_t pos = 0;
  for (const char* lead : {"model.", "language_model."}) {
    std::string l = lead;
    if (name.compare(pos, l.size(), l) == 0) pos += l.size();
  }
  size_t dot = name.find('.', pos);
  std::string root = name.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
  for (const char* r : kMultimodalRoots) {
    if (root == r) {
      *prefix = name.substr(0, pos) + root + ".";
      *reason = "multimodal weights (redwing runs the text model only)";
      return true;
    }
  }
  if (root == "lm_head") {
    *prefix = name.substr(0, pos) + "lm_head.";
    *reason = "output head tied to embed_tokens (tie_word_embeddings)";
    return true;
  }
  return false;
}

class Planner {
 public:
  Planner(const Json& config, const std::vector<SourceTensorInfo>& tensors, QuantizeMode mode,
          std::string what)
      : config_json_(config), mode_(mode), what_(std::move(what)) {
    for (const SourceTensorInfo& t : tensors) by_name_[t.name] = &t;
  }

  Result<ConvertPlan> Run();

 private:
  const SourceTensorInfo* Find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  Status Missing(const std::string& name, const std::string& target) const {
    return Error(ErrorCode::kNotFound, "{}: tensor '{}' is missing (needed for '{}')", what_, name,
                 target);
  }
  Status BadShape(const SourceTensorInfo& t, const std::vector<int64_t>& want,
                  const std::string& note = "") const {
    return Error(ErrorCode::kCorrupt, "{}: tensor '{}': shape {}, but the config implies {}{}",
                 t.file, t.name, gemma4::ShapeStr(t.shape), gemma4::ShapeStr(want), note);
  }
  Status CheckFloat(const SourceTensorInfo& t) const {
    if (t.dtype == StDType::kBF16 || t.dtype == StDType::kF32) return Status::Ok();
    if (t.dtype == StDType::kF16)
      return Error(ErrorCode::kUnsupported,
                   "{}: tensor '{}': F16 weights are not supported (convert the checkpoint to "
                   "bf16 or f32 first)",
                   t.file, t.name);
    return Error(ErrorCode::kCorrupt,
                 "{}: tensor '{}': dtype {} where a float (BF16 or F32) is expected", t.file,
                 t.name, StDTypeName(t.dtype));
  }
  void Use(const SourceTensorInfo* t) {
    if (!used_.insert(t->name).second) return;
    uint64_t n = StDTypeSize(t->dtype);
    for (int64_t d : t->shape) n *= static_cast<uint64_t>(d);
    plan_.source_bytes += n;
  }

  Status DetectLayout(const std::vector<SourceTensorInfo>& tensors);
  Status ReadMlxQuantization();
  // Bits and group size the source's config.json gives a module ({0, 0}: no quantization config;
  // {-1, -1}: the module is listed as not quantized).
  std::pair<int, int> ConfiguredQuant(const std::string& module) const;

  // A float tensor kept as is (norms, scales, layer_scalar).
  Status PlanFloat(const std::string& target, const std::string& src,
                   const std::vector<int64_t>& shape);
  // A linear (or the embedding) [out, in]; `module` is the source name without ".weight".
  // experts > 0 plans a [experts, ...] tensor's per-expert slices; `row_begin`/`stride` pick
  // rows of a fused tensor.
  Result<TensorPlan> PlanLinear(const std::string& target, const std::string& module, int64_t out,
                                int64_t in, Role role, int experts = 0, int64_t row_begin = 0,
                                int64_t stride = 0, int64_t fused_rows = 0);
  // Chooses the target type of a float source by mode and role.
  void ChooseFloatTarget(TensorPlan* p, Role role);
  // A core tensor of the table: `src` its source key (a linear's module).
  Status PlanCore(const TensorRow& row, const std::string& target, const std::string& src,
                  const std::vector<int64_t>& shape);
  Status PlanLayer(int layer);
  Status PlanExperts(int layer);

  const Json& config_json_;
  QuantizeMode mode_;
  std::string what_;
  std::map<std::string, const SourceTensorInfo*> by_name_;
  std::set<std::string> used_;
  ConvertPlan plan_;
  const Json* quant_ = nullptr;  // MLX config.json["quantization"]
  int base_bits_ = 0, base_group_ = 0;
  bool any_affine_ = false;
  std::map<std::string, int> kept_float_;  // q4/q8 linears left in float, by reason
};

Status Planner::DetectLayout(const std::vector<SourceTensorInfo>& tensors) {
  for (std::string_view p : kPrefixes) {
    if (Find(fmt::format("{}{}.weight", p, gemma4::kEmbedTokens.source)) != nullptr) {
      plan_.prefix = p;
      break;
    }
  }
  if (plan_.prefix.empty())
    return Error(ErrorCode::kNotFound,
                 "{}: no embed_tokens.weight under model.language_model., language_model.model. "
                 "or model.: not a Gemma 4 checkpoint",
                 what_);
  for (const SourceTensorInfo& t : tensors) {
    if (t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".scales") == 0 &&
        t.name.compare(0, plan_.prefix.size(), plan_.prefix) == 0)
      any_affine_ = true;
  }
  bool mlx_config =
      config_json_.contains("quantization") && config_json_["quantization"].is_object();
  plan_.kind = (any_affine_ || mlx_config || plan_.prefix == gemma4::kMlxPrefix) ? SourceKind::kMlx
                                                                                 : SourceKind::kHf;
  if (!mlx_config && config_json_.contains("quantization_config") &&
      config_json_["quantization_config"].is_object() &&
      config_json_["quantization_config"].contains("quant_method"))
    return Error(ErrorCode::kUnsupported,
                 "{}: config.json: quantized checkpoints of method {} are not supported", what_,
                 config_json_["quantization_config"]["quant_method"].dump());
  if (any_affine_ && mode_ != QuantizeMode::kKeep)
    return Error(ErrorCode::kInvalidArgument,
                 "{}: the checkpoint is MLX-quantized; re-quantizing is lossy, so only --quantize "
                 "keep is supported for it (asked for {})",
                 what_, QuantizeModeName(mode_));
  return Status::Ok();
}

Status Planner::ReadMlxQuantization() {
  if (!config_json_.contains("quantization")) return Status::Ok();
  quant_ = &config_json_["quantization"];
  std::string w = what_ + ": config.json quantization";
  std::string qmode = quant_->value("mode", "affine");
  if (qmode != "affine")
    return Error(ErrorCode::kUnsupported, "{}: mode '{}' is not supported (only affine)", w, qmode);
  auto get = [&](const Json& j, const char* key, int* out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return Status::Ok();
    // JsonInt: an integer in int64 range (a value past it would wrap); then the int's range.
    RW_ASSIGN_OR_RETURN(const int64_t v, JsonInt(j, key, w));
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      return Error(ErrorCode::kCorrupt, "{}: '{}' is {}, out of range", w, key, v);
    *out = static_cast<int>(v);
    return Status::Ok();
  };
  RW_RETURN_IF_ERROR(get(*quant_, "bits", &base_bits_));
  RW_RETURN_IF_ERROR(get(*quant_, "group_size", &base_group_));
  plan_.mlx_quantization = Json{{"bits", base_bits_}, {"group_size", base_group_}, {"mode", qmode}};
  return Status::Ok();
}

std::pair<int, int> Planner::ConfiguredQuant(const std::string& module) const {
  if (quant_ == nullptr) return {0, 0};
  auto it = quant_->find(module);
  if (it == quant_->end()) return {base_bits_, base_group_};
  if (it->is_boolean() && !it->get<bool>()) return {-1, -1};
  if (!it->is_object()) return {base_bits_, base_group_};
  return {it->value("bits", base_bits_), it->value("group_size", base_group_)};
}

Status Planner::PlanFloat(const std::string& target, const std::string& src,
                          const std::vector<int64_t>& shape) {
  const SourceTensorInfo* t = Find(src);
  if (t == nullptr) return Missing(src, target);
  RW_RETURN_IF_ERROR(CheckFloat(*t));
  if (t->shape != shape) return BadShape(*t, shape);
  Use(t);
  TensorPlan p;
  p.target.name = target;
  p.target.type = FloatTypeOf(t->dtype);
  p.target.shape = shape;
  p.src_dtype = t->dtype;
  p.weight = SourceSlice{src, 0, shape.size() >= 2 ? shape[0] : 1, 0,
                         static_cast<uint64_t>(shape.back()) * StDTypeSize(t->dtype)};
  plan_.core.push_back(std::move(p));
  return Status::Ok();
}

void Planner::ChooseFloatTarget(TensorPlan* p, Role role) {
  TensorDesc& d = p->target;
  d.type = FloatTypeOf(p->src_dtype);
  if (role == Role::kVector || mode_ == QuantizeMode::kKeep) return;
  if (mode_ == QuantizeMode::kBf16) {
    d.type = TensorType::kBf16;
    return;
  }
  constexpr int kGroup = 64;
  if (d.cols() % kGroup != 0) {
    kept_float_[fmt::format("input width not a multiple of {}", kGroup)]++;
    return;
  }
  d.type = TensorType::kAffine;
  d.group_size = kGroup;
  d.bits = (mode_ == QuantizeMode::kQ8 || role == Role::kRouter) ? 8 : 4;
}

Result<TensorPlan> Planner::PlanLinear(const std::string& target, const std::string& module,
                                       int64_t out, int64_t in, Role role, int experts,
                                       int64_t row_begin, int64_t stride, int64_t fused_rows) {
  const bool fused = fused_rows > 0;
  const std::string wname = fused ? module : module + ".weight";
  const SourceTensorInfo* w = Find(wname);
  if (w == nullptr) return Missing(wname, target);
  TensorPlan p;
  p.target.name = target;
  p.target.shape = {out, in};
  std::vector<int64_t> lead;  // leading [E] of expert tensors
  if (experts > 0) lead = {experts};
  const int64_t rows_in_src = fused ? fused_rows : out;
  const SourceTensorInfo* s = fused ? nullptr : Find(module + ".scales");
  if (s == nullptr) {
    // Float weight [.., rows_in_src, in].
    RW_RETURN_IF_ERROR(CheckFloat(*w));
    std::vector<int64_t> want = lead;
    want.push_back(rows_in_src);
    want.push_back(in);
    if (w->shape != want) return BadShape(*w, want);
    Use(w);
    p.src_dtype = w->dtype;
    p.weight = SourceSlice{wname, row_begin, out, experts > 0 ? (stride ? stride : rows_in_src) : 0,
                           static_cast<uint64_t>(in) * StDTypeSize(w->dtype)};
    ChooseFloatTarget(&p, role);
    return p;
  }
  // MLX affine: .weight U32 [.., out, in*bits/32], .scales/.biases [.., out, in/group].
  const std::string bname = module + ".biases";
  const SourceTensorInfo* b = Find(bname);
  if (b == nullptr) return Missing(bname, target);
  if (w->dtype != StDType::kU32)
    return Error(ErrorCode::kCorrupt,
                 "{}: tensor '{}': quantized weight has dtype {}, expected U32", w->file, w->name,
                 StDTypeName(w->dtype));
  for (const SourceTensorInfo* t : {s, b}) {
    if (t->dtype != StDType::kBF16)
      return Error(
          ErrorCode::kUnsupported,
          "{}: tensor '{}': affine scales/biases of dtype {} are not supported (only BF16)",
          t->file, t->name, StDTypeName(t->dtype));
  }
  const size_t rank = lead.size() + 2;
  auto lead_ok = [&](const SourceTensorInfo* t) {
    return t->shape.size() == rank && std::equal(lead.begin(), lead.end(), t->shape.begin()) &&
           t->shape[rank - 2] == out && t->shape[rank - 1] > 0;
  };
  std::vector<int64_t> want_rows = lead;
  want_rows.push_back(out);
  if (!lead_ok(w)) {
    auto want = want_rows;
    want.push_back(-1);
    return BadShape(*w, want, " (-1: packed words)");
  }
  if (!lead_ok(s)) {
    auto want = want_rows;
    want.push_back(-1);
    return BadShape(*s, want, " (-1: groups)");
  }
  if (b->shape != s->shape) return BadShape(*b, s->shape, " (the shape of its scales)");
  const int64_t wcols = w->shape.back(), scols = s->shape.back();
  if ((wcols * 32) % in != 0 || in % scols != 0)
    return Error(ErrorCode::kCorrupt,
                 "{}: tensor '{}': {} packed words and {} groups per row do not fit {} inputs",
                 w->file, w->name, wcols, scols, in);
  const int bits = static_cast<int>(wcols * 32 / in), group = static_cast<int>(in / scols);
  if (!gemma4::SupportedAffine(bits, group))
    return Error(ErrorCode::kUnsupported,
                 "{}: tensor '{}': shapes imply {}-bit, group {}; only 4/8-bit with group "
                 "32/64/128 are supported",
                 w->file, w->name, bits, group);
  auto [cb, cg] = ConfiguredQuant(module);
  if (cb == -1)
    return Error(ErrorCode::kCorrupt,
                 "{}: tensor '{}': config.json lists module '{}' as not quantized, but it has "
                 ".scales",
                 w->file, w->name, module);
  if (cb != 0 && (cb != bits || cg != group))
    return Error(ErrorCode::kCorrupt,
                 "{}: tensor '{}': config.json says {}-bit group {} for '{}', but the shapes "
                 "({} words, {} groups per row of {}) imply {}-bit group {}",
                 w->file, w->name, cb, cg, module, wcols, scols, in, bits, group);
  Use(w);
  Use(s);
  Use(b);
  const int64_t es = experts > 0 ? out : 0;
  p.src_affine = true;
  p.src_dtype = s->dtype;
  p.src_bits = bits;
  p.src_group = group;
  p.weight = SourceSlice{wname, 0, out, es, static_cast<uint64_t>(wcols) * 4};
  p.scales = SourceSlice{s->name, 0, out, es, static_cast<uint64_t>(scols) * 2};
  p.biases = SourceSlice{bname, 0, out, es, static_cast<uint64_t>(scols) * 2};
  p.target.type = TensorType::kAffine;
  p.target.bits = bits;
  p.target.group_size = group;
  return p;
}

Status Planner::PlanCore(const TensorRow& row, const std::string& target, const std::string& src,
                         const std::vector<int64_t>& shape) {
  if (row.role == Role::kVector) return PlanFloat(target, src, shape);
  RW_ASSIGN_OR_RETURN(TensorPlan p, PlanLinear(target, src, shape[0], shape[1], row.role));
  plan_.core.push_back(std::move(p));
  return Status::Ok();
}

Status Planner::PlanLayer(int i) {
  const ModelConfig& c = plan_.config;
  const std::string src = fmt::format("{}layers.{}.", plan_.prefix, i);
  for (const TensorRow* row : ConvertLayerOrder()) {
    const std::string source = src + std::string(row->source);
    // K=V layers have no v_proj; keep one if the source has it anyway.
    if (!gemma4::Present(*row, c, i) &&
        !(row->when == gemma4::When::kHasVProj && Find(source + ".weight") != nullptr))
      continue;
    RW_RETURN_IF_ERROR(
        PlanCore(*row, gemma4::LayerName(*row, i), source, gemma4::Shape(*row, c, i)));
  }
  if (c.enable_moe) RW_RETURN_IF_ERROR(PlanExperts(i));
  return Status::Ok();
}

Status Planner::PlanExperts(int i) {
  const ModelConfig& c = plan_.config;
  const std::string src = fmt::format("{}layers.{}.experts.", plan_.prefix, i);
  const gemma4::ExpertRow& first = gemma4::kExpertTensors[0];
  // Hugging Face fuses parts into one tensor per hf_tensor ([E, parts*out, in], no ".weight");
  // MLX keeps a module per part.
  const bool hf = Find(src + std::string(first.hf_tensor)) != nullptr ||
                  Find(src + std::string(first.mlx_module) + ".weight") == nullptr;
  ExpertLayerPlan lp;
  lp.layer = i;
  TensorPlan* parts[] = {&lp.gate, &lp.up, &lp.down};
  static_assert(std::size(parts) == std::size(gemma4::kExpertTensors));
  for (size_t k = 0; k < std::size(parts); ++k) {
    const gemma4::ExpertRow& row = gemma4::kExpertTensors[k];
    const std::vector<int64_t> shape = gemma4::Shape(row, c);
    const int64_t out = shape[0], in = shape[1], fused = row.hf_parts * out;
    const std::string name(row.name);
    if (hf) {
      RW_ASSIGN_OR_RETURN(*parts[k],
                          PlanLinear(name, src + std::string(row.hf_tensor), out, in, Role::kExpert,
                                     c.num_experts, row.hf_part * out, fused, fused));
    } else {
      RW_ASSIGN_OR_RETURN(*parts[k], PlanLinear(name, src + std::string(row.mlx_module), out, in,
                                                Role::kExpert, c.num_experts));
    }
  }
  plan_.experts.push_back(std::move(lp));
  return Status::Ok();
}

Result<ConvertPlan> Planner::Run() {
  plan_.mode = mode_;
  std::vector<SourceTensorInfo> all;
  all.reserve(by_name_.size());
  for (const auto& [n, t] : by_name_) all.push_back(*t);
  RW_RETURN_IF_ERROR(DetectLayout(all));
  RW_RETURN_IF_ERROR(ReadMlxQuantization());

  // The source float type: the embedding's dtype, or its scales' dtype when quantized.
  const std::string embed = plan_.prefix + std::string(gemma4::kEmbedTokens.source);
  const SourceTensorInfo* et = Find(embed + ".scales");
  if (et == nullptr) et = Find(embed + ".weight");
  plan_.source_dtype = DTypeToTorchName(et->dtype);
  const Json& text = config_json_.contains("text_config") && config_json_["text_config"].is_object()
                         ? config_json_["text_config"]
                         : config_json_;
  // The weights decide; a config that disagrees is only noted.
  for (const Json* j : {&text, &config_json_}) {
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (j->contains(key) && (*j)[key].is_string() && (*j)[key] != plan_.source_dtype &&
          plan_.notes.empty())
        plan_.notes.push_back(fmt::format("config.json says {} {}, the weights are {}; using {}",
                                          key, (*j)[key].get<std::string>(), plan_.source_dtype,
                                          plan_.source_dtype));
    }
  }
  // The embedding scale is rounded to the dtype the model computes in: the source's for keep,
  // bf16 when we produce bf16 or bf16-based affine weights.
  const std::string scale_dtype = mode_ == QuantizeMode::kKeep ? plan_.source_dtype : "bfloat16";
  RW_ASSIGN_OR_RETURN(plan_.config,
                      ModelConfigFromHf(config_json_, scale_dtype, what_ + "/config.json"));
  const ModelConfig& c = plan_.config;

  auto model_tensor = [&](const TensorRow& row) {
    return PlanCore(row, std::string(row.name), plan_.prefix + std::string(row.source),
                    gemma4::Shape(row, c, -1));
  };
  RW_RETURN_IF_ERROR(model_tensor(gemma4::kEmbedTokens));
  for (int i = 0; i < c.num_layers; ++i) RW_RETURN_IF_ERROR(PlanLayer(i));
  RW_RETURN_IF_ERROR(model_tensor(gemma4::kFinalNorm));

  // Everything else is either skipped with a reason or an error: never drop weights silently.
  std::map<std::string, std::pair<std::string, int>> skipped;  // prefix -> (reason, count)
  std::vector<const SourceTensorInfo*> unknown;
  for (const auto& [name, t] : by_name_) {
    if (used_.count(name)) continue;
    std::string prefix, reason;
    if (SkipReason(name, &prefix, &reason)) {
      auto& e = skipped[prefix];
      e.first = reason;
      e.second++;
    } else if (name.find("rotary_emb.") != std::string::npos) {
      auto& e = skipped[name.substr(0, name.find("rotary_emb.") + 11)];
      e.first = "rotary buffers (recomputed from the config)";
      e.second++;
    } else {
      unknown.push_back(t);
    }
  }
  if (!unknown.empty()) {
    std::string list;
    for (size_t k = 0; k < unknown.size() && k < 5; ++k)
      list += fmt::format("{}'{}' (in {})", k ? ", " : "", unknown[k]->name, unknown[k]->file);
    if (unknown.size() > 5) list += fmt::format(" and {} more", unknown.size() - 5);
    return Error(ErrorCode::kUnsupported,
                 "{}: {} tensor(s) that are not part of the Gemma 4 text model as configured: {}",
                 what_, unknown.size(), list);
  }
  for (const auto& [prefix, e] : skipped)
    plan_.skipped.push_back(Json{{"prefix", prefix}, {"tensors", e.second}, {"reason", e.first}});
  for (const auto& [reason, n] : kept_float_)
    plan_.notes.push_back(
        fmt::format("{} linear(s) kept in their source float type: {}", n, reason));
  return std::move(plan_);
}

}  // namespace

const char* SourceKindName(SourceKind k) {
  return k == SourceKind::kMlx ? "mlx" : "hf";
}

Result<QuantizeMode> ParseQuantizeMode(const std::string& s) {
  if (s == "keep") return QuantizeMode::kKeep;
  if (s == "q4") return QuantizeMode::kQ4;
  if (s == "q8") return QuantizeMode::kQ8;
  if (s == "bf16") return QuantizeMode::kBf16;
  return Error(ErrorCode::kInvalidArgument, "--quantize '{}': expected keep, q4, q8 or bf16", s);
}

const char* QuantizeModeName(QuantizeMode m) {
  switch (m) {
    case QuantizeMode::kKeep:
      return "keep";
    case QuantizeMode::kQ4:
      return "q4";
    case QuantizeMode::kQ8:
      return "q8";
    case QuantizeMode::kBf16:
      return "bf16";
  }
  return "?";
}

Result<ConvertPlan> PlanConversion(const Json& config_json,
                                   const std::vector<SourceTensorInfo>& tensors, QuantizeMode mode,
                                   const std::string& what) {
  if (!config_json.is_object())
    return Error(ErrorCode::kCorrupt, "{}/config.json: not a JSON object", what);
  Planner p(config_json, tensors, mode, what);
  return p.Run();
}

std::vector<SourceTensorInfo> ListSourceTensors(const SafetensorsCheckpoint& ck) {
  std::vector<SourceTensorInfo> out;
  for (const std::string& name : ck.Names()) {
    auto e = ck.Find(name);
    out.push_back(SourceTensorInfo{name, e.tensor->dtype, e.tensor->shape, e.file->path()});
  }
  return out;
}

}  // namespace rw
