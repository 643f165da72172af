// redwing convert: tiny checkpoints in every supported layout convert into model directories
// whose tensors equal the source bit for bit (keep) or MLX's quantizer applied to the source
// (q4/q8/bf16); the committed golden fixtures convert cleanly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "base/bf16.h"
#include "base/file.h"
#include "convert_fixture.h"
#include "format/model_dir.h"
#include "golden_fixtures.h"
#include "install/convert.h"
#include "install/convert_plan.h"
#include "install/convert_repack.h"
#include "install/quantize.h"

namespace rw {
namespace {

using test::FixtureOptions;
using test::Layout;
using test::TinyGeometry;

std::string TempPath(const std::string& name) {
  std::string base = ::testing::TempDir() + "rw_convert_" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name;
  (void)RemoveAll(base);
  return base;
}

// Bytes of source rows [row0, row0 + rows) of a tensor viewed as 2-D over its last dim.
std::string SourceRows(const SafetensorsCheckpoint& ck, const std::string& name, int64_t row0,
                       int64_t rows) {
  auto e = ck.Find(name);
  EXPECT_NE(e.file, nullptr) << name;
  if (e.file == nullptr) return {};
  uint64_t row_bytes = static_cast<uint64_t>(e.tensor->shape.back()) * StDTypeSize(e.tensor->dtype);
  if (rows < 0) rows = static_cast<int64_t>(e.tensor->size / row_bytes) - row0;
  std::string out(rows * row_bytes, '\0');
  EXPECT_TRUE(e.file->ReadRange(*e.tensor, row0 * row_bytes, out.size(), out.data()).ok()) << name;
  return out;
}

std::string Bytes(const uint8_t* base, const ByteRange& r) {
  return std::string(reinterpret_cast<const char*>(base + r.offset), r.size);
}

// The source's bf16 values of some rows (f32 sources rounded to nearest even).
std::vector<uint16_t> AsBf16(const std::string& bytes, StDType dt) {
  std::vector<uint16_t> out;
  if (dt == StDType::kF32) {
    out.resize(bytes.size() / 4);
    const float* f = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = F32ToBf16(f[i]);
  } else {
    out.resize(bytes.size() / 2);
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return out;
}

bool IsPlainTensor(const std::string& core_name) {
  for (const char* s : {"layer_scalar", "router.scale", "router.per_expert_scale"})
    if (core_name.size() >= std::strlen(s) &&
        core_name.compare(core_name.size() - std::strlen(s), std::string::npos, s) == 0)
      return true;
  return false;
}
bool IsNormLike(const std::string& core_name) {
  return IsPlainTensor(core_name) || core_name.find("norm") != std::string::npos;
}

// Checks one converted tensor against its source. src is the source module (no suffix) for
// linears or the full name for plain tensors; row0/rows pick the rows of a fused tensor and
// expert slices (rows -1: all).
void CheckTensor(const SafetensorsCheckpoint& ck, const TensorDesc& t, const uint8_t* base,
                 const std::string& src_weight, const std::string& src_module, int64_t row0,
                 int64_t rows, QuantizeMode mode, bool norm_like, const std::string& what) {
  SCOPED_TRACE(what);
  auto e = ck.Find(src_weight);
  ASSERT_NE(e.file, nullptr) << src_weight;
  if (rows < 0) rows = t.rows();
  const std::string src = SourceRows(ck, src_weight, row0, rows);
  if (ck.Find(src_module + ".scales").file != nullptr) {  // MLX: verbatim
    ASSERT_EQ(t.type, TensorType::kAffine);
    EXPECT_EQ(Bytes(base, t.data), src);
    EXPECT_EQ(Bytes(base, t.scales), SourceRows(ck, src_module + ".scales", row0, rows));
    EXPECT_EQ(Bytes(base, t.biases), SourceRows(ck, src_module + ".biases", row0, rows));
    // Dequantized values equal the source's dequantized values, by construction of the above.
    std::vector<float> a(t.numel()), b(t.numel());
    auto ss = SourceRows(ck, src_module + ".scales", row0, rows);
    auto sb = SourceRows(ck, src_module + ".biases", row0, rows);
    ASSERT_TRUE(DequantizeAffine(reinterpret_cast<const uint32_t*>(src.data()),
                                 reinterpret_cast<const uint16_t*>(ss.data()),
                                 reinterpret_cast<const uint16_t*>(sb.data()), t.rows(), t.cols(),
                                 t.bits, t.group_size, a.data())
                    .ok());
    ASSERT_TRUE(DequantizeAffine(reinterpret_cast<const uint32_t*>(base + t.data.offset),
                                 reinterpret_cast<const uint16_t*>(base + t.scales.offset),
                                 reinterpret_cast<const uint16_t*>(base + t.biases.offset),
                                 t.rows(), t.cols(), t.bits, t.group_size, b.data())
                    .ok());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
    return;
  }
  if (mode == QuantizeMode::kKeep || norm_like) {
    EXPECT_EQ(t.type, e.tensor->dtype == StDType::kF32 ? TensorType::kF32 : TensorType::kBf16);
    EXPECT_EQ(Bytes(base, t.data), src);
    return;
  }
  std::vector<uint16_t> w = AsBf16(src, e.tensor->dtype);
  if (mode == QuantizeMode::kBf16) {
    ASSERT_EQ(t.type, TensorType::kBf16);
    EXPECT_EQ(Bytes(base, t.data), std::string(reinterpret_cast<char*>(w.data()), w.size() * 2));
    return;
  }
  ASSERT_EQ(t.type, TensorType::kAffine);
  const bool router = what.find("router.proj") != std::string::npos;
  EXPECT_EQ(t.bits, mode == QuantizeMode::kQ8 || router ? 8 : 4);
  EXPECT_EQ(t.group_size, 64);
  std::vector<uint32_t> q(t.numel() * t.bits / 32);
  std::vector<uint16_t> s(t.numel() / 64), z(t.numel() / 64);
  ASSERT_TRUE(
      QuantizeAffineBf16(w.data(), t.rows(), t.cols(), t.bits, 64, q.data(), s.data(), z.data())
          .ok());
  EXPECT_EQ(Bytes(base, t.data), std::string(reinterpret_cast<char*>(q.data()), q.size() * 4));
  EXPECT_EQ(Bytes(base, t.scales), std::string(reinterpret_cast<char*>(s.data()), s.size() * 2));
  EXPECT_EQ(Bytes(base, t.biases), std::string(reinterpret_cast<char*>(z.data()), z.size() * 2));
}

// Opens and verifies the output, then checks every core tensor and expert part against the
// source with a name mapping written independently of the converter's.
void CheckConverted(const std::string& src_dir, const std::string& out_dir, Layout layout,
                    const TinyGeometry& g, QuantizeMode mode) {
  auto dir = ModelDir::Open(out_dir);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto report = VerifyModelDir(out_dir);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->problems.empty());
  auto ck = SafetensorsCheckpoint::Open(src_dir);
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  const std::string P = test::LayoutPrefix(layout);

  // Core: the expected name set, then each tensor's bytes.
  std::set<std::string> expected = {"embed_tokens", "norm"};
  for (int i = 0; i < g.layers; ++i) {
    bool full = i == g.layers - 1;
    for (const char* n :
         {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
          "post_feedforward_layernorm", "post_feedforward_layernorm_1",
          "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2", "self_attn.q_proj",
          "self_attn.k_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "router.proj", "router.scale",
          "router.per_expert_scale", "layer_scalar"})
      expected.insert(fmt::format("layers.{}.{}", i, n));
    if (!full || !g.k_eq_v) expected.insert(fmt::format("layers.{}.self_attn.v_proj", i));
  }
  std::set<std::string> got;
  for (const TensorDesc& t : dir->core().tensors()) got.insert(t.name);
  EXPECT_EQ(got, expected);
  for (const TensorDesc& t : dir->core().tensors()) {
    std::string module = P + t.name;
    std::string weight = IsPlainTensor(t.name) ? module : module + ".weight";
    CheckTensor(*ck, t, dir->core().base(), weight, module, 0, -1, mode, IsNormLike(t.name),
                t.name);
  }

  // Experts: HF fused gate_up split at I; MLX switch_glu copied per expert.
  const ExpertIndex* idx = dir->experts();
  ASSERT_NE(idx, nullptr);
  ASSERT_EQ(idx->num_layers, g.layers);
  ASSERT_EQ(idx->num_experts, g.experts);
  const int64_t I = g.moe_intermediate, H = g.hidden;
  for (int l = 0; l < g.layers; ++l) {
    const ExpertLayerInfo& info = idx->layers[l];
    auto f = File::OpenRead(dir->FilePath(info.file));
    ASSERT_TRUE(f.ok());
    std::vector<uint8_t> blob(info.layout.stride);
    const std::string L = fmt::format("{}layers.{}.experts.", P, l);
    for (int e = 0; e < g.experts; ++e) {
      ASSERT_TRUE(f->PreadExact(blob.data(), blob.size(), info.layout.stride * e).ok());
      std::string what = fmt::format("layer {} expert {}", l, e);
      if (layout == Layout::kMlx) {
        CheckTensor(*ck, info.layout.gate, blob.data(), L + "switch_glu.gate_proj.weight",
                    L + "switch_glu.gate_proj", e * I, I, mode, false, what + " gate");
        CheckTensor(*ck, info.layout.up, blob.data(), L + "switch_glu.up_proj.weight",
                    L + "switch_glu.up_proj", e * I, I, mode, false, what + " up");
        CheckTensor(*ck, info.layout.down, blob.data(), L + "switch_glu.down_proj.weight",
                    L + "switch_glu.down_proj", e * H, H, mode, false, what + " down");
      } else {
        CheckTensor(*ck, info.layout.gate, blob.data(), L + "gate_up_proj", L + "gate_up_proj",
                    e * 2 * I, I, mode, false, what + " gate");
        CheckTensor(*ck, info.layout.up, blob.data(), L + "gate_up_proj", L + "gate_up_proj",
                    e * 2 * I + I, I, mode, false, what + " up");
        CheckTensor(*ck, info.layout.down, blob.data(), L + "down_proj", L + "down_proj", e * H, H,
                    mode, false, what + " down");
      }
    }
  }
}

struct Case {
  const char* name;
  Layout layout;
  StDType dtype;
  int shards;
  const char* quantize;
};

class ConvertLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertLayouts, MatchesSource) {
  const Case& c = GetParam();
  TinyGeometry g;
  FixtureOptions o;
  o.layout = c.layout;
  o.dtype = c.dtype;
  o.shards = c.shards;
  o.lm_head = c.layout == Layout::kHfConditional;
  std::string src = TempPath("src"), out = TempPath("out");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  ConvertOptions opts;
  opts.source_dir = src;
  opts.out_dir = out;
  opts.quantize = c.quantize;
  opts.repo_id = "test/tiny";
  Status st = ConvertCheckpoint(opts);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(PathExists(out + ".partial"));
  auto mode = ParseQuantizeMode(c.quantize);
  CheckConverted(src, out, c.layout, g, *mode);

