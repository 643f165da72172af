#include "chat/chat_tool_call.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <initializer_list>

namespace rw {
namespace {

constexpr std::string_view kQuote = "<|\"|>";
constexpr std::string_view kCallOpen = "<|tool_call>";
constexpr std::string_view kCallClose = "<tool_call|>";
constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";
constexpr std::string_view kThoughtName = "thought\n";
// End-of-turn and stop markers that may appear in decoded text; never part of content.
constexpr std::string_view kDropped[] = {"<turn|>", "<|tool_response>", "<tool_response|>",
                                         "<eos>"};
constexpr int kMaxDepth = 64;

bool IsWs(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

std::string_view TrimWs(std::string_view s) {
  while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}

bool StartsWith(std::string_view s, size_t at, std::string_view prefix) {
  return s.size() >= at + prefix.size() && s.compare(at, prefix.size(), prefix) == 0;
}

// An unquoted scalar: numbers, booleans, None/null (or nothing) and otherwise the text itself.
Json Literal(std::string_view raw) {
  std::string_view t = TrimWs(raw);
  if (t.empty() || t == "null" || t == "None" || t == "none") return nullptr;
  if (t == "true" || t == "True") return true;
  if (t == "false" || t == "False") return false;
  size_t i = 0;
  if (t[i] == '-' || t[i] == '+') ++i;
  size_t digits = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++digits;
  bool is_float = false;
  if (i < t.size() && t[i] == '.') {
    is_float = true;
    ++i;
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i, ++digits;
  }
  if (digits > 0 && i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    size_t j = i + 1;
    if (j < t.size() && (t[j] == '-' || t[j] == '+')) ++j;
    size_t exp_digits = 0;
    while (j < t.size() && t[j] >= '0' && t[j] <= '9') ++j, ++exp_digits;
    if (exp_digits > 0) {
      is_float = true;
      i = j;
    }
  }
  if (digits == 0 || i != t.size()) return std::string(t);
  std::string s(t);
  if (!is_float) {
    errno = 0;
    long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno == 0) return static_cast<int64_t>(v);
  }
  return std::strtod(s.c_str(), nullptr);
}

class ArgParser {
 public:
  explicit ArgParser(std::string_view s) : s_(s) {}

  Result<Json> ParseTop() {
    SkipWs();
    if (i_ >= s_.size() || s_[i_] != '{') return Fail("expected '{'");
    RW_ASSIGN_OR_RETURN(Json obj, ParseValue(0));
    SkipWs();
    if (i_ != s_.size()) return Fail("unexpected text after arguments");
    return obj;
  }

 private:
  Status Fail(const std::string& what) const {
    return Error(ErrorCode::kInvalidArgument, "tool call arguments: {} at offset {}", what, i_);
  }
  void SkipWs() {
    while (i_ < s_.size() && IsWs(s_[i_])) ++i_;
  }

  Result<std::string> Quoted() {
    size_t start = i_ + kQuote.size();
    size_t end = s_.find(kQuote, start);
    if (end == std::string_view::npos) return Fail("unterminated string");
    i_ = end + kQuote.size();
    return std::string(s_.substr(start, end - start));
  }

  Result<Json> ParseValue(int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    SkipWs();
    if (StartsWith(s_, i_, kQuote)) {
      RW_ASSIGN_OR_RETURN(std::string s, Quoted());
      return Json(std::move(s));
    }
    if (i_ < s_.size() && s_[i_] == '{') {
      ++i_;
      Json obj = Json::object();
      SkipWs();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return obj;
      }
      while (true) {
        RW_ASSIGN_OR_RETURN(std::string key, ParseKey());
        SkipWs();
        if (i_ >= s_.size() || s_[i_] != ':') return Fail("expected ':'");
        ++i_;
        RW_ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
        obj[key] = std::move(value);
        SkipWs();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          SkipWs();
          if (i_ < s_.size() && s_[i_] == '}') {
            ++i_;
            return obj;
          }
          continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') {
          ++i_;
          return obj;
        }
        return Fail("expected ',' or '}'");
      }
    }
    if (i_ < s_.size() && s_[i_] == '[') {
      ++i_;
      Json arr = Json::array();
      SkipWs();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return arr;
      }
      while (true) {
        // An empty element is a None that @huggingface/jinja printed as nothing: "[,1,]".
        RW_ASSIGN_OR_RETURN(Json value, ParseValue(depth + 1));
        arr.push_back(std::move(value));
        SkipWs();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') {
          ++i_;
          return arr;
        }
        return Fail("expected ',' or ']'");
      }
    }
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' &&
           !StartsWith(s_, i_, kQuote))
      ++i_;
    return Literal(s_.substr(start, i_ - start));
  }

  Result<std::string> ParseKey() {
    SkipWs();
    if (StartsWith(s_, i_, kQuote)) return Quoted();
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ':') {
      char c = s_[i_];
      if (c == '{' || c == '}' || c == '[' || c == ']' || c == ',') return Fail("expected a key");
      ++i_;
    }
    std::string_view key = TrimWs(s_.substr(start, i_ - start));
    if (key.empty() || i_ >= s_.size()) return Fail("expected a key");
    return std::string(key);
  }

  std::string_view s_;
  size_t i_ = 0;
};

