// redwing synth: geometry, generators, determinism, the three output forms and their round trips
// through `convert`, and routing skew.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/bf16.h"
#include "base/file.h"
#include "format/model_dir.h"
#include "install/convert.h"
#include "install/quantize.h"
#include "install/safetensors.h"
#include "install/synth.h"
#include "install/synth_gen.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = (fs::temp_directory_path() / fmt::format("synth_test_{}_{}", ::getpid(), counter_++))
                .string();
    (void)RemoveAll(path_);
    EXPECT_TRUE(MakeDirectories(path_).ok());
  }
  ~TempDir() { (void)RemoveAll(path_); }
  std::string Sub(const std::string& name) const { return JoinPath(path_, name); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

Status Synth(const std::string& geometry, uint64_t seed, const std::string& out,
             const std::string& format = "model", double skew = 0,
             uint64_t shard = 5'000'000'000ull) {
  SynthOptions o;
  o.geometry = geometry;
  o.seed = seed;
  o.out_dir = out;
  o.format = format;
  o.routing_skew = skew;
  o.max_shard_bytes = shard;
  return SynthesizeModel(o);
}

std::vector<uint8_t> Bytes(const CoreFile& c, const ByteRange& r) {
  return std::vector<uint8_t>(c.base() + r.offset, c.base() + r.end());
}

// ---- geometry and generators ----

TEST(SynthGeometry, KnownNamesValidate) {
  for (const std::string& name : SynthGeometryNames()) {
    auto c = SynthGeometry(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    EXPECT_TRUE(c->Validate().ok());
    int full = 0;
    for (int l = 0; l < c->num_layers; ++l) full += c->is_full(l);
    EXPECT_GE(full, 1) << name;
    EXPECT_TRUE(c->is_full(c->num_layers - 1)) << name;
  }
  auto bad = SynthGeometry("huge");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

TEST(SynthGeometry, FullSizeIsExactGemma4) {
  auto c = SynthGeometry("gemma4-26b-a4b");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->hidden_size, 2816);
  EXPECT_EQ(c->vocab_size, 262144);
  EXPECT_EQ(c->num_heads, 16);
  EXPECT_EQ(c->sliding.num_kv_heads, 8);
  EXPECT_EQ(c->sliding.head_dim, 256);
  EXPECT_EQ(c->sliding_window, 1024);
  EXPECT_EQ(c->full.num_kv_heads, 2);
  EXPECT_EQ(c->full.head_dim, 512);
  EXPECT_TRUE(c->full.k_eq_v);
  EXPECT_EQ(c->full.rope_type, "proportional");
  EXPECT_DOUBLE_EQ(c->full.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c->full.rope_theta, 1e6);
  for (int l = 0; l < 30; ++l) EXPECT_EQ(c->is_full(l), l % 6 == 5) << l;
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->top_k, 8);
  EXPECT_EQ(c->moe_intermediate_size, 704);
  EXPECT_EQ(c->intermediate_size, 2112);
  EXPECT_EQ(c->embed_scale, 53.0f);
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  EXPECT_EQ(c->max_position_embeddings, 262144);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{1, 106}));
  auto est = EstimateSynthSize("gemma4-26b-a4b");
  ASSERT_TRUE(est.ok());
  double total = static_cast<double>(est->core_bytes + est->expert_bytes);
  EXPECT_GT(total, 14.0e9);
  EXPECT_LT(total, 14.6e9);
}

TEST(SynthGen, RowsAreIndependentOfChunking) {
  synth::MatrixSpec m;
  m.name = "x";
  m.rows = 10;
  m.cols = 128;
  m.bits = 4;
  m.group = 64;
  m.std = 0.1f;
  m.key = synth::TensorKey(7, m.name);
  std::vector<uint8_t> all(m.code_bytes()), parts(m.code_bytes());
  synth::GenCodes(m, 0, 10, all.data());
  synth::GenCodes(m, 0, 3, parts.data());
  synth::GenCodes(m, 3, 10, parts.data() + 3 * m.row_bytes());
  EXPECT_EQ(all, parts);
  std::vector<uint16_t> s1(20), b1(20), s2(20);
  synth::GenScales(m, 0, 10, s1.data(), b1.data());
  synth::GenScales(m, 4, 10, s2.data() + 8, nullptr);
  synth::GenScales(m, 0, 4, s2.data(), nullptr);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(synth::TensorKey(7, "x"), synth::TensorKey(8, "x"));
  EXPECT_NE(synth::TensorKey(7, "x"), synth::TensorKey(7, "y"));
}

