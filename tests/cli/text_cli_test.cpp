// The text commands on a tiny model with Gemma's real vocabulary: `redwing tokenize`, `redwing
// run` (chat round trip against the @huggingface/jinja + @lenml/tokenizers oracle, streaming,
// reproducible sampling, flag errors) and `redwing chat` driven through a pseudo-terminal.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <regex>
#include <sstream>

#include "base/file.h"
#include "base/json.h"
#include "cli/gemma_test_model.h"
#include "cli/pty_process.h"
#include "test_prereq.h"
#include "tokenizer/tokenizer.h"

namespace rw {
namespace {

const test::GemmaTestModel& Model() {
  return test::SharedGemmaTinyModel();
}

struct CmdResult {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string TempPath(const std::string& name) {
  return std::string(REDWING_BUILD_DIR) + "/test_tmp/text/" + name + "." + std::to_string(getpid());
}

CmdResult Redwing(const std::string& args, const std::string& stdin_text = "") {
  const std::string in = TempPath("stdin"), err = TempPath("stderr");
  EXPECT_TRUE(WriteFileAtomic(in, stdin_text).ok());
  int rc = 0;
  CmdResult r;
  r.out = test::ShellOut(
      std::string(REDWING_BINARY) + " " + args + " < '" + in + "' 2> '" + err + "'", &rc);
  r.code = rc;
  auto e = ReadFileToString(err);
  r.err = e.ok() ? *e : "";
  std::remove(in.c_str());
  std::remove(err.c_str());
  return r;
}

std::string ModelArg() {
  return "--model '" + Model().model_dir + "'";
}

TEST(TokenizeCli, EncodesDecodesAndMatchesTheLibrary) {
  REQUIRE_GEMMA_TINY_MODEL();
  auto tok = Tokenizer::Load(Model().tokenizer_dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const std::string text = "Hello world! Grüße, 你好 🦜\n  indented";
  CmdResult enc = Redwing("tokenize " + ModelArg(), text);
  ASSERT_EQ(enc.code, 0) << enc.err;
  auto ids = ParseJson(enc.out, "stdout");
  ASSERT_TRUE(ids.ok()) << enc.out;
  EXPECT_EQ(ids->get<std::vector<int32_t>>(), tok->Encode(text));

  CmdResult bos = Redwing("tokenize --bos " + ModelArg(), "hi");
  ASSERT_EQ(bos.code, 0);
  EXPECT_EQ(bos.out.rfind("[2, ", 0), 0u) << bos.out;

  CmdResult dec = Redwing("tokenize --decode " + ModelArg(), enc.out);
  ASSERT_EQ(dec.code, 0) << dec.err;
  EXPECT_EQ(dec.out, text);

  const std::string file = TempPath("text.txt");
  ASSERT_TRUE(WriteFileAtomic(file, "from a file").ok());
  CmdResult ff = Redwing("tokenize " + ModelArg() + " --file '" + file + "'");
  std::remove(file.c_str());
  ASSERT_EQ(ff.code, 0);
  EXPECT_EQ(ParseJson(ff.out, "stdout")->get<std::vector<int32_t>>(), tok->Encode("from a file"));
}

TEST(TokenizeCli, BadInputIsAClearError) {
  REQUIRE_GEMMA_TINY_MODEL();
  CmdResult bad_id = Redwing("tokenize --decode " + ModelArg(), "[1, 99999999]");
  EXPECT_EQ(bad_id.code, 1);
  EXPECT_NE(bad_id.err.find("99999999"), std::string::npos) << bad_id.err;
  CmdResult junk = Redwing("tokenize --decode " + ModelArg(), "[1, two]");
  EXPECT_NE(junk.code, 0);
  EXPECT_NE(junk.err.find("'two'"), std::string::npos) << junk.err;
  CmdResult missing = Redwing("tokenize --model /nonexistent/dir");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("/nonexistent/dir"), std::string::npos) << missing.err;
  CmdResult both = Redwing("tokenize --decode --bos " + ModelArg(), "[1]");
  EXPECT_EQ(both.code, 2) << both.err;
}

// The conversations of the round trip: roles, system/developer, thinking on and off, several
// turns, unicode, an empty message, and tools.
Json RoundTripCases() {
  return Json::parse(R"([
    {"messages": [{"role": "user", "content": "Hello!"}], "enable_thinking": false},
    {"messages": [{"role": "user", "content": "Hello!"}], "enable_thinking": true},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Name three rivers."}], "enable_thinking": false},
    {"messages": [{"role": "developer", "content": "Answer in French."},
                  {"role": "user", "content": "What is 2+2?"},
                  {"role": "assistant", "content": "Quatre."},
                  {"role": "user", "content": "And 3+3?"}], "enable_thinking": true},
    {"messages": [{"role": "user", "content": "Grüße 👋 你好 — «quotes» \"and\" tabs\tand\nnewlines"}],
     "enable_thinking": false},
    {"messages": [{"role": "user", "content": ""}], "enable_thinking": false},
    {"messages": [{"role": "user", "content": "Weather in Paris?"}],
     "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "Current weather", "parameters": {"type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"]}}}],
     "enable_thinking": false}
  ])");
}

TEST(RunCli, ChatPromptIdsEqualTheOracleTemplateTokenizedByTheOracleTokenizer) {
  REQUIRE_GEMMA_TINY_MODEL();
  const std::string tpl = std::string(REDWING_SOURCE_DIR) + "/tests/fixtures/gemma4-templates/" +
                          "google-gemma-4-31B-it.jinja";
  ASSERT_TRUE(PathExists(tpl)) << "the committed Gemma 4 template is not at " << tpl;
  REQUIRE_OR_SKIP(IsDirectory(test::NodeModulesDir() + "/@huggingface/jinja"),
                  "@huggingface/jinja under tests/node/node_modules (scripts/install-deps.sh)");
  const Json cases = RoundTripCases();
  const std::string cases_path = TempPath("cases.json"), oracle_path = TempPath("oracle.json");
  ASSERT_TRUE(WriteFileAtomic(cases_path, cases.dump()).ok());
  int rc = 0;
  std::string log = test::ShellOut(
      "node '" + std::string(REDWING_SOURCE_DIR) + "/tests/cli/chat_roundtrip_oracle.js' '" +
          test::NodeModulesDir() + "' '" + Model().tokenizer_dir + "' '" + tpl + "' '" +
          cases_path + "' '" + oracle_path + "' 2>&1",
      &rc);
  ASSERT_EQ(rc, 0) << log;
  auto oracle_text = ReadFileToString(oracle_path);
  ASSERT_TRUE(oracle_text.ok());
  const Json oracle = Json::parse(*oracle_text);
  ASSERT_EQ(oracle.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + cases[i].dump());
    const std::string f = TempPath("messages" + std::to_string(i) + ".json");
    Json file{{"messages", cases[i]["messages"]}};
    if (cases[i].contains("tools")) file["tools"] = cases[i]["tools"];
    ASSERT_TRUE(WriteFileAtomic(f, file.dump()).ok());
    CmdResult r = Redwing("run " + ModelArg() + " --messages-file '" + f + "' --thinking " +
                          (cases[i]["enable_thinking"].get<bool>() ? "on" : "off") +
                          " --print-prompt-ids --max-new 0 --quiet");
    std::remove(f.c_str());
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string first = r.out.substr(0, r.out.find('\n'));
    auto ids = ParseJson(first, "stdout");
    ASSERT_TRUE(ids.ok()) << r.out;
    EXPECT_EQ(ids->get<std::vector<int>>(), oracle[i]["ids"].get<std::vector<int>>())
        << "oracle text:\n"
        << oracle[i]["text"].get<std::string>();
  }
  std::remove(cases_path.c_str());
  std::remove(oracle_path.c_str());
}

TEST(RunCli, StreamsTextThatDecodesTheSampledIds) {
  REQUIRE_GEMMA_TINY_MODEL();
  auto tok = Tokenizer::Load(Model().tokenizer_dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const std::string common = "run " + ModelArg() + " --prompt 'Once upon a time' --max-new 12 " +
                             "--temperature 0.9 --seed 7";
  CmdResult ids = Redwing(common + " --print-ids --quiet");
  ASSERT_EQ(ids.code, 0) << ids.err;
  std::vector<int32_t> v;
  for (std::istringstream in(ids.out); in;) {
    int x;
    if (in >> x) v.push_back(x);
  }
  ASSERT_FALSE(v.empty());
  CmdResult text = Redwing(common);
  ASSERT_EQ(text.code, 0) << text.err;
  // Stop ids end generation without being printed.
  std::vector<int32_t> printable;
  for (int32_t id : v)
    if (id != 1 && id != 106 && id != 50) printable.push_back(id);
  EXPECT_EQ(text.out, tok->Decode(printable) + "\n");
  EXPECT_NE(text.err.find("prompt 5 tokens"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("seed 7"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("peak RSS"), std::string::npos) << text.err;
}

TEST(RunCli, SameSeedSameTextWhateverThePrefillChunking) {
  REQUIRE_GEMMA_TINY_MODEL();
  const std::string common =
      "run " + ModelArg() + " --chat-prompt 'Tell me a story about a red wing' --max-new 16 " +
      "--temperature 1.0 --top-k 0 --top-p 1 --seed 1234 --print-ids --quiet";
  CmdResult a = Redwing(common + " --prefill-chunk 3");
  CmdResult b = Redwing(common + " --prefill-chunk 64");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  CmdResult c = Redwing("run " + ModelArg() +
                        " --chat-prompt 'Tell me a story about a red wing' --max-new 16 "
                        "--temperature 1.0 --top-k 0 --top-p 1 --seed 99 --print-ids --quiet");
  EXPECT_NE(a.out, c.out) << "different seeds drew the same 16 tokens";
}

TEST(RunCli, StopStringEndsTheAnswer) {
  REQUIRE_GEMMA_TINY_MODEL();
  // Generate once, then stop on a piece of what came out: the text ends just before it. Greedy
  // on this model (seed 11, Gemma's 262,144 ids) writes 24 tokens of about 170 bytes: the stop
  // ids are 3 of 262,144, so an early end is not a chance this test needs to skip for.
  CmdResult full =
      Redwing("run " + ModelArg() + " --prompt 'abc' --max-new 24 --temperature 0 --quiet");
  ASSERT_EQ(full.code, 0) << full.err;
  const std::string text = full.out.substr(0, full.out.size() - 1);
  ASSERT_GE(text.size(), 24u) << "the model wrote too little text to cut: '" << text << "'";
  const std::string stop = text.substr(text.size() / 2, 3);
  const std::string want = text.substr(0, text.find(stop));
  const std::string f = TempPath("stop.txt");
  ASSERT_TRUE(WriteFileAtomic(f, stop).ok());
  CmdResult cut =
      Redwing("run " + ModelArg() +
              " --prompt 'abc' --max-new 24 --temperature 0 --stop=\"$(cat '" + f + "')\"");
  std::remove(f.c_str());
  ASSERT_EQ(cut.code, 0) << cut.err;
  EXPECT_EQ(cut.out, want + "\n");
  EXPECT_NE(cut.err.find("(stop)"), std::string::npos) << cut.err;
}

TEST(RunCli, BadFlagsAreClearErrors) {
  REQUIRE_GEMMA_TINY_MODEL();
  struct Case {
    std::string args, expect;
    int code;
  };
  const std::vector<Case> cases = {
      {"run " + ModelArg(), "give a prompt", 2},
      {"run " + ModelArg() + " --prompt a --chat-prompt b", "only one of", 2},
      {"run " + ModelArg() + " --prompt a --thinking on", "--thinking applies", 2},
      {"run " + ModelArg() + " --chat-prompt a --thinking maybe", "on or off", 2},
      {"run " + ModelArg() + " --chat-prompt a --top-p 1.5", "top_p", 2},
      {"run " + ModelArg() + " --chat-prompt a --temperature -1", "temperature", 2},
      {"run " + ModelArg() + " --prompt a --system b", "--system goes with --chat-prompt", 2},
      {"run " + ModelArg() + " --chat-prompt a --tmperature 1", "unknown option --tmperature", 2},
      {"run " + ModelArg() + " --messages-file /nonexistent.json", "/nonexistent.json", 1},
      {"run " + ModelArg() + " --chat-prompt a --max-context 8", "context", 1},
  };
  for (const Case& c : cases) {
    CmdResult r = Redwing(c.args + " --max-new 2");
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << "\n" << r.err;
  }
  const std::string f = TempPath("bad.json");
  ASSERT_TRUE(WriteFileAtomic(f, "{\"messages\": 3}").ok());
  CmdResult r = Redwing("run " + ModelArg() + " --messages-file '" + f + "'");
  std::remove(f.c_str());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("array of messages"), std::string::npos) << r.err;
}

// "[prompt N tokens (F new, R reused from the cache)..." -> {N, F, R}.
std::vector<std::array<int, 3>> StatsLines(const std::string& out) {
  std::vector<std::array<int, 3>> v;
  std::regex re(R"(prompt (\d+) tokens \((\d+) new, (\d+) reused)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3])});
  return v;
}

TEST(ChatCli, TwoTurnsThroughATerminalReuseTheFirstTurnsCache) {
  REQUIRE_GEMMA_TINY_MODEL();
  test::PtyProcess p({REDWING_BINARY, "chat", "--model", Model().model_dir, "--temperature", "0",
                      "--max-new", "6"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.WaitFor("> ", 0, 60)) << p.output();
  size_t mark = p.output().size();
  p.Send("Hello there\n");
  ASSERT_TRUE(p.WaitFor("reused from the cache", mark, 60)) << p.output();
  ASSERT_TRUE(p.WaitFor("> ", p.output().rfind("reused from the cache"), 60)) << p.output();
  mark = p.output().size();
  p.Send("How are you?\n");
  ASSERT_TRUE(p.WaitFor("reused from the cache", mark, 60)) << p.output();
  auto stats = StatsLines(p.output());
  ASSERT_EQ(stats.size(), 2u) << p.output();
  const auto [n1, new1, reused1] = stats[0];
  const auto [n2, new2, reused2] = stats[1];
  EXPECT_EQ(reused1, 0);
  EXPECT_EQ(new1, n1);
  // Turn two starts with all of turn one (its prompt and answer): only what follows is new.
  EXPECT_GE(reused2, n1) << p.output();
  EXPECT_EQ(new2 + reused2, n2);
  // "<turn|>\n<|turn>user\nHow are you?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>" and
  // at most the one generated token not yet in the cache.
  EXPECT_LE(new2, 24) << p.output();

  ASSERT_TRUE(p.WaitFor("> ", p.output().rfind("reused from the cache"), 60));
  mark = p.output().size();
  p.Send("/reset\n");
  ASSERT_TRUE(p.WaitFor("[conversation cleared]", mark, 30)) << p.output();
  mark = p.output().size();
  p.Send("Hello there\n");
  ASSERT_TRUE(p.WaitFor("reused from the cache", mark, 60)) << p.output();
  stats = StatsLines(p.output());
  ASSERT_EQ(stats.size(), 3u);
  EXPECT_EQ(stats[2][0], n1);
  EXPECT_EQ(stats[2][2], 0) << "after /reset nothing is reused";
  mark = p.output().size();
  p.Send("/exit\n");
  EXPECT_EQ(p.WaitExit(30), 0) << p.output();
}

TEST(ChatCli, CtrlCStopsTheAnswerNotTheProgram) {
  REQUIRE_GEMMA_TINY_MODEL();
  test::PtyProcess p({REDWING_BINARY, "chat", "--model", Model().model_dir, "--max-new", "100000",
                      "--max-context", "4096", "--quiet"});
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.WaitFor("> ", 0, 60)) << p.output();
  size_t mark = p.output().size();
  p.Send("Write a very long story\n");
  // Wait for some answer text, then interrupt.
  ASSERT_TRUE(p.WaitForSize(mark + 80, 60)) << p.output();
  p.SendInterrupt();
  ASSERT_TRUE(p.WaitFor("[stopped]", mark, 30)) << p.output();
  ASSERT_TRUE(p.WaitFor("> ", p.output().find("[stopped]"), 30)) << p.output();
  // Ctrl-C at the prompt does not quit either.
  mark = p.output().size();
  p.SendInterrupt();
  ASSERT_TRUE(p.WaitFor("/exit or Ctrl-D quits", mark, 30)) << p.output();
  // Ctrl-D (end of input) leaves cleanly.
  p.Send("\x04");
  EXPECT_EQ(p.WaitExit(30), 0) << p.output();
}

}  // namespace
}  // namespace rw
