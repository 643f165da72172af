#include "engine/conversation.h"

#include "engine/chat_prompt.h"

namespace rw {

Result<std::vector<int>> EncodeChat(const Engine& engine, const Json& messages, const Json& tools,
                                    bool add_generation_prompt, bool thinking) {
  const Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return engine.text_status();
  RW_ASSIGN_OR_RETURN(ChatPromptText text,
                      RenderChatPrompt(engine, messages, tools, add_generation_prompt, thinking));
  return EncodeChatPrompt(*tok, text);
}

Conversation::Conversation(std::shared_ptr<const Engine> engine, bool thinking)
    : engine_(std::move(engine)), thinking_(thinking) {}

void Conversation::SetSystem(std::string text) {
  system_ = std::move(text);
  history_.clear();  // the system turn is at the top: everything after it re-renders
}

void Conversation::Reset() {
  messages_ = Json::array();
  history_.clear();
}

Json Conversation::AllMessages() const {
  Json all = Json::array();
  if (!system_.empty()) all.push_back(Json{{"role", "system"}, {"content", system_}});
  for (const Json& m : messages_) all.push_back(m);
  return all;
}

Result<std::vector<int>> Conversation::PromptFor(const std::string& user_text) const {
  const Tokenizer* tok = engine_->tokenizer();
  if (tok == nullptr) return engine_->text_status();
  Json all = AllMessages();
  const Json before = all;
  all.push_back(Json{{"role", "user"}, {"content", user_text}});
  // The user's text (and the system message) stay text: they cannot forge turns.
  RW_ASSIGN_OR_RETURN(ChatPromptText full,
                      RenderChatPrompt(*engine_, all, Json(), true, thinking_));
  if (!history_.empty()) {
    // The template renders earlier turns canonically (thinking stripped, no empty thought
    // channel), but the cache holds what the model really saw and wrote: keep that, and append
    // only the part of the rendering that comes after the earlier turns.
    RW_ASSIGN_OR_RETURN(ChatPromptText prev,
                        RenderChatPrompt(*engine_, before, Json(), false, thinking_));
    if (full.text.compare(0, prev.text.size(), prev.text) == 0) {
      std::vector<int> ids = history_;
      for (int id : EncodeChatPrompt(*tok, full, prev.text.size())) ids.push_back(id);
      return ids;
    }
  }
  return EncodeChatPrompt(*tok, full);
}

void Conversation::Commit(const std::string& user_text, const std::vector<int>& prompt,
                          const GenerateResult& r, const std::string& content) {
  messages_.push_back(Json{{"role", "user"}, {"content", user_text}});
  messages_.push_back(Json{{"role", "assistant"}, {"content", content}});
  history_ = prompt;
  history_.insert(history_.end(), r.ids.begin(), r.ids.end());
  // Close the model's turn as the template does, whether it ended with <turn|> or was cut off.
  for (int32_t id : engine_->tokenizer()->Encode("<turn|>\n")) history_.push_back(id);
}

}  // namespace rw