TEST(SynthGen, Bf16IsTheMlxDequantizationAndCentred) {
  for (int bits : {4, 8}) {
    synth::MatrixSpec m;
    m.name = "w";
    m.rows = 64;
    m.cols = 256;
    m.bits = bits;
    m.group = 64;
    m.std = 0.05f;
    m.key = synth::TensorKey(1, m.name);
    std::vector<uint8_t> codes(m.code_bytes());
    std::vector<uint16_t> sc(m.scale_bytes() / 2), bi(m.scale_bytes() / 2), bf(m.rows * m.cols);
    synth::GenCodes(m, 0, m.rows, codes.data());
    synth::GenScales(m, 0, m.rows, sc.data(), bi.data());
    synth::GenBf16(m, 0, m.rows, bf.data());
    std::vector<float> deq(m.rows * m.cols);
    ASSERT_TRUE(DequantizeAffine(reinterpret_cast<const uint32_t*>(codes.data()), sc.data(),
                                 bi.data(), m.rows, m.cols, bits, 64, deq.data())
                    .ok());
    double sum = 0, sq = 0;
    for (size_t i = 0; i < deq.size(); ++i) {
      ASSERT_EQ(bf[i], F32ToBf16(deq[i])) << i;
      sum += deq[i];
      sq += static_cast<double>(deq[i]) * deq[i];
    }
    double mean = sum / deq.size(), std = std::sqrt(sq / deq.size() - mean * mean);
    EXPECT_LT(std::abs(mean), 0.005) << bits;
    EXPECT_NEAR(std, 0.05, 0.005) << bits;
  }
}

TEST(SynthGen, RouterGainsSkewOnlyWhenAsked) {
  auto flat = synth::RouterRowGains(1, 0, 32, 0);
  for (float g : flat) EXPECT_EQ(g, 1.0f);
  auto skewed = synth::RouterRowGains(1, 0, 32, 2);
  double sq = 0;
  for (float g : skewed) sq += g * g;
  EXPECT_NEAR(sq / 32, 1.0, 1e-4);
  EXPECT_GT(*std::max_element(skewed.begin(), skewed.end()),
            3 * *std::min_element(skewed.begin(), skewed.end()));
  EXPECT_NE(synth::RouterRowGains(1, 0, 32, 2), synth::RouterRowGains(1, 1, 32, 2));  // per layer
}

// ---- the model form ----

