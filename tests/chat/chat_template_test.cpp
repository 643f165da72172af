// ChatTemplate: the native Gemma 4 renderer's exact output, OpenAI-shape normalization, model
// directory loading, and native-vs-template agreement on conversations built here (so it runs
// without node; the oracle test covers far more cases).
#include <gtest/gtest.h>

#include <string>

#include "base/file.h"
#include "base/json.h"
#include "chat/chat_template.h"

namespace rw {
namespace {

Json Msg(const char* role, const Json& content) {
  return {{"role", role}, {"content", content}};
}

std::string Render(const ChatTemplate& t, const Json& messages, const Json& tools = nullptr,
                   bool gen = true, bool think = false, const Json& extra = nullptr) {
  auto r = t.Render(messages, tools, gen, think, extra);
  return r.ok() ? *r : "ERR " + r.status().ToString();
}

TEST(Gemma4Native, BasicTurns) {
  const ChatTemplate& t = ChatTemplate::Gemma4Default();
  EXPECT_TRUE(t.is_native());
  Json conv =
      Json::array({Msg("system", " Be brief. "), Msg("user", "Hi\n"),
                   Msg("assistant", "<|channel>thought\nx<channel|> Hello! "), Msg("user", "Bye")});
  EXPECT_EQ(
      Render(t, conv),
      "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\nHello!<turn|>\n"
      "<|turn>user\nBye<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(Render(t, Json::array({Msg("user", "Q")}), nullptr, true, true),
            "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nQ<turn|>\n<|turn>model\n");
  EXPECT_EQ(Render(t, Json::array({Msg("user", "Q")}), nullptr, false, false),
            "<bos><|turn>user\nQ<turn|>\n");
}

TEST(Gemma4Native, ToolsAndToolCalls) {
  const ChatTemplate& t = ChatTemplate::Gemma4Default();
  Json tools =
      Json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Weather.",
    "parameters":{"type":"object","properties":{"city":{"type":"string","description":"City"}},"required":["city"]}}}])");
  Json conv = Json::parse(R"([
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"21C"},
    {"role":"assistant","content":"It is 21C."}])");
  EXPECT_EQ(Render(t, conv, tools),
            "<bos><|turn>system\n<|tool>declaration:get_weather{description:<|\"|>Weather.<|\"|>,"
            "parameters:{"
            "properties:{city:{description:<|\"|>City<|\"|>,type:<|\"|>STRING<|\"|>}},required:[<|"
            "\"|>city<|\"|>],"
            "type:<|\"|>OBJECT<|\"|>}}<tool|><turn|>\n<|turn>user\nWeather in "
            "Paris?<turn|>\n<|turn>model\n"
            "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>"
            "response:get_weather"
            "{value:<|\"|>21C<|\"|>}<tool_response|>It is "
            "21C.<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
  // A trailing tool call leaves the turn open for the tool response; no generation prompt.
  Json pending = Json::array({conv[0], conv[1]});
  std::string out = Render(t, pending, tools);
  EXPECT_TRUE(out.size() > 16 && out.substr(out.size() - 16) == "<|tool_response>") << out;
}

TEST(Gemma4Native, ErrorsWhereTheTemplateFails) {
  const ChatTemplate& t = ChatTemplate::Gemma4Default();
  EXPECT_EQ(Render(t, Json::array()).rfind("ERR", 0), 0u);
  EXPECT_EQ(Render(t, Json::array({{{"content", "no role"}}})).rfind("ERR", 0), 0u);
  Json orphan = Json::parse(R"([{"role":"user","content":"x"},
    {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{}}}]},
    {"role":"tool","tool_call_id":"zzz","content":"r"}])");
  EXPECT_NE(Render(t, orphan).find("tool response needs a string name"), std::string::npos);
  EXPECT_EQ(Render(t, Json::array({Msg("user", "x")}), Json::object()).rfind("ERR", 0),
            0u);  // tools not an array
  EXPECT_EQ(Render(t, Json::array({Msg("user", "x")}), nullptr, true, false, Json::array())
                .rfind("ERR", 0),
            0u);
  EXPECT_EQ(Render(t, Json::object()).rfind("ERR", 0), 0u);
}

TEST(ChatTemplate, NormalizeMessages) {
  Json in = Json::parse(R"([
    {"role":"system","content":[{"type":"text","text":" A. "},{"type":"image"},{"type":"text","text":"B."}]},
    {"role":"assistant","tool_calls":[
      {"function":{"name":"f","arguments":"{\"x\": 1}"}},
      {"function":{"name":"g","arguments":"not json"}},
      {"function":{"name":"h","arguments":"[1, 2]"}}]},
    {"role":"system","content":[{"type":"text","text":" kept "}]}])");
  auto out = ChatTemplate::NormalizeMessages(in);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0]["content"], "A.B.");
  EXPECT_EQ((*out)[1]["tool_calls"][0]["function"]["arguments"], Json({{"x", 1}}));
  EXPECT_EQ((*out)[1]["tool_calls"][1]["function"]["arguments"], "not json");
  EXPECT_EQ((*out)[1]["tool_calls"][2]["function"]["arguments"],
            "[1, 2]");                           // only objects are parsed
  EXPECT_TRUE((*out)[2]["content"].is_array());  // only a leading system message
  EXPECT_FALSE(ChatTemplate::NormalizeMessages(Json::object()).ok());
  EXPECT_FALSE(ChatTemplate::NormalizeMessages(Json::array({1})).ok());
}