// Longest suffix of s that is a proper prefix of one of the markers (text to hold back).
size_t PartialMarkerSuffix(std::string_view s, std::initializer_list<std::string_view> markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t len = std::min(m.size() - 1, s.size()); len > best; --len) {
      if (s.compare(s.size() - len, len, m.substr(0, len)) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

}  // namespace

Result<Json> ParseToolArguments(std::string_view text) {
  return ArgParser(text).ParseTop();
}

Result<ToolCall> ParseToolCallBody(std::string_view body) {
  std::string_view t = TrimWs(body);
  if (t.substr(0, 5) != "call:") {
    return Error(ErrorCode::kInvalidArgument, "tool call must start with 'call:'");
  }
  t.remove_prefix(5);
  size_t brace = t.find('{');
  if (brace == std::string_view::npos)
    return Error(ErrorCode::kInvalidArgument, "tool call has no arguments block");
  ToolCall call;
  call.name = std::string(TrimWs(t.substr(0, brace)));
  if (call.name.empty()) return Error(ErrorCode::kInvalidArgument, "tool call has an empty name");
  auto args = ParseToolArguments(t.substr(brace));
  if (!args.ok()) return args.status().Annotate(fmt::format("tool call '{}'", call.name));
  call.arguments = std::move(args).value();
  return call;
}

ChatOutputParser::ChatOutputParser(bool start_in_reasoning)
    : state_(start_in_reasoning ? State::kReasoning : State::kContent) {}

void ChatOutputParser::Emit(Event::Kind kind, std::string_view text, std::vector<Event>* events) {
  if ((kind == Event::Kind::kContent || kind == Event::Kind::kReasoning) && text.empty()) return;
  // Merge consecutive deltas of the same kind within one Feed.
  if (!events->empty() && events->back().kind == kind &&
      (kind == Event::Kind::kContent || kind == Event::Kind::kReasoning)) {
    events->back().text += text;
    return;
  }
  Event e;
  e.kind = kind;
  e.text = std::string(text);
  events->push_back(std::move(e));
}

std::vector<ChatOutputParser::Event> ChatOutputParser::Feed(std::string_view chunk) {
  buf_.append(chunk);
  std::vector<Event> events;
  Process(false, &events);
  return events;
}

std::vector<ChatOutputParser::Event> ChatOutputParser::Finish() {
  std::vector<Event> events;
  Process(true, &events);
  return events;
}

void ChatOutputParser::Process(bool final, std::vector<Event>* events) {
  while (true) {
    std::string_view b = buf_;
    if (state_ == State::kChannelName) {
      if (StartsWith(b, 0, kThoughtName)) {
        buf_.erase(0, kThoughtName.size());
        state_ = State::kReasoning;
        continue;
      }
      if (!final && kThoughtName.substr(0, b.size()) == b) return;  // maybe "thought\n" later
      state_ = State::kReasoning;
      continue;
    }
    if (state_ == State::kToolCall) {
      // The call ends at <tool_call|> outside <|"|> strings (or, leniently, at a stop marker).
      bool in_string = false;
      size_t end = std::string_view::npos, marker_len = 0;
      for (size_t i = 0; i < b.size();) {
        if (StartsWith(b, i, kQuote)) {
          in_string = !in_string;
          i += kQuote.size();
          continue;
        }
        if (!in_string) {
          if (StartsWith(b, i, kCallClose)) {
            end = i;
            marker_len = kCallClose.size();
            break;
          }
          if (StartsWith(b, i, "<|tool_response>") || StartsWith(b, i, "<turn|>")) {
            end = i;
            marker_len = 0;  // leave the stop marker to the content state, which drops it
            break;
          }
        }
        ++i;
      }
      if (end == std::string_view::npos) {
        if (!final) return;
        Event e;
        e.kind = Event::Kind::kInvalidToolCall;
        e.text = std::string(kCallOpen) + buf_;
        e.error = "unterminated tool call";
        events->push_back(std::move(e));
        buf_.clear();
        state_ = State::kContent;
        return;
      }
      std::string body(b.substr(0, end));
      buf_.erase(0, end + marker_len);
      state_ = State::kContent;
      auto call = ParseToolCallBody(body);
      Event e;
      if (call.ok()) {
        e.kind = Event::Kind::kToolCall;
        e.tool_call = std::move(call).value();
      } else {
        e.kind = Event::Kind::kInvalidToolCall;
        e.text = std::string(kCallOpen) + body + std::string(kCallClose);
        e.error = call.status().message();
      }
      events->push_back(std::move(e));
      continue;
    }
    // Content or reasoning: find the earliest marker.
    const bool reasoning = state_ == State::kReasoning;
    const Event::Kind kind = reasoning ? Event::Kind::kReasoning : Event::Kind::kContent;
    size_t best = std::string_view::npos;
    std::string_view marker;
    auto consider = [&](std::string_view m) {
      size_t p = b.find(m);
      if (p < best) {
        best = p;
        marker = m;
      }
    };
    consider(kCallOpen);
    consider(kChannelOpen);
    consider(kChannelClose);
    consider(kCallClose);
    for (std::string_view m : kDropped) consider(m);
    if (best == std::string_view::npos) {
      size_t hold =
          final ? 0
                : PartialMarkerSuffix(b, {kCallOpen, kChannelOpen, kChannelClose, kCallClose,
                                          kDropped[0], kDropped[1], kDropped[2], kDropped[3]});
      Emit(kind, b.substr(0, b.size() - hold), events);
      buf_.erase(0, b.size() - hold);
      return;
    }
    Emit(kind, b.substr(0, best), events);
    buf_.erase(0, best + marker.size());
    if (marker == kCallOpen) {
      state_ = State::kToolCall;
      Event e;
      e.kind = Event::Kind::kToolCallStart;
      events->push_back(std::move(e));
    } else if (marker == kChannelOpen) {
      state_ = State::kChannelName;
    } else if (marker == kChannelClose) {
      state_ = State::kContent;
    }
    // Stray <tool_call|> and stop markers are dropped.
  }
}

Result<ParsedAssistantOutput> ParseAssistantOutput(std::string_view model_output) {
  ChatOutputParser parser;
  std::vector<ChatOutputParser::Event> events = parser.Feed(model_output);
  std::vector<ChatOutputParser::Event> rest = parser.Finish();
  events.insert(events.end(), std::make_move_iterator(rest.begin()),
                std::make_move_iterator(rest.end()));
  ParsedAssistantOutput out;
  for (auto& e : events) {
    switch (e.kind) {
      case ChatOutputParser::Event::Kind::kContent:
        out.content += e.text;
        break;
      case ChatOutputParser::Event::Kind::kReasoning:
        out.reasoning += e.text;
        break;
      case ChatOutputParser::Event::Kind::kToolCall:
        out.tool_calls.push_back(std::move(e.tool_call));
        break;
      case ChatOutputParser::Event::Kind::kInvalidToolCall:
        return Error(ErrorCode::kInvalidArgument, "{}", e.error);
      case ChatOutputParser::Event::Kind::kToolCallStart:
        break;
    }
  }
  return out;
}

Result<std::vector<ToolCall>> ParseToolCalls(std::string_view model_output) {
  RW_ASSIGN_OR_RETURN(ParsedAssistantOutput parsed, ParseAssistantOutput(model_output));
  return std::move(parsed.tool_calls);
}

}  // namespace rw
