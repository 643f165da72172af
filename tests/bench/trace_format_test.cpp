// --trace and --profile of the CLI on the CPU: run's and bench's traces are valid Chrome trace
// JSON with the forward pass's spans on one clock, and the profile counts what ran (one
// attention span per layer and forward call), so its sums can be trusted.
#include <gtest/gtest.h>

#include <set>

#include "bench/trace_check.h"

namespace rw {
namespace {

const std::string& Scratch() {
  static const std::string d = test::ScratchDir("trace_format_test");
  return d;
}

TEST(TraceFormatTest, RunWritesTraceAndProfile) {
  const std::string model = test::TraceTinyModel(Scratch());
  const std::string trace = JoinPath(Scratch(), "run.trace.json");
  const std::string profile = JoinPath(Scratch(), "run.profile.json");
  // 5 prompt ids, up to 7 new tokens: one prefill call and a decode call for every printed id
  // but the last (the last one sampled is not fed back; a stop id is printed too).
  auto r = test::Run(std::string(REDWING_BINARY) + " run --model " + model +
                         " --threads 2 --prompt-ids 2,17,99,5,8 --max-new 7 --temperature 0 "
                         "--print-ids --trace " +
                         trace + " --profile " + profile,
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const int generated = [&] {
    int n = 0;
    for (char c : r.out) n += c == ' ';
    return n + 1;
  }();
  ASSERT_GE(generated, 1);
  const int calls = generated;  // prefill + (generated - 1) decode steps (a stop id included)

  const Json t = test::ReadJsonFile(trace);
  std::vector<Json> xs;
  ASSERT_NO_FATAL_FAILURE(test::CheckChromeTrace(t, &xs));
  std::map<std::string, int> count;
  std::set<int64_t> layers;
  double attention_end = 0, first_embed = 1e30;
  for (const Json& e : xs) {
    const std::string key = e["cat"].get<std::string>() + "/" + e["name"].get<std::string>();
    ++count[key];
    if (key == "forward/attention") {
      ASSERT_TRUE(e["args"].contains("layer")) << e.dump();
      layers.insert(e["args"]["layer"].get<int64_t>());
      attention_end = std::max(attention_end, e["ts"].get<double>() + e["dur"].get<double>());
    }
    if (key == "forward/embed") first_embed = std::min(first_embed, e["ts"].get<double>());
    if (key == "experts/wait") {
      EXPECT_TRUE(e["args"].contains("layer")) << e.dump();
    }
  }
  EXPECT_EQ(layers.size(), 6u);
  EXPECT_EQ(count["forward/attention"], 6 * calls);
  EXPECT_EQ(count["forward/embed"], calls);
  EXPECT_EQ(count["forward/head"], calls);
  EXPECT_GE(count["sample/sample"], 1);
  EXPECT_GT(count["experts/wait"], 0);
  EXPECT_LT(first_embed, attention_end);  // one clock: the first embed precedes the attention
  EXPECT_EQ(t["otherData"]["dropped_events"].get<int>(), 0);

  const Json p = test::ReadJsonFile(profile);
  test::CheckProfile(p, 6);
  EXPECT_EQ(p["summary"]["attention"]["count"].get<int>(), 6 * calls);
  EXPECT_EQ(p["summary"]["head"]["count"].get<int>(), calls);
  EXPECT_EQ(p["summary"]["host_syncs"]["count"].get<int>(), 0);  // the CPU has none
  EXPECT_EQ(p["summary"]["gpu_kernels"]["count"].get<int>(), 0);
  EXPECT_NE(p["command"].get<std::string>().find("redwing run"), std::string::npos);
  // Per layer: each row has the layer's attention time, and they sum to the summary's.
  double sum = 0;
  for (const Json& l : p["layers"]) sum += l["attention_ms"].get<double>();
  EXPECT_NEAR(sum, p["summary"]["attention"]["total_ms"].get<double>(), 1e-6);
  // The profile's span counts agree with the trace's.
  for (const Json& s : p["spans"]) {
    const std::string key = s["category"].get<std::string>() + "/" + s["name"].get<std::string>();
    EXPECT_EQ(s["count"].get<int>(), count[key]) << key;
  }
}

TEST(TraceFormatTest, BenchTraceAndProfile) {
  const std::string model = test::TraceTinyModel(Scratch());
  const std::string trace = JoinPath(Scratch(), "bench.trace.json");
  const std::string profile = JoinPath(Scratch(), "bench.profile.json");
  const std::string json = JoinPath(Scratch(), "bench.json");
  auto r = test::Run(std::string(REDWING_BINARY) + " bench --model " + model +
                         " --threads 2 --prompt-tokens 20 --decode-tokens 6 --warmup 0 --quiet "
                         "--no-disk-probe --no-memory-probe --json " +
                         json + " --trace " + trace + " --profile " + profile,
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<Json> xs;
  ASSERT_NO_FATAL_FAILURE(test::CheckChromeTrace(test::ReadJsonFile(trace), &xs));
  int decode_tokens = 0;
  for (const Json& e : xs) decode_tokens += e["name"] == "decode token";
  EXPECT_EQ(decode_tokens, 6);
  const Json p = test::ReadJsonFile(profile);
  test::CheckProfile(p, 6);
  EXPECT_EQ(p["summary"]["attention"]["count"].get<int>(), 6 * (1 + 6));
  const Json b = test::ReadJsonFile(json);
  EXPECT_EQ(b["trace_file"], trace);
  EXPECT_EQ(b["profile_file"], profile);
}

TEST(TraceFormatTest, EnvironmentVariablesStandInForFlags) {
  const std::string model = test::TraceTinyModel(Scratch());
  const std::string trace = JoinPath(Scratch(), "env.trace.json");
  const std::string profile = JoinPath(Scratch(), "env.profile.json");
  auto r = test::Run("REDWING_TRACE=" + trace + " REDWING_PROFILE=" + profile + " " +
                         REDWING_BINARY + " run --model " + model +
                         " --threads 2 --prompt-ids 2,3,4 --max-new 2 --print-ids --quiet",
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::vector<Json> xs;
  ASSERT_NO_FATAL_FAILURE(test::CheckChromeTrace(test::ReadJsonFile(trace), &xs));
  test::CheckProfile(test::ReadJsonFile(profile), 6);
}

TEST(TraceFormatTest, UnwritablePathIsAnErrorNamingTheFlag) {
  const std::string model = test::TraceTinyModel(Scratch());
  auto r = test::Run(std::string(REDWING_BINARY) + " run --model " + model +
                         " --threads 2 --prompt-ids 2,3 --max-new 1 --print-ids --quiet "
                         "--profile /nonexistent-dir/p.json",
                     Scratch());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--profile"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rw
