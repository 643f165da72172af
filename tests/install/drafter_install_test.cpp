// Installing a DFlash drafter from the local fake hub (tests/fakehub) serving a random drafter in
// the Hugging Face layout: the result equals converting the same checkpoint locally (q4 by
// default), survives dropped connections, continues a staged partial install with --resume,
// catches a damaged staged prefix by its SHA-256, and `redwing install <repo>DFlash --model M`
// puts it in M/drafter.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/file.h"
#include "base/hash.h"
#include "base/json.h"
#include "draft/dflash_model.h"
#include "install/drafter_convert.h"
#include "install/drafter_install.h"
#include "install/synth.h"
#include "install/synth_drafter.h"
#include "test_prereq.h"

namespace rw {
namespace {

constexpr const char* kRepo = "test-org/gemma-4-tiny-DFlash";
constexpr const char* kCommit = "0123456789abcdef0123456789abcdef01234567";

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log,
            const std::vector<std::pair<std::string, std::string>>& env = {}) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    for (const char* v : {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                          "all_proxy", "HF_TOKEN", "HF_ENDPOINT"})
      ::unsetenv(v);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (std::string& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

int WaitExit(pid_t pid, double timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "process still running after " << timeout_s << " s: killed";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class DrafterInstall : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_OR_SKIP(std::system("python3 -c pass >/dev/null 2>&1") == 0,
                    "python3 (the fake hub, tests/fakehub, runs on it)");
    base_ = ::testing::TempDir() + "rw_drafter_install_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "." +
            std::to_string(::getpid());
    (void)RemoveAll(base_);
    ASSERT_TRUE(MakeDirectories(base_).ok());
    // The repository: a random drafter for the tiny geometry, as published (bf16 HF layout).
    repo_ = base_ + "/repo";
    auto tiny = SynthGeometry("tiny");
    ASSERT_TRUE(tiny.ok());
    DrafterSynthOptions d;
    d.seed = 11;
    d.out_dir = repo_;
    d.format = "hf";
    ASSERT_TRUE(SynthesizeDrafter(*tiny, d).ok());
    // What a local conversion of it gives.
    DrafterConvertOptions co;
    co.source_dir = repo_;
    co.out_dir = base_ + "/reference";
    ASSERT_TRUE(ConvertDrafter(co).ok());
    reference_ = co.out_dir;
    const std::string ports = base_ + "/ports.json";
    hub_ = Spawn({"python3", std::string(REDWING_SOURCE_DIR) + "/tests/fakehub/fakehub.py",
                  "--repo-dir", repo_, "--repo-id", kRepo, "--commit", kCommit, "--port-file",
                  ports},
                 base_ + "/fakehub.log");
    for (int i = 0; i < 600 && !PathExists(ports); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto text = ReadFileToString(ports);
    ASSERT_TRUE(text.ok()) << "fake hub did not start";
    endpoint_ = "http://127.0.0.1:" + std::to_string(Json::parse(*text)["hub"].get<int>());
  }
  void TearDown() override {
    if (hub_ > 0) {
      ::kill(hub_, SIGKILL);
      ::waitpid(hub_, nullptr, 0);
    }
    (void)RemoveAll(base_);
  }
  DrafterInstallOptions Options(const std::string& out) const {
    DrafterInstallOptions o;
    o.repo_id = kRepo;
    o.out_dir = out;
    o.endpoint = endpoint_;
    o.segment_bytes = 64 << 10;  // several range requests per file
    o.backoff_initial_s = 0.01;
    o.stall_timeout_s = 5;
    return o;
  }
  void Faults(const Json& rules) {
    // The control endpoint, through the installer's own HTTP client would be circular: curl.
    const std::string cmd = "curl -s --noproxy '*' -X POST -d '" + rules.dump() + "' " +
                            endpoint_ + "/_control/faults >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  void ExpectSameAsReference(const std::string& out) {
    for (const char* f : {"core.bin", "config.json"}) {
      auto a = Sha256File(JoinPath(out, f));
      auto b = Sha256File(JoinPath(reference_, f));
      ASSERT_TRUE(a.ok() && b.ok()) << f;
      EXPECT_EQ(*a, *b) << f;
    }
    auto m = DFlashModel::Open(out);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ((*m)->quantize(), "q4");
    EXPECT_FALSE(PathExists(out + ".installing"));
    auto manifest = ReadFileToString(JoinPath(out, kDrafterManifest));
    ASSERT_TRUE(manifest.ok());
    const Json j = Json::parse(*manifest);
    EXPECT_EQ(j["source"]["kind"], "hub");
    EXPECT_EQ(j["source"]["repo_id"], kRepo);
    EXPECT_EQ(j["source"]["revision"], kCommit);
  }
  uint64_t WeightsSize() const {
    auto f = File::OpenRead(repo_ + "/model.safetensors");
    return f.ok() ? *f->Size() : 0;
  }

  std::string base_, repo_, reference_, endpoint_;
  pid_t hub_ = -1;
};

TEST_F(DrafterInstall, EqualsALocalConversionAndSurvivesDroppedConnections) {
  Faults(Json::array({{{"kind", "drop"}, {"path", "model.safetensors"}, {"after", 1000},
                       {"count", 2}},
                      {{"kind", "status"}, {"path", "model.safetensors"}, {"status", 503},
                       {"count", 1}}}));
  auto r = InstallDrafterFromHub(Options(base_ + "/out"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->commit, kCommit);
  EXPECT_GE(r->retries, 1u);
  ExpectSameAsReference(base_ + "/out");
  // A second install into the same place needs --force.
  auto again = InstallDrafterFromHub(Options(base_ + "/out"));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("--force"), std::string::npos);
}

TEST_F(DrafterInstall, ResumesAStagedPartialInstall) {
  const std::string out = base_ + "/out";
  auto whole = ReadFileToString(repo_ + "/model.safetensors");
  ASSERT_TRUE(whole.ok());
  const uint64_t have = 100000;
  ASSERT_TRUE(MakeDirectories(out + ".installing").ok());
  ASSERT_TRUE(
      WriteFileAtomic(out + ".installing/model.safetensors", whole->substr(0, have)).ok());
  auto refused = InstallDrafterFromHub(Options(out));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--resume"), std::string::npos);
  DrafterInstallOptions o = Options(out);
  o.resume = true;
  auto r = InstallDrafterFromHub(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->resumed);
  EXPECT_EQ(r->fetched_bytes, WeightsSize() - have);
  ExpectSameAsReference(out);
}

TEST_F(DrafterInstall, ADamagedStagedPrefixIsCaughtAndFetchedAgain) {
  const std::string out = base_ + "/out";
  ASSERT_TRUE(MakeDirectories(out + ".installing").ok());
  ASSERT_TRUE(WriteFileAtomic(out + ".installing/model.safetensors", std::string(5000, 'x')).ok());
  DrafterInstallOptions o = Options(out);
  o.resume = true;
  auto bad = InstallDrafterFromHub(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("SHA-256"), std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(PathExists(out + ".installing/model.safetensors"));
  auto r = InstallDrafterFromHub(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fetched_bytes, WeightsSize());
  ExpectSameAsReference(out);
}

TEST_F(DrafterInstall, TheCliPutsItBesideTheModel) {
  ASSERT_TRUE(PathExists(REDWING_BINARY)) << REDWING_BINARY;
  const std::string model = base_ + "/model";
  ASSERT_TRUE(MakeDirectories(model).ok());
  pid_t p = Spawn({REDWING_BINARY, "install", kRepo, "--model", model, "--quiet"},
                  base_ + "/install.log", {{"HF_ENDPOINT", endpoint_}});
  EXPECT_EQ(WaitExit(p), 0) << *ReadFileToString(base_ + "/install.log");
  ExpectSameAsReference(model + "/drafter");
  // keep, on request.
  p = Spawn({REDWING_BINARY, "install", kRepo, "--output", base_ + "/keep", "--quantize", "keep",
             "--quiet"},
            base_ + "/keep.log", {{"HF_ENDPOINT", endpoint_}});
  EXPECT_EQ(WaitExit(p), 0) << *ReadFileToString(base_ + "/keep.log");
  auto m = DFlashModel::Open(base_ + "/keep");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->quantize(), "keep");
}

}  // namespace
}  // namespace rw
