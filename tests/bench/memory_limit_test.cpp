// scripts/with-memory-limit.sh (label integration): a read of a file bigger than the limit goes
// through the page cache and succeeds (the cache is charged and reclaimed), anonymous memory
// beyond the limit is OOM-killed (137 passed through), exit codes pass through, the cgroup is
// removed afterwards, bad sizes are clear errors. Skips with the reason when cgroups cannot be
// written here (not root, no memory controller).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>

#include "base/file.h"
#include "bench/bench_test_util.h"
#include "test_prereq.h"

namespace rw {
namespace {

const std::string kScript = std::string(REDWING_SOURCE_DIR) + "/scripts/with-memory-limit.sh";

const std::string& Scratch() {
  static const std::string d = test::ScratchDir("memory_limit_test");
  return d;
}

test::CmdResult Limit(const std::string& size, const std::string& cmd) {
  return test::Run(kScript + " " + size + " " + cmd, Scratch());
}

// Empty when the script can make a cgroup here, else why not.
std::string Unavailable() {
  static const std::string why = [] {
    auto r = Limit("64M", "true");
    if (r.code == 0) return std::string();
    return "with-memory-limit.sh cannot run here (exit " + std::to_string(r.code) + "): " + r.err;
  }();
  return why;
}

#define SKIP_IF_UNAVAILABLE()                           \
  do {                                                  \
    if (!Unavailable().empty()) {                       \
      std::printf("SKIP: %s\n", Unavailable().c_str()); \
      GTEST_SKIP() << Unavailable();                    \
    }                                                   \
  } while (0)

bool HavePython() {
  static const bool have = std::system("python3 -c pass >/dev/null 2>&1") == 0;
  return have;
}

TEST(MemoryLimitTest, BadUsageIsAClearError) {
  auto r = Limit("lots", "true");
  EXPECT_EQ(r.code, 125);
  EXPECT_NE(r.err.find("bad size 'lots'"), std::string::npos) << r.err;
  r = test::Run(kScript, Scratch());
  EXPECT_EQ(r.code, 125);
  EXPECT_NE(r.err.find("usage:"), std::string::npos) << r.err;
  r = Limit("1K", "true");
  EXPECT_EQ(r.code, 125);
  EXPECT_NE(r.err.find("below 4 MiB"), std::string::npos) << r.err;
}

TEST(MemoryLimitTest, PassesExitCodeAndRemovesTheCgroup) {
  SKIP_IF_UNAVAILABLE();
  auto r = Limit("64M", "sh -c 'cat /proc/self/cgroup; exit 7'");
  EXPECT_EQ(r.code, 7) << r.err;
  // The line of the memory hierarchy names the new cgroup; it is gone afterwards.
  std::smatch m;
  const std::regex re(R"((^|\n)[0-9]+:[^:\n]*:(/[^\n]*redwing-memlimit\.[0-9]+))");
  ASSERT_TRUE(std::regex_search(r.out, m, re)) << r.out;
  const std::string rel = m[2];
  EXPECT_NE(r.err.find("redwing-memlimit."), std::string::npos) << r.err;
  // The script names the full directory on stderr.
  std::smatch d;
  ASSERT_TRUE(
      std::regex_search(r.err, d, std::regex(R"((/sys/fs/cgroup\S*redwing-memlimit\.[0-9]+))")))
      << r.err;
  EXPECT_FALSE(PathExists(d[1])) << d[1] << " was left behind";
  EXPECT_NE(std::string(d[1]).find(rel.substr(rel.rfind('/'))), std::string::npos);
}

TEST(MemoryLimitTest, PageCacheReadsBeyondTheLimitSucceed) {
  SKIP_IF_UNAVAILABLE();
  // 96 MiB file, 32 MiB limit: reading it through the page cache charges the cache to the
  // cgroup, which reclaims it instead of failing.
  const std::string f = JoinPath(Scratch(), "big.bin");
  ASSERT_EQ(
      std::system(("dd if=/dev/zero of=" + f + " bs=1M count=96 conv=fsync status=none").c_str()),
      0);
  // Out of the page cache first, so the reads inside the cgroup really go through it.
  const int fd = ::open(f.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
  auto r = Limit("32M", "sh -c 'cat " + f + " > /dev/null && echo read-ok'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("read-ok"), std::string::npos) << r.out << r.err;
  (void)RemoveAll(f);
}

TEST(MemoryLimitTest, AnonymousMemoryBeyondTheLimitIsKilled) {
  SKIP_IF_UNAVAILABLE();
  REQUIRE_OR_SKIP(HavePython(), "python3 (scripts/install-deps.sh installs it)");
  auto r = Limit("48M", "python3 -c \"b = bytearray(160 << 20); print('survived', len(b))\"");
  EXPECT_EQ(r.code, 137) << r.out << r.err;
  EXPECT_EQ(r.out.find("survived"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("exited with status 137"), std::string::npos) << r.err;
  // Within the limit the same program lives.
  r = Limit("256M", "python3 -c \"b = bytearray(64 << 20); print('survived', len(b))\"");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("survived"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace rw
