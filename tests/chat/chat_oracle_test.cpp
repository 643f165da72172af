// Byte-for-byte comparison of the C++ chat renderers against reference template engines:
// chat_oracle.js renders chat_conversations.js through both Gemma 4 templates with
// @huggingface/jinja, chat_oracle.py (when Python jinja2 is installed) with jinja2 configured
// as transformers does. Compared: the Jinja interpreter on each template file, and the native
// Gemma 4 renderer against the official 26B/31B template, in the matching dialect.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "base/file.h"
#include "base/json.h"
#include "chat/chat_gemma4.h"
#include "chat/chat_template.h"
#include "chat/chat_tool_call.h"
#include "chat/jinja_template.h"
#include "test_prereq.h"

namespace rw {
namespace {

const char kOfficialTemplate[] = "google-gemma-4-31B-it.jinja";

std::string TemplatesDir() {
  return std::string(REDWING_SOURCE_DIR) + "/tests/fixtures/gemma4-templates";
}
std::string NodeModules() {
  return std::string(REDWING_SOURCE_DIR) + "/tests/node/node_modules";
}
std::string ScriptDir() {
  return std::string(REDWING_SOURCE_DIR) + "/tests/chat";
}
std::string OutDir() {
  return std::string(REDWING_BUILD_DIR) + "/chat_oracle";
}

int Run(const std::string& cmd) {
  return std::system(cmd.c_str());
}

struct Oracle {
  bool loaded = false;
  std::string missing;  // a prerequisite that is not installed (node, @huggingface/jinja)
  std::string error;    // the oracle ran and failed
  Json cases;           // from the node oracle
  std::map<std::string, Json> hf;                // template file -> renders
  std::map<std::string, Json> py;                // empty when Python jinja2 is unavailable
  std::string py_missing;                        // non-empty: Python jinja2 is not installed
  std::string py_error;                          // non-empty: chat_oracle.py failed
  Json jinja_cases;                              // generic interpreter cases (chat_jinja_cases.js)
  Json jinja_hf, jinja_py;                       // their renders; jinja_py null without jinja2
  std::map<std::string, std::string> templates;  // file -> text
};

const Oracle& GetOracle() {
  static const Oracle* oracle = [] {
    auto* o = new Oracle;
    if (!IsDirectory(NodeModules() + "/@huggingface/jinja")) {
      o->missing = "@huggingface/jinja under " + NodeModules() + " (scripts/install-deps.sh)";
      return o;
    }
    if (Run("node --version > /dev/null 2>&1") != 0) {
      o->missing = "node on PATH (scripts/install-deps.sh installs it)";
      return o;
    }
    (void)MakeDirectories(OutDir());
    // ctest runs each test in its own process, possibly in parallel: per-process files, renamed
    // into place afterwards for inspection.
    const std::string suffix = "." + std::to_string(getpid());
    std::string hf_path = OutDir() + "/hf.json" + suffix;
    std::string log = OutDir() + "/oracle.log" + suffix;
    std::string cmd = "node '" + ScriptDir() + "/chat_oracle.js' '" + NodeModules() + "' '" +
                      TemplatesDir() + "' '" + hf_path + "' > '" + log + "' 2>&1";
    if (Run(cmd) != 0) {
      auto l = ReadFileToString(log);
      o->error = "chat_oracle.js failed (" + log + "):\n" + (l.ok() ? *l : "");
      return o;
    }
    auto text = ReadFileToString(hf_path);
    if (!text.ok()) {
      o->error = text.status().ToString();
      return o;
    }
    auto j = ParseJson(*text, hf_path);
    if (!j.ok()) {
      o->error = j.status().ToString();
      return o;
    }
    o->cases = (*j)["cases"];
    o->jinja_cases = (*j)["jinja_cases"];
    o->jinja_hf = (*j)["jinja_renders"];
    for (auto it = (*j)["renders"].begin(); it != (*j)["renders"].end(); ++it)
      o->hf[it.key()] = it.value();
    for (const auto& [file, _] : o->hf) {
      auto t = ReadFileToString(TemplatesDir() + "/" + file);
      if (t.ok()) o->templates[file] = *t;
    }
    // Python jinja2 is optional (scripts/install-deps.sh does not install it): without it those
    // comparisons skip, saying so; with it, a failing oracle is a failure.
    if (Run("python3 -c 'import jinja2' > /dev/null 2>&1") != 0) {
      o->py_missing = "Python jinja2 is not installed (optional: apt-get install python3-jinja2)";
    } else {
      std::string py_path = OutDir() + "/py.json" + suffix;
      std::string py_cmd = "python3 '" + ScriptDir() + "/chat_oracle.py' '" + hf_path + "' '" +
                           TemplatesDir() + "' '" + py_path + "' >> '" + log + "' 2>&1";
      auto pt = Run(py_cmd) == 0
                    ? ReadFileToString(py_path)
                    : Result<std::string>(Error(ErrorCode::kInternal, "chat_oracle.py failed"));
      auto pj = pt.ok() ? ParseJson(*pt, py_path) : Result<Json>(pt.status());
      if (pj.ok()) {
        for (auto it = (*pj)["renders"].begin(); it != (*pj)["renders"].end(); ++it)
          o->py[it.key()] = it.value();
        o->jinja_py = (*pj)["jinja_renders"];
        std::rename(py_path.c_str(), (OutDir() + "/py.json").c_str());
      } else {
        auto l = ReadFileToString(log);
        o->py_error = pj.status().ToString() + " (" + log + "):\n" + (l.ok() ? *l : "");
      }
    }
    std::rename(hf_path.c_str(), (OutDir() + "/hf.json").c_str());
    std::rename(log.c_str(), (OutDir() + "/oracle.log").c_str());
    o->loaded = true;
    return o;
  }();
  return *oracle;
}

// Skips (under CI fails) without node and @huggingface/jinja; fails if the oracle did.
#define REQUIRE_ORACLE()                                   \
  const Oracle& oracle = GetOracle();                      \
  REQUIRE_OR_SKIP(oracle.missing.empty(), oracle.missing); \
  ASSERT_TRUE(oracle.error.empty()) << oracle.error;       \
  ASSERT_TRUE(oracle.loaded)

// For the comparisons over the Gemma 4 templates (committed under tests/fixtures), which would
// pass vacuously without them: both must have been rendered.
#define REQUIRE_TEMPLATES() \
  REQUIRE_ORACLE();         \
  ASSERT_EQ(oracle.hf.size(), 2u) << "templates rendered from " << TemplatesDir()

// An optional oracle (not in scripts/install-deps.sh, so not required under CI either): skips
// saying so without Python jinja2; fails if chat_oracle.py ran and failed.
#define REQUIRE_PYTHON_ORACLE()                                      \
  if (!oracle.py_missing.empty()) GTEST_SKIP() << oracle.py_missing; \
  ASSERT_TRUE(oracle.py_error.empty()) << oracle.py_error;           \
  ASSERT_FALSE(oracle.py.empty() || oracle.jinja_py.is_null()) << "no Python renders"

std::string Describe(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) +
         "\n  want: " + Json(want.substr(from, 120)).dump() +
         "\n  got:  " + Json(got.substr(from, 120)).dump();
}

Result<std::string> RenderCase(const ChatTemplate& t, const Json& c) {
  return t.Render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(),
                  c["enable_thinking"].get<bool>());
}

