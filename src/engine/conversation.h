// A multi-turn chat over one Session: messages in OpenAI shape, rendered with the model's chat
// template, and the token history of what the model actually saw and wrote. A new turn's prompt
// is that history plus the template's rendering of the new messages, so the KV cache of every
// earlier turn is reused and only the new tokens are prefilled.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "engine/engine.h"
#include "engine/generate.h"

namespace rw {

// The ids of a conversation rendered with the engine's chat template.
Result<std::vector<int>> EncodeChat(const Engine& engine, const Json& messages, const Json& tools,
                                    bool add_generation_prompt, bool thinking);

class Conversation {
 public:
  // engine must have a tokenizer (Engine::text_status() ok).
  Conversation(std::shared_ptr<const Engine> engine, bool thinking);

  // Replaces the system message ("" removes it). The next prompt is rendered afresh; the cache
  // still serves whatever prefix it shares.
  void SetSystem(std::string text);
  // Forgets every turn (the system message stays).
  void Reset();

  // The prompt ids for a new user message.
  Result<std::vector<int>> PromptFor(const std::string& user_text) const;
  // Records a finished (or interrupted) answer to that user message: prompt are the ids
  // PromptFor returned, r the generation, content the answer without thinking or tool calls.
  void Commit(const std::string& user_text, const std::vector<int>& prompt, const GenerateResult& r,
              const std::string& content);

  const Json& messages() const { return messages_; }
  bool thinking() const { return thinking_; }

 private:
  Json AllMessages() const;  // system (if any) + turns

  std::shared_ptr<const Engine> engine_;
  bool thinking_;
  std::string system_;
  Json messages_ = Json::array();  // user/assistant turns
  std::vector<int> history_;       // ids of every committed turn, ending after "<turn|>\n"
};

}  // namespace rw
