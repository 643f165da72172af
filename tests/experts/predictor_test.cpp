// The fitted early-read predictor: fitting, prediction, file round trips and damaged files, and
// `redwing trace` → `redwing fit-predictor` → `--early-expert-read fitted` end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "base/file.h"
#include "experts/predictor.h"
#include "install/synth.h"

namespace rw {
namespace {

std::string Temp(const std::string& name) {
  const std::string root = JoinPath(REDWING_BUILD_DIR, "test_tmp/predictor");
  EXPECT_TRUE(MakeDirectories(root).ok());
  return JoinPath(root, name + "." + std::to_string(getpid()));
}

// Layer l+1 chooses {2i, 2i+1 mod E} when layer l chose expert i first: a rule to learn.
RoutingTrace RuleTrace(int tokens, int layers, int experts, unsigned seed) {
  RoutingTrace t;
  t.layers = layers;
  t.top_k = 2;
  t.num_experts = experts;
  std::srand(seed);
  for (int n = 0; n < tokens; ++n) {
    int first = std::rand() % experts, second = (first + 1 + std::rand() % (experts - 1)) % experts;
    for (int l = 0; l < layers; ++l) {
      t.ids.push_back(first);
      t.ids.push_back(second);
      const int next = (2 * first) % experts;
      second = (2 * first + 1) % experts;
      first = next;
    }
  }
  return t;
}

TEST(ExpertPredictor, LearnsTransitionsAndRoundTrips) {
  std::vector<RoutingTrace> traces = {RuleTrace(400, 4, 16, 1)};
  auto p = ExpertPredictor::Fit(traces);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<int> guess;
  // At layer 1 the pair is (2f, 2f+1) for layer 0's first choice f; {6, 7} leads to {12, 13}.
  p->Predict(1, std::vector<int>{6, 7}, 2, &guess);
  ASSERT_EQ(guess.size(), 2u);
  std::sort(guess.begin(), guess.end());
  EXPECT_EQ(guess, (std::vector<int>{12, 13}));
  EXPECT_GT(p->Accuracy(RuleTrace(100, 4, 16, 2)), 0.5);
  p->Predict(3, std::vector<int>{1}, 2, &guess);
  EXPECT_TRUE(guess.empty()) << "no layer after the last";

  const std::string path = Temp("pred.bin");
  ASSERT_TRUE(p->Write(path).ok());
  auto back = ExpertPredictor::Read(path, 4, 16);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  std::vector<int> again;
  back->Predict(1, std::vector<int>{6, 7}, 2, &again);
  p->Predict(1, std::vector<int>{6, 7}, 2, &guess);
  EXPECT_EQ(again, guess);
  auto other = ExpertPredictor::Read(path, 5, 16);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("4 layers"), std::string::npos);
  // Cut file and wrong magic.
  auto bytes = ReadFileToString(path);
  ASSERT_TRUE(WriteFileAtomic(path, bytes->substr(0, bytes->size() - 7)).ok());
  EXPECT_EQ(ExpertPredictor::Read(path, 4, 16).status().code(), ErrorCode::kCorrupt);
  ASSERT_TRUE(WriteFileAtomic(path, "not a predictor at all, no").ok());
  EXPECT_EQ(ExpertPredictor::Read(path, 4, 16).status().code(), ErrorCode::kCorrupt);
  // A huge file (sparse: nothing written) is refused unread.
  std::filesystem::resize_file(path, uint64_t{8} << 30);
  auto huge = ExpertPredictor::Read(path, 4, 16);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("8589934592 bytes, more than"), std::string::npos)
      << huge.status().message();
  std::remove(path.c_str());

  // Traces: round trip, damage, mixing models.
  const std::string tp = Temp("trace.bin");
  ASSERT_TRUE(traces[0].Write(tp).ok());
  auto t = RoutingTrace::Read(tp);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ids, traces[0].ids);
  std::string raw = *ReadFileToString(tp);
  raw[24] = 99;  // an expert id beyond 16
  ASSERT_TRUE(WriteFileAtomic(tp, raw).ok());
  EXPECT_FALSE(RoutingTrace::Read(tp).ok());
  std::remove(tp.c_str());
  traces.push_back(RuleTrace(10, 5, 16, 3));
  EXPECT_FALSE(ExpertPredictor::Fit(traces).ok());
  EXPECT_FALSE(ExpertPredictor::Fit({}).ok());
}

int Sh(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(ExpertPredictor, TraceFitAndRunFromTheCommandLine) {
  SynthOptions o;
  o.geometry = "tiny";
  o.seed = 3;
  o.routing_skew = 1.0;
  o.out_dir = Temp("model");
  o.overwrite = true;
  ASSERT_TRUE(SynthesizeModel(o).ok());
  const std::string bin = REDWING_BINARY, m = o.out_dir, t1 = Temp("t1"), t2 = Temp("t2");
  std::string out;
  // Without a predictor, fitted mode says what to do.
  ASSERT_NE(
      Sh(bin + " run --model " + m + " --prompt-ids 2,3 --max-new 2 --early-expert-read fitted",
         &out),
      0);
  EXPECT_NE(out.find("redwing fit-predictor"), std::string::npos) << out;
  ASSERT_EQ(
      Sh(bin + " trace --model " + m + " --prompt-ids 2,5,9 --max-new 60 --seed 1 --out " + t1,
         &out),
      0)
      << out;
  ASSERT_EQ(
      Sh(bin + " trace --model " + m + " --prompt-ids 2,7 --max-new 60 --seed 2 --out " + t2, &out),
      0)
      << out;
  out.clear();
  ASSERT_EQ(Sh(bin + " fit-predictor --model " + m + " --trace " + t1 + " --trace " + t2, &out), 0)
      << out;
  EXPECT_NE(out.find("held-out"), std::string::npos) << out;
  // Early reads never change the answer.
  std::string plain, fitted;
  const std::string run = bin + " run --model " + m +
                          " --prompt-ids 2,40,7 --max-new 24 --temperature 1 --seed 9 --print-ids "
                          "--quiet --expert-store slots ";
  ASSERT_EQ(Sh(run + "--early-expert-read off", &plain), 0) << plain;
  ASSERT_EQ(Sh(run + "--early-expert-read fitted", &fitted), 0) << fitted;
  EXPECT_EQ(plain, fitted);
  // A trace of another model is refused by name.
  RoutingTrace foreign = RuleTrace(5, 3, 16, 4);
  ASSERT_TRUE(foreign.Write(t2).ok());
  out.clear();
  EXPECT_NE(Sh(bin + " fit-predictor --model " + m + " --trace " + t2, &out), 0);
  EXPECT_NE(out.find("another model"), std::string::npos) << out;
  std::remove(t1.c_str());
  std::remove(t2.c_str());
  (void)RemoveAll(m);
}

}  // namespace
}  // namespace rw
