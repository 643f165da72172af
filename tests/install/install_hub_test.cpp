// `redwing install` through the real binary against the local fake hub (tests/fakehub): the
// result equals `redwing convert` of the same checkpoint; branch names resolve to commits; every
// injected fault is survived or reported clearly; kill -9 at random points then --resume ends
// identical; Ctrl-C and partial installs; the token never reaches the CDN host; Retry-After,
// stalls, git blob ids of non-LFS files, disk space (preflight and a full tmpfs), progress lines
// on a terminal and in a log. Built a second time with REDWING_INSTALL_SLOW for the
// multi-hundred-MB bounded-memory test (label slow).
#include <curl/curl.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "base/file.h"
#include "base/json.h"
#include "convert_fixture.h"
#include "format/model_dir.h"
#include "install/convert.h"
#include "install/synth.h"
#include "test_prereq.h"

namespace rw {
namespace {

constexpr const char* kRepo = "test-org/gemma-4-tiny";
constexpr const char* kCommit = "3f1c0de5a1b2c3d4e5f60718293a4b5c6d7e8f90";

using Env = std::vector<std::pair<std::string, std::string>>;

// Starts argv with stdout+stderr into log and a clean environment for proxies and the Hub.
pid_t Spawn(const std::vector<std::string>& argv, const Env& env, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    for (const char* v : {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                          "all_proxy", "no_proxy", "NO_PROXY", "HF_TOKEN", "HF_ENDPOINT"})
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

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for pid at most timeout_s seconds; past that it is killed, the test fails and -1 is
// returned, so a hung install never hangs the suite.
int Wait(pid_t pid, double timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitCode(status);
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "process " << pid << " still running after " << timeout_s << " s: killed";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs argv with stdout and stderr on a pseudo-terminal (isatty true) and returns what it
// printed in *out; killed after timeout_s.
[[maybe_unused]] int RunOnPty(const std::vector<std::string>& argv, const Env& env,
                              std::string* out, double timeout_s) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) {
    ADD_FAILURE() << "no pseudo-terminal: " << std::strerror(errno);
    return -1;
  }
  const std::string slave = ::ptsname(master);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    int fd = ::open(slave.c_str(), O_RDWR);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(master);
    for (const char* v : {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                          "all_proxy", "no_proxy", "NO_PROXY", "HF_TOKEN", "HF_ENDPOINT"})
      ::unsetenv(v);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (std::string& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  bool exited = false;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0) {
        out->append(buf, static_cast<size_t>(n));
        continue;
      }
      if (exited) break;  // EIO: the child and its terminal are gone
    } else if (exited) {
      break;
    }
    if (!exited && ::waitpid(pid, &status, WNOHANG) == pid) exited = true;
    if (!exited && std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(master);
      ADD_FAILURE() << "process on a terminal still running after " << timeout_s << " s: killed";
      return -1;
    }
  }
  ::close(master);
  return ExitCode(status);
}

bool HavePython() {
  static const bool have = std::system("python3 -c pass >/dev/null 2>&1") == 0;
  return have;
}

size_t CurlAppend(char* p, size_t s, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, s * n);
  return s * n;
}

// The fake hub as a child process; stopped (and reaped) when this object goes away.
class FakeHub {
 public:
  ~FakeHub() { Stop(); }
  void Start(const std::string& repo_dir, const std::string& work,
             const std::vector<std::string>& extra = {}) {
    const std::string ports = work + "/ports.json";
    (void)RemoveAll(ports);
    std::vector<std::string> argv = {
        "python3",     std::string(REDWING_SOURCE_DIR) + "/tests/fakehub/fakehub.py",
        "--repo-dir",  repo_dir,
        "--repo-id",   kRepo,
        "--commit",    kCommit,
        "--port-file", ports};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = Spawn(argv, {}, work + "/fakehub.log");
    for (int i = 0; i < 600 && !PathExists(ports); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;  // exited: the log says why
      }
    }
    auto text = ReadFileToString(ports);
    ASSERT_TRUE(text.ok()) << "fake hub did not start: "
                           << *ReadFileToString(work + "/fakehub.log");
    Json j = Json::parse(*text);
    port_ = j["hub"].get<int>();
    proxy_port_ = j["proxy"].get<int>();
  }
  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Wait(pid_);
      pid_ = -1;
    }
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string proxy() const { return "http://127.0.0.1:" + std::to_string(proxy_port_); }
  Json Call(const std::string& path, const Json* body) {
    CURL* c = curl_easy_init();
    std::string url = endpoint() + path, out, data = body ? body->dump() : "";
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, CurlAppend);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    if (body) curl_easy_setopt(c, CURLOPT_POSTFIELDS, data.c_str());
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    EXPECT_EQ(rc, CURLE_OK) << url;
    return rc == CURLE_OK ? Json::parse(out) : Json();
  }
  void Faults(const Json& rules) { Call("/_control/faults", &rules); }
  void Throttle(uint64_t bytes_per_s) {
    Json cfg{{"throttle", bytes_per_s}};
    Call("/_control/config", &cfg);
  }
  void ResetStats() {
    Json none = Json::object();
    Call("/_control/reset", &none);
  }
  Json Stats() { return Call("/_control/stats", nullptr); }

 private:
  pid_t pid_ = -1;
  int port_ = 0, proxy_port_ = 0;
};