TEST(ChatTemplate, JinjaBackendAndExtraContext) {
  auto t = ChatTemplate::FromText(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
      "{% if add_generation_prompt %}<gen{{ '+think' if enable_thinking }}>{% endif %}{{ (tools or "
      "[]) | length }}{{ custom }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->is_native());
  EXPECT_EQ(Render(*t, Json::array({Msg("user", "hi")}), nullptr, true, true,
                   {{"custom", "!"}, {"bos_token", "<s>"}}),
            "<s>[user:hi]<gen+think>0!");
  EXPECT_EQ(Render(*t, Json::array({Msg("user", "hi")}), Json::array({1, 2}), false),
            "<bos>[user:hi]2");
  auto bad = ChatTemplate::FromText("{% if %}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat template"), std::string::npos);
  auto raises = ChatTemplate::FromText("{{ raise_exception('roles must alternate') }}");
  ASSERT_TRUE(raises.ok());
  EXPECT_NE(Render(*raises, Json::array({Msg("user", "x")})).find("roles must alternate"),
            std::string::npos);
  // The native renderer honours a bos_token override too.
  EXPECT_EQ(Render(ChatTemplate::Gemma4Default(), Json::array({Msg("user", "q")}), nullptr, false,
                   false, {{"bos_token", ""}}),
            "<|turn>user\nq<turn|>\n");
}

TEST(ChatTemplate, FromModelDirectory) {
  std::string dir = std::string(REDWING_BUILD_DIR) + "/chat_template_test_dir";
  ASSERT_TRUE(RemoveAll(dir).ok());
  ASSERT_TRUE(MakeDirectories(dir).ok());
  auto empty = ChatTemplate::FromModelDirectory(dir);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->is_native());

  ASSERT_TRUE(
      WriteFileAtomic(
          JoinPath(dir, "tokenizer_config.json"),
          R"({"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D{{ messages | length }}"}]})")
          .ok());
  auto from_config = ChatTemplate::FromModelDirectory(dir);
  ASSERT_TRUE(from_config.ok()) << from_config.status().ToString();
  EXPECT_EQ(Render(*from_config, Json::array({Msg("user", "x")})), "D1");

  ASSERT_TRUE(
      WriteFileAtomic(JoinPath(dir, "chat_template.jinja"), "J{{ messages[0].content }}\n").ok());
  auto from_file = ChatTemplate::FromModelDirectory(dir);
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(Render(*from_file, Json::array({Msg("user", "x")})), "Jx");

  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "chat_template.jinja"), "{% for %}").ok());
  auto broken = ChatTemplate::FromModelDirectory(dir);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("chat_template.jinja"), std::string::npos);
  (void)RemoveAll(dir);
}

// Native renderer == official template run by the interpreter, on conversations built here.
TEST(ChatTemplate, NativeMatchesOfficialTemplate) {
  std::string dir = std::string(REDWING_SOURCE_DIR) + "/tests/fixtures/gemma4-templates";
  std::string path = dir + "/google-gemma-4-31B-it.jinja";
  auto text = ReadFileToString(path);  // committed: its absence is a failure
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  Json tools = Json::parse(R"([
    {"type":"function","function":{"name":"lookup","description":"Find things.","parameters":{"type":"object",
      "properties":{"q":{"type":"string","description":"query","enum":["a","b"]},"n":{"type":"integer","nullable":true},
      "opts":{"type":"object","properties":{"deep":{"type":"boolean"}},"required":["deep"]},
      "list":{"type":"array","items":{"type":"object","properties":{"k":{"type":"string"}},"required":["k"]}},
      "types":{"type":"array","items":{"type":["string","null"]}},
      "loose":{"description":"no type"}},"required":["q"]}}},
    {"type":"function","function":{"name":"t","description":"d","response":{"type":"object","description":"r"}}}])");
  Json conversations = Json::array();
  conversations.push_back(Json::array({Msg("user", "hi")}));
  conversations.push_back(Json::array(
      {Msg("developer", "dev"), Msg("user", "u1"), Msg("assistant", "a1"), Msg("user", "u2")}));
  conversations.push_back(
      Json::parse(R"([{"role":"user","content":[{"type":"text","text":" a "},{"type":"image"}]},
    {"role":"assistant","content":[{"type":"text","text":"<|channel>thought\nz<channel|>ok"}]}])"));
  conversations.push_back(Json::parse(R"([{"role":"user","content":"go"},
    {"role":"assistant","reasoning_content":"why","tool_calls":[
      {"id":"1","function":{"name":"lookup","arguments":{"q":"a","n":null,"f":1.5,"b":false,"o":{"Z":1,"a":[1,"x"]}}}}]},
    {"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}]},
    {"role":"assistant","tool_responses":[{"name":"t","response":{"k":[null,2.0]}}],"content":""},
    {"role":"assistant","content":"final"}])"));
  for (jinja::Dialect dialect : {jinja::Dialect::kPython, jinja::Dialect::kHuggingFaceJs}) {
    auto official = ChatTemplate::FromText(*text, {dialect});
    ASSERT_TRUE(official.ok()) << official.status().ToString();
    ChatTemplate native = ChatTemplate::Native({dialect});
    for (const Json& conv : conversations) {
      for (int flags = 0; flags < 4; ++flags) {
        for (const Json& t : {Json(nullptr), tools}) {
          bool gen = flags & 1, think = flags & 2;
          std::string want = Render(*official, conv, t, gen, think);
          EXPECT_EQ(Render(native, conv, t, gen, think), want) << conv.dump() << " flags " << flags;
          EXPECT_EQ(want.rfind("ERR", 0), std::string::npos) << want;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rw
