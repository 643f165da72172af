// The last conversation as the model saw it. OpenAI clients resend the whole conversation each
// turn, and the chat template renders earlier answers canonically (without the thought channel
// the generation prompt opened, for instance), so re-rendering would differ from the KV cache
// right where the last answer starts. When a request extends the last conversation by exactly
// its answer plus new messages, its prompt is built from the ids the model actually saw and
// wrote, so only the new messages are prefilled. It belongs to one client (the engine's cache
// serves a client only its own prompts), and only that client's requests continue it.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/json.h"
#include "engine/engine.h"
#include "engine/generate.h"

namespace rw::serve {

class ChatHistory {
 public:
  // Remembers an answered conversation: the messages and tools of the request, the prompt ids,
  // the generation and the answer's content (without reasoning).
  void Record(const std::string& client, const Json& messages, const Json& tools, bool thinking,
              std::vector<int> prompt, const GenerateResult& r, const std::string& content);
  void Clear();

  // The prompt for messages that continue the recorded conversation; nullopt when they do not.
  std::optional<std::vector<int>> PromptFor(const std::string& client, const Engine& engine,
                                            const Json& messages, const Json& tools,
                                            bool thinking) const;

 private:
  mutable std::mutex mu_;
  bool have_ = false;
  std::string client_;
  Json messages_, tools_;
  bool thinking_ = false;
  std::string content_;
  std::vector<int> ids_;  // prompt + generated, without the end of turn
};

// The text of a message's content: a string, or the concatenated text parts.
std::string ContentText(const Json& content);

}  // namespace rw::serve