TEST(SynthModel, TinyOpensVerifiesAndFollowsTheNamingContract) {
  TempDir tmp;
  const std::string out = tmp.Sub("tiny");
  ASSERT_TRUE(Synth("tiny", 5, out).ok());
  auto dir = ModelDir::Open(out);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto report = VerifyModelDir(out);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  auto geo = SynthGeometry("tiny");
  EXPECT_EQ(dir->config().ToJson(), geo->ToJson());
  EXPECT_EQ(dir->manifest().source["kind"], "synthetic");
  EXPECT_EQ(dir->manifest().source["geometry"], "tiny");
  EXPECT_EQ(dir->manifest().source["seed"], 5);

  const ModelConfig& c = dir->config();
  const CoreFile& core = dir->core();
  auto expect = [&](const std::string& name, std::vector<int64_t> shape, TensorType type) {
    const TensorDesc* t = core.Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(t->type, type) << name;
  };
  const int64_t h = c.hidden_size;
  expect("embed_tokens", {c.vocab_size, h}, TensorType::kAffine);
  expect("norm", {h}, TensorType::kBf16);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("layers.{}.", l);
    const AttentionGeometry& g = c.geometry(l);
    for (const char* n :
         {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
          "post_feedforward_layernorm", "post_feedforward_layernorm_1",
          "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"})
      expect(p + n, {h}, TensorType::kBf16);
    expect(p + "self_attn.q_proj", {c.num_heads * g.head_dim, h}, TensorType::kAffine);
    expect(p + "self_attn.k_proj", {g.num_kv_heads * g.head_dim, h}, TensorType::kAffine);
    if (c.is_full(l)) {
      EXPECT_EQ(core.Find(p + "self_attn.v_proj"), nullptr);
    } else {
      expect(p + "self_attn.v_proj", {g.num_kv_heads * g.head_dim, h}, TensorType::kAffine);
    }
    expect(p + "self_attn.o_proj", {h, c.num_heads * g.head_dim}, TensorType::kAffine);
    expect(p + "self_attn.q_norm", {g.head_dim}, TensorType::kBf16);
    expect(p + "self_attn.k_norm", {g.head_dim}, TensorType::kBf16);
    expect(p + "mlp.gate_proj", {c.intermediate_size, h}, TensorType::kAffine);
    expect(p + "mlp.up_proj", {c.intermediate_size, h}, TensorType::kAffine);
    expect(p + "mlp.down_proj", {h, c.intermediate_size}, TensorType::kAffine);
    expect(p + "router.proj", {c.num_experts, h}, TensorType::kAffine);
    expect(p + "router.scale", {h}, TensorType::kBf16);
    expect(p + "router.per_expert_scale", {c.num_experts}, TensorType::kBf16);
    expect(p + "layer_scalar", {1}, TensorType::kBf16);
    EXPECT_EQ(core.Find(p + "router.proj")->bits, 8);
    EXPECT_EQ(core.Find(p + "mlp.down_proj")->bits, 8);
    EXPECT_EQ(core.Find(p + "self_attn.q_proj")->bits, 4);
    // layer_scalar stays below 1 so the residual cannot grow without bound.
    float s = Bf16ToF32(core.Ptr<uint16_t>(core.Find(p + "layer_scalar")->data)[0]);
    EXPECT_GE(s, 0.6f);
    EXPECT_LE(s, 1.0f);
  }
  const ExpertIndex* idx = dir->experts();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->layers[0].layout.gate.name, "gate");
  EXPECT_EQ(idx->layers[0].layout.down.shape, (std::vector<int64_t>{h, c.moe_intermediate_size}));
  EXPECT_EQ(idx->layers[0].layout.gate.bits, 4);
}

TEST(SynthModel, SameSeedSameBytesOtherSeedDifferent) {
  TempDir tmp;
  ASSERT_TRUE(Synth("tiny", 11, tmp.Sub("a")).ok());
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 11;
  o.out_dir = tmp.Sub("b");
  o.threads = 1;  // thread count must not matter
  ASSERT_TRUE(SynthesizeModel(o).ok());
  ASSERT_TRUE(Synth("tiny", 12, tmp.Sub("c")).ok());
  auto a = ModelDir::Open(tmp.Sub("a")), b = ModelDir::Open(tmp.Sub("b")),
       c = ModelDir::Open(tmp.Sub("c"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->manifest().files.size(), b->manifest().files.size());
  for (const auto& [name, f] : a->manifest().files) {
    EXPECT_EQ(f.sha256, b->manifest().files.at(name).sha256) << name;
    if (name == kCoreName || name.rfind("experts/layer_", 0) == 0) {
      EXPECT_NE(f.sha256, c->manifest().files.at(name).sha256) << name;
    }
  }
}

TEST(SynthModel, RefusesExistingOutputUnlessOverwrite) {
  TempDir tmp;
  ASSERT_TRUE(Synth("tiny", 1, tmp.Sub("m")).ok());
  Status again = Synth("tiny", 1, tmp.Sub("m"));
  EXPECT_EQ(again.code(), ErrorCode::kAlreadyExists);
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 2;
  o.out_dir = tmp.Sub("m");
  o.overwrite = true;
  ASSERT_TRUE(SynthesizeModel(o).ok());
  EXPECT_EQ(ModelDir::Open(tmp.Sub("m"))->manifest().source["seed"], 2);
  o.format = "gguf";
  EXPECT_EQ(SynthesizeModel(o).code(), ErrorCode::kInvalidArgument);
  o.format = "model";
  o.routing_skew = -1;
  EXPECT_EQ(SynthesizeModel(o).code(), ErrorCode::kInvalidArgument);
}

TEST(SynthModel, TokenizerSideFilesAreCopied) {
  TempDir tmp;
  ASSERT_TRUE(MakeDirectories(tmp.Sub("tok")).ok());
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("tok/tokenizer.json"), "{\"model\": {}}").ok());
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("tok/tokenizer_config.json"), "{}").ok());
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 1;
  o.out_dir = tmp.Sub("m");
  o.tokenizer_dir = tmp.Sub("tok");
  ASSERT_TRUE(SynthesizeModel(o).ok());
  auto dir = ModelDir::Open(o.out_dir);
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(dir->HasSideFile("tokenizer.json"));
  EXPECT_TRUE(dir->HasSideFile("tokenizer_config.json"));
  o.out_dir = tmp.Sub("m2");
  o.tokenizer_dir = tmp.Sub("nothing-here");
  EXPECT_EQ(SynthesizeModel(o).code(), ErrorCode::kNotFound);
}

