// redwing synth through the CLI: flags, errors, and the files other commands read.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "base/file.h"
#include "run_cli.h"

namespace rw {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ =
        (fs::temp_directory_path() / fmt::format("synth_cli_test_{}_{}", ::getpid(), counter_++))
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

using test::RunCli;

// ---- CLI ----

TEST(SynthCli, WritesInspectableModelAndRejectsBadFlags) {
  TempDir tmp;
  std::string out;
  const std::string dir = tmp.Sub("cli");
  ASSERT_EQ(RunCli("synth --geometry tiny --seed 3 --out " + dir, &out), 0) << out;
  EXPECT_NE(out.find("peak RSS"), std::string::npos) << out;
  ASSERT_EQ(RunCli("inspect " + dir, &out), 0) << out;
  EXPECT_NE(out.find("6 layers (4 sliding, 2 full), hidden 128, vocab 512"), std::string::npos)
      << out;
  EXPECT_NE(out.find("MoE 8 experts of 64, top-2"), std::string::npos) << out;
  EXPECT_NE(out.find("synthetic"), std::string::npos) << out;
  ASSERT_EQ(RunCli("verify " + dir, &out), 0) << out;

  EXPECT_EQ(RunCli("synth --geometry tiny --seed 3 --out " + dir, &out), 1) << out;  // exists
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  EXPECT_EQ(RunCli("synth --geometry tiny --seed 4 --out " + dir + " --force --quiet", &out), 0)
      << out;
  EXPECT_EQ(RunCli("synth --geometry tiny --out " + tmp.Sub("x"), &out), 2) << out;
  EXPECT_NE(out.find("--seed"), std::string::npos) << out;
  EXPECT_EQ(RunCli("synth --geometry enormous --seed 1 --out " + tmp.Sub("x"), &out), 2) << out;
  EXPECT_NE(out.find("unknown geometry"), std::string::npos) << out;
  EXPECT_EQ(RunCli("synth --geometry tiny --seed 1 --format gguf --out " + tmp.Sub("x"), &out), 2)
      << out;
  EXPECT_EQ(RunCli("synth --geometry tiny --seed 1 --routing-skew -1 --out " + tmp.Sub("x"), &out),
            2)
      << out;
  EXPECT_EQ(RunCli("synth --geometry tiny --seed 1 --bogus --out " + tmp.Sub("x"), &out), 2) << out;
  EXPECT_FALSE(PathExists(tmp.Sub("x")));
}

TEST(SynthCli, MlxThroughConvertCli) {
  TempDir tmp;
  std::string out;
  ASSERT_EQ(
      RunCli("synth --geometry tiny --seed 8 --format mlx --quiet --out " + tmp.Sub("mlx"), &out),
      0)
      << out;
  ASSERT_EQ(RunCli("convert " + tmp.Sub("mlx") + " " + tmp.Sub("m") + " --quiet", &out), 0) << out;
  ASSERT_EQ(RunCli("verify " + tmp.Sub("m"), &out), 0) << out;
}

// Progress lines count against the model being written: with --vocab the embedding is larger
// than the geometry's, and the total must say so ("0.02 GiB / 0.00 GiB" before).
TEST(SynthCli, ProgressTotalCoversTheVocabulary) {
  TempDir tmp;
  std::string out;
  ASSERT_EQ(RunCli("synth --geometry tiny --seed 2 --vocab 262144 --out " + tmp.Sub("m"), &out), 0)
      << out;
  int lines = 0;
  for (size_t at = out.find(" GiB / "); at != std::string::npos; at = out.find(" GiB / ", at + 1)) {
    const size_t start = out.rfind(']', at) + 1;
    double done = 0, total = 0;
    ASSERT_EQ(std::sscanf(out.c_str() + start, " %lf GiB / %lf GiB", &done, &total), 2) << out;
    EXPECT_GT(total, 0.0) << out;
    EXPECT_LE(done, total) << out;
    ++lines;
  }
  EXPECT_GE(lines, 1) << out;
}

}  // namespace
}  // namespace rw