  auto dir = ModelDir::Open(out);
  ASSERT_TRUE(dir.ok());
  const Manifest& m = dir->manifest();
  EXPECT_EQ(m.created_by, "redwing 0.1.0 convert");
  EXPECT_EQ(m.source["kind"], c.layout == Layout::kMlx ? "mlx" : "hf");
  EXPECT_EQ(m.source["path"], std::filesystem::absolute(src).lexically_normal().string());
  EXPECT_EQ(m.source["repo_id"], "test/tiny");
  EXPECT_FALSE(m.source.contains("revision"));
  EXPECT_EQ(m.source["quantize"], c.quantize);
  EXPECT_EQ(m.source["dtype"],
            c.dtype == StDType::kF32 && c.layout != Layout::kMlx ? "float32" : "bfloat16");
  // Skipped: the vision tower and embed_vision (and the tied head) are listed with counts.
  std::map<std::string, int> skipped;
  for (const Json& s : m.skipped) skipped[s["prefix"]] = s["tensors"];
  std::string mm = c.layout == Layout::kMlx ? "" : "model.";
  EXPECT_EQ(skipped[mm + "vision_tower."], 2);
  EXPECT_EQ(skipped[mm + "embed_vision."], 1);
  if (o.lm_head) {
    EXPECT_EQ(skipped["lm_head."], 1);
  }
  // Side files copied; config normalized.
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    EXPECT_TRUE(dir->HasSideFile(f)) << f;
  EXPECT_FALSE(dir->HasSideFile("generation_config.json"));
  EXPECT_EQ(dir->config().num_layers, g.layers);
  EXPECT_TRUE(dir->config().is_full(g.layers - 1));
  EXPECT_EQ(dir->config().full.head_dim, g.full_head_dim);
  const bool bf16_scale =
      std::string(c.quantize) != "keep" || c.dtype == StDType::kBF16 || c.layout == Layout::kMlx;
  EXPECT_EQ(dir->config().embed_scale,
            bf16_scale ? RoundToBf16(std::sqrt(128.0f)) : std::sqrt(128.0f));
}

INSTANTIATE_TEST_SUITE_P(
    All, ConvertLayouts,
    ::testing::Values(Case{"HfCondBf16Sharded", Layout::kHfConditional, StDType::kBF16, 3, "keep"},
                      Case{"HfCondBf16Single", Layout::kHfConditional, StDType::kBF16, 1, "keep"},
                      Case{"HfCausalBf16Single", Layout::kHfCausal, StDType::kBF16, 1, "keep"},
                      Case{"HfCausalF32Sharded", Layout::kHfCausal, StDType::kF32, 2, "keep"},
                      Case{"HfCondF32", Layout::kHfConditional, StDType::kF32, 1, "keep"},
                      Case{"Mlx4bit", Layout::kMlx, StDType::kBF16, 1, "keep"},
                      Case{"Mlx4bitSharded", Layout::kMlx, StDType::kBF16, 2, "keep"},
                      Case{"Q4FromBf16", Layout::kHfConditional, StDType::kBF16, 1, "q4"},
                      Case{"Q4FromF32", Layout::kHfCausal, StDType::kF32, 2, "q4"},
                      Case{"Q8FromBf16", Layout::kHfConditional, StDType::kBF16, 2, "q8"},
                      Case{"Q8FromF32", Layout::kHfCausal, StDType::kF32, 1, "q8"},
                      Case{"Bf16FromF32", Layout::kHfConditional, StDType::kF32, 1, "bf16"},
                      Case{"Bf16FromBf16", Layout::kHfCausal, StDType::kBF16, 1, "bf16"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(Convert, Mlx8bitGroup32) {
  TinyGeometry g;
  FixtureOptions o;
  o.layout = Layout::kMlx;
  o.mlx_bits = 8;
  o.mlx_group = 32;
  o.mlx_router_bits = 8;
  std::string src = TempPath("src"), out = TempPath("out");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  ConvertOptions opts = test::ConvertOpts(src, out);
  Status st = ConvertCheckpoint(opts);
  ASSERT_TRUE(st.ok()) << st.ToString();
  CheckConverted(src, out, Layout::kMlx, g, QuantizeMode::kKeep);
  auto dir = ModelDir::Open(out);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->core().Find("layers.0.self_attn.q_proj")->group_size, 32);
  EXPECT_EQ(dir->experts()->layers[0].layout.gate.bits, 8);
}

TEST(Convert, MlxRouterIsEightBit) {
  TinyGeometry g;
  FixtureOptions o;
  o.layout = Layout::kMlx;
  std::string src = TempPath("src"), out = TempPath("out");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  ASSERT_TRUE(ConvertCheckpoint(test::ConvertOpts(src, out)).ok());
  auto dir = ModelDir::Open(out);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->core().Find("layers.1.router.proj")->bits, 8);
  EXPECT_EQ(dir->core().Find("layers.1.mlp.down_proj")->bits, 4);
  EXPECT_EQ(dir->core().Find("embed_tokens")->bits, 4);
  EXPECT_EQ(dir->core().Find("layers.1.router.scale")->type, TensorType::kBf16);
  EXPECT_EQ(dir->manifest().quantization["tensors"]["layers.1.router.proj"]["bits"], 8);
  EXPECT_EQ(dir->manifest().source["mlx_quantization"]["bits"], 4);
}

TEST(Convert, MlxRefusesRequantization) {
  TinyGeometry g;
  FixtureOptions o;
  o.layout = Layout::kMlx;
  std::string src = TempPath("src"), out = TempPath("out");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  for (const char* q : {"q4", "q8", "bf16"}) {
    ConvertOptions opts = test::ConvertOpts(src, out, q);
    Status st = ConvertCheckpoint(opts);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("only --quantize keep"), std::string::npos) << st.message();
    EXPECT_FALSE(PathExists(out));
    EXPECT_FALSE(PathExists(out + ".partial"));
  }
  Status st = ConvertCheckpoint(test::ConvertOpts(src, out, "q5"));
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
}

TEST(Convert, NarrowLinearsStayFloatUnderQ4) {
  // moe_intermediate 32 cannot form groups of 64 in the down projection: kept bf16, as mlx-lm
  // leaves such modules unquantized.
  TinyGeometry g;
  g.moe_intermediate = 32;
  FixtureOptions o;
  std::string src = TempPath("src"), out = TempPath("out");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  ConvertOptions opts = test::ConvertOpts(src, out, "q4");
  Status st = ConvertCheckpoint(opts);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto dir = ModelDir::Open(out);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->experts()->layers[0].layout.gate.type, TensorType::kAffine);
  EXPECT_EQ(dir->experts()->layers[0].layout.down.type, TensorType::kBf16);
}

