#include "convert_fixture.h"

#include <cstring>
#include <map>

#include "base/bf16.h"
#include "base/file.h"
#include "install/quantize.h"
#include "install/safetensors_writer.h"

namespace rw::test {
namespace {

struct Tensor {
  StDType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Cheap deterministic values in [-1, 1): one 64-bit mix per element, seeded by the name.
struct Rng {
  uint64_t s;
  explicit Rng(const std::string& name, uint32_t seed) : s(0x9e3779b97f4a7c15ull ^ seed) {
    for (char c : name) s = (s ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  }
  float Next() {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
  }
};

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

class Builder {
 public:
  Builder(const FixtureOptions& o) : o_(o) {}

  // Float values: norms near 1, weights small.
  std::vector<float> Values(const std::string& name, int64_t n, bool norm) {
    Rng r(name, o_.seed);
    std::vector<float> v(n);
    for (auto& x : v) x = norm ? 1.0f + 0.5f * r.Next() : 0.08f * r.Next();
    return v;
  }
  void AddFloat(const std::string& name, std::vector<int64_t> shape, bool norm, StDType dt) {
    auto v = Values(name, Numel(shape), norm);
    Tensor t{dt, shape, {}};
    if (dt == StDType::kF32) {
      t.bytes.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    } else {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
      t.bytes.assign(reinterpret_cast<const char*>(b.data()), b.size() * 2);
    }
    tensors_[name] = std::move(t);
  }
  // MLX module: .weight U32, .scales/.biases BF16, quantized from bf16 values.
  void AddAffine(const std::string& module, std::vector<int64_t> shape, int bits, int group) {
    auto v = Values(module, Numel(shape), false);
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
    int64_t cols = shape.back(), rows = Numel(shape) / cols;
    std::vector<uint32_t> q(rows * cols * bits / 32);
    std::vector<uint16_t> s(rows * cols / group), z(rows * cols / group);
    Status st = QuantizeAffineBf16(b.data(), rows, cols, bits, group, q.data(), s.data(), z.data());
    (void)st;
    auto wshape = shape, sshape = shape;
    wshape.back() = cols * bits / 32;
    sshape.back() = cols / group;
    tensors_[module + ".weight"] =
        Tensor{StDType::kU32, wshape, std::string(reinterpret_cast<char*>(q.data()), q.size() * 4)};
    tensors_[module + ".scales"] = Tensor{
        StDType::kBF16, sshape, std::string(reinterpret_cast<char*>(s.data()), s.size() * 2)};
    tensors_[module + ".biases"] = Tensor{
        StDType::kBF16, sshape, std::string(reinterpret_cast<char*>(z.data()), z.size() * 2)};
  }
  void AddLinear(const std::string& module, std::vector<int64_t> shape, int bits) {
    if (o_.layout == Layout::kMlx)
      AddAffine(module, shape, bits, o_.mlx_group);
    else
      AddFloat(module + ".weight", shape, false, o_.dtype);
  }
  void AddNorm(const std::string& name, std::vector<int64_t> shape) {
    AddFloat(name, shape, true, o_.layout == Layout::kMlx ? StDType::kBF16 : o_.dtype);
  }

  Status Write(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors_) names.push_back(n);
    int shards = std::max(1, o_.shards);
    std::map<std::string, std::string> weight_map;
    uint64_t total = 0;
    for (int s = 0; s < shards; ++s) {
      std::string file = shards == 1
                             ? "model.safetensors"
                             : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
      std::vector<StTensorSpec> specs;
      for (size_t i = s; i < names.size(); i += shards) {
        const Tensor& t = tensors_[names[i]];
        specs.push_back(StTensorSpec{names[i], t.dtype, t.shape});
        weight_map[names[i]] = file;
        total += t.bytes.size();
      }
      RW_ASSIGN_OR_RETURN(SafetensorsWriter w,
                          SafetensorsWriter::Create(JoinPath(dir, file), specs));
      for (const StTensorSpec& sp : specs) {
        const Tensor& t = tensors_[sp.name];
        RW_RETURN_IF_ERROR(w.WriteTensor(sp.name, t.bytes.data(), t.bytes.size()));
      }
      RW_RETURN_IF_ERROR(w.Finish());
    }
    if (shards > 1)
      RW_RETURN_IF_ERROR(
          WriteSafetensorsIndex(JoinPath(dir, "model.safetensors.index.json"), weight_map, total));
    return Status::Ok();
  }

