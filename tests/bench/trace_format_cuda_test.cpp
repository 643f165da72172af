// --trace of a CUDA decode run: a valid Chrome trace in which the GPU's kernels (from CUPTI)
// sit on GPU stream tracks on the same clock as the CPU's spans, and tools/trace_summary.py
// sums it up. The GPU's work is recorded for a sample of the forward calls (one in
// REDWING_TRACE_GPU_EVERY of the small ones), each marked by its span's gpu_traced argument.
// Skips, saying why, without a usable GPU or without CUPTI.
#include <gtest/gtest.h>

#include "backend/cuda/cuda.h"
#include "bench/trace_check.h"

namespace rw {
namespace {

const std::string& Scratch() {
  static const std::string d = test::ScratchDir("trace_format_cuda_test");
  return d;
}

TEST(TraceFormatCudaTest, DecodeTraceHasKernelsOnTheCpuClock) {
  if (Status st = cuda::DeviceStatus(); !st.ok()) GTEST_SKIP() << "CUDA: " << st.message();
  const std::string model = test::TraceTinyModel(Scratch());
  const std::string trace = JoinPath(Scratch(), "cuda.trace.json");
  const std::string profile = JoinPath(Scratch(), "cuda.profile.json");
  // One call in 3: the prefill call (the first), then every third decode step.
  // (No time limit on the sample, so that it follows the count: REDWING_TRACE_GPU_BUDGET=0.)
  auto r = test::Run("REDWING_TRACE_GPU_EVERY=3 REDWING_TRACE_GPU_BUDGET=0 " +
                         std::string(REDWING_BINARY) + " bench --backend cuda --model " + model +
                         " --prompt-tokens 20 --decode-tokens 8 --warmup 0 --quiet "
                         "--no-disk-probe --no-memory-probe --format json --trace " +
                         trace + " --profile " + profile,
                     Scratch());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Json t = test::ReadJsonFile(trace);
  std::vector<Json> xs;
  ASSERT_NO_FATAL_FAILURE(test::CheckChromeTrace(t, &xs));
  if (t["otherData"].value("gpu", "").find("CUPTI activity") == std::string::npos)
    GTEST_SKIP() << "no GPU activity in the trace: " << t["otherData"].dump();
  std::vector<std::pair<double, double>> decode, calls;
  std::vector<bool> traced;
  std::vector<Json> kernels;
  for (const Json& e : xs) {
    const double b = e["ts"].get<double>(), end = b + e["dur"].get<double>();
    if (e["name"] == "decode") decode.push_back({b, end});
    if (e["name"] == "forward call") {
      calls.push_back({b, end});
      ASSERT_TRUE(e["args"].contains("gpu_traced")) << e.dump();
      traced.push_back(e["args"]["gpu_traced"].get<int>() == 1);
    }
    if (e["cat"] == "gpu kernel") kernels.push_back(e);
  }
  ASSERT_EQ(decode.size(), 1u);
  ASSERT_GE(calls.size(), 9u);  // one prefill call, 8 decode steps
  ASSERT_GT(kernels.size(), 3u * 6u);
  // The sample: every call here is small (< 64 tokens), so calls 0, 3, 6, ... are recorded.
  for (size_t c = 0; c < calls.size(); ++c) EXPECT_EQ(traced[c], c % 3 == 0) << "call " << c;
  EXPECT_NE(t["otherData"].value("gpu_sampling", "").find("one in 3"), std::string::npos)
      << t["otherData"].dump();
  // One clock: each recorded forward call has kernels that start inside it or in the gap
  // before the next call (a graph's kernels run after the launch returns), the others have
  // none, and no kernel runs after the trace's last CPU span has ended.
  double cpu_end = 0;
  for (const Json& e : xs)
    if (e["cat"] != "gpu kernel" && e["cat"] != "gpu copy")
      cpu_end = std::max(cpu_end, e["ts"].get<double>() + e["dur"].get<double>());
  for (size_t c = 0; c < calls.size(); ++c) {
    const double from = calls[c].first;
    const double to = c + 1 < calls.size() ? calls[c + 1].first : cpu_end;
    int in_call = 0;
    for (const Json& k : kernels) {
      const double s = k["ts"].get<double>();
      if (s < from || s >= to) continue;
      ++in_call;
      // Recorded calls run kernel by kernel, so each kernel is timed alone: none spans most of
      // its step (as each did when CUPTI timed a graph as one piece).
      if (traced[c]) {
        EXPECT_LT(k["dur"].get<double>(), 0.5 * (to - from)) << k.dump();
      }
    }
    if (traced[c]) {
      EXPECT_GT(in_call, 0) << "recorded call " << c << " has no kernels";
    } else if (c > 3) {
      EXPECT_EQ(in_call, 0) << "call " << c << " was not to be recorded";
    }
    // Calls 1 and 2, the decode graph's capture and first replays, still get records on the
    // H100 (CUPTI's records stop only from a later launch of a new graph on): the summary
    // counts only the recorded calls' windows, so they do no harm there.
  }

  for (const Json& k : kernels) {
    EXPECT_LE(k["ts"].get<double>() + k["dur"].get<double>(), cpu_end + 1.0) << k.dump();
    EXPECT_TRUE(k["args"].contains("blocks")) << k.dump();
  }
  // The profile gets the host syncs (one per decode step at least) and the kernels.
  const Json p = test::ReadJsonFile(profile);
  test::CheckProfile(p, 6);
  EXPECT_GE(p["summary"]["host_syncs"]["count"].get<int>(), 8);
  EXPECT_EQ(p["summary"]["gpu_kernels"]["count"].get<size_t>(), kernels.size());

  // The summary script reads it.
  auto sum = test::Run("python3 '" + std::string(REDWING_SOURCE_DIR) +
                           "/tools/trace_summary.py' '" + trace + "' --window decode",
                       Scratch());
  ASSERT_EQ(sum.code, 0) << sum.out << sum.err;
  const std::string& out = sum.out;
  EXPECT_NE(out.find("GPU time per kernel"), std::string::npos) << out;
  EXPECT_EQ(out.find("(no GPU events"), std::string::npos) << out;
  EXPECT_NE(out.find("GPU idle time by what the CPU"), std::string::npos) << out;
  std::printf("%s\n", out.c_str());
}

}  // namespace
}  // namespace rw
