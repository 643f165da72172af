// `redwing verify` makes every check `run` makes when it opens a model (the same code), then the
// hashes: edits that are re-signed in the manifest, so that every hash still matches, must still
// be refused, with a clear error and no crash. Also the size limits of the tokenizer files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "base/file.h"
#include "base/hash.h"
#include "base/json.h"
#include "chat/chat_template.h"
#include "run_cli.h"
#include "tokenizer/tokenizer.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

using test::RunCli;

// A minimal byte-level BPE tokenizer.json that the tokenizer loads.
std::string TinyTokenizerJson() {
  Json vocab = Json::object();
  int id = 0;
  for (const char* t : {"<pad>", "<eos>", "<bos>", "<unk>"}) vocab[t] = id++;
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = id++;
  Json added = Json::array();
  for (const auto& [content, tid] : vocab.items())
    if (content[0] == '<')
      added.push_back({{"id", tid},
                       {"content", content},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
  Json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", nullptr},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", "<unk>"},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", Json::array({"a b"})}}}};
  j["model"]["vocab"]["ab"] = id++;
  return j.dump();
}

class ModelCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            fmt::format("rw_model_check_{}_{}", ::getpid(),
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    (void)RemoveAll(base_);
    ASSERT_TRUE(MakeDirectories(base_ + "/tok").ok());
    ASSERT_TRUE(WriteFileAtomic(base_ + "/tok/tokenizer.json", TinyTokenizerJson()).ok());
    ASSERT_TRUE(
        WriteFileAtomic(base_ + "/tok/chat_template.jinja", "{{ bos_token }}{{ messages }}").ok());
  }
  void TearDown() override {
    if (!HasFailure()) (void)RemoveAll(base_);
  }
  // A fresh tiny model with the tokenizer; verify calls it intact.
  std::string Model(const std::string& name) {
    const std::string dir = base_ + "/" + name;
    std::string out;
    EXPECT_EQ(RunCli("synth --geometry tiny --seed 7 --quiet --tokenizer " + base_ + "/tok" +
                         " --out " + dir,
                     &out),
              0)
        << out;
    EXPECT_EQ(RunCli("verify " + dir, &out), 0) << out;
    return dir;
  }
  // Records rel's current size and SHA-256 in the manifest, so only checks beyond the hashes
  // can tell.
  static void Resign(const std::string& dir, const std::string& rel) {
    const std::string mpath = dir + "/manifest.json";
    Json m = Json::parse(*ReadFileToString(mpath));
    auto sha = Sha256File(dir + "/" + rel);
    ASSERT_TRUE(sha.ok());
    m["files"][rel] = {{"size", fs::file_size(dir + "/" + rel)}, {"sha256", *sha}};
    ASSERT_TRUE(WriteFileAtomic(mpath, m.dump(2)).ok());
  }
  static void EditConfig(const std::string& dir, const std::function<void(Json&)>& edit) {
    const std::string mpath = dir + "/manifest.json";
    Json m = Json::parse(*ReadFileToString(mpath));
    edit(m["config"]);
    ASSERT_TRUE(WriteFileAtomic(mpath, m.dump(2)).ok());
  }
  // verify fails (exit 1, not a crash) naming `needle`.
  static void ExpectVerifyFails(const std::string& dir, const std::string& needle) {
    std::string out;
    EXPECT_EQ(RunCli("verify " + dir, &out), 1) << out;
    EXPECT_EQ(out.find("intact"), std::string::npos) << out;
    EXPECT_NE(out.find("does not open"), std::string::npos) << out;
    EXPECT_NE(out.find(needle), std::string::npos) << out;
  }

  std::string base_;
};

TEST_F(ModelCheck, VerifyRefusesAReSignedIndexThatIsNotJson) {
  const std::string dir = Model("index");
  ASSERT_TRUE(WriteFileAtomic(dir + "/experts/index.json", "{\"version\": 1, oops").ok());
  Resign(dir, "experts/index.json");
  ExpectVerifyFails(dir, "experts/index.json: malformed JSON");
  std::string out;
  EXPECT_EQ(RunCli("inspect " + dir, &out), 1) << out;
}