TEST(Convert, FullLayerWithVProjKeepsIt) {
  TinyGeometry g;
  g.k_eq_v = false;
  g.full_kv_heads = g.kv_heads;  // without K=V, transformers uses num_key_value_heads everywhere
  FixtureOptions o;
  std::string src = TempPath("src"), out = TempPath("out");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  Status st = ConvertCheckpoint(test::ConvertOpts(src, out));
  ASSERT_TRUE(st.ok()) << st.ToString();
  CheckConverted(src, out, o.layout, g, QuantizeMode::kKeep);
}

TEST(Convert, PlanIsIndependentOfData) {
  // The planner works from names/dtypes/shapes alone (the installer plans from fetched headers).
  TinyGeometry g;
  FixtureOptions o;
  o.layout = Layout::kHfConditional;
  std::string src = TempPath("src");
  ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
  auto ck = SafetensorsCheckpoint::Open(src);
  ASSERT_TRUE(ck.ok());
  auto plan =
      PlanConversion(test::TinyConfigJson(g, o), ListSourceTensors(*ck), QuantizeMode::kQ4, src);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->experts.size(), 3u);
  const ExpertLayerPlan& lp = plan->experts[1];
  EXPECT_EQ(lp.gate.weight.tensor, "model.language_model.layers.1.experts.gate_up_proj");
  EXPECT_EQ(lp.up.weight.row_begin, g.moe_intermediate);
  EXPECT_EQ(lp.up.weight.expert_row_stride, 2 * g.moe_intermediate);
  EXPECT_EQ(lp.up.weight.ByteOffset(2),
            static_cast<uint64_t>((2 * 2 + 1) * g.moe_intermediate) * g.hidden * 2);
  EXPECT_EQ(lp.down.weight.ByteOffset(3),
            static_cast<uint64_t>(3 * g.hidden) * g.moe_intermediate * 2);
  EXPECT_EQ(plan->core.front().target.name, "embed_tokens");
  EXPECT_EQ(plan->core.back().target.name, "norm");
}

