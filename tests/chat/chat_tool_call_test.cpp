// Tool-call DSL parsing, the streaming output parser, and format -> parse round trips.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/file.h"
#include "base/json.h"
#include "chat/chat_gemma4.h"
#include "chat/chat_template.h"
#include "chat/chat_tool_call.h"

namespace rw {
namespace {

using Kind = ChatOutputParser::Event::Kind;

Json Args(std::string_view text) {
  auto r = ParseToolArguments(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().ToString();
  return r.ok() ? *r : Json();
}

TEST(ToolArguments, Scalars) {
  EXPECT_EQ(
      Args(R"({city:<|"|>Paris<|"|>,days:3,ratio:0.5,exact:true,dry:false})"),
      Json({{"city", "Paris"}, {"days", 3}, {"ratio", 0.5}, {"exact", true}, {"dry", false}}));
  EXPECT_EQ(Args("{a:None,b:null,c:,d:none}"),
            Json({{"a", nullptr}, {"b", nullptr}, {"c", nullptr}, {"d", nullptr}}));
  EXPECT_EQ(Args("{x:-12,y:1e-05,z:1.5e+20,w:True}"),
            Json({{"x", -12}, {"y", 1e-05}, {"z", 1.5e20}, {"w", true}}));
  EXPECT_EQ(Args("{}"), Json::object());
  EXPECT_EQ(Args("{word:hello world}"),
            Json({{"word", "hello world"}}));  // unquoted text stays a string
}

TEST(ToolArguments, NestedAndQuoted) {
  EXPECT_EQ(
      Args(
          R"({filters:{lang:<|"|>ja<|"|>,tags:[<|"|>x<|"|>,<|"|>y<|"|>]},ids:[1,2,[3]],empty:[],o:{}})"),
      Json::parse(
          R"({"filters":{"lang":"ja","tags":["x","y"]},"ids":[1,2,[3]],"empty":[],"o":{}})"));
  // Strings keep every character between the delimiters, including DSL punctuation.
  EXPECT_EQ(Args(R"({q:<|"|>a:b,c{d}[e] "quoted" <tool_call|>
newline ☕<|"|>})"),
            Json({{"q", "a:b,c{d}[e] \"quoted\" <tool_call|>\nnewline ☕"}}));
  // Keys may be quoted (format_argument with escape_keys=True), and whitespace is tolerated.
  EXPECT_EQ(Args(R"( { <|"|>key one<|"|> : 1 , k2 : [ 1 , 2 ] , } )"),
            Json({{"key one", 1}, {"k2", {1, 2}}}));
  // @huggingface/jinja prints None as nothing; empty array elements are nulls.
  EXPECT_EQ(Args("{a:[,0.5,],b:[]}"), Json::parse(R"({"a":[null,0.5,null],"b":[]})"));
}

TEST(ToolArguments, Errors) {
  for (std::string_view bad : {"", "city:1", "{city:<|\"|>Paris}", "{a:1", "{a:1}}", "{:1}",
                               "{a 1}", "{a:[1,2}", "{a:{b:1}", "[1,2]"}) {
    EXPECT_FALSE(ParseToolArguments(bad).ok()) << bad;
  }
  std::string deep = "{a:" + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_FALSE(ParseToolArguments(deep).ok());
}

TEST(ToolCalls, ParseBodyAndOutput) {
  auto call = ParseToolCallBody(R"(call:get_weather{city:<|"|>Oslo<|"|>})");
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->name, "get_weather");
  EXPECT_EQ(call->arguments, Json({{"city", "Oslo"}}));
  EXPECT_FALSE(ParseToolCallBody("get_weather{}").ok());
  EXPECT_FALSE(ParseToolCallBody("call:{}").ok());
  EXPECT_FALSE(ParseToolCallBody("call:f").ok());

  std::string out =
      "<|channel>thought\nI need two lookups.<channel|>Checking.<|tool_call>call:a{x:1}<tool_call|>"
      "<|tool_call>call:b{s:<|\"|>}{<|\"|>}<tool_call|><|tool_response>";
  auto parsed = ParseAssistantOutput(out);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->reasoning, "I need two lookups.");
  EXPECT_EQ(parsed->content, "Checking.");
  ASSERT_EQ(parsed->tool_calls.size(), 2u);
  EXPECT_EQ(parsed->tool_calls[0].name, "a");
  EXPECT_EQ(parsed->tool_calls[1].arguments, Json({{"s", "}{"}}));

  auto plain = ParseAssistantOutput("Just text.<turn|>");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->content, "Just text.");
  EXPECT_TRUE(plain->tool_calls.empty());

  EXPECT_FALSE(ParseToolCalls("<|tool_call>call:f{a:1").ok());             // unterminated
  EXPECT_FALSE(ParseToolCalls("<|tool_call>call:f{a:<tool_call|>").ok());  // truncated arguments
  EXPECT_FALSE(ParseToolCalls("<|tool_call>nonsense<tool_call|>").ok());
  // A call cut short by the stop marker is still recovered.
  auto recovered = ParseToolCalls("<|tool_call>call:f{a:1}<|tool_response>");
  ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
  ASSERT_EQ(recovered->size(), 1u);
}

