// `redwing convert` through the real binary: progress and peak RSS output, a conversion killed
// with SIGKILL midway leaves no model (and a rerun succeeds), and --force semantics.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "base/file.h"
#include "convert_fixture.h"
#include "format/model_dir.h"

namespace rw {
namespace {

using test::FixtureOptions;
using test::TinyGeometry;

// Starts `redwing args...` with stderr (and stdout) into log; returns the pid.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    std::string bin = REDWING_BINARY;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunCli(const std::vector<std::string>& args, std::string* output) {
  std::string log = ::testing::TempDir() + "rw_convert_cli_" + std::to_string(::getpid()) + ".log";
  int rc = Wait(Spawn(args, log));
  auto text = ReadFileToString(log);
  if (output) *output = text.ok() ? *text : "";
  (void)RemoveAll(log);
  return rc;
}

class ConvertCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(PathExists(REDWING_BINARY)) << REDWING_BINARY;
    base_ = ::testing::TempDir() + "rw_convert_cli_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    (void)RemoveAll(base_);
    src_ = base_ + "/src";
    out_ = base_ + "/model";
  }
  void TearDown() override { (void)RemoveAll(base_); }
  std::string base_, src_, out_;
};

TEST_F(ConvertCli, ConvertsAndReports) {
  ASSERT_TRUE(test::WriteTinyCheckpoint(src_, TinyGeometry{}, FixtureOptions{}).ok());
  std::string log;
  ASSERT_EQ(RunCli({"convert", src_, out_, "--repo-id", "x/y", "--revision", "abc"}, &log), 0)
      << log;
  EXPECT_NE(log.find("peak RSS"), std::string::npos) << log;
  EXPECT_NE(log.find("experts: layer 3/3"), std::string::npos) << log;
  auto dir = ModelDir::Open(out_);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->manifest().source["revision"], "abc");
  EXPECT_EQ(RunCli({"verify", out_, "--quiet"}, &log), 0) << log;

  // Refuses to overwrite without --force, leaving the model as it was.
  auto before = ReadFileToString(out_ + "/manifest.json");
  EXPECT_EQ(RunCli({"convert", src_, out_, "--quantize", "q8"}, &log), 1);
  EXPECT_NE(log.find("already exists"), std::string::npos) << log;
  EXPECT_EQ(*ReadFileToString(out_ + "/manifest.json"), *before);

  // --force with a broken source: fails, old model intact.
  std::string shard = src_ + "/model.safetensors";
  auto good = test::ReadAll(shard);
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 64);
  EXPECT_EQ(RunCli({"convert", src_, out_, "--quantize", "q8", "--force"}, &log), 1);
  EXPECT_NE(log.find("model.safetensors"), std::string::npos) << log;
  EXPECT_EQ(*ReadFileToString(out_ + "/manifest.json"), *before);
  EXPECT_FALSE(PathExists(out_ + ".partial"));

  // --force with a good source: replaced.
  ASSERT_TRUE(test::WriteAll(shard, *good).ok());
  ASSERT_EQ(RunCli({"convert", src_, out_, "--quantize", "q8", "--force", "--quiet"}, &log), 0)
      << log;
  EXPECT_TRUE(log.empty()) << log;
  dir = ModelDir::Open(out_);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->manifest().source["quantize"], "q8");
}

TEST_F(ConvertCli, UsageErrors) {
  std::string log;
  EXPECT_EQ(RunCli({"convert"}, &log), 2) << log;
  EXPECT_EQ(RunCli({"convert", "a", "b", "--quantize", "q3"}, &log), 2) << log;
  EXPECT_NE(log.find("q3"), std::string::npos) << log;
  EXPECT_EQ(RunCli({"convert", "--help"}, &log), 0);
  EXPECT_NE(log.find("--quantize"), std::string::npos) << log;
}

TEST_F(ConvertCli, KilledMidwayLeavesNoModel) {
  // Large enough that the conversion runs for a while after staging begins.
  TinyGeometry g;
  g.vocab = 8192;
  g.hidden = 512;
  g.layers = 4;
  g.heads = 4;
  g.head_dim = 64;
  g.full_head_dim = 128;
  g.intermediate = 512;
  g.experts = 16;
  g.moe_intermediate = 512;
  FixtureOptions o;
  o.shards = 2;
  ASSERT_TRUE(test::WriteTinyCheckpoint(src_, g, o).ok());
  std::string log = base_ + "/kill.log";
  pid_t pid = Spawn({"convert", src_, out_, "--quantize", "q4"}, log);
  ASSERT_GT(pid, 0);
  bool staged = false;
  for (int i = 0; i < 30000 && !staged; ++i) {
    staged = PathExists(out_ + ".partial");
    if (!staged) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(staged) << *ReadFileToString(log);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int rc = Wait(pid);
  ASSERT_EQ(rc, 128 + SIGKILL) << "the conversion finished before it could be killed; "
                               << *ReadFileToString(log);
  EXPECT_FALSE(PathExists(out_));
  auto dir = ModelDir::Open(out_);
  EXPECT_FALSE(dir.ok());
  // A rerun clears the stale staging directory and succeeds.
  std::string out;
  ASSERT_EQ(RunCli({"convert", src_, out_, "--quantize", "q4"}, &out), 0) << out;
  EXPECT_FALSE(PathExists(out_ + ".partial"));
  dir = ModelDir::Open(out_);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(RunCli({"verify", out_, "--quiet"}, &out), 0) << out;
}

}  // namespace
}  // namespace rw