std::vector<std::string> Shards(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Same files (core, experts, side files) with the same hashes, and the same config.
void ExpectSameModel(const std::string& got, const std::string& want) {
  auto a = ModelDir::Open(got);
  auto b = ModelDir::Open(want);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const auto& fa = a->manifest().files;
  const auto& fb = b->manifest().files;
  ASSERT_EQ(fa.size(), fb.size());
  for (const auto& [name, f] : fb) {
    auto it = fa.find(name);
    ASSERT_NE(it, fa.end()) << name;
    EXPECT_EQ(it->second.size, f.size) << name;
    EXPECT_EQ(it->second.sha256, f.sha256) << name;
  }
  EXPECT_EQ(a->manifest().config.ToJson(), b->manifest().config.ToJson());
  EXPECT_EQ(a->manifest().skipped, b->manifest().skipped);
}

// 8 + the JSON header length of a safetensors file: what planning fetches of it.
[[maybe_unused]] uint64_t HeaderBytes(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok() || text->size() < 8) return 0;
  uint64_t n = 0;
  std::memcpy(&n, text->data(), 8);
  return 8 + n;
}

[[maybe_unused]] size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

struct Sources {
  std::string root, mlx, mlx_ref, hf, hf_q4_ref;
};

const Sources& Fixtures() {
  static Sources* s = [] {
    auto* s = new Sources;
    s->root = ::testing::TempDir() + "rw_install_src_" + std::to_string(::getpid());
    (void)RemoveAll(s->root);
    const std::string side = s->root + "/side";
    EXPECT_TRUE(MakeDirectories(side).ok());
    EXPECT_TRUE(
        WriteFileAtomic(side + "/tokenizer.json", "{\"version\": \"1.0\", \"model\": {}}\n").ok());
    EXPECT_TRUE(
        WriteFileAtomic(side + "/tokenizer_config.json", "{\"bos_token\": \"<bos>\"}\n").ok());
    EXPECT_TRUE(WriteFileAtomic(side + "/chat_template.jinja", "{{ messages }}\n").ok());
#ifndef REDWING_INSTALL_SLOW
    // The real repository's layout: an MLX 4-bit checkpoint in several shards with an index.
    SynthOptions so;
    so.geometry = "tiny";
    so.seed = 5;
    so.out_dir = s->root + "/mlx";
    so.format = "mlx";
    so.tokenizer_dir = side;
    so.max_shard_bytes = 400'000;
    Status st = SynthesizeModel(so);
    EXPECT_TRUE(st.ok()) << st.ToString();
    s->mlx = so.out_dir;
    ConvertOptions co;
    co.source_dir = s->mlx;
    co.out_dir = s->root + "/mlx_ref";
    st = ConvertCheckpoint(co);
    EXPECT_TRUE(st.ok()) << st.ToString();
    s->mlx_ref = co.out_dir;
    // A bf16 Hugging Face checkpoint with vision tensors (fetched only to be hashed).
    test::FixtureOptions fo;
    fo.shards = 3;
    s->hf = s->root + "/hf";
    st = test::WriteTinyCheckpoint(s->hf, test::TinyGeometry{}, fo);
    EXPECT_TRUE(st.ok()) << st.ToString();
    co.source_dir = s->hf;
    co.out_dir = s->root + "/hf_q4_ref";
    co.quantize = "q4";
    st = ConvertCheckpoint(co);
    EXPECT_TRUE(st.ok()) << st.ToString();
    s->hf_q4_ref = co.out_dir;
#endif
    return s;
  }();
  return *s;
}