struct Collected {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
  int starts = 0, invalid = 0;
};

void Collect(const std::vector<ChatOutputParser::Event>& events, Collected* c) {
  for (const auto& e : events) {
    switch (e.kind) {
      case Kind::kContent:
        c->content += e.text;
        break;
      case Kind::kReasoning:
        c->reasoning += e.text;
        break;
      case Kind::kToolCallStart:
        ++c->starts;
        break;
      case Kind::kToolCall:
        c->calls.push_back(e.tool_call);
        break;
      case Kind::kInvalidToolCall:
        ++c->invalid;
        break;
    }
  }
}

TEST(ChatOutputParser, StreamingMatchesOneShotForEverySplit) {
  const std::string out =
      "<|channel>thought\nPlan: call <tool> then answer.<channel|>Sure <b>bold</b> < 3, "
      "let me check.<|tool_call>call:search{q:<|\"|>a <tool_call|> inside<|\"|>,n:2}<tool_call|>"
      "<|tool_call>call:noop{}<tool_call|>Done <|chan<turn|>";
  Collected whole;
  ChatOutputParser p0;
  Collect(p0.Feed(out), &whole);
  Collect(p0.Finish(), &whole);
  EXPECT_EQ(whole.reasoning, "Plan: call <tool> then answer.");
  EXPECT_EQ(whole.content, "Sure <b>bold</b> < 3, let me check.Done <|chan");
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.calls[0].arguments, Json({{"q", "a <tool_call|> inside"}, {"n", 2}}));
  EXPECT_EQ(whole.starts, 2);

  // Byte by byte, and every two-piece split.
  for (size_t step : {1u, 2u, 3u, 7u}) {
    Collected c;
    ChatOutputParser p;
    for (size_t i = 0; i < out.size(); i += step)
      Collect(p.Feed(std::string_view(out).substr(i, step)), &c);
    Collect(p.Finish(), &c);
    EXPECT_EQ(c.content, whole.content) << "step " << step;
    EXPECT_EQ(c.reasoning, whole.reasoning) << "step " << step;
    ASSERT_EQ(c.calls.size(), 2u) << "step " << step;
    EXPECT_EQ(c.calls[0].arguments, whole.calls[0].arguments);
  }
  for (size_t cut = 0; cut <= out.size(); ++cut) {
    Collected c;
    ChatOutputParser p;
    Collect(p.Feed(std::string_view(out).substr(0, cut)), &c);
    Collect(p.Feed(std::string_view(out).substr(cut)), &c);
    Collect(p.Finish(), &c);
    ASSERT_EQ(c.content, whole.content) << "cut " << cut;
    ASSERT_EQ(c.reasoning, whole.reasoning) << "cut " << cut;
    ASSERT_EQ(c.calls.size(), 2u) << "cut " << cut;
  }
}

TEST(ChatOutputParser, HoldsBackOnlyPossibleMarkers) {
  ChatOutputParser p;
  auto ev = p.Feed("Hello <|tool");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "Hello ");  // "<|tool" might become <|tool_call>
  EXPECT_FALSE(p.in_tool_call());
  ev = p.Feed("_call>call:f{");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kToolCallStart);
  EXPECT_TRUE(p.in_tool_call());
  EXPECT_TRUE(p.Feed("a:1}").empty());  // held until the call closes
  ev = p.Feed("<tool_call|>");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kToolCall);
  ev = p.Feed("x <");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "x ");
  ev = p.Feed("= y");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "<= y");
}

TEST(ChatOutputParser, ReasoningPromptAndInvalidCalls) {
  ChatOutputParser p(/*start_in_reasoning=*/true);
  Collected c;
  Collect(p.Feed("still thinking<channel|>answer<|tool_call>call:f{a:<tool_call|>after"), &c);
  Collect(p.Finish(), &c);
  EXPECT_EQ(c.reasoning, "still thinking");
  EXPECT_EQ(c.content, "answerafter");
  EXPECT_EQ(c.invalid, 1);

  ChatOutputParser q;
  Collected d;
  Collect(q.Feed("<|tool_call>call:f{a:1"), &d);
  EXPECT_EQ(d.invalid, 0);
  Collect(q.Finish(), &d);
  EXPECT_EQ(d.invalid, 1);  // unterminated at end of output
}

