// redwing convert on damaged or hostile checkpoints: every case fails with an error that names
// the file and the tensor, and leaves nothing at the output path (neither <out> nor
// <out>.partial). An existing output survives a failed --force conversion.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "base/file.h"
#include "convert_fixture.h"
#include "format/model_dir.h"
#include "install/convert.h"

namespace rw {
namespace {

using test::FixtureOptions;
using test::Layout;
using test::TinyGeometry;

constexpr const char* kVictim = "model.language_model.layers.1.self_attn.k_proj.weight";

class ConvertHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = ::testing::TempDir() + "rw_convert_hostile_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    (void)RemoveAll(base_);
    src_ = base_ + "/src";
    out_ = base_ + "/out";
  }
  void TearDown() override { (void)RemoveAll(base_); }

  void Make(FixtureOptions o = {}) {
    if (o.shards == 1 && o.layout != Layout::kMlx && !sharded_off_) o.shards = 3;
    ASSERT_TRUE(test::WriteTinyCheckpoint(src_, g_, o).ok());
  }
  // Rewrites the source's config.json through `edit`.
  void EditConfig(const std::function<void(Json&)>& edit) {
    const std::string cfg = src_ + "/config.json";
    auto j = ParseJson(*ReadFileToString(cfg), cfg);
    ASSERT_TRUE(j.ok());
    edit(*j);
    ASSERT_TRUE(WriteFileAtomic(cfg, j->dump()).ok());
  }
  // The shard holding a tensor (from the index), as a full path.
  std::string ShardOf(const std::string& tensor) {
    std::string index = src_ + "/model.safetensors.index.json";
    if (!PathExists(index)) return src_ + "/model.safetensors";
    auto text = ReadFileToString(index);
    auto j = ParseJson(*text, index);
    return src_ + "/" + (*j)["weight_map"][tensor].get<std::string>();
  }
  // Runs the conversion, expects failure naming each of `needles`, and nothing at the output.
  Status ExpectFailure(const std::vector<std::string>& needles,
                       const std::string& quantize = "keep") {
    ConvertOptions opts = test::ConvertOpts(src_, out_, quantize);
    Status st = ConvertCheckpoint(opts);
    EXPECT_FALSE(st.ok());
    for (const std::string& n : needles)
      EXPECT_NE(st.message().find(n), std::string::npos)
          << "'" << n << "' not in: " << st.message();
    EXPECT_FALSE(PathExists(out_)) << st.message();
    EXPECT_FALSE(PathExists(out_ + ".partial")) << st.message();
    return st;
  }
  std::string Base(const std::string& p) { return BaseName(p); }

  TinyGeometry g_;
  bool sharded_off_ = false;
  std::string base_, src_, out_;
};

TEST_F(ConvertHostile, BadHeaderLength) {
  Make();
  std::string shard = ShardOf(kVictim);
  auto all = test::ReadAll(shard);
  uint64_t huge = 1ull << 40;
  std::memcpy(all->data(), &huge, 8);
  ASSERT_TRUE(test::WriteAll(shard, *all).ok());
  (void)ExpectFailure({Base(shard), "header length"});
}

TEST_F(ConvertHostile, MalformedJson) {
  Make();
  std::string shard = ShardOf(kVictim);
  auto all = test::ReadAll(shard);
  size_t at = all->find(std::string("\"") + kVictim + "\":");
  ASSERT_NE(at, std::string::npos);
  (*all)[at + std::strlen(kVictim) + 2] = '!';
  ASSERT_TRUE(test::WriteAll(shard, *all).ok());
  (void)ExpectFailure({Base(shard), "malformed JSON"});
}

TEST_F(ConvertHostile, OffsetsOutOfBounds) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) {
                h[kVictim]["data_offsets"][1] =
                    h[kVictim]["data_offsets"][1].get<uint64_t>() + (1u << 30);
              }).ok());
  (void)ExpectFailure({Base(shard), kVictim});
}

TEST_F(ConvertHostile, OverlappingTensors) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) {
                uint64_t b = h[kVictim]["data_offsets"][0], e = h[kVictim]["data_offsets"][1];
                ASSERT_GT(b, 0u);
                h[kVictim]["data_offsets"] = {b - 2, e - 2};
              }).ok());
  Status st = ExpectFailure({Base(shard), kVictim, "overlaps"});
}

TEST_F(ConvertHostile, ShapeSizeMismatch) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) {
                h[kVictim]["shape"][0] = h[kVictim]["shape"][0].get<int64_t>() * 2;
              }).ok());
  (void)ExpectFailure({Base(shard), kVictim, "needs"});
}

TEST_F(ConvertHostile, DtypeSizeMismatch) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) { h[kVictim]["dtype"] = "F32"; }).ok());
  (void)ExpectFailure({Base(shard), kVictim});
}

