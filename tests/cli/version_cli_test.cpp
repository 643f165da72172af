// `redwing --version` prints project(VERSION) from CMake and, in a git checkout, the commit the
// build was configured at.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "cli/gemma_test_model.h"

namespace {

// Runs a shell command; returns its exit code and fills *output with stdout.
int RunShell(const std::string& cmd, std::string* output) {
  int rc = 0;
  *output = rw::test::ShellOut(cmd, &rc);
  return rc;
}

TEST(VersionCli, PrintsProjectVersionAndCommit) {
  std::string out;
  ASSERT_EQ(RunShell(std::string(REDWING_BINARY) + " --version", &out), 0) << out;
  std::smatch m;
  const std::regex line("redwing ([0-9.]+)(?: \\(([0-9a-f]{7,40})\\))?\n");
  ASSERT_TRUE(std::regex_match(out, m, line)) << out;
  EXPECT_EQ(m[1].str(), REDWING_PROJECT_VERSION);
  if (!m[2].matched) {
    // Without a commit the source must not be a git checkout git can read.
    std::string head;
    EXPECT_NE(RunShell("git -C " + std::string(REDWING_SOURCE_DIR) + " rev-parse HEAD 2>/dev/null",
                       &head),
              0)
        << "a git checkout, but --version names no commit";
    return;
  }
  // The commit is the one at configure time, so it need not be HEAD now, but it must be a
  // commit of this repository.
  std::string ignored;
  EXPECT_EQ(RunShell("git -C " + std::string(REDWING_SOURCE_DIR) + " cat-file -e " + m[2].str() +
                         "^{commit}",
                     &ignored),
            0)
      << m[2].str() << " is not a commit of " << REDWING_SOURCE_DIR;
}

}  // namespace
