#include "draft/dflash_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace rw {

namespace {

const char* kWhat = "drafter config.json";

// dflash_config's value of key, else the top level's, else null.
const Json* DraftValue(const Json& j, const char* key) {
  auto d = j.find("dflash_config");
  if (d != j.end() && d->is_object()) {
    auto v = d->find(key);
    if (v != d->end() && !v->is_null()) return &*v;
  }
  auto v = j.find(key);
  if (v != j.end() && !v->is_null()) return &*v;
  return nullptr;
}

Status Bad(const std::string& field, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument, "{}: {} {}", kWhat, field, why);
}

Result<int64_t> IntIn(const Json& j, const char* key, int64_t lo, int64_t hi) {
  RW_ASSIGN_OR_RETURN(int64_t v, JsonInt(j, key, kWhat));
  if (v < lo || v > hi) return Bad(key, fmt::format("must be in [{}, {}], not {}", lo, hi, v));
  return v;
}

Result<double> OptionalNumber(const Json& j, const char* key, double dflt) {
  const Json* v = DraftValue(j, key);
  if (v == nullptr) return dflt;
  if (!v->is_number()) return Bad(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x)) return Bad(key, "must be finite");
  return x;
}

}  // namespace

Result<DFlashConfig> DFlashConfig::FromHf(const Json& j) {
  if (!j.is_object()) return Bad("the file", "is not a JSON object");
  DFlashConfig c;
  RW_ASSIGN_OR_RETURN(int64_t layers, IntIn(j, "num_hidden_layers", 1, 256));
  c.num_layers = static_cast<int>(layers);
  RW_ASSIGN_OR_RETURN(c.hidden, IntIn(j, "hidden_size", 1, 1 << 16));
  RW_ASSIGN_OR_RETURN(int64_t heads, IntIn(j, "num_attention_heads", 1, 1024));
  RW_ASSIGN_OR_RETURN(int64_t kv, IntIn(j, "num_key_value_heads", 1, 1024));
  c.num_heads = static_cast<int>(heads);
  c.num_kv_heads = static_cast<int>(kv);
  if (heads % kv != 0)
    return Bad("num_attention_heads", fmt::format("({}) must be a multiple of "
                                                  "num_key_value_heads ({})",
                                                  heads, kv));
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    RW_ASSIGN_OR_RETURN(int64_t hd, IntIn(j, "head_dim", 2, 1024));
    c.head_dim = static_cast<int>(hd);
  } else {
    c.head_dim = static_cast<int>(c.hidden / heads);
  }
  if (c.head_dim % 2 != 0) return Bad("head_dim", "must be even (RoPE pairs)");
  RW_ASSIGN_OR_RETURN(c.intermediate, IntIn(j, "intermediate_size", 1, 1 << 20));
  RW_ASSIGN_OR_RETURN(c.rms_norm_eps, JsonNumber(j, "rms_norm_eps", kWhat));
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) return Bad("rms_norm_eps", "must be in (0, 1)");
  // transformers 5 moves rope_theta into rope_parameters.
  const Json* theta = nullptr;
  if (auto it = j.find("rope_theta"); it != j.end() && it->is_number()) theta = &*it;
  if (auto rp = j.find("rope_parameters"); theta == nullptr && rp != j.end() && rp->is_object()) {
    if (auto it = rp->find("rope_theta"); it != rp->end() && it->is_number()) theta = &*it;
    if (auto t = rp->find("rope_type"); t != rp->end() && t->is_string() && *t != "default")
      return Bad("rope_parameters.rope_type", "must be default");
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    auto t = rs->find("rope_type");
    if (!rs->is_object() || t == rs->end() || *t != "default")
      return Bad("rope_scaling", "is not supported (only default RoPE)");
  }
  if (theta != nullptr) c.rope_theta = theta->get<double>();
  if (!(c.rope_theta > 1)) return Bad("rope_theta", "must be > 1");
  if (auto b = j.find("attention_bias"); b != j.end() && b->is_boolean() && b->get<bool>())
    return Bad("attention_bias", "must be false");
  if (auto a = j.find("hidden_act"); a != j.end() && a->is_string() && *a != "silu")
    return Bad("hidden_act", "must be silu");

  c.sliding.assign(static_cast<size_t>(c.num_layers), false);
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(c.num_layers))
      return Bad("layer_types", fmt::format("must list {} layer types", c.num_layers));
    for (size_t i = 0; i < lt->size(); ++i) {
      const Json& t = (*lt)[i];
      if (t == "sliding_attention")
        c.sliding[i] = true;
      else if (t != "full_attention")
        return Bad("layer_types",
                   fmt::format("[{}] must be sliding_attention or full_attention", i));
    }
  }
  if (auto w = j.find("sliding_window"); w != j.end() && !w->is_null()) {
    RW_ASSIGN_OR_RETURN(c.sliding_window, IntIn(j, "sliding_window", 1, int64_t{1} << 40));
  }
  if (auto u = j.find("use_sliding_window"); u != j.end() && !u->is_null()) {
    if (!u->is_boolean()) return Bad("use_sliding_window", "must be true or false");
    c.use_sliding_window = u->get<bool>();
  }
  if (c.use_sliding_window && c.sliding_window <= 0)
    return Bad("sliding_window", "must be set when use_sliding_window is true");
  if (auto ic = j.find("is_causal"); ic != j.end() && !ic->is_null()) {
    if (!ic->is_boolean()) return Bad("is_causal", "must be true, false or null");
    c.is_causal = ic->get<bool>() ? 1 : 0;
  }

  if (const Json* v = DraftValue(j, "block_size")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 2 || v->get<int64_t>() > 1024)
      return Bad("block_size", "must be an integer in [2, 1024]");
    c.block_size = v->get<int>();
  }
  if (j.contains("vocab_size") && j["vocab_size"].is_number_integer())
    c.vocab_size = j["vocab_size"].get<int64_t>();
  const Json* mask = DraftValue(j, "mask_token_id");
  if (mask == nullptr || !mask->is_number_integer() || mask->get<int64_t>() < 0)
    return Bad("dflash_config.mask_token_id", "must be a token id");
  c.mask_token_id = mask->get<int>();
  const Json* ids = DraftValue(j, "target_layer_ids");
  if (ids == nullptr || !ids->is_array() || ids->empty())
    return Bad("dflash_config.target_layer_ids", "must be a non-empty list of layer indices");
  for (const Json& id : *ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 1024)
      return Bad("dflash_config.target_layer_ids", "must hold layer indices");
    if (!c.target_layer_ids.empty() && id.get<int>() <= c.target_layer_ids.back())
      return Bad("dflash_config.target_layer_ids", "must be ascending and distinct");
    c.target_layer_ids.push_back(id.get<int>());
  }
  RW_ASSIGN_OR_RETURN(c.input_embedding_scale, OptionalNumber(j, "input_embedding_scale", 1.0));
  if (!(c.input_embedding_scale > 0)) return Bad("input_embedding_scale", "must be > 0");
  RW_ASSIGN_OR_RETURN(c.output_multiplier, OptionalNumber(j, "output_multiplier", 1.0));
  RW_ASSIGN_OR_RETURN(c.final_logit_softcapping, OptionalNumber(j, "final_logit_softcapping", 0.0));
  if (c.final_logit_softcapping < 0) c.final_logit_softcapping = 0;  // the reference: > 0 caps
  return c;
}

