#include "format/model_config.h"

#include <cmath>

#include "base/bf16.h"

namespace rw {
namespace {

const char* LayerKindName(LayerKind k) {
  return k == LayerKind::kFull ? "full_attention" : "sliding_attention";
}

Json GeometryToJson(const AttentionGeometry& g) {
  return Json{{"head_dim", g.head_dim},
              {"num_kv_heads", g.num_kv_heads},
              {"rope_theta", g.rope_theta},
              {"rope_type", g.rope_type},
              {"partial_rotary_factor", g.partial_rotary_factor},
              {"k_eq_v", g.k_eq_v}};
}

Result<AttentionGeometry> GeometryFromJson(const Json& j, const std::string& what) {
  AttentionGeometry g;
  RW_ASSIGN_OR_RETURN(int64_t hd, JsonInt(j, "head_dim", what));
  RW_ASSIGN_OR_RETURN(int64_t kv, JsonInt(j, "num_kv_heads", what));
  RW_ASSIGN_OR_RETURN(g.rope_theta, JsonNumber(j, "rope_theta", what));
  RW_ASSIGN_OR_RETURN(g.rope_type, JsonString(j, "rope_type", what));
  RW_ASSIGN_OR_RETURN(g.partial_rotary_factor, JsonNumber(j, "partial_rotary_factor", what));
  RW_ASSIGN_OR_RETURN(g.k_eq_v, JsonBool(j, "k_eq_v", what));
  g.head_dim = static_cast<int>(hd);
  g.num_kv_heads = static_cast<int>(kv);
  return g;
}

// Reads an optional field with a default; a present field of the wrong type is an error.
template <typename T>
Status Optional(const Json& j, const char* key, T* out, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  try {
    *out = it->get<T>();
  } catch (const std::exception&) {
    return Error(ErrorCode::kCorrupt, "{}: field '{}' has the wrong type", what, key);
  }
  return Status::Ok();
}

}  // namespace

float EmbedScaleFor(int hidden_size, const std::string& weight_dtype) {
  float s = std::sqrt(static_cast<float>(hidden_size));
  if (weight_dtype == "bfloat16" || weight_dtype == "bf16") return RoundToBf16(s);
  return s;
}

Json ModelConfig::ToJson() const {
  Json types = Json::array();
  for (LayerKind k : layer_types) types.push_back(LayerKindName(k));
  return Json{{"architecture", architecture},
              {"vocab_size", vocab_size},
              {"hidden_size", hidden_size},
              {"num_layers", num_layers},
              {"num_heads", num_heads},
              {"layer_types", types},
              {"sliding", GeometryToJson(sliding)},
              {"full", GeometryToJson(full)},
              {"sliding_window", sliding_window},
              {"intermediate_size", intermediate_size},
              {"enable_moe", enable_moe},
              {"num_experts", num_experts},
              {"top_k", top_k},
              {"moe_intermediate_size", moe_intermediate_size},
              {"rms_norm_eps", rms_norm_eps},
              {"final_logit_softcapping", final_logit_softcapping},
              {"embed_scale", embed_scale},
              {"activation", activation},
              {"tie_word_embeddings", tie_word_embeddings},
              {"max_position_embeddings", max_position_embeddings},
              {"bos_token_id", bos_token_id},
              {"pad_token_id", pad_token_id},
              {"eos_token_ids", eos_token_ids}};
}

Result<ModelConfig> ModelConfig::FromJson(const Json& j, const std::string& what) {
  ModelConfig c;
  auto geti = [&](const char* key, int* out) -> Status {
    RW_ASSIGN_OR_RETURN(int64_t v, JsonInt(j, key, what));
    if (v < 0 || v > (1ll << 31))
      return Error(ErrorCode::kCorrupt, "{}: field '{}' out of range", what, key);
    *out = static_cast<int>(v);
    return Status::Ok();
  };
  RW_ASSIGN_OR_RETURN(c.architecture, JsonString(j, "architecture", what));
  RW_RETURN_IF_ERROR(geti("vocab_size", &c.vocab_size));
  RW_RETURN_IF_ERROR(geti("hidden_size", &c.hidden_size));
  RW_RETURN_IF_ERROR(geti("num_layers", &c.num_layers));
  RW_RETURN_IF_ERROR(geti("num_heads", &c.num_heads));
  if (!j.contains("layer_types") || !j["layer_types"].is_array())
    return Error(ErrorCode::kCorrupt, "{}: field 'layer_types' must be an array", what);
  for (const Json& t : j["layer_types"]) {
    if (t == "full_attention")
      c.layer_types.push_back(LayerKind::kFull);
    else if (t == "sliding_attention")
      c.layer_types.push_back(LayerKind::kSliding);
    else
      return Error(ErrorCode::kCorrupt, "{}: unknown layer type {}", what, t.dump());
  }
  if (!j.contains("sliding") || !j.contains("full"))
    return Error(ErrorCode::kCorrupt, "{}: fields 'sliding' and 'full' are required", what);
  RW_ASSIGN_OR_RETURN(c.sliding, GeometryFromJson(j["sliding"], what + ".sliding"));
  RW_ASSIGN_OR_RETURN(c.full, GeometryFromJson(j["full"], what + ".full"));
  RW_RETURN_IF_ERROR(geti("sliding_window", &c.sliding_window));
  RW_RETURN_IF_ERROR(geti("intermediate_size", &c.intermediate_size));
  RW_ASSIGN_OR_RETURN(c.enable_moe, JsonBool(j, "enable_moe", what));
  RW_RETURN_IF_ERROR(geti("num_experts", &c.num_experts));
  RW_RETURN_IF_ERROR(geti("top_k", &c.top_k));
  RW_RETURN_IF_ERROR(geti("moe_intermediate_size", &c.moe_intermediate_size));
  RW_ASSIGN_OR_RETURN(c.rms_norm_eps, JsonNumber(j, "rms_norm_eps", what));
  RW_ASSIGN_OR_RETURN(c.final_logit_softcapping, JsonNumber(j, "final_logit_softcapping", what));
  RW_ASSIGN_OR_RETURN(double es, JsonNumber(j, "embed_scale", what));
  c.embed_scale = static_cast<float>(es);
  RW_ASSIGN_OR_RETURN(c.activation, JsonString(j, "activation", what));
  RW_ASSIGN_OR_RETURN(c.tie_word_embeddings, JsonBool(j, "tie_word_embeddings", what));
  RW_RETURN_IF_ERROR(geti("max_position_embeddings", &c.max_position_embeddings));
  RW_RETURN_IF_ERROR(geti("bos_token_id", &c.bos_token_id));
  RW_RETURN_IF_ERROR(geti("pad_token_id", &c.pad_token_id));
  RW_RETURN_IF_ERROR(Optional(j, "eos_token_ids", &c.eos_token_ids, what));
  RW_RETURN_IF_ERROR(c.Validate().Annotate(what));
  return c;
}

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& m) { return Status(ErrorCode::kCorrupt, m); };
  if (architecture != "gemma4_text")
    return Status(ErrorCode::kUnsupported,
                  "architecture '" + architecture + "' is not supported (only gemma4_text)");
  if (vocab_size <= 0 || hidden_size <= 0 || num_layers <= 0 || num_heads <= 0)
    return bad("vocab_size, hidden_size, num_layers and num_heads must be positive");
  if (static_cast<int>(layer_types.size()) != num_layers)
    return bad(
        fmt::format("layer_types has {} entries for {} layers", layer_types.size(), num_layers));
  for (const AttentionGeometry* g : {&sliding, &full}) {
    if (g->head_dim <= 0 || g->head_dim % 2 != 0) return bad("head_dim must be positive and even");
    if (g->num_kv_heads <= 0 || num_heads % g->num_kv_heads != 0)
      return bad(fmt::format("num_heads {} is not a multiple of num_kv_heads {}", num_heads,
                             g->num_kv_heads));
    if (g->rope_type != "default" && g->rope_type != "proportional")
      return Status(ErrorCode::kUnsupported, "rope_type '" + g->rope_type + "' is not supported");
    if (g->partial_rotary_factor <= 0 || g->partial_rotary_factor > 1)
      return bad("partial_rotary_factor must be in (0, 1]");
    if (g->rope_theta <= 0) return bad("rope_theta must be positive");
  }
  if (sliding.k_eq_v)
    return Status(ErrorCode::kUnsupported, "k_eq_v on sliding layers is not supported");
  bool any_sliding = false;
  for (LayerKind k : layer_types) any_sliding |= k == LayerKind::kSliding;
  if (any_sliding && sliding_window <= 0) return bad("sliding_window must be positive");
  if (intermediate_size <= 0) return bad("intermediate_size must be positive");
  if (enable_moe) {
    if (num_experts <= 0 || top_k <= 0 || top_k > num_experts || moe_intermediate_size <= 0)
      return bad(fmt::format("bad MoE geometry: {} experts, top-k {}, width {}", num_experts, top_k,
                             moe_intermediate_size));
  }
  if (!(embed_scale > 0)) return bad("embed_scale must be positive");
  if (activation != "gelu_pytorch_tanh")
    return Status(ErrorCode::kUnsupported, "activation '" + activation + "' is not supported");
  if (!tie_word_embeddings)
    return Status(ErrorCode::kUnsupported, "untied output embeddings are not supported");
  if (max_position_embeddings <= 0) return bad("max_position_embeddings must be positive");
  if (bos_token_id < 0 || bos_token_id >= vocab_size) return bad("bos_token_id out of range");
  for (int e : eos_token_ids)
    if (e < 0 || e >= vocab_size) return bad("eos_token_ids out of range");
  return Status::Ok();
}