  const FixtureOptions& o_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace

std::string LayoutPrefix(Layout l) {
  switch (l) {
    case Layout::kHfConditional:
      return "model.language_model.";
    case Layout::kHfCausal:
      return "model.";
    case Layout::kMlx:
      return "language_model.model.";
  }
  return "";
}

Json TinyConfigJson(const TinyGeometry& g, const FixtureOptions& o) {
  Json types = Json::array();
  for (int i = 0; i < g.layers; ++i)
    types.push_back(i == g.layers - 1 ? "full_attention" : "sliding_attention");
  std::string dtype = o.dtype == StDType::kF32 && o.layout != Layout::kMlx ? "float32" : "bfloat16";
  Json text{
      {"model_type", "gemma4_text"},
      {"vocab_size", g.vocab},
      {"hidden_size", g.hidden},
      {"intermediate_size", g.intermediate},
      {"num_hidden_layers", g.layers},
      {"num_attention_heads", g.heads},
      {"num_key_value_heads", g.kv_heads},
      {"head_dim", g.head_dim},
      {"global_head_dim", g.full_head_dim},
      {"num_global_key_value_heads", g.full_kv_heads},
      {"attention_k_eq_v", g.k_eq_v},
      {"sliding_window", 8},
      {"layer_types", types},
      {"enable_moe_block", true},
      {"num_experts", g.experts},
      {"top_k_experts", g.top_k},
      {"moe_intermediate_size", g.moe_intermediate},
      {"hidden_size_per_layer_input", 0},
      {"num_kv_shared_layers", 0},
      {"final_logit_softcapping", 30.0},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-6},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"tie_word_embeddings", true},
      {"rope_parameters",
       {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention",
         {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1e6}}}}},
      {"dtype", dtype}};
  if (o.layout == Layout::kHfCausal) {
    text["architectures"] = {"Gemma4ForCausalLM"};
    return text;
  }
  Json root{{"architectures", {"Gemma4ForConditionalGeneration"}},
            {"model_type", "gemma4"},
            {"text_config", text},
            {"vision_config", {{"hidden_size", 8}}},
            {"tie_word_embeddings", true},
            {"dtype", dtype}};
  if (o.layout == Layout::kMlx) {
    Json q{{"group_size", o.mlx_group}, {"bits", o.mlx_bits}, {"mode", "affine"}};
    for (int i = 0; i < g.layers; ++i)
      q[fmt::format("language_model.model.layers.{}.router.proj", i)] =
          Json{{"group_size", o.mlx_group}, {"bits", o.mlx_router_bits}};
    root["quantization"] = q;
    root["quantization_config"] = q;
  }
  return root;
}