TEST_F(ConvertHostile, NonFloatDtype) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) { h[kVictim]["dtype"] = "I16"; }).ok());
  (void)ExpectFailure({Base(shard), kVictim, "I16"});
}

TEST_F(ConvertHostile, F16IsUnsupported) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) { h[kVictim]["dtype"] = "F16"; }).ok());
  Status st = ExpectFailure({Base(shard), kVictim, "F16"});
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
}

TEST_F(ConvertHostile, UnknownDtype) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) { h[kVictim]["dtype"] = "Q4_K"; }).ok());
  (void)ExpectFailure({Base(shard), kVictim});
}

TEST_F(ConvertHostile, TruncatedShard) {
  Make();
  std::string shard = ShardOf(kVictim);
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 100);
  (void)ExpectFailure({Base(shard), "truncated"});
}

TEST_F(ConvertHostile, TruncatedSingleFile) {
  sharded_off_ = true;
  Make();
  std::string file = src_ + "/model.safetensors";
  ASSERT_TRUE(PathExists(file));
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  (void)ExpectFailure({"model.safetensors", "tensor '"});
}

TEST_F(ConvertHostile, MissingTensor) {
  Make();
  std::string shard = ShardOf(kVictim);
  std::string index = src_ + "/model.safetensors.index.json";
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) { h.erase(kVictim); }).ok());
  auto j = ParseJson(*ReadFileToString(index), index);
  (*j)["weight_map"].erase(kVictim);
  ASSERT_TRUE(WriteFileAtomic(index, j->dump()).ok());
  Status st = ExpectFailure({src_, kVictim, "missing"});
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
}

TEST_F(ConvertHostile, IndexedTensorMissingFromShard) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) { h.erase(kVictim); }).ok());
  (void)ExpectFailure({"model.safetensors.index.json", kVictim, Base(shard)});
}

TEST_F(ConvertHostile, MissingShardFile) {
  Make();
  std::string shard = ShardOf(kVictim);
  ASSERT_TRUE(RemoveAll(shard).ok());
  (void)ExpectFailure({Base(shard), "does not exist"});
}

TEST_F(ConvertHostile, ShardNameEscapesDirectory) {
  Make();
  std::string index = src_ + "/model.safetensors.index.json";
  auto j = ParseJson(*ReadFileToString(index), index);
  (*j)["weight_map"][kVictim] = "../evil.safetensors";
  ASSERT_TRUE(WriteFileAtomic(index, j->dump()).ok());
  (void)ExpectFailure({"model.safetensors.index.json", kVictim});
}

TEST_F(ConvertHostile, WrongShapeForConfig) {
  Make();
  std::string shard = ShardOf(kVictim);
  // Same byte size, transposed: only the config can tell.
  ASSERT_TRUE(test::RewriteHeader(shard, [](Json& h) {
                auto s = h[kVictim]["shape"];
                h[kVictim]["shape"] = {s[1], s[0]};
              }).ok());
  Status st = ExpectFailure({Base(shard), kVictim, "[128, 64]", "[64, 128]"});
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
}

TEST_F(ConvertHostile, WrongExpertCount) {
  Make();
  const std::string t = "model.language_model.layers.0.experts.down_proj";
  std::string shard = ShardOf(t);
  ASSERT_TRUE(test::RewriteHeader(shard, [&](Json& h) {
                auto s = h[t]["shape"];  // [4, 128, 64] -> [8, 128, 32]: same bytes
                h[t]["shape"] = {8, s[1], 32};
              }).ok());
  (void)ExpectFailure({Base(shard), t, "[4, 128, 64]"});
}

TEST_F(ConvertHostile, MlxBitsDisagreeWithShapes) {
  FixtureOptions o;
  o.layout = Layout::kMlx;
  Make(o);
  EditConfig(
      [](Json& j) { j["quantization"]["language_model.model.layers.0.router.proj"]["bits"] = 4; });
  (void)ExpectFailure(
      {"model.safetensors", "language_model.model.layers.0.router.proj.weight", "4-bit", "8-bit"});
}

TEST_F(ConvertHostile, MlxDefaultBitsDisagreeWithShapes) {
  FixtureOptions o;
  o.layout = Layout::kMlx;
  Make(o);
  EditConfig([](Json& j) { j["quantization"]["group_size"] = 32; });
  (void)ExpectFailure(
      {"model.safetensors", "language_model.model.embed_tokens.weight", "group 32", "group 64"});
}

// A quantization field past int's range is refused, not wrapped (4294967300 would wrap to 4).
TEST_F(ConvertHostile, MlxBitsOutOfRange) {
  FixtureOptions o;
  o.layout = Layout::kMlx;
  Make(o);
  EditConfig([](Json& j) { j["quantization"]["bits"] = uint64_t{4294967300}; });
  (void)ExpectFailure({"quantization", "bits", "out of range"});
}

