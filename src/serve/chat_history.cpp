#include "serve/chat_history.h"

#include "engine/chat_prompt.h"

namespace rw::serve {

std::string ContentText(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const Json& part : content) {
      auto t = part.find("text");
      if (part.is_object() && t != part.end() && t->is_string()) out += t->get<std::string>();
    }
  }
  return out;
}

void ChatHistory::Record(const std::string& client, const Json& messages, const Json& tools,
                         bool thinking, std::vector<int> prompt, const GenerateResult& r,
                         const std::string& content) {
  std::lock_guard<std::mutex> lock(mu_);
  // An answer cut by a stop string holds ids past what the client got back; a cancelled one
  // never reached it. Neither can be continued faithfully.
  if (!r.stop_string.empty() || r.finish == FinishReason::kCancelled) {
    have_ = false;
    return;
  }
  have_ = true;
  client_ = client;
  messages_ = messages;
  tools_ = tools;
  thinking_ = thinking;
  content_ = content;
  ids_ = std::move(prompt);
  ids_.insert(ids_.end(), r.ids.begin(), r.ids.end());
}

void ChatHistory::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  have_ = false;
}

std::optional<std::vector<int>> ChatHistory::PromptFor(const std::string& client,
                                                       const Engine& engine, const Json& messages,
                                                       const Json& tools, bool thinking) const {
  const Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return std::nullopt;
  Json before;
  std::vector<int> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!have_ || client != client_ || thinking != thinking_ || tools != tools_)
      return std::nullopt;
    const size_t n = messages_.size();
    if (messages.size() < n + 2) return std::nullopt;
    for (size_t i = 0; i < n; ++i)
      if (messages[i] != messages_[i]) return std::nullopt;
    const Json& answer = messages[n];
    if (answer.value("role", "") != "assistant") return std::nullopt;
    if (auto tc = answer.find("tool_calls"); tc != answer.end() && !tc->is_null() && !tc->empty())
      return std::nullopt;
    if (ContentText(answer.value("content", Json())) != content_) return std::nullopt;
    before = Json(messages.begin(), messages.begin() + static_cast<long>(n + 1));
    ids = ids_;
  }
  // The client's strings stay text (RenderChatPrompt): they cannot forge turns.
  auto full = RenderChatPrompt(engine, messages, tools, true, thinking);
  auto prev = RenderChatPrompt(engine, before, tools, false, thinking);
  if (!full.ok() || !prev.ok() || full->text.compare(0, prev->text.size(), prev->text) != 0)
    return std::nullopt;
  // Close the model's turn as the template does, whether it ended with <turn|> or was cut off.
  for (int32_t id : tok->Encode("<turn|>\n")) ids.push_back(id);
  for (int id : EncodeChatPrompt(*tok, *full, prev->text.size())) ids.push_back(id);
  return ids;
}

}  // namespace rw::serve