// ---- checkpoint forms ----

TEST(SynthCheckpoint, ConfigsParseBackToTheGeometry) {
  for (const std::string& name : SynthGeometryNames()) {
    auto plan = synth::MakeSynthPlan(name, 1, 0);
    ASSERT_TRUE(plan.ok());
    for (bool mlx : {false, true}) {
      Json j = synth::CheckpointConfigJson(*plan, mlx);
      auto c = ModelConfigFromHf(j, "bfloat16", "config.json");
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_EQ(c->ToJson(), plan->config.ToJson()) << name << " mlx=" << mlx;
      EXPECT_EQ(j.contains("quantization"), mlx);
    }
  }
  Json q = synth::CheckpointConfigJson(*synth::MakeSynthPlan("gemma4-26b-a4b", 1, 0),
                                       true)["quantization"];
  EXPECT_EQ(q["bits"], 4);
  EXPECT_EQ(q["group_size"], 64);
  EXPECT_EQ(q["language_model.model.layers.0.router.proj"]["bits"], 8);
  EXPECT_EQ(q["language_model.model.layers.29.mlp.down_proj"]["bits"], 8);
  EXPECT_FALSE(q.contains("language_model.model.embed_tokens"));
}

TEST(SynthCheckpoint, MlxIsShardedWithRealKeyNames) {
  TempDir tmp;
  const std::string out = tmp.Sub("mlx");
  ASSERT_TRUE(Synth("tiny", 3, out, "mlx", 0, 300'000).ok());
  auto ck = SafetensorsCheckpoint::Open(out);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_GT(ck->num_files(), 1u);
  auto w = ck->Find("language_model.model.layers.1.experts.switch_glu.down_proj.weight");
  ASSERT_NE(w.tensor, nullptr);
  EXPECT_EQ(w.tensor->dtype, StDType::kU32);
  EXPECT_EQ(w.tensor->shape, (std::vector<int64_t>{8, 128, 8}));
  auto s = ck->Find("language_model.model.layers.1.experts.switch_glu.gate_proj.scales");
  ASSERT_NE(s.tensor, nullptr);
  EXPECT_EQ(s.tensor->shape, (std::vector<int64_t>{8, 64, 2}));
  EXPECT_NE(ck->Find("language_model.model.embed_tokens.biases").tensor, nullptr);
  EXPECT_NE(ck->Find("language_model.model.layers.0.layer_scalar").tensor, nullptr);
  EXPECT_NE(ck->Find("language_model.model.layers.0.router.per_expert_scale").tensor, nullptr);
  EXPECT_NE(ck->Find("language_model.model.norm.weight").tensor, nullptr);
  EXPECT_EQ(ck->Find("language_model.model.layers.2.self_attn.v_proj.weight").tensor, nullptr);
  EXPECT_FALSE(PathExists(out + ".partial"));
}

TEST(SynthCheckpoint, HfHasFusedExpertsAndDequantizedValues) {
  TempDir tmp;
  ASSERT_TRUE(Synth("tiny", 4, tmp.Sub("hf"), "hf").ok());
  ASSERT_TRUE(Synth("tiny", 4, tmp.Sub("m")).ok());
  auto ck = SafetensorsCheckpoint::Open(tmp.Sub("hf"));
  ASSERT_TRUE(ck.ok());
  auto gu = ck->Find("model.language_model.layers.0.experts.gate_up_proj");
  ASSERT_NE(gu.tensor, nullptr);
  EXPECT_EQ(gu.tensor->dtype, StDType::kBF16);
  EXPECT_EQ(gu.tensor->shape, (std::vector<int64_t>{8, 128, 128}));
  // q_proj in HF form is the model form's q_proj dequantized.
  auto dir = ModelDir::Open(tmp.Sub("m"));
  const TensorDesc* t = dir->core().Find("layers.0.self_attn.q_proj");
  std::vector<float> deq(t->numel());
  ASSERT_TRUE(DequantizeAffine(dir->core().Ptr<uint32_t>(t->data),
                               dir->core().Ptr<uint16_t>(t->scales),
                               dir->core().Ptr<uint16_t>(t->biases), t->rows(), t->cols(), t->bits,
                               t->group_size, deq.data())
                  .ok());
  auto q = ck->Find("model.language_model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q.tensor, nullptr);
  std::vector<uint16_t> hf(q.tensor->numel());
  ASSERT_TRUE(q.file->Read(*q.tensor, hf.data()).ok());
  for (size_t i = 0; i < hf.size(); ++i) ASSERT_EQ(hf[i], F32ToBf16(deq[i])) << i;
}

// ---- round trips through convert ----

TEST(SynthRoundTrip, MlxConvertKeepEqualsModelForm) {
  TempDir tmp;
  ASSERT_TRUE(Synth("tiny", 21, tmp.Sub("direct")).ok());
  ASSERT_TRUE(Synth("tiny", 21, tmp.Sub("mlx"), "mlx", 0, 300'000).ok());
  ConvertOptions co;
  co.source_dir = tmp.Sub("mlx");
  co.out_dir = tmp.Sub("converted");
  co.quantize = "keep";
  Status st = ConvertCheckpoint(co);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto a = ModelDir::Open(tmp.Sub("direct")), b = ModelDir::Open(tmp.Sub("converted"));
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_EQ(a->config().ToJson(), b->config().ToJson());
  ASSERT_EQ(a->core().tensors().size(), b->core().tensors().size());
  for (const TensorDesc& ta : a->core().tensors()) {
    const TensorDesc* tb = b->core().Find(ta.name);
    ASSERT_NE(tb, nullptr) << ta.name;
    EXPECT_EQ(ta.type, tb->type) << ta.name;
    EXPECT_EQ(ta.shape, tb->shape) << ta.name;
    EXPECT_EQ(ta.bits, tb->bits) << ta.name;
    EXPECT_EQ(ta.group_size, tb->group_size) << ta.name;
    EXPECT_TRUE(Bytes(a->core(), ta.data) == Bytes(b->core(), tb->data)) << ta.name;
    if (ta.type == TensorType::kAffine) {
      EXPECT_TRUE(Bytes(a->core(), ta.scales) == Bytes(b->core(), tb->scales)) << ta.name;
      EXPECT_TRUE(Bytes(a->core(), ta.biases) == Bytes(b->core(), tb->biases)) << ta.name;
    }
  }
  ASSERT_NE(b->experts(), nullptr);
  for (int l = 0; l < a->config().num_layers; ++l) {
    EXPECT_EQ(a->experts()->layers[l].layout.ToJson(), b->experts()->layers[l].layout.ToJson());
    EXPECT_EQ(a->experts()->layers[l].xxh3, b->experts()->layers[l].xxh3) << l;
    auto fa = ReadFileToString(a->FilePath(ExpertLayerFileName(l)));
    auto fb = ReadFileToString(b->FilePath(ExpertLayerFileName(l)));
    ASSERT_TRUE(fa.ok() && fb.ok());
    EXPECT_TRUE(*fa == *fb) << "experts layer " << l;
  }
}

TEST(SynthRoundTrip, HfConvertKeepPreservesEveryTensor) {
  TempDir tmp;
  ASSERT_TRUE(Synth("tiny", 22, tmp.Sub("hf"), "hf").ok());
  ConvertOptions co;
  co.source_dir = tmp.Sub("hf");
  co.out_dir = tmp.Sub("converted");
  co.quantize = "keep";
  Status st = ConvertCheckpoint(co);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto report = VerifyModelDir(co.out_dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  auto dir = ModelDir::Open(co.out_dir);
  ASSERT_TRUE(dir.ok());
  auto ck = SafetensorsCheckpoint::Open(co.source_dir);
  ASSERT_TRUE(ck.ok());
  const std::string prefix = "model.language_model.";
  const ModelConfig& c = dir->config();
  int compared = 0;
  for (const std::string& name : ck->Names()) {
    auto e = ck->Find(name);
    std::vector<uint8_t> src(e.tensor->size);
    ASSERT_TRUE(e.file->Read(*e.tensor, src.data()).ok());
    std::string n = name.substr(prefix.size());
    if (n.find(".experts.") != std::string::npos) {
      // Fused HF experts against the per-expert blobs.
      int l = std::stoi(n.substr(7));
      const ExpertLayerInfo& info = dir->experts()->layers[l];
      ASSERT_EQ(info.layout.gate.type, TensorType::kBf16);
      auto blob_file = ReadFileToString(dir->FilePath(info.file));
      ASSERT_TRUE(blob_file.ok());
      const uint64_t ib = static_cast<uint64_t>(c.moe_intermediate_size) * c.hidden_size * 2;
      for (int x = 0; x < c.num_experts; ++x) {
        const char* blob = blob_file->data() + info.layout.stride * x;
        if (n.find("gate_up_proj") != std::string::npos) {
          EXPECT_EQ(0,
                    std::memcmp(blob + info.layout.gate.data.offset, src.data() + 2 * ib * x, ib))
              << name << x;
          EXPECT_EQ(
              0, std::memcmp(blob + info.layout.up.data.offset, src.data() + 2 * ib * x + ib, ib))
              << name << x;
        } else {
          EXPECT_EQ(0, std::memcmp(blob + info.layout.down.data.offset, src.data() + ib * x, ib))
              << name << x;
        }
      }
      ++compared;
      continue;
    }
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0) n.resize(n.size() - 7);
    const TensorDesc* t = dir->core().Find(n);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->type, TensorType::kBf16) << name;
    EXPECT_TRUE(Bytes(dir->core(), t->data) == src) << name;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(ck->num_tensors()));
}

TEST(SynthRoundTrip, HfConvertQ4Verifies) {
  TempDir tmp;
  ASSERT_TRUE(Synth("tiny", 23, tmp.Sub("hf"), "hf").ok());
  ConvertOptions co;
  co.source_dir = tmp.Sub("hf");
  co.out_dir = tmp.Sub("q4");
  co.quantize = "q4";
  Status st = ConvertCheckpoint(co);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto report = VerifyModelDir(co.out_dir);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->problems.empty());
  auto dir = ModelDir::Open(co.out_dir);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->core().Find("layers.0.self_attn.q_proj")->type, TensorType::kAffine);
  EXPECT_EQ(dir->experts()->layers[0].layout.gate.bits, 4);
}

// ---- routing skew ----

TEST(SynthRouting, SkewMakesPopularityUneven) {
  TempDir tmp;
  double share[3];
  for (int s = 0; s <= 2; ++s) {
    std::string out = tmp.Sub(fmt::format("small{}", s));
    ASSERT_TRUE(Synth("small", 9, out, "model", s).ok());
    auto pop = MeasureRoutingPopularity(out, 2000, 1);
    ASSERT_TRUE(pop.ok()) << pop.status().ToString();
    share[s] = pop->top10_share;
    std::fprintf(stderr, "skew %d: top-10%% share %.3f (even %.3f), max/uniform %.2f\n", s,
                 pop->top10_share, pop->top10_uniform, pop->max_over_uniform);
  }
  EXPECT_LT(share[0], 0.2);
  EXPECT_GT(share[1], share[0] + 0.05);
  EXPECT_GT(share[2], share[1] + 0.05);
}

}  // namespace
}  // namespace rw