Status WriteTinyCheckpoint(const std::string& dir, const TinyGeometry& g, const FixtureOptions& o) {
  RW_RETURN_IF_ERROR(MakeDirectories(dir));
  Builder b(o);
  const std::string P = LayoutPrefix(o.layout);
  const bool mlx = o.layout == Layout::kMlx;
  const int64_t H = g.hidden, E = g.experts, I = g.moe_intermediate;
  b.AddLinear(P + "embed_tokens", {g.vocab, H}, o.mlx_bits);
  b.AddNorm(P + "norm.weight", {H});
  for (int i = 0; i < g.layers; ++i) {
    const bool full = i == g.layers - 1;
    const int64_t hd = full ? g.full_head_dim : g.head_dim,
                  kv = full ? g.full_kv_heads : g.kv_heads;
    const std::string L = fmt::format("{}layers.{}.", P, i);
    for (const char* n :
         {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
          "post_feedforward_layernorm", "post_feedforward_layernorm_1",
          "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"})
      b.AddNorm(L + n + ".weight", {H});
    b.AddLinear(L + "self_attn.q_proj", {g.heads * hd, H}, o.mlx_bits);
    b.AddLinear(L + "self_attn.k_proj", {kv * hd, H}, o.mlx_bits);
    if (!full || !g.k_eq_v) b.AddLinear(L + "self_attn.v_proj", {kv * hd, H}, o.mlx_bits);
    b.AddLinear(L + "self_attn.o_proj", {H, g.heads * hd}, o.mlx_bits);
    b.AddNorm(L + "self_attn.q_norm.weight", {hd});
    b.AddNorm(L + "self_attn.k_norm.weight", {hd});
    b.AddLinear(L + "mlp.gate_proj", {g.intermediate, H}, o.mlx_bits);
    b.AddLinear(L + "mlp.up_proj", {g.intermediate, H}, o.mlx_bits);
    b.AddLinear(L + "mlp.down_proj", {H, g.intermediate}, o.mlx_bits);
    b.AddLinear(L + "router.proj", {E, H}, o.mlx_router_bits);
    b.AddNorm(L + "router.scale", {H});
    b.AddNorm(L + "router.per_expert_scale", {E});
    b.AddNorm(L + "layer_scalar", {1});
    if (mlx) {
      b.AddAffine(L + "experts.switch_glu.gate_proj", {E, I, H}, o.mlx_bits, o.mlx_group);
      b.AddAffine(L + "experts.switch_glu.up_proj", {E, I, H}, o.mlx_bits, o.mlx_group);
      b.AddAffine(L + "experts.switch_glu.down_proj", {E, H, I}, o.mlx_bits, o.mlx_group);
    } else {
      b.AddFloat(L + "experts.gate_up_proj", {E, 2 * I, H}, false, o.dtype);
      b.AddFloat(L + "experts.down_proj", {E, H, I}, false, o.dtype);
    }
  }
  if (o.multimodal) {
    std::string mp = mlx ? "" : (o.layout == Layout::kHfCausal ? "model." : "model.");
    b.AddFloat(mp + "vision_tower.encoder.layers.0.mlp.fc1.weight", {8, 8}, false, StDType::kBF16);
    b.AddFloat(mp + "vision_tower.encoder.layers.0.mlp.fc2.weight", {8, 8}, false, StDType::kBF16);
    b.AddFloat(mp + "embed_vision.embedding_projection.weight", {8, 8}, false, StDType::kBF16);
  }
  if (o.lm_head && !mlx) b.tensors_["lm_head.weight"] = b.tensors_[P + "embed_tokens.weight"];
  for (const auto& [name, shape] : o.extra) b.AddFloat(name, shape, false, StDType::kBF16);
  RW_RETURN_IF_ERROR(b.Write(dir));
  RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "config.json"), TinyConfigJson(g, o).dump(2)));
  if (o.side_files) {
    // The smallest tokenizer.json that loads: `redwing verify` parses it as run does.
    RW_RETURN_IF_ERROR(WriteFileAtomic(
        JoinPath(dir, "tokenizer.json"),
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}\n"));
    RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "tokenizer_config.json"), "{}\n"));
    RW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, "chat_template.jinja"), "{{ bos_token }}\n"));
  }
  return Status::Ok();
}

Result<std::string> ReadAll(const std::string& path) {
  return ReadFileToString(path);
}

Status WriteAll(const std::string& path, const std::string& bytes) {
  RW_ASSIGN_OR_RETURN(File f, File::Create(path));
  RW_RETURN_IF_ERROR(f.PwriteAll(bytes.data(), bytes.size(), 0));
  return f.Close();
}

Status RewriteHeader(const std::string& path, const std::function<void(Json&)>& fn) {
  RW_ASSIGN_OR_RETURN(std::string all, ReadAll(path));
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  RW_ASSIGN_OR_RETURN(Json h, ParseJson(all.substr(8, n), path));
  fn(h);
  std::string text = h.dump();
  while (text.size() % 8) text.push_back(' ');
  uint64_t m = text.size();
  std::string out(reinterpret_cast<const char*>(&m), 8);
  out += text;
  out += all.substr(8 + n);
  return WriteAll(path, out);
}

}  // namespace rw::test