class InstallHub : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_OR_SKIP(HavePython(), "python3 (the fake hub, tests/fakehub, runs on it)");
    ASSERT_TRUE(PathExists(REDWING_BINARY)) << REDWING_BINARY;
    // Per process too: two build trees may run the same test at once.
    base_ = ::testing::TempDir() + "rw_install_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "." +
            std::to_string(::getpid());
    (void)RemoveAll(base_);
    ASSERT_TRUE(MakeDirectories(base_).ok());
    out_ = base_ + "/model";
    log_ = base_ + "/install.log";
  }
  void TearDown() override {
    hub_.Stop();
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
    if (!HasFailure() && !base_.empty()) (void)RemoveAll(base_);
  }
  std::vector<std::string> Args(std::vector<std::string> extra) {
    std::vector<std::string> a = {binary_, "install", kRepo, "--output", out_};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  Env HubEnv(const std::string& token = "") {
    Env e = {{"HF_ENDPOINT", hub_.endpoint()}};
    if (!token.empty()) e.push_back({"HF_TOKEN", token});
    return e;
  }
  int Run(std::vector<std::string> extra, std::string* out, const Env* env = nullptr,
          double timeout_s = 120) {
    int rc = Wait(Spawn(Args(std::move(extra)), env ? *env : HubEnv(), log_), timeout_s);
    auto text = ReadFileToString(log_);
    *out = text.ok() ? *text : "(no log: " + text.status().ToString() + ")";
    return rc;
  }
  // Waits until path exists (true) or timeout_s passes (false).
  static bool WaitForPath(const std::string& path, double timeout_s) {
    for (int i = 0; i < timeout_s * 40 && !PathExists(path); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    return PathExists(path);
  }

  FakeHub hub_;
  std::string base_, out_, log_, mounted_;
  // The CLI that Run() starts: REDWING_TESTHOOKS_BINARY for REDWING_INSTALL_ASSUME_FREE_BYTES.
  std::string binary_ = REDWING_BINARY;
};

#ifndef REDWING_INSTALL_SLOW

TEST_F(InstallHub, EqualsConvertAndRecordsTheCommit) {
  const Sources& s = Fixtures();
  ASSERT_GE(Shards(s.mlx).size(), 3u);
  hub_.Start(s.mlx, base_);
  std::string log;
  ASSERT_EQ(Run({"--revision", "main", "--segment-size", "64K"}, &log), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
  // The same as the `redwing convert` command, too.
  const std::string cli_ref = base_ + "/convert_cli";
  ASSERT_EQ(Wait(Spawn({REDWING_BINARY, "convert", s.mlx, cli_ref}, {}, base_ + "/convert.log")), 0)
      << *ReadFileToString(base_ + "/convert.log");
  ExpectSameModel(out_, cli_ref);
  auto m = ModelDir::Open(out_);
  ASSERT_TRUE(m.ok());
  const Json& src = m->manifest().source;
  EXPECT_EQ(src["kind"], "hub");
  EXPECT_EQ(src["repo_id"], kRepo);
  EXPECT_EQ(src["revision"], kCommit);
  EXPECT_EQ(src["requested_revision"], "main");
  EXPECT_EQ(src["endpoint"], hub_.endpoint());
  EXPECT_NE(log.find("is commit " + std::string(kCommit)), std::string::npos) << log;
  EXPECT_NE(log.find("peak RSS"), std::string::npos) << log;
  EXPECT_FALSE(PathExists(out_ + ".installing"));
  EXPECT_FALSE(PathExists(out_ + ".partial"));
  Json stats = hub_.Stats();
  EXPECT_GT(stats["cdn_requests"].get<int>(), 0);
  EXPECT_EQ(stats["cdn_auth_leaks"], 0);

  // An existing model is not replaced without --force; a pinned commit works too.
  EXPECT_EQ(Run({"--revision", kCommit}, &log), 1) << log;
  EXPECT_NE(log.find("already exists"), std::string::npos) << log;
  ASSERT_EQ(Run({"--revision", kCommit, "--force", "--quiet"}, &log), 0) << log;
  EXPECT_TRUE(log.empty()) << log;
  ExpectSameModel(out_, s.mlx_ref);
}

TEST_F(InstallHub, QuantizesBf16CheckpointLikeConvert) {
  const Sources& s = Fixtures();
  hub_.Start(s.hf, base_, {"--tree-page-size", "2"});  // the tree API paginates
  std::string log;
  ASSERT_EQ(Run({"--quantize", "q4", "--connections", "3", "--segment-size", "20000"}, &log), 0)
      << log;
  ExpectSameModel(out_, s.hf_q4_ref);
  EXPECT_NE(log.find("skipping"), std::string::npos) << log;  // the vision tower
}

TEST_F(InstallHub, SurvivesTransientFaults) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  std::vector<std::string> shards = Shards(s.mlx);
  hub_.Faults(Json::array({
      {{"kind", "status"}, {"status", 503}, {"retry_after", "1"}, {"count", 2}, {"server", "cdn"}},
      {{"kind", "status"}, {"status", 429}, {"retry_after", "1"}, {"count", 1}, {"server", "hub"}},
      {{"kind", "drop"}, {"count", 2}, {"path", ".safetensors"}, {"min_offset", 1}},
      {{"kind", "truncate"}, {"count", 2}, {"path", ".safetensors"}, {"min_offset", 1}},
      // Longer than the Run timeout below: only the stall timeout gets the install through.
      {{"kind", "stall"},
       {"seconds", 90},
       {"after", 100},
       {"count", 1},
       {"path", shards[0]},
       {"min_offset", 1}},
      {{"kind", "corrupt"}, {"count", 1}, {"path", shards[1]}, {"min_offset", 100000}},
      // The first request at or after byte 8 is the header: unparsable, so fetched again.
      {{"kind", "corrupt"}, {"count", 1}, {"path", shards[3]}, {"min_offset", 8}, {"at", 0}},
      {{"kind", "ignore_range"}, {"count", 1}, {"path", shards[2]}},
      {{"kind", "bad_range"}, {"count", 1}, {"path", shards[2]}},
  }));
  std::string log;
  ASSERT_EQ(
      Run({"--stall-timeout", "1", "--retries", "10", "--segment-size", "64K"}, &log, nullptr, 60),
      0)
      << log;
  ExpectSameModel(out_, s.mlx_ref);
  // Drops, truncation, bad ranges and the stall were caught per request: the one corrupted
  // shard is the only one whose SHA-256 ever failed.
  EXPECT_EQ(Count(log, "SHA-256 mismatch"), 1u) << log;
  Json fired = hub_.Stats()["faults_fired"];
  for (const char* k :
       {"status", "drop", "truncate", "stall", "corrupt", "ignore_range", "bad_range"})
    EXPECT_TRUE(fired.contains(k)) << k << " never fired: " << fired.dump();
  // The corrupted shard failed its SHA-256 once and was fetched again.
  EXPECT_NE(log.find(shards[1] + ": SHA-256 mismatch"), std::string::npos) << log;
  EXPECT_NE(log.find("fetching the shard again"), std::string::npos) << log;
  EXPECT_NE(log.find("fetching the header again"), std::string::npos) << log;
}

TEST_F(InstallHub, PersistentCorruptionNamesTheShardAndKeepsOtherShards) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  std::vector<std::string> shards = Shards(s.mlx);
  ASSERT_GE(shards.size(), 3u);
  const std::string bad = shards[2];
  hub_.Faults(
      Json::array({{{"kind", "corrupt"}, {"count", -1}, {"path", bad}, {"min_offset", 100000}}}));
  std::string log;
  // One connection: shards are fetched in order, so the ones before `bad` are complete.
  EXPECT_EQ(Run({"--connections", "1", "--segment-size", "64K"}, &log), 1) << log;
  EXPECT_NE(log.find(bad + ": SHA-256 mismatch over bytes 0-"), std::string::npos) << log;
  EXPECT_NE(log.find("the same bytes arrived on every fetch"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  EXPECT_FALSE(PathExists(out_));
  EXPECT_TRUE(PathExists(out_ + ".installing/install.journal"));

  hub_.Faults(Json::array());
  hub_.ResetStats();
  ASSERT_EQ(Run({"--resume", "--connections", "1", "--segment-size", "64K"}, &log), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
  // Shards verified before: only their headers again (to plan); the bad one: header + all.
  Json bytes = hub_.Stats()["bytes"];
  EXPECT_EQ(bytes.value(shards[0], uint64_t{0}), HeaderBytes(s.mlx + "/" + shards[0]))
      << bytes.dump();
  EXPECT_EQ(bytes.value(shards[1], uint64_t{0}), HeaderBytes(s.mlx + "/" + shards[1]))
      << bytes.dump();
  EXPECT_FALSE(bytes.contains("tokenizer.json")) << bytes.dump();
  EXPECT_EQ(bytes[bad].get<uint64_t>(),
            HeaderBytes(s.mlx + "/" + bad) + std::filesystem::file_size(s.mlx + "/" + bad));
}

TEST_F(InstallHub, TokenReachesTheHubButNeverTheCdn) {
  const Sources& s = Fixtures();
  // The CDN as another host name, then as the same host on another port: the Authorization
  // header must go to neither (the fake CDN counts leaks and answers 400 to them).
  for (const char* cdn_host : {"localhost", "127.0.0.1"}) {
    SCOPED_TRACE(cdn_host);
    (void)RemoveAll(out_);
    hub_.Stop();
    hub_.Start(s.mlx, base_, {"--token", "s3cret", "--cdn-host", cdn_host});
    std::string log;
    Env no_token = HubEnv();
    EXPECT_EQ(Run({}, &log, &no_token), 2) << log;  // 401: a usage problem, names HF_TOKEN
    EXPECT_NE(log.find("HF_TOKEN"), std::string::npos) << log;
    Env env = HubEnv("s3cret");
    ASSERT_EQ(Run({}, &log, &env), 0) << log;
    Json stats = hub_.Stats();
    EXPECT_GT(stats["hub_auth_ok"].get<int>(), 0);
    EXPECT_GT(stats["cdn_requests"].get<int>(), 0);
    EXPECT_EQ(stats["cdn_auth_leaks"], 0) << stats.dump();
    auto manifest = ReadFileToString(out_ + "/manifest.json");
    EXPECT_EQ(manifest->find("s3cret"), std::string::npos);
    ExpectSameModel(out_, s.mlx_ref);
  }
}

TEST_F(InstallHub, GoesThroughTheProxyFromTheEnvironment) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_, {"--token", "s3cret"});
  Env env = HubEnv("s3cret");
  env.push_back({"http_proxy", hub_.proxy()});
  std::string log;
  ASSERT_EQ(Run({}, &log, &env), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
  Json stats = hub_.Stats();
  EXPECT_GT(stats["proxy_requests"].get<int>(), 0) << stats.dump();
  EXPECT_EQ(stats["proxy_requests"].get<int>(),
            stats["hub_requests"].get<int>() + stats["cdn_requests"].get<int>())
      << "every request goes through the proxy";
  EXPECT_EQ(stats["cdn_auth_leaks"], 0) << stats.dump();
}

TEST_F(InstallHub, KillNineAtRandomPointsThenResumeIsIdentical) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  hub_.Throttle(120'000);  // per response: the install takes a few seconds
  std::mt19937 rng(::testing::UnitTest::GetInstance()->random_seed());
  int kills = 0;
  bool finished = false;
  for (int round = 0; round < 6 && !finished; ++round) {
    std::vector<std::string> extra = {"--segment-size", "32K", "--checkpoint-interval", "0.1"};
    if (round > 0) extra.push_back("--resume");
    pid_t pid = Spawn(Args(extra), HubEnv(), log_);
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 900));
    if (::kill(pid, SIGKILL) == 0) ++kills;
    int rc = Wait(pid);
    finished = rc == 0;
    if (!finished) {
      EXPECT_EQ(rc, 128 + SIGKILL) << *ReadFileToString(log_);
    }
  }
  EXPECT_GE(kills, 3);
  hub_.Throttle(0);
  std::string log;
  if (!finished) {
    ASSERT_EQ(Run({"--resume"}, &log), 0) << log;
  }
  ExpectSameModel(out_, s.mlx_ref);
  EXPECT_FALSE(PathExists(out_ + ".installing"));
}

