#include "engine/conversation.h"

namespace rw {

Result<std::vector<int>> EncodeChat(const Engine& engine, const Json& messages, const Json& tools,
                                    bool add_generation_prompt, bool thinking) {
  const Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return engine.text_status();
  RW_ASSIGN_OR_RETURN(std::string text, engine.chat_template().Render(
                                            messages, tools, add_generation_prompt, thinking));
  std::vector<int32_t> ids = tok->Encode(text);
  return std::vector<int>(ids.begin(), ids.end());
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
  const ChatTemplate& tpl = engine_->chat_template();
  Json all = AllMessages();
  const Json before = all;
  all.push_back(Json{{"role", "user"}, {"content", user_text}});
  RW_ASSIGN_OR_RETURN(std::string full, tpl.Render(all, Json(), true, thinking_));
  if (!history_.empty()) {
    // The template renders earlier turns canonically (thinking stripped, no empty thought
    // channel), but the cache holds what the model really saw and wrote: keep that, and append
    // only the part of the rendering that comes after the earlier turns.
    RW_ASSIGN_OR_RETURN(std::string prev, tpl.Render(before, Json(), false, thinking_));
    if (full.compare(0, prev.size(), prev) == 0) {
      std::vector<int> ids = history_;
      for (int32_t id : tok->Encode(std::string_view(full).substr(prev.size()))) ids.push_back(id);
      return ids;
    }
  }
  std::vector<int32_t> ids = tok->Encode(full);
  return std::vector<int>(ids.begin(), ids.end());
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