// Compares one renderer against one oracle's renders of one template. Returns the number of
// cases compared.
int Compare(const ChatTemplate& renderer, const Json& cases, const Json& renders, bool hf_oracle,
            const std::string& label) {
  int compared = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    const std::string name = c["name"].get<std::string>();
    const Json& want = renders[i];
    auto got = RenderCase(renderer, c);
    if (want.contains("error")) {
      if (hf_oracle && c["hf_fails"].get<bool>())
        continue;  // Python semantics apply; see the py oracle
      EXPECT_FALSE(got.ok()) << label << " / " << name << ": the reference failed ("
                             << want["error"].get<std::string>() << ") but we rendered";
      ++compared;
      continue;
    }
    if (!got.ok()) {
      ADD_FAILURE() << label << " / " << name << ": " << got.status().ToString();
      continue;
    }
    const std::string expected = want["output"].get<std::string>();
    EXPECT_TRUE(*got == expected) << label << " / " << name << ": " << Describe(expected, *got);
    ++compared;
  }
  return compared;
}

TEST(ChatOracle, HasEnoughCases) {
  REQUIRE_ORACLE();
  EXPECT_GE(oracle.cases.size(), 50u);
  EXPECT_EQ(oracle.hf.size(), 2u);
  EXPECT_TRUE(oracle.hf.count(kOfficialTemplate));
}

TEST(ChatOracle, JinjaInterpreterMatchesHuggingFaceJinja) {
  REQUIRE_TEMPLATES();
  for (const auto& [file, renders] : oracle.hf) {
    auto t = ChatTemplate::FromText(oracle.templates.at(file), {jinja::Dialect::kHuggingFaceJs});
    ASSERT_TRUE(t.ok()) << file << ": " << t.status().ToString();
    int n = Compare(*t, oracle.cases, renders, true, "jinja(hf) " + file);
    std::printf("  %s: %d cases compared with %s\n", file.c_str(), n, "@huggingface/jinja");
  }
}

TEST(ChatOracle, NativeRendererMatchesHuggingFaceJinja) {
  REQUIRE_TEMPLATES();
  ChatTemplate native = ChatTemplate::Native({jinja::Dialect::kHuggingFaceJs});
  int n = Compare(native, oracle.cases, oracle.hf.at(kOfficialTemplate), true, "native(hf)");
  std::printf("  native: %d cases compared with @huggingface/jinja\n", n);
}

TEST(ChatOracle, JinjaInterpreterMatchesPythonJinja2) {
  REQUIRE_TEMPLATES();
  REQUIRE_PYTHON_ORACLE();
  for (const auto& [file, renders] : oracle.py) {
    auto t = ChatTemplate::FromText(oracle.templates.at(file), {jinja::Dialect::kPython});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    int n = Compare(*t, oracle.cases, renders, false, "jinja(py) " + file);
    std::printf("  %s: %d cases compared with jinja2\n", file.c_str(), n);
  }
}

