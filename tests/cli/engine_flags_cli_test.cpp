// Every command that loads an engine takes the same engine flags (one definition in
// cli/generation_flags.cpp), and `logits` honours them: the slots store gives the same bytes as
// the page cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "base/file.h"
#include "gemma_test_model.h"

namespace rw {
namespace {

using test::ShellOut;

const char* const kEngineFlags[] = {
    "--model",        "--threads",           "--max-context",   "--prefill-chunk",
    "--prefill-span", "--expert-store",      "--memory-budget", "--io-threads",
    "--io-backend",   "--early-expert-read", "--lock-core",     "--backend",
    "--vram-budget",  "--fault-policy",      "--kv-type",       "--precision"};

TEST(EngineFlagsCli, EveryModelLoadingCommandListsTheEngineFlags) {
  for (const char* cmd : {"run", "chat", "serve", "bench", "trace", "logits"}) {
    int rc = 0;
    const std::string help =
        ShellOut(std::string(REDWING_BINARY) + " " + cmd + " --help 2>&1", &rc);
    ASSERT_EQ(rc, 0) << cmd << ": " << help;
    for (const char* flag : kEngineFlags)
      EXPECT_NE(help.find(std::string(flag) + " "), std::string::npos)
          << "redwing " << cmd << " --help lacks " << flag;
  }
}

TEST(EngineFlagsCli, LogitsTakesTheExpertStoreAndRefusesBadValues) {
  const std::string dir = std::string(REDWING_BUILD_DIR) + "/test-tmp/engine_flags_cli";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string bin = REDWING_BINARY;
  int rc = 0;
  std::string out =
      ShellOut(bin + " synth --geometry tiny --seed 5 --quiet --out " + dir + "/m 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string base = bin + " logits --model " + dir + "/m --ids 2,17,99,5 ";
  out = ShellOut(base + "--out " + dir + "/mmap.bin 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = ShellOut(base + "--expert-store slots --memory-budget 64M --out " + dir + "/slots.bin 2>&1",
                 &rc);
  ASSERT_EQ(rc, 0) << out;
  auto a = ReadFileToString(dir + "/mmap.bin");
  auto b = ReadFileToString(dir + "/slots.bin");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->size(), 0u);
  EXPECT_TRUE(*a == *b) << "the slots store changed the logits";

  out = ShellOut(base + "--expert-store bogus 2>&1", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--expert-store must be mmap or slots"), std::string::npos) << out;
  // The KV cache type: each half type gives logits of its own, close to fp32's; a bad one is a
  // clear error, and CUDA's cache is fp32.
  std::vector<std::string> kv;
  for (const char* type : {"f32", "bf16", "f16"}) {
    out = ShellOut(base + "--kv-type " + type + " --out " + dir + "/kv.bin 2>&1", &rc);
    ASSERT_EQ(rc, 0) << type << ": " << out;
    auto bytes = ReadFileToString(dir + "/kv.bin");
    ASSERT_TRUE(bytes.ok());
    kv.push_back(*bytes);
  }
  EXPECT_TRUE(kv[0] != kv[1] && kv[0] != kv[2] && kv[1] != kv[2]);
  EXPECT_TRUE(kv[0] == *a) << "f32 (the reference) is the command line's default KV cache";
  out = ShellOut(base + "--kv-type f8 2>&1", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--kv-type must be f32, bf16 or f16, not 'f8'"), std::string::npos) << out;
  // The matvec precision: exact is the default; fast (int8 activations) gives logits of its own
  // (4 ids: the few-row matvec path, which fast covers); a bad value is a clear error.
  out = ShellOut(base + "--precision exact --out " + dir + "/exact.bin 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  out = ShellOut(base + "--precision fast --out " + dir + "/fast.bin 2>&1", &rc);
  ASSERT_EQ(rc, 0) << out;
  auto exact = ReadFileToString(dir + "/exact.bin");
  auto fast = ReadFileToString(dir + "/fast.bin");
  ASSERT_TRUE(exact.ok() && fast.ok());
  EXPECT_TRUE(*exact == *a) << "exact is the command line's default precision";
  EXPECT_EQ(fast->size(), exact->size());
  EXPECT_TRUE(*fast != *exact) << "--precision fast changed nothing";
  out = ShellOut(base + "--precision turbo 2>&1", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--precision must be exact or fast, not 'turbo'"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rw
