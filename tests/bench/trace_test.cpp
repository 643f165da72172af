// base/trace.h: off by default (nothing recorded), scopes from several threads on one clock,
// valid Chrome trace JSON with thread names and arguments, Start clears, escaping.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "base/trace.h"
#include "bench/bench_test_util.h"

namespace rw {
namespace {

Json Parse(const std::string& text) {
  auto j = ParseJson(text, "trace");
  EXPECT_TRUE(j.ok()) << j.status().ToString() << "\n" << text.substr(0, 2000);
  return j.ok() ? *j : Json();
}

std::vector<Json> Events(const Json& t, const std::string& ph) {
  std::vector<Json> out;
  for (const Json& e : t["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

TEST(TraceTest, OffByDefaultRecordsNothing) {
  EXPECT_FALSE(trace::Enabled());
  { TraceScope s("ignored", "test"); }
  trace::Instant("ignored too", "test");
  trace::Complete("and this", "test", NowNanos(), NowNanos());
  EXPECT_EQ(trace::EventCount(), 0u);
  const Json t = Parse(trace::ToJson());
  EXPECT_TRUE(Events(t, "X").empty());
}

TEST(TraceTest, ScopesFromThreadsMakeValidJson) {
  trace::SetThreadName("test main");
  trace::Start();
  {
    TraceScope outer("outer", "test");
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i)
      threads.emplace_back([i] {
        trace::SetThreadName("worker \"" + std::to_string(i) + "\"");
        for (int k = 0; k < 10; ++k) TraceScope s("work", "test", "k", k);
      });
    for (auto& th : threads) th.join();
    trace::Instant("mark", "test");
  }
  trace::Stop();
  { TraceScope after("after stop", "test"); }
  EXPECT_EQ(trace::EventCount(), 32u);
  EXPECT_EQ(trace::DroppedCount(), 0u);

  const std::string path = JoinPath(test::ScratchDir("trace_test"), "t.json");
  ASSERT_TRUE(trace::WriteJson(path).ok());
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  const Json t = Parse(*text);
  ASSERT_TRUE(t["traceEvents"].is_array());
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  const auto x = Events(t, "X");
  ASSERT_EQ(x.size(), 31u);
  std::set<int> worker_tids;
  const Json* outer = nullptr;
  for (const Json& e : x) {
    if (e["name"] == "work") {
      worker_tids.insert(e["tid"].get<int>());
      ASSERT_TRUE(e["args"].contains("k"));
    } else if (e["name"] == "outer") {
      outer = &e;
    }
    EXPECT_NE(e["name"], "after stop");
  }
  EXPECT_EQ(worker_tids.size(), 3u);
  ASSERT_NE(outer, nullptr);
  // One clock: every worker scope lies inside the outer scope.
  const double o0 = (*outer)["ts"].get<double>(), o1 = o0 + (*outer)["dur"].get<double>();
  for (const Json& e : x) {
    EXPECT_GE(e["ts"].get<double>(), o0 - 0.002);
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), o1 + 0.002);
  }
  EXPECT_EQ(Events(t, "i").size(), 1u);
  int named = 0;
  for (const Json& m : Events(t, "M"))
    if (m["name"] == "thread_name" &&
        m["args"]["name"].get<std::string>().rfind("worker \"", 0) == 0)
      ++named;
  EXPECT_EQ(named, 3);

  // Start clears.
  trace::Start();
  { TraceScope s("second", "test"); }
  trace::Stop();
  const Json t2 = Parse(trace::ToJson());
  const auto x2 = Events(t2, "X");
  ASSERT_EQ(x2.size(), 1u);
  EXPECT_EQ(x2[0]["name"], "second");
}

TEST(TraceTest, ProfileSumsPerLayerWithoutEvents) {
  trace::Start(trace::kProfile);
  for (int layer = 0; layer < 3; ++layer)
    for (int k = 0; k <= layer; ++k) TraceScope s("attention", "forward", "layer", layer);
  { TraceScope s("head", "forward"); }
  trace::AddToProfile("q/k/v", "gpu op", 1, 2'000'000);
  trace::AddToProfile("q/k/v", "gpu op", 1, 1'000'000);
  trace::Stop();
  EXPECT_EQ(trace::EventCount(), 0u);  // profile mode keeps no events
  auto p = ParseJson(trace::ProfileJson(R"({"command": "x"})"), "profile");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)["format"], "redwing-profile/1");
  EXPECT_EQ((*p)["command"], "x");
  EXPECT_EQ((*p)["summary"]["attention"]["count"].get<int>(), 6);
  EXPECT_EQ((*p)["summary"]["head"]["count"].get<int>(), 1);
  EXPECT_EQ((*p)["summary"]["gpu_ops"]["count"].get<int>(), 2);
  EXPECT_NEAR((*p)["summary"]["gpu_ops"]["total_ms"].get<double>(), 3.0, 1e-9);
  ASSERT_EQ((*p)["layers"].size(), 3u);
  EXPECT_NEAR((*p)["layers"][1]["gpu_ops_ms"].get<double>(), 3.0, 1e-9);
  EXPECT_FALSE((*p)["layers"][0].contains("gpu_ops_ms"));
  int attention_rows = 0;
  for (const Json& s : (*p)["spans"])
    if (s["name"] == "attention") {
      ASSERT_EQ(s["layers"].size(), 3u);
      for (int l = 0; l < 3; ++l) EXPECT_EQ(s["layers"][l]["count"].get<int>(), l + 1);
      ++attention_rows;
    }
  EXPECT_EQ(attention_rows, 1);
  // ResetProfile starts a new window.
  trace::Start(trace::kProfile);
  { TraceScope s("head", "forward"); }
  trace::ResetProfile();
  { TraceScope s("head", "forward"); }
  { TraceScope s("head", "forward"); }
  trace::Stop();
  auto q = ParseJson(trace::ProfileJson(), "profile");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)["summary"]["head"]["count"].get<int>(), 2);
}

}  // namespace
}  // namespace rw