TEST(ChatOracle, NativeRendererMatchesPythonJinja2) {
  REQUIRE_TEMPLATES();
  REQUIRE_PYTHON_ORACLE();
  int n = Compare(ChatTemplate::Gemma4Default(), oracle.cases, oracle.py.at(kOfficialTemplate),
                  false, "native(py)");
  std::printf("  native: %d cases compared with jinja2\n", n);
}

// Without the Python oracle, the Python dialect is still checked on every case whose output
// does not depend on how values print.
TEST(ChatOracle, DialectsAgreeWhereOutputIsDialectIndependent) {
  REQUIRE_TEMPLATES();
  ChatTemplate py = ChatTemplate::Native({jinja::Dialect::kPython});
  ChatTemplate hf = ChatTemplate::Native({jinja::Dialect::kHuggingFaceJs});
  for (const Json& c : oracle.cases) {
    if (c["dialect_sensitive"].get<bool>() || c["hf_fails"].get<bool>()) continue;
    auto a = RenderCase(py, c);
    auto b = RenderCase(hf, c);
    ASSERT_EQ(a.ok(), b.ok()) << c["name"];
    if (a.ok()) {
      EXPECT_EQ(*a, *b) << c["name"];
    }
  }
}

// The interpreter on templates in other models' styles and on feature snippets.
void CompareJinjaCases(const Oracle& oracle, const Json& renders, jinja::Dialect dialect,
                       const char* label) {
  int compared = 0;
  for (size_t i = 0; i < oracle.jinja_cases.size(); ++i) {
    const Json& c = oracle.jinja_cases[i];
    const std::string name = c["name"].get<std::string>();
    if (dialect == jinja::Dialect::kHuggingFaceJs && c["py_only"].get<bool>()) continue;
    auto t = jinja::Template::Parse(c["template"].get<std::string>());
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    jinja::RenderOptions options;
    options.dialect = dialect;
    auto got = t->Render(c["context"], options);
    const Json& want = renders[i];
    ++compared;
    if (want.contains("error")) {
      EXPECT_FALSE(got.ok()) << label << " / " << name << ": reference failed (" << want["error"]
                             << ")";
      if (!got.ok()) {
        // The message a template raises reaches the caller.
        std::string raised = want["error"].get<std::string>();
        raised = raised.substr(raised.find(": ") == std::string::npos ? 0 : raised.find(": ") + 2);
        if (name.find("raise") != std::string::npos) {
          EXPECT_NE(got.status().message().find(raised), std::string::npos)
              << got.status().ToString();
        }
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << label << " / " << name << ": " << got.status().ToString();
    EXPECT_TRUE(*got == want["output"].get<std::string>())
        << label << " / " << name << ": " << Describe(want["output"].get<std::string>(), *got);
  }
  std::printf("  %d jinja cases compared with %s\n", compared, label);
}

TEST(ChatOracle, GenericTemplatesMatchHuggingFaceJinja) {
  REQUIRE_ORACLE();
  ASSERT_GE(oracle.jinja_cases.size(), 30u);
  CompareJinjaCases(oracle, oracle.jinja_hf, jinja::Dialect::kHuggingFaceJs, "@huggingface/jinja");
}

TEST(ChatOracle, GenericTemplatesMatchPythonJinja2) {
  REQUIRE_ORACLE();
  REQUIRE_PYTHON_ORACLE();
  CompareJinjaCases(oracle, oracle.jinja_py, jinja::Dialect::kPython, "jinja2");
}

// Rendering a tool call and parsing the rendered text gives back the same call.
TEST(ChatOracle, RenderedToolCallsParseBack) {
  REQUIRE_TEMPLATES();
  int checked = 0;
  for (jinja::Dialect dialect : {jinja::Dialect::kPython, jinja::Dialect::kHuggingFaceJs}) {
    ChatTemplate native = ChatTemplate::Native({dialect});
    for (const Json& c : oracle.cases) {
      if (c["expect_error"].get<bool>()) continue;
      for (const Json& m : c["template_messages"]) {
        if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
        Json messages = Json::array({{{"role", "user"}, {"content", "go"}}, m});
        auto text = native.Render(messages, nullptr, false, false);
        ASSERT_TRUE(text.ok()) << c["name"] << ": " << text.status().ToString();
        size_t start = text->find("<|turn>model\n");
        ASSERT_NE(start, std::string::npos);
        auto calls = ParseToolCalls(text->substr(start));
        ASSERT_TRUE(calls.ok()) << c["name"] << ": " << calls.status().ToString();
        ASSERT_EQ(calls->size(), m["tool_calls"].size()) << c["name"];
        for (size_t k = 0; k < calls->size(); ++k) {
          const Json& fn = m["tool_calls"][k]["function"];
          EXPECT_EQ((*calls)[k].name, fn["name"].get<std::string>()) << c["name"];
          EXPECT_EQ((*calls)[k].arguments, fn["arguments"]) << c["name"] << " arguments";
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
}  // namespace rw
