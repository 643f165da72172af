// The REDWING_CUDA_* parser (backend/cuda/tuning.h), no GPU needed: every variable takes the
// values it documents, a bad value is rejected with a message naming the variable and the value
// (and leaves the default), the fault-injection syntax, the decode split count, ScopedTuning,
// and docs/CUDA.md's table listing every variable.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "backend/cuda/tuning.h"
#include "base/file.h"

namespace rw {
namespace {

using cuda::ExpertPath;
using cuda::MatMulVariant;
using cuda::MatVecVariant;
using cuda::ParsedTuning;
using cuda::Tuning;

ParsedTuning Parse(const std::map<std::string, std::string>& vars) {
  return cuda::ParseTuning([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The fields a test compares, as text (Tuning has no operator==: a new field must be added here
// and in the parser at once, which the round trip below checks).
std::string Describe(const Tuning& t) {
  return std::to_string(static_cast<int>(t.matvec)) + " " + std::to_string(t.matvec_rows) + " " +
         std::to_string(static_cast<int>(t.matmul)) + " " + std::to_string(t.wgmma) + " " +
         std::to_string(t.wgmma_dense_tile) + " " + std::to_string(t.wgmma_expert_tile) + " " +
         std::to_string(t.stack) + " " + std::to_string(t.split_parts) + " " +
         std::to_string(t.tiled_prefill_attention) + " " + std::to_string(t.pdl) + " " +
         std::to_string(t.register_rows) + " " + std::to_string(t.rank_topk) + " " +
         std::to_string(t.fuse_rows) + " " + std::to_string(t.overlap) + " " +
         std::to_string(t.gpu_plan) + " " + std::to_string(t.split_keys) + " " +
         std::to_string(t.timing) + " " + std::to_string(static_cast<int>(t.experts)) + " " +
         std::to_string(t.promotions) + " " + std::to_string(static_cast<int>(t.prefill_experts)) +
         " " + std::to_string(t.graphs);
}

TEST(CudaTuningParse, NothingSetGivesTheDefaults) {
  const ParsedTuning p = Parse({});
  EXPECT_TRUE(p.errors.empty());
  EXPECT_EQ(Describe(p.tuning), Describe(Tuning{}));
  EXPECT_EQ(p.tuning.matvec, MatVecVariant::kInt8);
  EXPECT_EQ(p.tuning.matmul, MatMulVariant::kPlanes);
  EXPECT_EQ(p.tuning.split_parts, 2);
  EXPECT_EQ(p.tuning.split_keys, 64);
  EXPECT_EQ(p.tuning.matvec_rows, 8);
  EXPECT_FALSE(p.tuning.timing);
  EXPECT_EQ(p.tuning.experts, ExpertPath::kUnset);
  EXPECT_EQ(p.tuning.promotions, -1);
  // An empty value counts as unset (VAR= cmd).
  const ParsedTuning empty = Parse({{"REDWING_CUDA_MATVEC", ""}, {"REDWING_CUDA_PDL", ""}});
  EXPECT_TRUE(empty.errors.empty());
  EXPECT_EQ(Describe(empty.tuning), Describe(Tuning{}));
}

TEST(CudaTuningParse, EveryVariableTakesItsValues) {
  struct Case {
    const char* var;
    const char* value;
    std::function<bool(const Tuning&)> check;
  };
  const Case cases[] = {
      {"REDWING_CUDA_MATVEC", "i8",
       [](const Tuning& t) { return t.matvec == MatVecVariant::kInt8; }},
      {"REDWING_CUDA_MATVEC", "simt",
       [](const Tuning& t) { return t.matvec == MatVecVariant::kSimt; }},
      {"REDWING_CUDA_MATVEC", "generic",
       [](const Tuning& t) { return t.matvec == MatVecVariant::kGeneric; }},
      {"REDWING_CUDA_MATMUL", "planes",
       [](const Tuning& t) { return t.matmul == MatMulVariant::kPlanes; }},
      {"REDWING_CUDA_MATMUL", "bf16",
       [](const Tuning& t) { return t.matmul == MatMulVariant::kBf16; }},
      {"REDWING_CUDA_MATMUL", "tf32",
       [](const Tuning& t) { return t.matmul == MatMulVariant::kTf32; }},
      {"REDWING_CUDA_MATMUL", "simt",
       [](const Tuning& t) { return t.matmul == MatMulVariant::kSimt; }},
      {"REDWING_CUDA_WGMMA", "0", [](const Tuning& t) { return !t.wgmma; }},
      {"REDWING_CUDA_WGMMA_TN", "64", [](const Tuning& t) { return t.wgmma_dense_tile == 64; }},
      {"REDWING_CUDA_WGMMA_TN_EXPERT", "128",
       [](const Tuning& t) { return t.wgmma_expert_tile == 128; }},
      {"REDWING_CUDA_STACK", "0", [](const Tuning& t) { return !t.stack; }},
      {"REDWING_CUDA_SPLIT", "bf16x3", [](const Tuning& t) { return t.split_parts == 3; }},
      {"REDWING_CUDA_SPLIT", "fp16x2", [](const Tuning& t) { return t.split_parts == 2; }},
      {"REDWING_CUDA_PREFILL_ATTN", "split",
       [](const Tuning& t) { return !t.tiled_prefill_attention; }},
      {"REDWING_CUDA_PDL", "0", [](const Tuning& t) { return !t.pdl; }},
      {"REDWING_CUDA_ROWS", "shared", [](const Tuning& t) { return !t.register_rows; }},
      {"REDWING_CUDA_TOPK", "warp", [](const Tuning& t) { return !t.rank_topk; }},
      {"REDWING_CUDA_FUSE", "0", [](const Tuning& t) { return !t.fuse_rows; }},
      {"REDWING_CUDA_OVERLAP", "0", [](const Tuning& t) { return !t.overlap; }},
      {"REDWING_CUDA_GPU_PLAN", "0", [](const Tuning& t) { return !t.gpu_plan; }},
      {"REDWING_CUDA_SPLIT_KEYS", "256", [](const Tuning& t) { return t.split_keys == 256; }},
      {"REDWING_CUDA_MATVEC_ROWS", "1", [](const Tuning& t) { return t.matvec_rows == 1; }},
      {"REDWING_CUDA_TIMING", "1", [](const Tuning& t) { return t.timing; }},
      {"REDWING_CUDA_EXPERTS", "copy",
       [](const Tuning& t) { return t.experts == ExpertPath::kCopy; }},
      {"REDWING_CUDA_PROMOTIONS", "0", [](const Tuning& t) { return t.promotions == 0; }},
      {"REDWING_CUDA_PREFILL_EXPERTS", "mapped",
       [](const Tuning& t) { return t.prefill_experts == ExpertPath::kMapped; }},
      {"REDWING_CUDA_GRAPHS", "0", [](const Tuning& t) { return !t.graphs; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.var) + "=" + c.value);
    const ParsedTuning p = Parse({{c.var, c.value}});
    EXPECT_TRUE(p.errors.empty()) << p.errors.front();
    EXPECT_TRUE(c.check(p.tuning));
  }
}

TEST(CudaTuningParse, BadValuesAreRejectedByName) {
  // The removed variants (tc, tf32pipe) among them: they must not pass for the default.
  const std::pair<const char*, const char*> bad[] = {
      {"REDWING_CUDA_MATVEC", "tc"},
      {"REDWING_CUDA_MATMUL", "tf32pipe"},
      {"REDWING_CUDA_WGMMA", "off"},
      {"REDWING_CUDA_WGMMA_TN", "48"},
      {"REDWING_CUDA_WGMMA_TN_EXPERT", "0"},
      {"REDWING_CUDA_STACK", "no"},
      {"REDWING_CUDA_SPLIT", "bf16"},
      {"REDWING_CUDA_PREFILL_ATTN", "1"},
      {"REDWING_CUDA_PDL", "2"},
      {"REDWING_CUDA_ROWS", "Shared"},
      {"REDWING_CUDA_TOPK", "block"},
      {"REDWING_CUDA_FUSE", "false"},
      {"REDWING_CUDA_OVERLAP", " 0"},
      {"REDWING_CUDA_GPU_PLAN", "00"},
      {"REDWING_CUDA_SPLIT_KEYS", "16"},
      {"REDWING_CUDA_MATVEC_ROWS", "9"},
      {"REDWING_CUDA_TIMING", "yes"},
      {"REDWING_CUDA_EXPERTS", "host"},
      {"REDWING_CUDA_PROMOTIONS", "-1"},
      {"REDWING_CUDA_PREFILL_EXPERTS", "auto"},
      {"REDWING_CUDA_GRAPHS", "on"},
  };
  for (const auto& [var, value] : bad) {
    SCOPED_TRACE(std::string(var) + "=" + value);
    const ParsedTuning p = Parse({{var, value}});
    ASSERT_EQ(p.errors.size(), 1u);
    const std::string& msg = p.errors[0];
    EXPECT_EQ(msg.rfind(std::string(var) + " must be ", 0), 0u) << msg;
    EXPECT_NE(msg.find(std::string("'") + value + "'"), std::string::npos) << msg;
    EXPECT_EQ(Describe(p.tuning), Describe(Tuning{})) << "a bad value leaves the default";
  }
  // The message lists what the variable takes.
  const ParsedTuning p = Parse({{"REDWING_CUDA_MATVEC", "tc"}});
  EXPECT_EQ(p.errors[0], "REDWING_CUDA_MATVEC must be i8, simt or generic, not 'tc'");
  const ParsedTuning n = Parse({{"REDWING_CUDA_SPLIT_KEYS", "64k"}});
  EXPECT_EQ(n.errors[0],
            "REDWING_CUDA_SPLIT_KEYS must be a whole number from 32 to 1048576, not "
            "'64k'");
}

TEST(CudaTuningParse, EveryErrorIsReportedAndGoodValuesStand) {
  const ParsedTuning p = Parse({{"REDWING_CUDA_PDL", "x"},
                                {"REDWING_CUDA_MATVEC", "simt"},
                                {"REDWING_CUDA_SPLIT_KEYS", "abc"}});
  ASSERT_EQ(p.errors.size(), 2u);
  EXPECT_NE(p.errors[0].find("REDWING_CUDA_PDL"), std::string::npos);
  EXPECT_NE(p.errors[1].find("REDWING_CUDA_SPLIT_KEYS"), std::string::npos);
  EXPECT_EQ(p.tuning.matvec, MatVecVariant::kSimt);
  EXPECT_TRUE(p.tuning.pdl);
  EXPECT_EQ(p.tuning.split_keys, 64);
}

TEST(CudaTuningParse, TheVariableListMatchesTheParser) {
  // Each listed variable, given a value no variable takes, is reported by its own name.
  ASSERT_EQ(cuda::kTuningVariableCount, 21);
  for (int i = 0; i < cuda::kTuningVariableCount; ++i) {
    const std::string var = cuda::kTuningVariables[i];
    const ParsedTuning p = Parse({{var, "?"}});
    ASSERT_EQ(p.errors.size(), 1u) << var;
    EXPECT_EQ(p.errors[0].rfind(var + " must be ", 0), 0u) << p.errors[0];
  }
}

TEST(CudaTuningParse, DocsTableListsEveryVariable) {
  auto text = ReadFileToString(JoinPath(REDWING_SOURCE_DIR, "docs/CUDA.md"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  for (int i = 0; i <= cuda::kTuningVariableCount; ++i) {
    const std::string var =
        i < cuda::kTuningVariableCount ? cuda::kTuningVariables[i] : "REDWING_CUDA_INJECT_FAULT";
    EXPECT_NE(text->find("| `" + var + "` |"), std::string::npos)
        << var << " has no row in docs/CUDA.md's table of variables";
  }
}

TEST(CudaTuningParse, FaultInjectionSyntax) {
  cuda::FaultInjection f;
  std::string error;
  ASSERT_TRUE(cuda::ParseFaultInjection(nullptr, &f, &error));
  EXPECT_EQ(f.layer, -1);
  ASSERT_TRUE(cuda::ParseFaultInjection("", &f, &error));
  EXPECT_EQ(f.layer, -1);
  ASSERT_TRUE(cuda::ParseFaultInjection("3", &f, &error));
  EXPECT_EQ(f.layer, 3);
  EXPECT_EQ(f.call, 0u);
  EXPECT_FALSE(f.sticky);
  ASSERT_TRUE(cuda::ParseFaultInjection("2,11", &f, &error));
  EXPECT_EQ(f.layer, 2);
  EXPECT_EQ(f.call, 11u);
  ASSERT_TRUE(cuda::ParseFaultInjection("0,1,sticky", &f, &error));
  EXPECT_TRUE(f.sticky);
  for (const char* bad : {"2,x", "x", "-1", "1,2,3", "1,2,sticky,4", "1,", ",1", "1,2,Sticky"}) {
    SCOPED_TRACE(bad);
    error.clear();
    EXPECT_FALSE(cuda::ParseFaultInjection(bad, &f, &error));
    EXPECT_EQ(error.rfind("REDWING_CUDA_INJECT_FAULT must be <layer>[,<call>[,sticky]]", 0), 0u)
        << error;
    EXPECT_NE(error.find(std::string("'") + bad + "'"), std::string::npos) << error;
    EXPECT_EQ(f.layer, -1);
  }
}

TEST(CudaTuningParse, DecodeSplitsFollowTheKeysPerSplit) {
  EXPECT_EQ(cuda::DecodeAttentionSplits(256, 64), 4);
  EXPECT_EQ(cuda::DecodeAttentionSplits(256, 32), 8);  // REDWING_CUDA_SPLIT_KEYS=32
  EXPECT_EQ(cuda::DecodeAttentionSplits(257, 64), 5);
  EXPECT_EQ(cuda::DecodeAttentionSplits(1, 64), 1);
  EXPECT_EQ(cuda::DecodeAttentionSplits(100000, 64), 64);  // at most 64
  EXPECT_EQ(cuda::DecodeAttentionSplits(4096, 256), 16);
}

TEST(CudaTuningParse, ScopedTuningReplacesTheSettingsForItsLifetime) {
  const std::string before = Describe(cuda::CurrentTuning());
  {
    Tuning a;
    a.matvec = MatVecVariant::kGeneric;
    cuda::ScopedTuning outer(a);
    EXPECT_EQ(cuda::CurrentTuning().matvec, MatVecVariant::kGeneric);
    {
      Tuning b;
      b.split_keys = 128;
      cuda::ScopedTuning inner(b);
      EXPECT_EQ(cuda::CurrentTuning().split_keys, 128);
      EXPECT_EQ(cuda::CurrentTuning().matvec, MatVecVariant::kInt8);
    }
    EXPECT_EQ(cuda::CurrentTuning().matvec, MatVecVariant::kGeneric);
  }
  EXPECT_EQ(Describe(cuda::CurrentTuning()), before);
}

}  // namespace
}  // namespace rw