TEST_F(InstallHub, CtrlCThenPartialNeedsAChoice) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  hub_.Throttle(100'000);
  pid_t pid = Spawn(Args({"--segment-size", "32K"}), HubEnv(), log_);
  for (int i = 0; i < 400 && !PathExists(out_ + ".installing/install.journal"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGINT);
  EXPECT_EQ(Wait(pid), 130);
  std::string log = *ReadFileToString(log_);
  EXPECT_NE(log.find("interrupted"), std::string::npos) << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  hub_.Throttle(0);

  EXPECT_EQ(Run({}, &log), 1) << log;
  EXPECT_NE(log.find("interrupted install; pass --resume to continue it or --discard-partial"),
            std::string::npos)
      << log;
  EXPECT_EQ(Run({"--resume", "--discard-partial"}, &log), 2) << log;
  ASSERT_EQ(Run({"--discard-partial"}, &log), 0) << log;
  EXPECT_NE(log.find("removing the partial install"), std::string::npos) << log;
  ExpectSameModel(out_, s.mlx_ref);
}

TEST_F(InstallHub, ClearErrors) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  std::string log;
  EXPECT_EQ(Run({"--revision", "no-such-branch"}, &log), 1) << log;
  EXPECT_NE(log.find("no revision 'no-such-branch'"), std::string::npos) << log;
  EXPECT_EQ(
      Wait(Spawn({REDWING_BINARY, "install", "not a repo", "--output", out_}, HubEnv(), log_)), 2);
  EXPECT_EQ(Wait(Spawn({REDWING_BINARY, "install", kRepo}, HubEnv(), log_)), 2);
  EXPECT_NE(ReadFileToString(log_)->find("--output"), std::string::npos);
  EXPECT_EQ(
      Wait(Spawn({REDWING_BINARY, "install", "other/repo", "--output", out_}, HubEnv(), log_)), 1);
  EXPECT_NE(ReadFileToString(log_)->find("other/repo"), std::string::npos)
      << *ReadFileToString(log_);
  EXPECT_FALSE(PathExists(out_));
  EXPECT_FALSE(PathExists(out_ + ".installing"));
}

