// Unit tests of the installer's building blocks: the resumable SHA-256 (against base/hash.h,
// with its state saved and restored at arbitrary points), the journal (torn and damaged tails are
// dropped, appends continue cleanly), the HTTP header parsers, git blob ids and content checks
// of Hub files, the free-space check, and the install lock.
#include <gtest/gtest.h>

#include <random>

#include "base/file.h"
#include "base/hash.h"
#include "install/hub_api.h"
#include "install/hub_http.h"
#include "install/install_lock.h"
#include "install/installer.h"
#include "install/journal.h"
#include "install/journal_sha256.h"

namespace rw {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(ResumableSha256, MatchesOpenSsl) {
  for (size_t n : {0, 1, 55, 56, 63, 64, 65, 119, 120, 1000, 100000}) {
    std::string s = RandomBytes(n, static_cast<uint32_t>(n));
    ResumableSha256 h;
    h.Update(s.data(), s.size());
    EXPECT_EQ(h.DigestHex(), Sha256Hex(s.data(), s.size())) << n;
  }
  ResumableSha256 empty;
  EXPECT_EQ(empty.DigestHex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ResumableSha256, SaveLoadAnywhere) {
  std::string s = RandomBytes(5000, 7);
  const std::string want = Sha256Hex(s.data(), s.size());
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    size_t cut = rng() % s.size();
    ResumableSha256 a;
    a.Update(s.data(), cut);
    auto b = ResumableSha256::Load(a.Save());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->length(), cut);
    b->Update(s.data() + cut, s.size() - cut);
    EXPECT_EQ(b->DigestHex(), want) << cut;
  }
  EXPECT_FALSE(ResumableSha256::Load("").ok());
  EXPECT_FALSE(ResumableSha256::Load("zz:1:00").ok());
  ResumableSha256 a;
  a.Update("abc", 3);
  std::string saved = a.Save();
  EXPECT_FALSE(ResumableSha256::Load(saved.substr(0, saved.size() - 2)).ok());  // tail != len%64
}

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "rw_journal_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    (void)RemoveAll(path_);
  }
  void TearDown() override { (void)RemoveAll(path_); }
  std::string path_;
};

TEST_F(JournalTest, AppendReopen) {
  std::vector<Json> recs;
  {
    auto j = Journal::Open(path_, &recs);
    ASSERT_TRUE(j.ok());
    EXPECT_TRUE(recs.empty());
    j->Append(Json{{"t", "a"}, {"n", 1}});
    j->Append(Json{{"t", "b"}, {"s", "line\nbreak"}});
    ASSERT_TRUE(j->Sync().ok());
  }
  auto j = Journal::Open(path_, &recs);
  ASSERT_TRUE(j.ok());
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[1]["s"], "line\nbreak");
}

TEST_F(JournalTest, TornTailDroppedAndAppendsContinue) {
  std::vector<Json> recs;
  {
    auto j = Journal::Open(path_, &recs);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 3; ++i) j->Append(Json{{"i", i}});
    ASSERT_TRUE(j->Sync().ok());
  }
  auto text = ReadFileToString(path_);
  ASSERT_TRUE(text.ok());
  // Every possible cut of a fourth record: never a fourth, never fewer than three.
  std::string line = JournalLine(Json{{"i", 3}});
  for (size_t cut = 0; cut < line.size(); ++cut) {
    ASSERT_TRUE(WriteFileAtomic(path_, *text + line.substr(0, cut)).ok());
    bool torn = false;
    auto j = Journal::Open(path_, &recs, &torn);
    ASSERT_TRUE(j.ok());
    EXPECT_EQ(recs.size(), 3u) << cut;
    EXPECT_EQ(torn, cut > 0);
    j->Append(Json{{"i", 4}});
    ASSERT_TRUE(j->Sync().ok());
    auto again = Journal::Open(path_, &recs);
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(recs.size(), 4u) << cut;
    EXPECT_EQ(recs[3]["i"], 4);
  }
  // A damaged byte in the middle: records from there on are dropped.
  std::string damaged = *text;
  damaged[damaged.find("\"i\":1") + 4] = '7';
  ASSERT_TRUE(WriteFileAtomic(path_, damaged).ok());
  auto j = Journal::Open(path_, &recs);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(recs.size(), 1u);
}

TEST(HubHttp, ParseContentRange) {
  uint64_t a, b, t;
  ASSERT_TRUE(ParseContentRange("bytes 0-99/1000", &a, &b, &t));
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 99u);
  EXPECT_EQ(t, 1000u);
  ASSERT_TRUE(ParseContentRange("bytes 5-5/*", &a, &b, &t));
  EXPECT_EQ(t, UINT64_MAX);
  EXPECT_FALSE(ParseContentRange("bytes 9-5/10", &a, &b, &t));
  EXPECT_FALSE(ParseContentRange("bytes */10", &a, &b, &t));
  EXPECT_FALSE(ParseContentRange("bytes 0-1/2 junk", &a, &b, &t));
  EXPECT_EQ(ParseRetryAfter("3"), 3.0);
  EXPECT_LT(ParseRetryAfter("soon"), 0);
  EXPECT_GE(ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), 0.0);  // in the past: now
}