// Deterministic random JSON values for round trips.
class Gen {
 public:
  // nulls_in_arrays=false for the @huggingface/jinja dialect, where [None] prints like [].
  explicit Gen(uint32_t seed, bool nulls_in_arrays = true)
      : s_(seed), nulls_in_arrays_(nulls_in_arrays) {}
  uint32_t Next() {
    s_ = s_ * 1664525u + 1013904223u;
    return s_ >> 8;
  }
  std::string Key() {
    static const char kChars[] = "abcXYZ_019";
    std::string k(1 + Next() % 6, 'a');
    for (char& ch : k) ch = kChars[Next() % (sizeof(kChars) - 1)];
    return k;
  }
  std::string Text() {
    static const std::vector<std::string> kPieces = {"a", "Z", " ",  ",",    ":",  "{",    "}",
                                                     "[", "]", "\"", "'",    "\n", "é",    "日本",
                                                     "🎉", "<", "|",  "null", "1",  "true", "\\"};
    std::string t;
    for (int n = Next() % 8; n > 0; --n) t += kPieces[Next() % kPieces.size()];
    return t;
  }
  Json Value(int depth, bool in_array = false) {
    switch (Next() % (depth > 3 ? 5 : 7)) {
      case 0:
        return Text();
      case 1:
        return static_cast<int64_t>(Next() % 2000) - 1000;
      case 2: {
        static const double kFloats[] = {0.5, -2.25, 1e-7, 3.14159, 1e21, 123456.789, 1.0, -0.001};
        return kFloats[Next() % 8];
      }
      case 3:
        return Next() % 2 == 0;
      case 4:
        if (in_array && !nulls_in_arrays_) return 0;
        return nullptr;
      case 5: {
        Json a = Json::array();
        for (int n = Next() % 4; n > 0; --n) a.push_back(Value(depth + 1, true));
        return a;
      }
      default: {
        Json o = Json::object();
        for (int n = Next() % 4; n > 0; --n) o[Key()] = Value(depth + 1);
        return o;
      }
    }
  }

 private:
  uint32_t s_;
  bool nulls_in_arrays_;
};

TEST(ToolCallRoundTrip, FormatArgumentThenParse) {
  for (jinja::Dialect dialect : {jinja::Dialect::kPython, jinja::Dialect::kHuggingFaceJs}) {
    Gemma4ChatFormat format(dialect);
    Gen gen(7, dialect == jinja::Dialect::kPython);
    for (int i = 0; i < 500; ++i) {
      Json args = Json::object();
      for (int n = gen.Next() % 5; n > 0; --n) args[gen.Key()] = gen.Value(0);
      auto text = format.FormatArgument(args, /*escape_keys=*/false);
      ASSERT_TRUE(text.ok());
      auto back = ParseToolArguments(*text);
      ASSERT_TRUE(back.ok()) << *text << ": " << back.status().ToString();
      EXPECT_EQ(*back, args) << *text;
      // escape_keys=True (how tool declarations quote keys) parses too.
      auto quoted = format.FormatArgument(args, true);
      ASSERT_TRUE(quoted.ok());
      auto back2 = ParseToolArguments(*quoted);
      ASSERT_TRUE(back2.ok()) << *quoted;
      EXPECT_EQ(*back2, args);
    }
  }
}

// Through the full renderers: the official template (committed) and the native one.
TEST(ToolCallRoundTrip, RenderedAssistantTurnParsesBack) {
  std::vector<ChatTemplate> renderers = {ChatTemplate::Native()};
  std::string path = std::string(REDWING_SOURCE_DIR) +
                     "/tests/fixtures/gemma4-templates/google-gemma-4-31B-it.jinja";
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  auto t = ChatTemplate::FromText(*text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  renderers.push_back(*t);
  Gen gen(99);
  for (int i = 0; i < 100; ++i) {
    Json calls = Json::array();
    for (int n = 1 + gen.Next() % 3; n > 0; --n) {
      Json args = Json::object();
      for (int k = gen.Next() % 4; k > 0; --k) args[gen.Key()] = gen.Value(0);
      std::string id = std::string("c") + std::to_string(n);
      std::string name = std::string("fn_") + gen.Key();
      calls.push_back({{"id", id},
                       {"type", "function"},
                       {"function", {{"name", name}, {"arguments", args.dump()}}}});
    }
    Json messages = Json::array(
        {{{"role", "user"}, {"content", "go"}}, {{"role", "assistant"}, {"tool_calls", calls}}});
    std::string previous;
    for (const ChatTemplate& r : renderers) {
      auto text = r.Render(messages, nullptr, false, false);
      ASSERT_TRUE(text.ok()) << text.status().ToString();
      if (!previous.empty()) {
        EXPECT_EQ(*text, previous);  // native == template
      }
      previous = *text;
      auto parsed = ParseToolCalls(text->substr(text->find("<|turn>model\n")));
      ASSERT_TRUE(parsed.ok()) << *text << "\n" << parsed.status().ToString();
      ASSERT_EQ(parsed->size(), calls.size());
      for (size_t k = 0; k < calls.size(); ++k) {
        EXPECT_EQ((*parsed)[k].name, calls[k]["function"]["name"].get<std::string>());
        EXPECT_EQ((*parsed)[k].arguments,
                  Json::parse(calls[k]["function"]["arguments"].get<std::string>()));
      }
    }
  }
}

}  // namespace
}  // namespace rw