TEST_F(InstallHub, HonoursRetryAfter) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  // config.json (the first file, from the hub) and the first shard header range (the CDN) are
  // fetched one request at a time, so the next request to that server is the retry.
  hub_.Faults(Json::array({
      {{"kind", "status"}, {"status", 429}, {"retry_after", "2"}, {"count", 1}, {"server", "hub"}},
      {{"kind", "status"}, {"status", 503}, {"retry_after", "2"}, {"count", 1}, {"server", "cdn"}},
  }));
  std::string log;
  ASSERT_EQ(Run({}, &log), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
  Json stats = hub_.Stats();
  ASSERT_EQ(stats["fault_log"].size(), 2u) << stats["fault_log"].dump();
  for (const Json& fault : stats["fault_log"]) {
    const double t = fault[0].get<double>();
    const std::string server = fault[1].get<std::string>();
    double next = -1;
    for (const Json& r : stats["requests_log"])
      if (r[1] == server && r[0].get<double>() > t) {
        next = r[0].get<double>();
        break;
      }
    ASSERT_GT(next, 0) << "no request to the " << server << " after the fault";
    // The backoff alone would wait about 0.5 s (at most 0.625 s).
    EXPECT_GE(next - t, 1.9) << fault.dump() << ": Retry-After: 2 not honoured";
  }
}

