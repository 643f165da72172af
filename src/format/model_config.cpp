#include "format/model_config.h"

#include <cmath>
#include <limits>
#include <type_traits>

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

// An integer field read as int64 and refused unless it fits an int, so that a value like
// 2^32 + 32 is an error naming the field rather than 32. Validate checks the plausible range.
Status IntField(const Json& j, const char* key, int* out, const std::string& what) {
  RW_ASSIGN_OR_RETURN(int64_t v, JsonInt(j, key, what));
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return Error(ErrorCode::kCorrupt, "{}: field '{}' is {}, out of range", what, key, v);
  *out = static_cast<int>(v);
  return Status::Ok();
}

// The same for an optional field (absent or null keeps *out).
Status OptionalInt(const Json& j, const char* key, int* out, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  return IntField(j, key, out, what);
}

// A list of token ids (each checked as IntField is).
Status OptionalIds(const Json& j, const char* key, std::vector<int>* out, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_array() || it->size() > 1024)
    return Error(ErrorCode::kCorrupt, "{}: field '{}' must be an array of token ids", what, key);
  out->clear();
  for (const Json& e : *it) {
    Json one{{key, e}};
    int id = 0;
    RW_RETURN_IF_ERROR(IntField(one, key, &id, what));
    out->push_back(id);
  }
  return Status::Ok();
}

Result<AttentionGeometry> GeometryFromJson(const Json& j, const std::string& what) {
  AttentionGeometry g;
  RW_RETURN_IF_ERROR(IntField(j, "head_dim", &g.head_dim, what));
  RW_RETURN_IF_ERROR(IntField(j, "num_kv_heads", &g.num_kv_heads, what));
  RW_ASSIGN_OR_RETURN(g.rope_theta, JsonNumber(j, "rope_theta", what));
  RW_ASSIGN_OR_RETURN(g.rope_type, JsonString(j, "rope_type", what));
  RW_ASSIGN_OR_RETURN(g.partial_rotary_factor, JsonNumber(j, "partial_rotary_factor", what));
  RW_ASSIGN_OR_RETURN(g.k_eq_v, JsonBool(j, "k_eq_v", what));
  return g;
}