TEST_F(ConvertHostile, MlxScalesWrongShape) {
  FixtureOptions o;
  o.layout = Layout::kMlx;
  Make(o);
  const std::string t = "language_model.model.layers.0.mlp.up_proj.biases";
  std::string file = src_ + "/model.safetensors";
  ASSERT_TRUE(test::RewriteHeader(file, [&](Json& h) {
                auto s = h[t]["shape"];  // [128, 2] -> [64, 4]
                h[t]["shape"] = {s[0].get<int64_t>() / 2, s[1].get<int64_t>() * 2};
              }).ok());
  (void)ExpectFailure({"model.safetensors", t});
}

TEST_F(ConvertHostile, UnknownLanguageModelTensor) {
  FixtureOptions o;
  o.extra = {{"model.language_model.layers.0.mystery_proj.weight", {4, 4}}};
  Make(o);
  Status st = ExpectFailure({"model.language_model.layers.0.mystery_proj.weight", ".safetensors"});
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
}

TEST_F(ConvertHostile, UnknownTopLevelTensor) {
  FixtureOptions o;
  o.extra = {{"something_else.weight", {4, 4}}};
  Make(o);
  (void)ExpectFailure({"something_else.weight"});
}

TEST_F(ConvertHostile, NotGemma4) {
  Make();
  EditConfig([](Json& j) { j["text_config"]["model_type"] = "llama"; });
  (void)ExpectFailure({"config.json", "llama"});
}

TEST_F(ConvertHostile, UntiedHead) {
  Make();
  EditConfig([](Json& j) {
    j["tie_word_embeddings"] = false;
    j["text_config"]["tie_word_embeddings"] = false;
  });
  (void)ExpectFailure({"config.json", "untied"});
}

TEST_F(ConvertHostile, MissingConfig) {
  Make();
  ASSERT_TRUE(RemoveAll(src_ + "/config.json").ok());
  (void)ExpectFailure({"config.json"});
}

TEST_F(ConvertHostile, MalformedConfig) {
  Make();
  ASSERT_TRUE(WriteFileAtomic(src_ + "/config.json", "{\"text_config\": [").ok());
  (void)ExpectFailure({"config.json"});
}

TEST_F(ConvertHostile, NonFiniteWeightUnderQ4) {
  Make();
  std::string shard = ShardOf(kVictim);
  auto all = test::ReadAll(shard);
  uint64_t n = 0;
  std::memcpy(&n, all->data(), 8);
  auto h = ParseJson(all->substr(8, n), shard);
  uint64_t b = (*h)[kVictim]["data_offsets"][0];
  uint16_t nan = 0x7fc0;
  std::memcpy(all->data() + 8 + n + b + 10, &nan, 2);
  ASSERT_TRUE(test::WriteAll(shard, *all).ok());
  (void)ExpectFailure({kVictim, "non-finite"}, "q4");
}

TEST_F(ConvertHostile, OutputMayNotContainSource) {
  Make();
  // The output may not be the source or contain it (--force would delete the checkpoint).
  for (const std::string& bad : {src_, base_}) {
    ConvertOptions opts = test::ConvertOpts(src_, bad, "keep", /*overwrite=*/true);
    Status st = ConvertCheckpoint(opts);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.ToString();
  }
  EXPECT_TRUE(PathExists(src_ + "/config.json"));
}

TEST_F(ConvertHostile, ForceReplacesOnlyOnSuccess) {
  Make();
  ASSERT_TRUE(ConvertCheckpoint(test::ConvertOpts(src_, out_)).ok());
  auto before = ReadFileToString(out_ + "/manifest.json");
  ASSERT_TRUE(before.ok());
  // Without --force: refused, untouched.
  Status st = ConvertCheckpoint(test::ConvertOpts(src_, out_, "q8"));
  EXPECT_EQ(st.code(), ErrorCode::kAlreadyExists);
  // With --force on a broken source: fails, the old model stays intact.
  std::string shard = ShardOf(kVictim);
  auto good = test::ReadAll(shard);
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 10);
  st = ConvertCheckpoint(test::ConvertOpts(src_, out_, "q8", true));
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(PathExists(out_ + ".partial"));
  EXPECT_EQ(*ReadFileToString(out_ + "/manifest.json"), *before);
  EXPECT_TRUE(ModelDir::Open(out_).ok());
  // With --force on a good source: replaced.
  ASSERT_TRUE(test::WriteAll(shard, *good).ok());
  st = ConvertCheckpoint(test::ConvertOpts(src_, out_, "q8", true));
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto dir = ModelDir::Open(out_);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->manifest().source["quantize"], "q8");
  EXPECT_EQ(dir->core().Find("layers.0.mlp.up_proj")->bits, 8);
}

}  // namespace
}  // namespace rw
