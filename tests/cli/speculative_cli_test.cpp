// `redwing run --drafter ngram` on the tiny model with Gemma's vocabulary: the same text as
// without a drafter (greedy and sampled), the --speculation-log format, and its flag errors.
#include <gtest/gtest.h>

#include <sstream>

#include "base/file.h"
#include "base/json.h"
#include "cli/gemma_test_model.h"
#include "test_prereq.h"

namespace rw {
namespace {

struct CmdResult {
  int code;
  std::string out, err;
};

std::string TempPath(const std::string& name) {
  const std::string dir = std::string(REDWING_BUILD_DIR) + "/test_tmp/speculative_cli";
  EXPECT_TRUE(MakeDirectories(dir).ok());
  return dir + "/" + name + "." + std::to_string(getpid());
}

CmdResult Redwing(const std::string& args) {
  const std::string err = TempPath("stderr");
  EXPECT_TRUE(WriteFileAtomic(err, "").ok());
  CmdResult r;
  r.out = test::ShellOut(std::string(REDWING_BINARY) + " " + args + " < /dev/null 2> '" + err + "'",
                         &r.code);
  auto e = ReadFileToString(err);
  r.err = e.ok() ? *e : "";
  std::remove(err.c_str());
  return r;
}

std::string RunArgs() {
  // Repeated text, so that prompt lookup finds matches to draft from.
  return "run --model '" + test::SharedGemmaTinyModel().model_dir +
         "' --prompt 'the red wing flew over the red wing flew over the red wing flew over the'";
}

TEST(SpeculativeCli, NgramPrintsTheSameTextAsPlainDecoding) {
  REQUIRE_GEMMA_TINY_MODEL();
  // This random model rarely repeats itself; a repetition "penalty" below 1 makes it copy the
  // prompt, which gives prompt lookup matches (and the penalty's context a part to play).
  int drafting = 0;
  for (const std::string sampling : {"--temperature 0", "--temperature 1 --top-k 40 --seed 8",
                                     "--temperature 0 --repetition-penalty 0.3",
                                     "--temperature 0.5 --repetition-penalty 0.3 --seed 3"}) {
    const std::string common = RunArgs() + " --max-new 32 " + sampling;
    CmdResult plain = Redwing(common);
    ASSERT_EQ(plain.code, 0) << plain.err;
    CmdResult spec = Redwing(common + " --drafter ngram --draft-tokens 4");
    ASSERT_EQ(spec.code, 0) << spec.err;
    EXPECT_EQ(spec.out, plain.out) << sampling;
    EXPECT_NE(spec.err.find("speculation (ngram, up to 4)"), std::string::npos) << spec.err;
    EXPECT_EQ(plain.err.find("speculation"), std::string::npos) << plain.err;
    if (spec.err.find(" 0 drafted") == std::string::npos) ++drafting;
  }
  EXPECT_GT(drafting, 0) << "no case had drafts to verify";
}

TEST(SpeculativeCli, SpeculationLogHasOneJsonLinePerVerifyStep) {
  REQUIRE_GEMMA_TINY_MODEL();
  const std::string log = TempPath("spec.jsonl");
  // A repetition "penalty" below 1 favours the prompt's tokens: the model copies, and prompt
  // lookup has matches to draft from.
  CmdResult r = Redwing(RunArgs() +
                        " --max-new 40 --temperature 0 --repetition-penalty 0.3 --drafter ngram "
                        "--print-ids --speculation-log '" +
                        log + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  auto text = ReadFileToString(log);
  std::remove(log.c_str());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  std::vector<int> generated;
  for (std::istringstream in(r.out); in;) {
    int x;
    if (in >> x) generated.push_back(x);
  }
  std::istringstream lines(*text);
  std::string line;
  int steps = 0, accepted = 0;
  int64_t last = -1;
  while (std::getline(lines, line)) {
    auto j = ParseJson(line, "speculation log");
    ASSERT_TRUE(j.ok()) << line;
    ASSERT_TRUE(j->is_object() && j->size() == 4) << line;
    const int64_t pos = (*j)["position"].get<int64_t>();
    const auto drafted = (*j)["drafted"].get<std::vector<int>>();
    const int acc = (*j)["accepted"].get<int>();
    const int k = (*j)["k"].get<int>();  // the policy's choice (--draft-tokens auto)
    EXPECT_GT(pos, last) << line;
    EXPECT_FALSE(drafted.empty()) << line;
    EXPECT_LE(drafted.size(), static_cast<size_t>(k)) << line;
    EXPECT_LE(k, 15) << line;
    EXPECT_GE(acc, 0);
    EXPECT_LE(acc, static_cast<int>(drafted.size())) << line;
    last = pos;
    accepted += acc;
    ++steps;
  }
  ASSERT_GT(steps, 0) << "no verify step on a prompt that repeats itself";
  // The stats line counts the same steps.
  EXPECT_NE(r.err.find(fmt::format("{} verify calls", steps)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(fmt::format("{} accepted", accepted)), std::string::npos) << r.err;
  EXPECT_FALSE(generated.empty());
}

TEST(SpeculativeCli, BadSpeculationFlagsAreClearErrors) {
  REQUIRE_GEMMA_TINY_MODEL();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --drafter dflash", "--drafter: drafter must be ngram, oracle:P, off or a drafter directory"},
      {" --drafter oracle:0.8", "redwing bench"},
      {" --drafter ngram --draft-tokens 99", "--draft-tokens must be auto or in 0..64"},
      {" --drafter ngram --draft-tokens some", "--draft-tokens must be auto or in 0..64"},
      {" --draft-tokens 4", "--draft-tokens needs a --drafter"},
      {" --speculation-log x.jsonl", "--speculation-log needs a --drafter"},
  };
  for (const auto& [flags, expect] : cases) {
    CmdResult r = Redwing(RunArgs() + " --max-new 2" + flags);
    EXPECT_NE(r.code, 0) << flags;
    EXPECT_NE(r.err.find(expect), std::string::npos) << flags << ": " << r.err;
  }
}

// `redwing chat --drafter ngram` answers as `redwing chat` without it, turn after turn (the
// policy is kept across turns), and its stats lines report the speculation.
TEST(SpeculativeCli, ChatWithTheDrafterAnswersAsWithout) {
  REQUIRE_GEMMA_TINY_MODEL();
  auto chat = [](const std::string& extra) {
    int rc = 0;
    const std::string out = test::ShellOut(
        "printf 'the red wing flew over the red wing flew over the red wing\\nand again the red "
        "wing\\n/exit\\n' | " +
            std::string(REDWING_BINARY) + " chat --model '" +
            test::SharedGemmaTinyModel().model_dir +
            "' --temperature 0 --max-new 24 --repetition-penalty 0.3" + extra + " 2>&1",
        &rc);
    EXPECT_EQ(rc, 0) << out;
    return out;
  };
  const std::string plain = chat("");
  const std::string spec = chat(" --drafter ngram");
  // The answers: every line but the stats lines (which carry timings).
  auto answers = [](const std::string& out) {
    std::string a;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.find("prompt ") == std::string::npos) a += line + "\n";
    return a;
  };
  EXPECT_EQ(answers(spec), answers(plain)) << spec;
  EXPECT_NE(spec.find("speculation (ngram, auto)"), std::string::npos) << spec;
  EXPECT_EQ(plain.find("speculation"), std::string::npos) << plain;
}

}  // namespace
}  // namespace rw
