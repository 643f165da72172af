#include "runtime/tiny_model_builder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/bf16.h"
#include "base/file.h"
#include "format/model_dir.h"
#include "install/quantize.h"

namespace rw::test {
namespace {

#define ASSERT_STATUS(expr)                                 \
  do {                                                      \
    ::rw::Status _s = (expr);                               \
    if (!_s.ok()) FAIL() << #expr << ": " << _s.ToString(); \
  } while (0)

// Encoded tensor parts ready for a writer.
struct Encoded {
  TensorDesc desc;
  std::vector<uint8_t> data, scales, biases;
};

Encoded Encode(const std::string& name, const std::vector<int64_t>& shape,
               const std::vector<float>& w, LinearType t) {
  Encoded e;
  e.desc.name = name;
  e.desc.shape = shape;
  e.desc.type = t.type;
  const int64_t rows = shape.size() >= 2 ? shape[0] : 1, cols = shape.back();
  if (t.type == TensorType::kF32) {
    e.data.resize(w.size() * 4);
    std::memcpy(e.data.data(), w.data(), e.data.size());
  } else if (t.type == TensorType::kBf16) {
    e.data.resize(w.size() * 2);
    auto* p = reinterpret_cast<uint16_t*>(e.data.data());
    for (size_t i = 0; i < w.size(); ++i) p[i] = F32ToBf16(w[i]);
  } else {
    e.desc.bits = t.bits;
    e.desc.group_size = t.group;
    e.data.resize(rows * cols * t.bits / 8);
    e.scales.resize(rows * cols / t.group * 2);
    e.biases.resize(e.scales.size());
    Status st = QuantizeAffine(
        w.data(), rows, cols, t.bits, t.group, reinterpret_cast<uint32_t*>(e.data.data()),
        reinterpret_cast<uint16_t*>(e.scales.data()), reinterpret_cast<uint16_t*>(e.biases.data()));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return e;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  std::vector<float> Normal(int64_t n, double std) {
    std::normal_distribution<float> d(0.0f, static_cast<float>(std));
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen_);
    return v;
  }
  std::vector<float> Uniform(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen_);
    return v;
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace

ModelConfig TinyConfig(const TinySpec& s) {
  ModelConfig c;
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.num_layers = static_cast<int>(s.layers.size());
  c.num_heads = s.heads;
  c.layer_types = s.layers;
  c.sliding = AttentionGeometry{s.sliding_head_dim, s.sliding_kv, 10000.0, 1.0, "default", false};
  c.full =
      AttentionGeometry{s.full_head_dim, s.full_kv, 1e6, s.partial_rotary, "proportional", true};
  c.sliding_window = s.window;
  c.intermediate_size = s.intermediate;
  c.enable_moe = s.moe;
  if (s.moe) {
    c.num_experts = s.experts;
    c.top_k = s.top_k;
    c.moe_intermediate_size = s.moe_intermediate;
  }
  c.final_logit_softcapping = 30.0;
  c.embed_scale = EmbedScaleFor(s.hidden, "bfloat16");
  c.max_position_embeddings = s.max_positions;
  c.eos_token_ids = {1};
  return c;
}

void BuildTinyModel(const TinySpec& s, const std::string& dir) {
  const ModelConfig c = TinyConfig(s);
  ASSERT_STATUS(c.Validate());
  ASSERT_STATUS(RemoveAll(dir));
  auto writer = ModelDirWriter::Create(dir, /*overwrite=*/true);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  auto core = CoreWriter::Create(writer->Path(kCoreName));
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  Rng rng(s.seed);
  const LinearType vec_type{s.bf16_vectors ? TensorType::kBf16 : TensorType::kF32};
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& w,
                 LinearType t) {
    Encoded e = Encode(name, shape, w, t);
    ASSERT_STATUS(core->Add(e.desc, e.data.data(), e.scales.empty() ? nullptr : e.scales.data(),
                            e.biases.empty() ? nullptr : e.biases.data()));
  };
  auto vec = [&](const std::string& name, int64_t n) {
    add(name, {n}, rng.Uniform(n, 0.5f, 1.5f), vec_type);
  };
  auto lin = [&](const std::string& name, int64_t out, int64_t in, LinearType t, double std) {
    add(name, {out, in}, rng.Normal(out * in, std), t);
  };
  const int64_t H = s.hidden;
  lin("embed_tokens", s.vocab, H, s.embed, 0.35);
  vec("norm", H);
  for (int i = 0; i < c.num_layers; ++i) {
    const AttentionGeometry& g = c.geometry(i);
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm",
                          "pre_feedforward_layernorm", "post_feedforward_layernorm"})
      vec(p + n, H);
    if (s.moe)
      for (const char* n : {"post_feedforward_layernorm_1", "pre_feedforward_layernorm_2",
                            "post_feedforward_layernorm_2"})
        vec(p + n, H);
    const double ws = 1.0 / std::sqrt(static_cast<double>(H));
    lin(p + "self_attn.q_proj", int64_t{s.heads} * g.head_dim, H, s.attn, ws);
    lin(p + "self_attn.k_proj", int64_t{g.num_kv_heads} * g.head_dim, H, s.attn, ws);
    if (!g.k_eq_v) lin(p + "self_attn.v_proj", int64_t{g.num_kv_heads} * g.head_dim, H, s.attn, ws);
    lin(p + "self_attn.o_proj", H, int64_t{s.heads} * g.head_dim, s.attn, ws);
    vec(p + "self_attn.q_norm", g.head_dim);
    vec(p + "self_attn.k_norm", g.head_dim);
    lin(p + "mlp.gate_proj", s.intermediate, H, s.mlp, ws);
    lin(p + "mlp.up_proj", s.intermediate, H, s.mlp, ws);
    lin(p + "mlp.down_proj", H, s.intermediate, s.mlp, 1.0 / std::sqrt(double(s.intermediate)));
    if (s.moe) {
      lin(p + "router.proj", s.experts, H, s.router, 0.5);
      vec(p + "router.scale", H);
      vec(p + "router.per_expert_scale", s.experts);
    }
    vec(p + "layer_scalar", 1);
  }
  ASSERT_STATUS(core->Finish());