TEST_F(InstallHub, NonLfsFilesAreCheckedAgainstTheirGitBlobId) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  // Outside LFS, so the tree API's oid is the git blob SHA-1 of the content.
  hub_.Faults(Json::array({
      {{"kind", "corrupt"}, {"count", 1}, {"path", "config.json"}, {"server", "hub"}},
      {{"kind", "corrupt"}, {"count", 1}, {"path", "tokenizer_config.json"}},
  }));
  std::string log;
  ASSERT_EQ(Run({}, &log), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
  EXPECT_NE(log.find("config.json: git blob SHA-1 mismatch over bytes 0-"), std::string::npos)
      << log;
  EXPECT_NE(log.find("tokenizer_config.json: git blob SHA-1 mismatch over bytes 0-"),
            std::string::npos)
      << log;
  EXPECT_EQ(Count(log, "; fetching it again"), 2u) << log;

  // Wrong on every fetch: a clear error naming the file, and the partial install is kept.
  (void)RemoveAll(out_);
  hub_.Faults(Json::array({{{"kind", "corrupt"}, {"count", -1}, {"path", "chat_template.jinja"}}}));
  EXPECT_EQ(Run({}, &log), 1) << log;
  EXPECT_NE(log.find("chat_template.jinja: git blob SHA-1 mismatch over bytes 0-"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  EXPECT_FALSE(PathExists(out_));
  hub_.Faults(Json::array());
  ASSERT_EQ(Run({"--resume"}, &log), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
}

TEST_F(InstallHub, TooLittleDiskSpaceIsReportedBeforeStarting) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  Env env = HubEnv();
  env.push_back({"REDWING_INSTALL_ASSUME_FREE_BYTES", "123456"});
  binary_ = REDWING_TESTHOOKS_BINARY;
  std::string log;
  EXPECT_EQ(Run({}, &log, &env), 1) << log;
  EXPECT_NE(log.find("not enough disk space"), std::string::npos) << log;
  EXPECT_NE(log.find("but only 123456 bytes"), std::string::npos) << log;
  EXPECT_NE(log.find("the install needs "), std::string::npos) << log;
  EXPECT_FALSE(PathExists(out_));
  EXPECT_FALSE(PathExists(out_ + ".installing"));  // nothing written
  Json bytes = hub_.Stats()["bytes"];
  for (const std::string& shard : Shards(s.mlx))
    EXPECT_LT(bytes.value(shard, uint64_t{0}), 70'000u) << shard << ": more than its header";
  // The variable is a hook of the test build only: the shipped binary asks the real disk.
  binary_ = REDWING_BINARY;
  ASSERT_EQ(Run({}, &log, &env), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
}

// A real full disk midway (a small tmpfs, so it needs root; skipped otherwise): the install stops
// with a clear error, the journal survives, and --resume after freeing space finishes.
TEST_F(InstallHub, DiskFullMidwayStopsCleanlyAndResumes) {
  const Sources& s = Fixtures();
  const std::string disk = base_ + "/disk";
  ASSERT_TRUE(MakeDirectories(disk).ok());
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=16m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs to fill (" << std::strerror(errno)
                 << "); this test needs root";
  mounted_ = disk;
  out_ = disk + "/model";
  hub_.Start(s.mlx, base_);
  hub_.Throttle(60'000);
  pid_t pid =
      Spawn(Args({"--segment-size", "32K", "--checkpoint-interval", "0.1"}), HubEnv(), log_);
  ASSERT_TRUE(WaitForPath(out_ + ".installing/install.journal", 60));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Fill the disk.
  {
    int fd = ::open((disk + "/filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    std::vector<char> chunk(64 << 10, 'x');
    for (size_t n : {size_t{64} << 10, size_t{4096}})
      while (::write(fd, chunk.data(), n) == static_cast<ssize_t>(n)) {
      }
    ::close(fd);
  }
  const int rc = Wait(pid, 60);
  std::string log = *ReadFileToString(log_);
  EXPECT_EQ(rc, 1) << log;
  const size_t full = log.find("disk full");
  ASSERT_NE(full, std::string::npos) << log;
  std::printf("the install said: %s\n", log.substr(log.rfind('\n', full) + 1).c_str());
  EXPECT_NE(log.find("--resume"), std::string::npos) << log;
  EXPECT_FALSE(PathExists(out_ + "/manifest.json"));
  EXPECT_TRUE(PathExists(out_ + ".installing/install.journal"));
  ASSERT_TRUE(RemoveAll(disk + "/filler").ok());
  hub_.Throttle(0);
  ASSERT_EQ(Run({"--resume"}, &log), 0) << log;
  ExpectSameModel(out_, s.mlx_ref);
}

TEST_F(InstallHub, ProgressLinesWhenNotATerminal) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  hub_.Throttle(150'000);
  std::string log;
  ASSERT_EQ(Run({"--segment-size", "32K", "--progress-interval", "0.2"}, &log), 0) << log;
  EXPECT_GE(Count(log, "install: "), 3u) << log;
  EXPECT_NE(log.find("(100.0%)"), std::string::npos) << log;
  EXPECT_NE(log.find("/s  ETA "), std::string::npos) << log;
  EXPECT_EQ(log.find('\r'), std::string::npos) << "terminal control in a log";
  EXPECT_EQ(log.find("\033["), std::string::npos) << "terminal control in a log";
}

TEST_F(InstallHub, ProgressIsOneUpdatingLineOnATerminal) {
  const int probe = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (probe < 0) GTEST_SKIP() << "no pseudo-terminal here (" << std::strerror(errno) << ")";
  ::close(probe);
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  hub_.Throttle(150'000);
  std::string out;
  ASSERT_EQ(RunOnPty(Args({"--segment-size", "32K"}), HubEnv(), &out, 120), 0) << out;
  // Every progress update rewrites the same line ("\r", erase line) instead of adding one.
  EXPECT_GE(Count(out, "\r\033[Kinstall: "), 2u) << out;
  EXPECT_EQ(Count(out, "\ninstall: "), 0u) << out;
  EXPECT_NE(out.find("done: "), std::string::npos) << out;
  ExpectSameModel(out_, s.mlx_ref);
}

// The mlx fixture with a tokenizer.json of `tokenizer_bytes` (hard links to the rest), for
// tests that need a side file large next to the model.
std::string SourceWithBigTokenizer(const std::string& dir, uint64_t tokenizer_bytes) {
  const Sources& s = Fixtures();
  (void)RemoveAll(dir);
  EXPECT_TRUE(MakeDirectories(dir).ok());
  for (const auto& e : std::filesystem::directory_iterator(s.mlx)) {
    const std::string name = e.path().filename().string();
    if (name != "tokenizer.json") std::filesystem::create_hard_link(e.path(), dir + "/" + name);
  }
  std::string text = "{\"version\": \"1.0\", \"padding\": \"";
  text += std::string(tokenizer_bytes - text.size() - 3, 'x') + "\"}\n";
  EXPECT_TRUE(WriteFileAtomic(dir + "/tokenizer.json", text).ok());
  return dir;
}

// The "the install needs N bytes" of a free-space refusal (0 when there is none).
uint64_t NeededBytes(const std::string& log) {
  const std::string key = "the install needs ";
  size_t at = log.find(key);
  return at == std::string::npos ? 0 : std::strtoull(log.c_str() + at + key.size(), nullptr, 10);
}

// Two installs into one output at once: the second is refused at once, naming the first's pid,
// and its --discard-partial does not delete the running install's files.
TEST_F(InstallHub, SecondInstallIntoTheSameOutputIsRefusedWhileOneRuns) {
  const Sources& s = Fixtures();
  hub_.Start(s.mlx, base_);
  hub_.Throttle(100'000);  // the first install takes several seconds
  const pid_t first = Spawn(Args({"--segment-size", "32K"}), HubEnv(), log_);
  ASSERT_TRUE(WaitForPath(out_ + ".installing/install.journal", 60)) << *ReadFileToString(log_);
  const std::string second_log = base_ + "/second.log";
  for (std::vector<std::string> extra :
       {std::vector<std::string>{}, {"--resume"}, {"--discard-partial"}, {"--force"}}) {
    SCOPED_TRACE(extra.empty() ? "(no flag)" : extra[0]);
    EXPECT_EQ(Wait(Spawn(Args(extra), HubEnv(), second_log), 30), 1);
    const std::string log = *ReadFileToString(second_log);
    EXPECT_NE(log.find("another install into " + out_ + " is running (pid " +
                       std::to_string(first) + ")"),
              std::string::npos)
        << log;
    int status;
    ASSERT_EQ(::waitpid(first, &status, WNOHANG), 0) << "the first install already ended";
    EXPECT_TRUE(PathExists(out_ + ".installing/install.journal")) << "the running install's "
                                                                     "files were removed";
  }
  hub_.Throttle(0);
  ASSERT_EQ(Wait(first), 0) << *ReadFileToString(log_);
  ExpectSameModel(out_, s.mlx_ref);
  EXPECT_FALSE(PathExists(out_ + ".installing.lock"));  // removed by its holder
  // A lock left by a killed install (its file, with a dead pid) does not block the next one.
  ASSERT_TRUE(WriteFileAtomic(out_ + ".installing.lock", "999999999\n").ok());
  std::string log;
  ASSERT_EQ(Run({"--force"}, &log), 0) << log;
}

// A resume after a stop asks for the space still needed: the side files fetched before the stop
// (tokenizer.json is tens of MB) are on disk already, like the shards' bytes.
TEST_F(InstallHub, ResumeDoesNotAskSpaceForSideFilesAlreadyFetched) {
  const Sources& s = Fixtures();
  const uint64_t kTokenizer = 4'000'000;  // more than the whole model
  const std::string src = SourceWithBigTokenizer(base_ + "/src", kTokenizer);
  hub_.Start(src, base_);
  std::vector<std::string> shards = Shards(s.mlx);
  ASSERT_GE(shards.size(), 3u);
  hub_.Faults(Json::array(
      {{{"kind", "corrupt"}, {"count", -1}, {"path", shards[2]}, {"min_offset", 100000}}}));
  std::string log;
  // Stops at the corrupt shard, with every side file fetched.
  EXPECT_EQ(Run({"--connections", "1", "--segment-size", "64K"}, &log), 1) << log;
  ASSERT_TRUE(PathExists(out_ + ".installing/tokenizer.json")) << log;

  Env tight = HubEnv();
  tight.push_back({"REDWING_INSTALL_ASSUME_FREE_BYTES", "1"});
  binary_ = REDWING_TESTHOOKS_BINARY;
  ASSERT_EQ(Wait(Spawn({binary_, "install", kRepo, "--output", base_ + "/fresh"}, tight,
                       base_ + "/fresh.log")),
            1);
  const uint64_t fresh = NeededBytes(*ReadFileToString(base_ + "/fresh.log"));
  ASSERT_GT(fresh, kTokenizer) << *ReadFileToString(base_ + "/fresh.log");
  EXPECT_EQ(Run({"--resume"}, &log, &tight), 1) << log;
  const uint64_t resume = NeededBytes(log);
  ASSERT_GT(resume, 0u) << log;
  EXPECT_LE(resume + kTokenizer, fresh)
      << "the resume asks for the already fetched tokenizer.json again: " << log;

  // Exactly what it asked for is enough.
  hub_.Faults(Json::array());
  Env enough = HubEnv();
  enough.push_back({"REDWING_INSTALL_ASSUME_FREE_BYTES", std::to_string(resume)});
  ASSERT_EQ(Run({"--resume"}, &log, &enough), 0) << log;
  EXPECT_TRUE(ModelDir::Open(out_).ok());
}

// Progress moves by bytes received: while a side file that is one range request downloads, and
// while a shard's only segment is in flight.
TEST_F(InstallHub, ProgressAdvancesAsBytesArrive) {
  Fixtures();  // built once for the suite
  const uint64_t kTokenizer = 600'000;
  const std::string src = SourceWithBigTokenizer(base_ + "/src", kTokenizer);
  hub_.Start(src, base_);
  hub_.Throttle(500'000);
  std::string log;
  ASSERT_EQ(
      Run({"--connections", "1", "--segment-size", "64M", "--progress-interval", "0.05"}, &log), 0)
      << log;
  uint64_t side = 0;  // fetched before any shard
  for (const std::string& name : SideFileNames())
    if (PathExists(src + "/" + name)) side += std::filesystem::file_size(src + "/" + name);
  // With one connection and segments larger than any shard, shards come one after the other,
  // each as a single range request: the largest one leaves the widest window.
  uint64_t before = side, largest = 0, largest_at = 0;
  for (const std::string& shard : Shards(src)) {
    const uint64_t size = std::filesystem::file_size(src + "/" + shard);
    if (size > largest) {
      largest = size;
      largest_at = before;
    }
    before += size;
  }
  ASSERT_GT(largest, 300'000u);  // wider than the 0.1 MB steps of the progress line
  // "install: 123 kB / 2.2 MB (5.6%) ..." lines, in bytes.
  std::vector<double> done;
  for (size_t at = log.find("install: "); at != std::string::npos;
       at = log.find("install: ", at + 1)) {
    char unit[8] = {};
    double v = 0;
    if (std::sscanf(log.c_str() + at, "install: %lf %7s", &v, unit) != 2) continue;
    done.push_back(v * (std::string(unit) == "MB" ? 1e6 : std::string(unit) == "GB" ? 1e9 : 1e3));
  }
  ASSERT_GE(done.size(), 5u) << log;
  for (size_t i = 1; i < done.size(); ++i) EXPECT_GE(done[i], done[i - 1]) << log;
  auto shown_within = [&](double lo, double hi) {
    for (double d : done)
      if (d > lo && d < hi) return true;
    return false;
  };
  // Margins of a throttled chunk (64 KiB) and of the kB rounding.
  EXPECT_TRUE(shown_within(70e3, kTokenizer - 70e3)) << "nothing while tokenizer.json came\n"
                                                     << log;
  EXPECT_TRUE(shown_within(largest_at + 70e3, largest_at + largest - 70e3))
      << "nothing while a shard's only segment came (" << largest_at << " + " << largest << ")\n"
      << log;
}

#else  // REDWING_INSTALL_SLOW

// A multi-hundred-MB MLX checkpoint (about 0.7 GB, in 4 shards): memory stays at the buffer
// pool whatever the model size, and the result still equals `redwing convert`.
TEST_F(InstallHub, LargeCheckpointInBoundedMemory) {
  const Sources& s = Fixtures();
  test::TinyGeometry g;
  g.vocab = 32768;
  g.hidden = 2048;
  g.layers = 3;
  g.heads = 8;
  g.head_dim = 128;
  g.full_head_dim = 256;
  g.intermediate = 2048;
  g.experts = 32;
  g.moe_intermediate = 2048;
  test::FixtureOptions fo;
  fo.layout = test::Layout::kMlx;
  fo.shards = 4;
  const std::string src = s.root + "/big";
  Status st = test::WriteTinyCheckpoint(src, g, fo);
  ASSERT_TRUE(st.ok()) << st.ToString();
  uint64_t total = 0;
  for (const std::string& f : Shards(src)) total += std::filesystem::file_size(src + "/" + f);
  ASSERT_GT(total, 500'000'000u);
  hub_.Start(src, base_);
  std::string log;
  ASSERT_EQ(Run({"--connections", "4", "--segment-size", "16M"}, &log, nullptr, 600), 0) << log;
  std::printf("%s", log.c_str());
  size_t at = log.find("peak RSS ");
  ASSERT_NE(at, std::string::npos) << log;
  const double rss_mb = std::atof(log.c_str() + at + 9);
  std::printf("install of a %.2f GB checkpoint: peak RSS %.1f MB (pool: 6 x 16 MB segments)\n",
              total / 1e9, rss_mb);
  EXPECT_LT(rss_mb, 300) << "peak RSS for a " << total / 1e9 << " GB checkpoint";
  const std::string ref = s.root + "/big_ref";
  st = ConvertCheckpoint(test::ConvertOpts(src, ref));
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectSameModel(out_, ref);
  (void)RemoveAll(src);
  (void)RemoveAll(ref);
}

#endif

}  // namespace
}  // namespace rw