// Reads an optional field with a default; a present field of the wrong type is an error.
template <typename T>
Status Optional(const Json& j, const char* key, T* out, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  static_assert(!std::is_integral_v<T> || std::is_same_v<T, bool> || std::is_same_v<T, int64_t>,
                "integer fields are read as int64_t here, or with OptionalInt");
  if constexpr (std::is_same_v<T, int64_t>) {
    // get<int64_t>() of a float (an integer literal too large for 64 bits parses as one) is an
    // out-of-range conversion; JsonInt accepts integers only, in range.
    RW_ASSIGN_OR_RETURN(*out, JsonInt(j, key, what));
  } else {
    try {
      *out = it->get<T>();
    } catch (const std::exception&) {
      return Error(ErrorCode::kCorrupt, "{}: field '{}' has the wrong type", what, key);
    }
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
              {"final_logit_softcapping",
               final_logit_softcapping > 0 ? Json(final_logit_softcapping) : Json(nullptr)},
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
  auto geti = [&](const char* key, int* out) { return IntField(j, key, out, what); };
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
  // null means no softcapping; 0 would divide by zero in any reference implementation, so a
  // number must be a real cap.
  auto cap = j.find("final_logit_softcapping");
  if (cap == j.end())
    return Error(ErrorCode::kCorrupt, "{}: field 'final_logit_softcapping' missing", what);
  if (!cap->is_null()) {
    RW_ASSIGN_OR_RETURN(c.final_logit_softcapping, JsonNumber(j, "final_logit_softcapping", what));
    if (!(c.final_logit_softcapping > 0))
      return Error(ErrorCode::kCorrupt,
                   "{}: field 'final_logit_softcapping' is {}; it must be positive, or null for "
                   "no softcapping",
                   what, c.final_logit_softcapping);
  }
  RW_ASSIGN_OR_RETURN(double es, JsonNumber(j, "embed_scale", what));
  if (!(es > 0 && es <= 1e4))
    return Error(ErrorCode::kCorrupt, "{}: field 'embed_scale' is {}, outside (0, 1e4]", what, es);
  c.embed_scale = static_cast<float>(es);
  RW_ASSIGN_OR_RETURN(c.activation, JsonString(j, "activation", what));
  RW_ASSIGN_OR_RETURN(c.tie_word_embeddings, JsonBool(j, "tie_word_embeddings", what));
  RW_RETURN_IF_ERROR(geti("max_position_embeddings", &c.max_position_embeddings));
  RW_RETURN_IF_ERROR(geti("bos_token_id", &c.bos_token_id));
  RW_RETURN_IF_ERROR(geti("pad_token_id", &c.pad_token_id));
  RW_RETURN_IF_ERROR(OptionalIds(j, "eos_token_ids", &c.eos_token_ids, what));
  RW_RETURN_IF_ERROR(c.Validate().Annotate(what));
  return c;
}

Status ModelConfig::Validate() const {
  auto bad = [](const std::string& m) { return Status(ErrorCode::kCorrupt, m); };
  // Ranges far beyond any real Gemma, tight enough that products of them cannot overflow.
  auto range = [&](const std::string& field, int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi) return Status::Ok();
    return bad(fmt::format("field '{}' is {}, outside [{}, {}]", field, v, lo, hi));
  };
  if (architecture != "gemma4_text")
    return Status(ErrorCode::kUnsupported,
                  "architecture '" + architecture + "' is not supported (only gemma4_text)");
  RW_RETURN_IF_ERROR(range("vocab_size", vocab_size, 1, 1 << 24));
  RW_RETURN_IF_ERROR(range("hidden_size", hidden_size, 1, 1 << 16));
  RW_RETURN_IF_ERROR(range("num_layers", num_layers, 1, 1024));
  RW_RETURN_IF_ERROR(range("num_heads", num_heads, 1, 1024));
  if (static_cast<int>(layer_types.size()) != num_layers)
    return bad(
        fmt::format("layer_types has {} entries for {} layers", layer_types.size(), num_layers));
  for (const AttentionGeometry* g : {&sliding, &full}) {
    const std::string kind = g == &sliding ? "sliding." : "full.";
    RW_RETURN_IF_ERROR(range(kind + "head_dim", g->head_dim, 2, 1 << 13));
    if (g->head_dim % 2 != 0) return bad("field '" + kind + "head_dim' must be even");
    RW_RETURN_IF_ERROR(range(kind + "num_kv_heads", g->num_kv_heads, 1, 1024));
    if (num_heads % g->num_kv_heads != 0)
      return bad(fmt::format("num_heads {} is not a multiple of num_kv_heads {}", num_heads,
                             g->num_kv_heads));
    if (g->rope_type != "default" && g->rope_type != "proportional")
      return Status(ErrorCode::kUnsupported, "rope_type '" + g->rope_type + "' is not supported");
    if (!(g->partial_rotary_factor > 0 && g->partial_rotary_factor <= 1))
      return bad("field '" + kind + "partial_rotary_factor' must be in (0, 1]");
    if (!(g->rope_theta > 0 && std::isfinite(g->rope_theta)))
      return bad("field '" + kind + "rope_theta' must be positive and finite");
  }
  if (sliding.k_eq_v)
    return Status(ErrorCode::kUnsupported, "k_eq_v on sliding layers is not supported");
  bool any_sliding = false;
  for (LayerKind k : layer_types) any_sliding |= k == LayerKind::kSliding;
  RW_RETURN_IF_ERROR(range("sliding_window", sliding_window, any_sliding ? 1 : 0, 1 << 24));
  RW_RETURN_IF_ERROR(range("intermediate_size", intermediate_size, 1, 1 << 20));
  if (enable_moe) {
    RW_RETURN_IF_ERROR(range("num_experts", num_experts, 1, 100000));
    RW_RETURN_IF_ERROR(range("top_k", top_k, 1, num_experts));
    RW_RETURN_IF_ERROR(range("moe_intermediate_size", moe_intermediate_size, 1, 1 << 20));
  } else if (num_experts != 0 || top_k != 0 || moe_intermediate_size != 0) {
    return bad(fmt::format(
        "field 'enable_moe' is false, but num_experts {}, top_k {}, moe_intermediate_size {} "
        "describe experts",
        num_experts, top_k, moe_intermediate_size));
  }
  if (!(rms_norm_eps > 0 && rms_norm_eps < 1))
    return bad(fmt::format("field 'rms_norm_eps' is {}; it must be in (0, 1)", rms_norm_eps));
  // 0 is "none"; a cap must be a positive finite number.
  if (!(final_logit_softcapping == 0 ||
        (final_logit_softcapping > 0 && std::isfinite(final_logit_softcapping))))
    return bad(fmt::format("field 'final_logit_softcapping' is {}; it must be positive",
                           final_logit_softcapping));
  if (!(embed_scale > 0 && std::isfinite(embed_scale)))
    return bad("field 'embed_scale' must be positive and finite");
  if (activation != "gelu_pytorch_tanh")
    return Status(ErrorCode::kUnsupported, "activation '" + activation + "' is not supported");
  if (!tie_word_embeddings)
    return Status(ErrorCode::kUnsupported, "untied output embeddings are not supported");
  RW_RETURN_IF_ERROR(range("max_position_embeddings", max_position_embeddings, 1, 1 << 24));
  RW_RETURN_IF_ERROR(range("bos_token_id", bos_token_id, 0, vocab_size - 1));
  RW_RETURN_IF_ERROR(range("pad_token_id", pad_token_id, 0, vocab_size - 1));
  for (int e : eos_token_ids) RW_RETURN_IF_ERROR(range("eos_token_ids", e, 0, vocab_size - 1));
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
  auto req = [&](const char* key, int* out) { return IntField(j, key, out, what); };
  RW_RETURN_IF_ERROR(req("vocab_size", &c.vocab_size));
  RW_RETURN_IF_ERROR(req("hidden_size", &c.hidden_size));
  RW_RETURN_IF_ERROR(req("num_hidden_layers", &c.num_layers));
  RW_RETURN_IF_ERROR(req("num_attention_heads", &c.num_heads));
  RW_RETURN_IF_ERROR(req("intermediate_size", &c.intermediate_size));
  int kv_heads = 0, head_dim = 256;
  RW_RETURN_IF_ERROR(req("num_key_value_heads", &kv_heads));
  RW_RETURN_IF_ERROR(OptionalInt(j, "head_dim", &head_dim, what));
  c.sliding_window = 512;  // the class default
  RW_RETURN_IF_ERROR(OptionalInt(j, "sliding_window", &c.sliding_window, what));
  RW_RETURN_IF_ERROR(Optional(j, "rms_norm_eps", &c.rms_norm_eps, what));
  RW_RETURN_IF_ERROR(Optional(j, "final_logit_softcapping", &c.final_logit_softcapping, what));
  // transformers divides by the cap whenever it is not None: 0 is no model, not "no cap".
  if (j.contains("final_logit_softcapping") && !j["final_logit_softcapping"].is_null() &&
      !(c.final_logit_softcapping > 0))
    return Error(ErrorCode::kCorrupt,
                 "{}: field 'final_logit_softcapping' is {}; it must be positive, or null for none",
                 what, c.final_logit_softcapping);
  RW_RETURN_IF_ERROR(Optional(j, "hidden_activation", &c.activation, what));
  c.max_position_embeddings = 131072;
  RW_RETURN_IF_ERROR(OptionalInt(j, "max_position_embeddings", &c.max_position_embeddings, what));
  RW_RETURN_IF_ERROR(Optional(root, "tie_word_embeddings", &c.tie_word_embeddings, what));
  RW_RETURN_IF_ERROR(Optional(j, "tie_word_embeddings", &c.tie_word_embeddings, what));
  RW_RETURN_IF_ERROR(OptionalInt(j, "bos_token_id", &c.bos_token_id, what));
  RW_RETURN_IF_ERROR(OptionalInt(j, "pad_token_id", &c.pad_token_id, what));
  const Json* eos = j.contains("eos_token_id")
                        ? &j["eos_token_id"]
                        : (root.contains("eos_token_id") ? &root["eos_token_id"] : nullptr);
  if (eos != nullptr && eos->is_number_integer()) {
    c.eos_token_ids = {0};
    RW_RETURN_IF_ERROR(
        IntField(Json{{"eos_token_id", *eos}}, "eos_token_id", &c.eos_token_ids[0], what));
  } else if (eos != nullptr && eos->is_array()) {
    RW_RETURN_IF_ERROR(
        OptionalIds(j.contains("eos_token_id") ? j : root, "eos_token_id", &c.eos_token_ids, what));
  } else {
    c.eos_token_ids = {1};
  }

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
  RW_RETURN_IF_ERROR(OptionalInt(j, "global_head_dim", &c.full.head_dim, what));
  if (k_eq_v)
    RW_RETURN_IF_ERROR(OptionalInt(j, "num_global_key_value_heads", &c.full.num_kv_heads, what));
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
      RW_RETURN_IF_ERROR(OptionalInt(it.value(), "head_dim", &hd, what));
      RW_RETURN_IF_ERROR(OptionalInt(it.value(), "num_key_value_heads", &kv, what));
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