  if (s.moe) {
    ASSERT_STATUS(MakeDirectories(writer->Path("experts")));
    ExpertIndex idx;
    idx.num_layers = c.num_layers;
    idx.num_experts = s.experts;
    const int64_t I = s.moe_intermediate;
    for (int i = 0; i < c.num_layers; ++i) {
      // Encode one expert to learn the layout, then write all.
      std::vector<Encoded> parts[3];
      for (int e = 0; e < s.experts; ++e) {
        parts[0].push_back(
            Encode("gate", {I, H}, rng.Normal(I * H, 1.0 / std::sqrt(double(H))), s.experts_type));
        parts[1].push_back(
            Encode("up", {I, H}, rng.Normal(I * H, 1.0 / std::sqrt(double(H))), s.experts_type));
        parts[2].push_back(
            Encode("down", {H, I}, rng.Normal(I * H, 1.0 / std::sqrt(double(I))), s.experts_type));
      }
      ExpertLayout layout =
          ExpertLayout::Make(parts[0][0].desc, parts[1][0].desc, parts[2][0].desc);
      const std::string file = ExpertLayerFileName(i);
      auto lw = ExpertLayerWriter::Create(writer->Path(file), layout, s.experts);
      ASSERT_TRUE(lw.ok()) << lw.status().ToString();
      for (int e = 0; e < s.experts; ++e) {
        std::vector<uint8_t> blob(layout.stride, 0);
        const TensorDesc* descs[3] = {&layout.gate, &layout.up, &layout.down};
        for (int k = 0; k < 3; ++k) {
          const Encoded& enc = parts[k][e];
          std::memcpy(blob.data() + descs[k]->data.offset, enc.data.data(), enc.data.size());
          if (!enc.scales.empty()) {
            std::memcpy(blob.data() + descs[k]->scales.offset, enc.scales.data(),
                        enc.scales.size());
            std::memcpy(blob.data() + descs[k]->biases.offset, enc.biases.data(),
                        enc.biases.size());
          }
        }
        ASSERT_STATUS(lw->Write(e, blob.data()));
      }
      auto sums = lw->Finish();
      ASSERT_TRUE(sums.ok()) << sums.status().ToString();
      idx.layers.push_back(ExpertLayerInfo{file, layout, *sums});
    }
    ASSERT_STATUS(WriteFileAtomic(writer->Path(kExpertIndexName), idx.ToJson().dump(1)));
  }
  Manifest m;
  m.created_by = "tiny_model_builder (test)";
  m.config = c;
  m.source = Json{{"kind", "synthetic"}};
  ASSERT_STATUS(writer->Commit(m));
}

std::string TestTempDir(const std::string& name) {
  std::string root = JoinPath(REDWING_BUILD_DIR, "test_tmp");
  std::string dir = JoinPath(root, name);
  EXPECT_TRUE(RemoveAll(dir).ok());
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir;
}

}  // namespace rw::test