TEST(HubApi, Names) {
  EXPECT_TRUE(CheckRepoId("mlx-community/gemma-4-26b-a4b-it-4bit").ok());
  EXPECT_FALSE(CheckRepoId("noslash").ok());
  EXPECT_FALSE(CheckRepoId("a/b/c").ok());
  EXPECT_FALSE(CheckRepoId("a/..").ok());
  EXPECT_FALSE(CheckRepoId("a/b?x=1").ok());
  EXPECT_TRUE(IsCommitHash("0d77464eeb233a2da68ebf9d7dc4edaac7db956d"));
  EXPECT_FALSE(IsCommitHash("main"));
  EXPECT_EQ(UrlEncode("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(UrlEncode("dir/a b.json", true), "dir/a%20b.json");
  EXPECT_EQ(EndpointForDisplay("https://u:p@mirror.example/hf"), "https://mirror.example/hf");
  EXPECT_EQ(EndpointForDisplay("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
}

// Values from `git hash-object --stdin`.
TEST(GitBlobSha1, MatchesGit) {
  EXPECT_EQ(GitBlobSha1Hex("", 0), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(GitBlobSha1Hex("hello", 5), "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0");
  EXPECT_EQ(GitBlobSha1Hex("\n", 1), "8b137891791fe96927ad78e64b0aad7bded08bdc");
  std::string s = RandomBytes(100000, 11);
  GitBlobSha1 h(s.size());
  for (size_t off = 0; off < s.size(); off += 777)
    h.Update(s.data() + off, std::min<size_t>(777, s.size() - off));
  EXPECT_EQ(h.FinishHex(), GitBlobSha1Hex(s.data(), s.size()));
}

TEST(HubApi, CheckHubFileContent) {
  HubFile git{"config.json", 5, "", "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"};
  EXPECT_TRUE(git.has_git_oid());
  EXPECT_TRUE(CheckHubFileContent(git, "hello").ok());
  Status st = CheckHubFileContent(git, "hellO");
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_NE(st.message().find("config.json: git blob SHA-1 mismatch over bytes 0-4 (expected "
                              "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"),
            std::string::npos)
      << st.message();
  EXPECT_NE(CheckHubFileContent(git, "hello!").message().find("got 6 bytes, the Hub lists 5"),
            std::string::npos);
  HubFile lfs{"tokenizer.json", 5, Sha256Hex("hello", 5),
              "0123456789abcdef0123456789abcdef01234567"};
  EXPECT_FALSE(lfs.has_git_oid());  // an LFS file's oid hashes its pointer, not its content
  EXPECT_TRUE(CheckHubFileContent(lfs, "hello").ok());
  st = CheckHubFileContent(lfs, "jello");
  EXPECT_NE(st.message().find("tokenizer.json: SHA-256 mismatch over bytes 0-4"), std::string::npos)
      << st.message();
  HubFile no_oid{"x.json", 5, "", ""};  // nothing to check but the size
  EXPECT_TRUE(CheckHubFileContent(no_oid, "jello").ok());
}

TEST(Installer, CheckFreeSpace) {
  EXPECT_TRUE(CheckFreeSpace("/m", 100, 100).ok());
  EXPECT_TRUE(CheckFreeSpace("/m", 100, 1u << 30).ok());
  Status st = CheckFreeSpace("/models/gemma", 15'000'000'000, 2'000'000'000);
  EXPECT_EQ(st.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(st.message().find("/models/gemma: not enough disk space"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("needs 15000000000 bytes (15.00 GB)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("only 2000000000 bytes (2.00 GB) are available"), std::string::npos)
      << st.message();
}

// flock(2) locks belong to open files, so a second Acquire in this process conflicts with the
// first just as another process's would (install_hub_test runs two real installs).
TEST(InstallLock, OneHolderAtATimeNamedByPid) {
  const std::string path = ::testing::TempDir() + "rw_install_lock_" + std::to_string(::getpid());
  (void)RemoveAll(path);
  {
    auto a = InstallLock::Acquire(path, "/models/x");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(*ReadFileToString(path), std::to_string(::getpid()) + "\n");
    auto b = InstallLock::Acquire(path, "/models/x");
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), ErrorCode::kAlreadyExists);
    EXPECT_NE(b.status().message().find("another install into /models/x is running (pid " +
                                        std::to_string(::getpid()) + ")"),
              std::string::npos)
        << b.status().message();
    InstallLock moved = std::move(*a);  // still held
    EXPECT_FALSE(InstallLock::Acquire(path, "/models/x").ok());
  }
  EXPECT_FALSE(PathExists(path));  // the holder removes it
  // A stale file (its holder killed: the kernel dropped the lock) is taken over.
  ASSERT_TRUE(WriteFileAtomic(path, "12345\n").ok());
  auto c = InstallLock::Acquire(path, "/models/x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*ReadFileToString(path), std::to_string(::getpid()) + "\n");
}

}  // namespace
}  // namespace rw