TEST(Convert, RowBlocksEqualWholeTensors) {
  // Core tensors are repacked and written in row blocks; with blocks of a few rows (and of one
  // row, below a row's size) every tensor's bytes equal RepackTensor of the whole tensor.
  struct Src {
    Layout layout;
    StDType dtype;
    QuantizeMode mode;
  };
  for (const Src& c : {Src{Layout::kHfConditional, StDType::kBF16, QuantizeMode::kKeep},
                       Src{Layout::kHfCausal, StDType::kF32, QuantizeMode::kQ4},
                       Src{Layout::kHfConditional, StDType::kBF16, QuantizeMode::kQ8},
                       Src{Layout::kHfCausal, StDType::kF32, QuantizeMode::kBf16},
                       Src{Layout::kMlx, StDType::kBF16, QuantizeMode::kKeep}}) {
    SCOPED_TRACE(
        fmt::format("layout {} mode {}", static_cast<int>(c.layout), QuantizeModeName(c.mode)));
    TinyGeometry g;
    FixtureOptions o;
    o.layout = c.layout;
    o.dtype = c.dtype;
    std::string src = TempPath("src");
    ASSERT_TRUE(test::WriteTinyCheckpoint(src, g, o).ok());
    auto ck = SafetensorsCheckpoint::Open(src);
    ASSERT_TRUE(ck.ok());
    auto plan = PlanConversion(test::TinyConfigJson(g, o), ListSourceTensors(*ck), c.mode, src);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    CheckpointReader reader(*ck);
    for (uint64_t block : {uint64_t{1}, uint64_t{1000}, kRepackBlockBytes}) {
      SCOPED_TRACE(fmt::format("block {} bytes", block));
      std::string path = TempPath("core.bin");
      RepackScratch scratch;
      {
        auto core = CoreWriter::Create(path);
        ASSERT_TRUE(core.ok());
        for (const TensorPlan& p : plan->core)
          ASSERT_TRUE(WriteCoreTensor(p, reader, *core, &scratch, block).ok()) << p.target.name;
        ASSERT_TRUE(core->Finish().ok());
      }
      auto core = CoreFile::Open(path);
      ASSERT_TRUE(core.ok()) << core.status().ToString();
      ASSERT_EQ(core->tensors().size(), plan->core.size());
      for (const TensorPlan& p : plan->core) {
        const TensorDesc* t = core->Find(p.target.name);
        ASSERT_NE(t, nullptr) << p.target.name;
        std::vector<uint8_t> data(p.target.ExpectedDataBytes()),
            scales(p.target.ExpectedScaleBytes()), biases(p.target.ExpectedScaleBytes());
        ASSERT_TRUE(
            RepackTensor(p, -1, reader, data.data(), scales.data(), biases.data(), &scratch).ok());
        const uint8_t* base = core->base();
        EXPECT_EQ(Bytes(base, t->data), std::string(data.begin(), data.end())) << t->name;
        if (t->type == TensorType::kAffine) {
          EXPECT_EQ(Bytes(base, t->scales), std::string(scales.begin(), scales.end())) << t->name;
          EXPECT_EQ(Bytes(base, t->biases), std::string(biases.begin(), biases.end())) << t->name;
        }
      }
    }
  }
}

// Every committed golden fixture (manifest.json) in both of its formats converts and verifies.
TEST(Convert, GoldenFixtures) {
  const test::GoldenManifest m = test::ReadGoldenManifest();
  ASSERT_TRUE(m.error.empty()) << m.error;
  int converted = 0;
  for (const std::string& name : m.names) {
    for (const std::string& kind : test::GoldenFormats()) {
      const std::string src = JoinPath(JoinPath(test::GoldenRoot(), name), kind);
      SCOPED_TRACE(src);
      std::string out = TempPath(name + "_" + kind);
      Status st = ConvertCheckpoint(test::ConvertOpts(src, out));
      ASSERT_TRUE(st.ok()) << st.ToString();
      auto dir = ModelDir::Open(out);
      ASSERT_TRUE(dir.ok()) << dir.status().ToString();
      auto report = VerifyModelDir(out);
      ASSERT_TRUE(report.ok());
      EXPECT_TRUE(report->problems.empty());
      ++converted;
      (void)RemoveAll(out);
    }
  }
  EXPECT_EQ(converted, static_cast<int>(m.names.size() * test::GoldenFormats().size()));
  std::printf("[convert] %d golden checkpoints converted and verified\n", converted);
}

}  // namespace
}  // namespace rw