TEST_F(ModelCheck, VerifyRefusesAHostileStrideWithoutAllocatingIt) {
  const std::string dir = Model("stride");
  const std::string ipath = dir + "/experts/index.json";
  Json idx = Json::parse(*ReadFileToString(ipath));
  idx["layers"][2]["layout"]["stride"] = uint64_t{1} << 62;
  ASSERT_TRUE(WriteFileAtomic(ipath, idx.dump()).ok());
  Resign(dir, "experts/index.json");
  // Used to abort with bad_alloc (exit 134).
  ExpectVerifyFails(dir, "stride 4611686018427387904");
}

TEST_F(ModelCheck, VerifyRefusesFewerLayersInTheConfig) {
  const std::string dir = Model("layers");
  EditConfig(dir, [](Json& c) {
    c["num_layers"] = 3;
    c["layer_types"] = Json::array({c["layer_types"][0], c["layer_types"][1], "full_attention"});
  });
  ExpectVerifyFails(dir, "expert index has 6 layers");
}

// Beyond what the model directory itself says: the weights against the config, as run binds them.
TEST_F(ModelCheck, VerifyChecksTheConfigAgainstTheWeights) {
  const std::string dir = Model("weights");
  EditConfig(dir, [](Json& c) { c["intermediate_size"] = c["intermediate_size"].get<int>() * 2; });
  ExpectVerifyFails(dir, "mlp.gate_proj' has shape");
}

TEST_F(ModelCheck, VerifyParsesTheTokenizerAndTemplate) {
  const std::string dir = Model("tokenizer");
  ASSERT_TRUE(WriteFileAtomic(dir + "/tokenizer.json", "{\"model\": [").ok());
  Resign(dir, "tokenizer.json");
  ExpectVerifyFails(dir, "tokenizer.json");
  const std::string dir2 = Model("template");
  ASSERT_TRUE(WriteFileAtomic(dir2 + "/chat_template.jinja", "{% for x in %}").ok());
  Resign(dir2, "chat_template.jinja");
  ExpectVerifyFails(dir2, "chat_template.jinja");
}

TEST_F(ModelCheck, HugeManifestIsAClearErrorNotACrash) {
  const std::string dir = Model("manifest");
  fs::resize_file(dir + "/manifest.json", uint64_t{20} << 30);  // sparse: truncate -s 20G
  for (const char* cmd : {"verify", "inspect"}) {
    std::string out;
    EXPECT_EQ(RunCli(std::string(cmd) + " " + dir, &out), 1) << cmd << ": " << out;
    EXPECT_NE(out.find("21474836480 bytes, more than the 4194304 bytes"), std::string::npos)
        << cmd << ": " << out;
  }
}

// The tokenizer files are read with limits far above real ones (tokenizer.json is ~32 MB), so a
// damaged one is refused before it is read into memory. Sparse files: nothing is written.
TEST_F(ModelCheck, TokenizerFilesHaveSizeLimits) {
  const std::string dir = base_ + "/limits";
  ASSERT_TRUE(MakeDirectories(dir).ok());
  const std::string tok = dir + "/tokenizer.json";
  ASSERT_TRUE(WriteFileAtomic(tok, TinyTokenizerJson()).ok());
  ASSERT_TRUE(Tokenizer::Load(tok).ok()) << Tokenizer::Load(tok).status().ToString();
  fs::resize_file(tok, uint64_t{3} << 30);
  auto t = Tokenizer::Load(tok);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("3221225472 bytes, more than"), std::string::npos)
      << t.status().message();
  for (const char* name : {"chat_template.jinja", "tokenizer_config.json"}) {
    SCOPED_TRACE(name);
    (void)RemoveAll(dir + "/chat_template.jinja");
    ASSERT_TRUE(WriteFileAtomic(dir + "/" + std::string(name), "{}").ok());
    fs::resize_file(dir + "/" + std::string(name), uint64_t{1} << 30);
    auto c = ChatTemplate::FromModelDirectory(dir);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("1073741824 bytes, more than"), std::string::npos)
        << c.status().message();
  }
}

}  // namespace
}  // namespace rw