Result<ModelConfig> ModelConfigFromHf(const Json& root, const std::string& weight_dtype,
                                      const std::string& what) {
  if (!root.is_object()) return Error(ErrorCode::kCorrupt, "{}: not a JSON object", what);
  // Gemma4Config nests the text model; Gemma4TextConfig is flat.
  const Json& j =
      root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  // Optional() rather than Json::value(): value() throws when a field has another type.
  std::string model_type;
  RW_RETURN_IF_ERROR(Optional(root, "model_type", &model_type, what));
  RW_RETURN_IF_ERROR(Optional(j, "model_type", &model_type, what));
  if (model_type != "gemma4_text" && model_type != "gemma4")
    return Error(ErrorCode::kUnsupported, "{}: model_type '{}' is not Gemma 4", what, model_type);
  int64_t per_layer_input = 0, kv_shared = 0;
  RW_RETURN_IF_ERROR(Optional(j, "hidden_size_per_layer_input", &per_layer_input, what));
  RW_RETURN_IF_ERROR(Optional(j, "num_kv_shared_layers", &kv_shared, what));
  if (per_layer_input != 0)
    return Error(ErrorCode::kUnsupported,
                 "{}: per-layer embeddings (hidden_size_per_layer_input) are not supported", what);
  if (kv_shared != 0)
    return Error(ErrorCode::kUnsupported, "{}: KV sharing (num_kv_shared_layers) is not supported",
                 what);

  ModelConfig c;
  auto req = [&](const char* key, int* out) -> Status {
    RW_ASSIGN_OR_RETURN(int64_t v, JsonInt(j, key, what));
    *out = static_cast<int>(v);
    return Status::Ok();
  };
  RW_RETURN_IF_ERROR(req("vocab_size", &c.vocab_size));
  RW_RETURN_IF_ERROR(req("hidden_size", &c.hidden_size));
  RW_RETURN_IF_ERROR(req("num_hidden_layers", &c.num_layers));
  RW_RETURN_IF_ERROR(req("num_attention_heads", &c.num_heads));
  RW_RETURN_IF_ERROR(req("intermediate_size", &c.intermediate_size));
  int kv_heads = 0, head_dim = 256;
  RW_RETURN_IF_ERROR(req("num_key_value_heads", &kv_heads));
  RW_RETURN_IF_ERROR(Optional(j, "head_dim", &head_dim, what));
  c.sliding_window = 512;  // the class default
  RW_RETURN_IF_ERROR(Optional(j, "sliding_window", &c.sliding_window, what));
  RW_RETURN_IF_ERROR(Optional(j, "rms_norm_eps", &c.rms_norm_eps, what));
  RW_RETURN_IF_ERROR(Optional(j, "final_logit_softcapping", &c.final_logit_softcapping, what));
  RW_RETURN_IF_ERROR(Optional(j, "hidden_activation", &c.activation, what));
  c.max_position_embeddings = 131072;
  RW_RETURN_IF_ERROR(Optional(j, "max_position_embeddings", &c.max_position_embeddings, what));
  RW_RETURN_IF_ERROR(Optional(root, "tie_word_embeddings", &c.tie_word_embeddings, what));
  RW_RETURN_IF_ERROR(Optional(j, "tie_word_embeddings", &c.tie_word_embeddings, what));
  RW_RETURN_IF_ERROR(Optional(j, "bos_token_id", &c.bos_token_id, what));
  RW_RETURN_IF_ERROR(Optional(j, "pad_token_id", &c.pad_token_id, what));
  const Json* eos = j.contains("eos_token_id")
                        ? &j["eos_token_id"]
                        : (root.contains("eos_token_id") ? &root["eos_token_id"] : nullptr);
  if (eos != nullptr && eos->is_number_integer())
    c.eos_token_ids = {eos->get<int>()};
  else if (eos != nullptr && eos->is_array())
    RW_RETURN_IF_ERROR(
        Optional(j.contains("eos_token_id") ? j : root, "eos_token_id", &c.eos_token_ids, what));
  else
    c.eos_token_ids = {1};

  c.enable_moe = false;
  RW_RETURN_IF_ERROR(Optional(j, "enable_moe_block", &c.enable_moe, what));
  if (c.enable_moe) {
    RW_RETURN_IF_ERROR(req("num_experts", &c.num_experts));
    RW_RETURN_IF_ERROR(req("top_k_experts", &c.top_k));
    RW_RETURN_IF_ERROR(req("moe_intermediate_size", &c.moe_intermediate_size));
  }

  // Layer pattern: explicit, or the class default (every 6th layer full), last layer forced full.
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const Json& t : j["layer_types"]) {
      if (t == "full_attention")
        c.layer_types.push_back(LayerKind::kFull);
      else if (t == "sliding_attention")
        c.layer_types.push_back(LayerKind::kSliding);
      else
        return Error(ErrorCode::kUnsupported, "{}: unknown layer type {}", what, t.dump());
    }
  } else {
    for (int i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % 6 == 0 ? LayerKind::kFull : LayerKind::kSliding);
  }
  if (!c.layer_types.empty()) c.layer_types.back() = LayerKind::kFull;

  bool k_eq_v = false;
  RW_RETURN_IF_ERROR(Optional(j, "attention_k_eq_v", &k_eq_v, what));
  c.sliding.head_dim = head_dim;
  c.sliding.num_kv_heads = kv_heads;
  // Full-layer geometry: explicit global_* fields (transformers 5.5) or per_layer_config
  // overrides (later versions); absent both, the class defaults (512, same kv heads).
  c.full.head_dim = 512;
  c.full.num_kv_heads = kv_heads;
  RW_RETURN_IF_ERROR(Optional(j, "global_head_dim", &c.full.head_dim, what));
  if (k_eq_v)
    RW_RETURN_IF_ERROR(Optional(j, "num_global_key_value_heads", &c.full.num_kv_heads, what));
  if (j.contains("per_layer_config") && j["per_layer_config"].is_object()) {
    bool seen = false;
    for (auto it = j["per_layer_config"].begin(); it != j["per_layer_config"].end(); ++it) {
      int layer = -1;
      try {
        layer = std::stoi(it.key());
      } catch (...) {
      }
      // Against layer_types, which an explicit list may make shorter than num_layers.
      if (layer < 0 || layer >= static_cast<int>(c.layer_types.size()))
        return Error(ErrorCode::kCorrupt, "{}: per_layer_config key '{}' is not a layer index",
                     what, it.key());
      if (c.layer_types[layer] != LayerKind::kFull)
        return Error(ErrorCode::kUnsupported, "{}: per_layer_config overrides sliding layer {}",
                     what, layer);
      int hd = c.full.head_dim, kv = c.full.num_kv_heads;
      RW_RETURN_IF_ERROR(Optional(it.value(), "head_dim", &hd, what));
      RW_RETURN_IF_ERROR(Optional(it.value(), "num_key_value_heads", &kv, what));
      if (seen && (hd != c.full.head_dim || kv != c.full.num_kv_heads))
        return Error(ErrorCode::kUnsupported, "{}: full layers with differing geometry", what);
      c.full.head_dim = hd;
      c.full.num_kv_heads = kv;
      seen = true;
    }
  }
  c.full.k_eq_v = k_eq_v;

  // RoPE per layer kind.
  c.sliding.rope_type = "default";
  c.sliding.rope_theta = 10000.0;
  c.full.rope_type = "proportional";
  c.full.rope_theta = 1e6;
  c.full.partial_rotary_factor = 0.25;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const Json& rp = j["rope_parameters"];
    auto read = [&](const char* key, AttentionGeometry* g) -> Status {
      if (!rp.contains(key)) return Status::Ok();
      const Json& p = rp[key];
      RW_RETURN_IF_ERROR(Optional(p, "rope_type", &g->rope_type, what));
      RW_RETURN_IF_ERROR(Optional(p, "rope_theta", &g->rope_theta, what));
      g->partial_rotary_factor = 1.0;
      RW_RETURN_IF_ERROR(Optional(p, "partial_rotary_factor", &g->partial_rotary_factor, what));
      double factor = 1.0;
      RW_RETURN_IF_ERROR(Optional(p, "factor", &factor, what));
      if (factor != 1.0)
        return Error(ErrorCode::kUnsupported, "{}: RoPE scaling factor {} is not supported", what,
                     factor);
      return Status::Ok();
    };
    RW_RETURN_IF_ERROR(read("sliding_attention", &c.sliding));
    RW_RETURN_IF_ERROR(read("full_attention", &c.full));
  }
  c.embed_scale = EmbedScaleFor(c.hidden_size, weight_dtype);
  RW_RETURN_IF_ERROR(c.Validate().Annotate(what));
  return c;
}

}  // namespace rw