Json DFlashConfig::ToHf() const {
  Json j;
  j["architectures"] = Json::array({"DFlashDraftModel"});
  j["model_type"] = "qwen3";
  j["num_hidden_layers"] = num_layers;
  j["hidden_size"] = hidden;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["intermediate_size"] = intermediate;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["sliding_window"] = sliding_window;
  j["use_sliding_window"] = use_sliding_window;
  Json types = Json::array();
  for (const bool s : sliding) types.push_back(s ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  if (is_causal >= 0) j["is_causal"] = is_causal == 1;
  j["block_size"] = block_size;
  if (vocab_size > 0) j["vocab_size"] = vocab_size;
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = "bfloat16";
  Json d;
  d["mask_token_id"] = mask_token_id;
  d["target_layer_ids"] = target_layer_ids;
  if (input_embedding_scale != 1.0) d["input_embedding_scale"] = input_embedding_scale;
  j["dflash_config"] = d;
  if (output_multiplier != 1.0) j["output_multiplier"] = output_multiplier;
  if (final_logit_softcapping > 0) j["final_logit_softcapping"] = final_logit_softcapping;
  return j;
}

std::vector<DFlashTensorName> DFlashTensorNames(const DFlashConfig& c) {
  const int64_t H = c.hidden, hd = c.head_dim, q = int64_t{c.num_heads} * hd,
                kv = int64_t{c.num_kv_heads} * hd, I = c.intermediate;
  const int64_t nctx = static_cast<int64_t>(c.target_layer_ids.size());
  std::vector<DFlashTensorName> t = {{"fc", {H, nctx * H}, true}, {"hidden_norm", {H}, false}};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    t.push_back({p + "input_layernorm", {H}, false});
    t.push_back({p + "self_attn.q_proj", {q, H}, true});
    t.push_back({p + "self_attn.k_proj", {kv, H}, true});
    t.push_back({p + "self_attn.v_proj", {kv, H}, true});
    t.push_back({p + "self_attn.o_proj", {H, q}, true});
    t.push_back({p + "self_attn.q_norm", {hd}, false});
    t.push_back({p + "self_attn.k_norm", {hd}, false});
    t.push_back({p + "post_attention_layernorm", {H}, false});
    t.push_back({p + "mlp.gate_proj", {I, H}, true});
    t.push_back({p + "mlp.up_proj", {I, H}, true});
    t.push_back({p + "mlp.down_proj", {H, I}, true});
  }
  t.push_back({"norm", {H}, false});
  return t;
}

int64_t DFlashConfig::Parameters() const {
  int64_t n = 0;
  for (const DFlashTensorName& t : DFlashTensorNames(*this)) {
    int64_t e = 1;
    for (int64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

std::vector<int> SpreadTargetLayers(int num_target_layers, int count) {
  std::vector<int> ids;
  if (num_target_layers <= 0 || count <= 0) return ids;
  if (count == 1) return {num_target_layers / 2};
  const int start = 1, end = std::max(start, num_target_layers - 3);
  for (int i = 0; i < count; ++i) {
    // int(round(start + i·span/(count−1))) with Python's round (half to even).
    const double x = start + static_cast<double>(i) * (end - start) / (count - 1);
    int id = static_cast<int>(std::nearbyint(x));
    id = std::clamp(id, 0, num_target_layers - 1);
    if (ids.empty() || id > ids.back()) ids.push_back(id);
  }
  return ids;
}

}  // namespace rw
