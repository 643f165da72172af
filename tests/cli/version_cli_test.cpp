// `redwing --version` prints project(VERSION) from CMake and, in a git checkout, the commit the
// build was configured at.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <regex>
#include <string>

namespace {

// Runs a shell command; returns its exit code and fills *output with stdout.
int RunShell(const std::string& cmd, std::string* output) {
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[4096];
  output->clear();
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) output->append(buf, n);
  int st = ::pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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
