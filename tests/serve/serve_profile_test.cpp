// `redwing serve --profile P --trace T`: SIGUSR1 writes the profile of the window since the start
// (or the last dump) and starts a new one; SIGTERM writes the last window and the whole trace.
// Real server, real HTTP requests, real signals.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <thread>

#include "bench/trace_check.h"
#include "serve/serve_test_util.h"

namespace rw {
namespace {

using test::HttpClient;
using test::NowMs;
using test::ServerProcess;

int Chat(int port, int max_tokens) {
  HttpClient c(port);
  const Json body = {{"model", "gemma-4-26b-a4b-it"},
                     {"messages", Json::array({{{"role", "user"}, {"content", "Hello!"}}})},
                     {"max_tokens", max_tokens},
                     {"temperature", 0}};
  return c.Request("POST", "/v1/chat/completions", body.dump()).status;
}

// Waits until path holds a profile newer than `after` (its pid and a wall time differ), or 20 s.
Json WaitForProfile(const std::string& path, double not_wall) {
  const int64_t deadline = NowMs() + 20000;
  while (NowMs() < deadline) {
    auto text = ReadFileToString(path);
    if (text.ok()) {
      auto j = ParseJson(*text, path);
      if (j.ok() && (*j)["wall_seconds"].get<double>() != not_wall) return *j;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Json();
}

TEST(ServeProfile, SignalWritesWindowsAndExitWritesTrace) {
  REQUIRE_GEMMA_TINY_MODEL();
  const test::GemmaTestModel& m = test::SharedGemmaTinyModel();
  const std::string profile = test::ServeTempPath("serve.profile.json");
  const std::string trace = test::ServeTempPath("serve.trace.json");
  std::remove(profile.c_str());
  std::remove(trace.c_str());
  ServerProcess server(m.model_dir, {"--profile", profile, "--trace", trace}, "profile");
  ASSERT_TRUE(server.error().empty()) << server.error();

  ASSERT_EQ(Chat(server.port(), 6), 200);
  ASSERT_EQ(::kill(server.pid(), SIGUSR1), 0);
  const Json first = WaitForProfile(profile, -1);
  ASSERT_TRUE(first.is_object()) << server.Log();
  test::CheckProfile(first, static_cast<int>(first["layers"].size()));
  EXPECT_NE(first["command"].get<std::string>().find("redwing serve"), std::string::npos);
  const int calls1 = first["summary"]["head"]["count"].get<int>();
  EXPECT_GE(calls1, 1);
  EXPECT_EQ(first["summary"]["attention"]["count"].get<int>(),
            calls1 * static_cast<int>(first["layers"].size()));
  EXPECT_NE(server.Log().find("profile written to"), std::string::npos) << server.Log();

  // A second request, then SIGTERM: the last window has that request alone.
  ASSERT_EQ(Chat(server.port(), 3), 200);
  const int st = server.Kill();
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  const Json last = WaitForProfile(profile, first["wall_seconds"].get<double>());
  ASSERT_TRUE(last.is_object());
  const int calls2 = last["summary"]["head"]["count"].get<int>();
  EXPECT_GE(calls2, 1);
  EXPECT_LE(calls2, 3);  // a prefill (or a reused prefix) and up to 2 decode steps
  // The trace covers both requests.
  std::vector<Json> xs;
  ASSERT_NO_FATAL_FAILURE(test::CheckChromeTrace(test::ReadJsonFile(trace), &xs));
  int heads = 0;
  for (const Json& e : xs) heads += e["name"] == "head" && e["cat"] == "forward";
  EXPECT_EQ(heads, calls1 + calls2);
}

}  // namespace
}  // namespace rw
