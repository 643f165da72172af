// Unit checks of the CPU forward pass against a naive double-precision implementation of the
// reference formulas (reference_forward.cpp): RoPE tables, router math, whole small models with
// every weight type, sliding-window ring wraparound under several chunk sizes, and decode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/file.h"
#include "base/json.h"
#include "runtime/forward.h"
#include "runtime/reference_forward.h"
#include "runtime/tiny_model_builder.h"

namespace rw {
namespace {

using test::LinearType;
using test::TinySpec;

double RelErr(const std::vector<float>& ours, const std::vector<std::vector<double>>& ref,
              int64_t vocab) {
  double num = 0, den = 0;
  for (size_t t = 0; t < ref.size(); ++t)
    for (int64_t v = 0; v < vocab; ++v) {
      const double d = ours[t * vocab + v] - ref[t][v];
      num += d * d;
      den += ref[t][v] * ref[t][v];
    }
  return std::sqrt(num / den);
}

std::vector<int> Prompt(int n, int vocab, int seed) {
  std::vector<int> ids{2};
  uint32_t s = static_cast<uint32_t>(seed) * 2654435761u + 1;
  while (static_cast<int>(ids.size()) < n) {
    s = s * 1664525u + 1013904223u;
    ids.push_back(static_cast<int>((s >> 8) % vocab));
  }
  return ids;
}

// Runs ids through the pass in chunks of `chunk` (1 = decode steps), all logits.
std::vector<float> RunChunked(const RuntimeModel& model, const std::vector<int>& ids, int64_t chunk,
                              int64_t max_context, ThreadPool* pool) {
  const int64_t V = model.config().vocab_size, n = static_cast<int64_t>(ids.size());
  KvCache kv(model.config(), max_context, chunk);
  ForwardPass fwd(model, chunk);
  std::vector<float> logits(n * V);
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i);
    Status st = fwd.Run(kv, &ids[i], m, i, LogitsRows::kAll, &logits[i * V], pool, nullptr);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return logits;
}

TEST(RopeTest, DefaultInvFreqMatchesFormula) {
  AttentionGeometry g{256, 8, 10000.0, 1.0, "default", false};
  const std::vector<float> inv = RopeInvFreq(g);
  const std::vector<double> ref = test::ReferenceInvFreq(256, 1e4, false, 1.0);
  ASSERT_EQ(inv.size(), 128u);
  for (size_t k = 0; k < inv.size(); ++k) EXPECT_NEAR(inv[k], ref[k], 1e-6 * ref[k]) << k;
  EXPECT_EQ(inv[0], 1.0f);
}

TEST(RopeTest, ProportionalRotatesOnlyTheFirstPairsWithFullHeadDimDenominator) {
  AttentionGeometry g{512, 2, 1e6, 0.25, "proportional", true};
  const std::vector<float> inv = RopeInvFreq(g);
  const std::vector<double> ref = test::ReferenceInvFreq(512, 1e6, true, 0.25);
  ASSERT_EQ(inv.size(), 256u);
  for (int k = 0; k < 64; ++k) {
    EXPECT_GT(inv[k], 0.0f);
    EXPECT_NEAR(inv[k], ref[k], 1e-6 * ref[k]) << k;
    // Denominator 512, not 128.
    EXPECT_NEAR(inv[k], std::pow(1e6, -2.0 * k / 512), 1e-6 * ref[k]);
  }
  for (int k = 64; k < 256; ++k) EXPECT_EQ(inv[k], 0.0f) << k;
  // Small geometry: int(0.25 * 32 / 2) = 4 rotated pairs.
  AttentionGeometry s{32, 1, 1e6, 0.25, "proportional", true};
  const std::vector<float> small = RopeInvFreq(s);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(small[k] > 0, k < 4) << k;
}

TEST(RouterTest, SoftmaxTopKRenormTimesPerExpertScale) {
  const int E = 16, k = 4;
  std::vector<float> logits(E), pes(E);
  std::vector<double> dl(E), dp(E);
  for (int e = 0; e < E; ++e) {
    logits[e] = static_cast<float>(std::sin(1.7 * e) * 3);
    pes[e] = 0.5f + 0.07f * e;
    dl[e] = logits[e];
    dp[e] = pes[e];
  }
  std::vector<int> idx(k);
  std::vector<float> w(k);
  RouteTopK(logits.data(), E, k, pes.data(), idx.data(), w.data());
  const auto ref = test::ReferenceRoute(dl, k, dp);
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(idx[j], ref[j].first);
    EXPECT_NEAR(w[j], ref[j].second, 1e-6);
  }
  // Without per-expert scales the weights sum to one.
  std::vector<float> ones(E, 1.0f);
  for (int e = 0; e < E; ++e) logits[e] = static_cast<float>(dl[e]);
  RouteTopK(logits.data(), E, k, ones.data(), idx.data(), w.data());
  double sum = 0;
  for (float x : w) sum += x;
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

struct Case {
  const char* name;
  TinySpec spec;
};

TinySpec Typed(LinearType all, bool bf16_vectors = true) {
  TinySpec s;
  s.embed = s.attn = s.mlp = s.router = s.experts_type = all;
  s.bf16_vectors = bf16_vectors;
  return s;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  cases.push_back({"f32", Typed({TensorType::kF32}, false)});
  cases.push_back({"bf16", Typed({TensorType::kBf16})});
  TinySpec q = Typed({TensorType::kAffine, 4, 32});
  q.mlp = {TensorType::kAffine, 8, 32};
  q.router = {TensorType::kAffine, 8, 64};
  cases.push_back({"affine_mixed", q});
  TinySpec dense = Typed({TensorType::kBf16});
  dense.moe = false;
  cases.push_back({"dense_only", dense});
  TinySpec wide = Typed({TensorType::kAffine, 4, 64});
  wide.layers = {LayerKind::kFull, LayerKind::kSliding, LayerKind::kSliding, LayerKind::kFull};
  wide.heads = 2;
  wide.sliding_kv = 1;
  wide.experts = 12;
  wide.top_k = 3;
  wide.window = 16;
  wide.sliding_head_dim = 32;  // every input dim a multiple of 64
  wide.full_head_dim = 64;
  wide.intermediate = 64;
  wide.moe_intermediate = 64;
  wide.seed = 7;
  cases.push_back({"affine_g64_k3", wide});
  return cases;
}

class ModelCase : public ::testing::TestWithParam<Case> {};

TEST_P(ModelCase, AllPositionLogitsMatchDoubleReference) {
  const Case& c = GetParam();
  const std::string dir = test::TestTempDir(std::string("fwd_") + c.name) + "/model";
  test::BuildTinyModel(c.spec, dir);
  auto model = RuntimeModel::Open(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<int> ids = Prompt(20, c.spec.vocab, 3);
  const auto ref = test::ReferenceLogits(dir, ids);
  ThreadPool pool(2);
  const std::vector<float> ours = RunChunked(**model, ids, 64, 128, &pool);
  const double err = RelErr(ours, ref, c.spec.vocab);
  EXPECT_LT(err, 2e-5) << c.name;
  // Decode steps (MatVec + AttendOne) agree too.
  const std::vector<float> stepped = RunChunked(**model, ids, 1, 128, &pool);
  const double err1 = RelErr(stepped, ref, c.spec.vocab);
  EXPECT_LT(err1, 2e-5) << c.name;
  std::printf("[%s] rel err vs double reference: chunked %.3g, stepped %.3g\n", c.name, err, err1);
}

INSTANTIATE_TEST_SUITE_P(Types, ModelCase, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// A prompt four windows long through rings of window + chunk − 1 slots: every chunk size must
// reproduce the no-cache reference.
TEST(SlidingWindowTest, RingWraparoundMatchesReferenceForEveryChunkSize) {
  TinySpec s = Typed({TensorType::kBf16});
  s.window = 8;
  s.layers = {LayerKind::kSliding, LayerKind::kFull, LayerKind::kSliding};
  const std::string dir = test::TestTempDir("fwd_ring") + "/model";
  test::BuildTinyModel(s, dir);
  auto model = RuntimeModel::Open(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<int> ids = Prompt(37, s.vocab, 11);
  const auto ref = test::ReferenceLogits(dir, ids);
  for (int64_t chunk : {1, 3, 7, 8, 13, 64}) {
    KvCache probe(model->get()->config(), 64, chunk);
    EXPECT_EQ(probe.capacity(0), std::min<int64_t>(64, 8 + chunk - 1));
    const std::vector<float> ours = RunChunked(**model, ids, chunk, 64, nullptr);
    const double err = RelErr(ours, ref, s.vocab);
    EXPECT_LT(err, 2e-5) << "chunk " << chunk;
    std::printf("[ring] chunk %lld: rel err %.3g\n", static_cast<long long>(chunk), err);
  }
}

// Experts run side by side (one per thread) or split across the threads depending on the
// chunk; both, and every thread count, must give the same bits.
TEST(ExpertThreadsTest, EveryThreadCountGivesTheSameBits) {
  TinySpec s = Typed({TensorType::kAffine, 4, 64});
  s.layers = {LayerKind::kSliding, LayerKind::kFull};
  s.experts = 12;
  s.top_k = 3;
  s.sliding_head_dim = 32;
  s.full_head_dim = 64;
  s.intermediate = 64;
  s.moe_intermediate = 64;
  s.seed = 5;
  const std::string dir = test::TestTempDir("fwd_threads") + "/model";
  test::BuildTinyModel(s, dir);
  auto model = RuntimeModel::Open(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const std::vector<int> ids = Prompt(64, s.vocab, 9);
  for (int64_t chunk : {64, 5, 1}) {
    const std::vector<float> one = RunChunked(**model, ids, chunk, 128, nullptr);
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      const std::vector<float> many = RunChunked(**model, ids, chunk, 128, &pool);
      ASSERT_EQ(one.size(), many.size());
      EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
          << "chunk " << chunk << ", " << threads << " threads";
    }
  }
}

// A config that claims fewer layers than the weights hold would run as a truncated model: opening
// refuses it, naming a tensor of the layer the config lacks (dense, so no expert index can tell).
TEST(ModelOpenTest, RefusesWeightsOfLayersTheConfigLacks) {
  TinySpec s = Typed({TensorType::kBf16});
  s.moe = false;
  const std::string dir = test::TestTempDir("fwd_layers") + "/model";
  test::BuildTinyModel(s, dir);
  ASSERT_TRUE(RuntimeModel::Open(dir).ok());
  const std::string mpath = dir + "/manifest.json";
  Json m = Json::parse(*ReadFileToString(mpath));
  m["config"]["num_layers"] = 2;
  m["config"]["layer_types"] =
      Json::array({m["config"]["layer_types"][0], m["config"]["layer_types"][1]});
  ASSERT_TRUE(WriteFileAtomic(mpath, m.dump()).ok());
  auto model = RuntimeModel::Open(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("belongs to layer 2, but the config has 2 layers"),
            std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace rw
