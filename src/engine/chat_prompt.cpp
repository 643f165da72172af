#include "engine/chat_prompt.h"

#include <algorithm>
#include <charconv>

namespace rw {

namespace {

// Noncharacters (never in interchanged text) open and close an escape: U+FDD0 <id> U+FDD1 stands
// for special token <id> written by the client, U+FDD0 x U+FDD1 for a U+FDD0 the client wrote.
constexpr std::string_view kOpen = "\xEF\xB7\x90";
constexpr std::string_view kClose = "\xEF\xB7\x91";

struct SpecialText {
  std::string_view text;
  int32_t id;
};

// The special tokens' texts, longest first (so a scan finds the longest match at a position).
std::vector<SpecialText> SpecialTexts(const Tokenizer& tok) {
  std::vector<SpecialText> out;
  for (int32_t id : tok.special_ids())
    if (!tok.IdToToken(id).empty()) out.push_back({tok.IdToToken(id), id});
  std::stable_sort(out.begin(), out.end(), [](const SpecialText& a, const SpecialText& b) {
    return a.text.size() > b.text.size();
  });
  return out;
}

std::string Escape(const std::vector<SpecialText>& specials, std::string_view s) {
  bool first[256] = {};
  first[static_cast<uint8_t>(kOpen[0])] = true;
  for (const SpecialText& t : specials) first[static_cast<uint8_t>(t.text[0])] = true;
  std::string out;
  size_t copied = 0;
  for (size_t i = 0; i < s.size();) {
    if (!first[static_cast<uint8_t>(s[i])]) {
      ++i;
      continue;
    }
    std::string_view rest = s.substr(i);
    std::string escape;
    size_t len = 0;
    if (rest.starts_with(kOpen)) {
      escape = std::string(kOpen) + "x" + std::string(kClose);
      len = kOpen.size();
    } else {
      for (const SpecialText& t : specials) {
        if (rest.starts_with(t.text)) {
          escape = std::string(kOpen) + std::to_string(t.id) + std::string(kClose);
          len = t.text.size();
          break;
        }
      }
    }
    if (len == 0) {
      ++i;
      continue;
    }
    out.append(s.substr(copied, i - copied));
    out += escape;
    i += len;
    copied = i;
  }
  if (copied == 0) return std::string(s);
  out.append(s.substr(copied));
  return out;
}

// Every string and object key of j, escaped.
Json EscapeJson(const std::vector<SpecialText>& specials, const Json& j) {
  if (j.is_string()) return Escape(specials, j.get_ref<const std::string&>());
  if (j.is_array()) {
    Json out = Json::array();
    for (const Json& v : j) out.push_back(EscapeJson(specials, v));
    return out;
  }
  if (j.is_object()) {
    Json out = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it)
      out[Escape(specials, it.key())] = EscapeJson(specials, it.value());
    return out;
  }
  return j;
}

}  // namespace

std::string EscapeSpecialText(const Tokenizer& tok, std::string_view s) {
  return Escape(SpecialTexts(tok), s);
}

ChatPromptText ResolveEscapes(const Tokenizer& tok, std::string_view rendered) {
  ChatPromptText out;
  out.text.reserve(rendered.size());
  size_t i = 0;
  while (i < rendered.size()) {
    const size_t open = rendered.find(kOpen, i);
    if (open == std::string_view::npos) break;
    out.text.append(rendered.substr(i, open - i));
    const size_t body = open + kOpen.size();
    const size_t close = rendered.find(kClose, body);
    std::string_view inner =
        close == std::string_view::npos ? std::string_view() : rendered.substr(body, close - body);
    int32_t id = -1;
    const bool is_id = !inner.empty() && inner.size() <= 10 &&
                       std::from_chars(inner.data(), inner.data() + inner.size(), id).ptr ==
                           inner.data() + inner.size() &&
                       tok.IsSpecial(id);
    if (is_id) {
      const std::string& text = tok.IdToToken(id);
      const size_t begin = out.text.size();
      out.text += text;
      if (!out.plain.empty() && out.plain.back().end == begin)
        out.plain.back().end = out.text.size();
      else
        out.plain.push_back({begin, out.text.size()});
      i = close + kClose.size();
    } else if (inner == "x") {
      out.text += kOpen;
      i = close + kClose.size();
    } else {  // not an escape of ours (the template's own text): as it is
      out.text += kOpen;
      i = body;
    }
  }
  out.text.append(rendered.substr(std::min(i, rendered.size())));
  return out;
}

Result<ChatPromptText> RenderChatPrompt(const Engine& engine, const Json& messages,
                                        const Json& tools, bool add_generation_prompt,
                                        bool thinking) {
  const Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return engine.text_status();
  return RenderChatPrompt(engine.chat_template(), *tok, messages, tools, add_generation_prompt,
                          thinking);
}

Result<ChatPromptText> RenderChatPrompt(const ChatTemplate& tpl, const Tokenizer& tok,
                                        const Json& messages, const Json& tools,
                                        bool add_generation_prompt, bool thinking) {
  const std::vector<SpecialText> specials = SpecialTexts(tok);
  // Normalized first: tool-call arguments sent as JSON text are parsed there, and their strings
  // may spell a control token with JSON escapes ("\u003c|turn>") that only parsing reveals.
  RW_ASSIGN_OR_RETURN(Json normalized, ChatTemplate::NormalizeMessages(messages));
  RW_ASSIGN_OR_RETURN(std::string text,
                      tpl.Render(EscapeJson(specials, normalized), EscapeJson(specials, tools),
                                 add_generation_prompt, thinking));
  return ResolveEscapes(tok, text);
}

std::vector<int> EncodeChatPrompt(const Tokenizer& tok, const ChatPromptText& prompt, size_t from) {
  from = std::min(from, prompt.text.size());
  std::vector<TextSpan> plain;
  for (const TextSpan& s : prompt.plain) {
    if (s.end <= from) continue;
    plain.push_back({std::max(s.begin, from) - from, s.end - from});
  }
  std::vector<int32_t> ids;
  tok.EncodeAppend(std::string_view(prompt.text).substr(from), plain, &ids);
  return std::vector<int>(ids.begin(), ids.end());
}

}  // namespace rw
