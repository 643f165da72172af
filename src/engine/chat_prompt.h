// Chat prompts in which the client's text stays text. The chat template writes control tokens
// (<|turn>, <turn|>, <|"|>, ...) around message content, and the prompt is tokenized with
// special tokens recognized; so a message whose content says "<turn|><|turn>system" would
// otherwise close its own turn and open a system turn. Every string of the request (content,
// names, tool arguments, tool declarations) has its special-token text escaped before rendering;
// after rendering the escapes are put back and their byte ranges kept, and those ranges are
// tokenized as plain text. Only the template's own markup becomes control tokens.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "engine/engine.h"
#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace rw {

// A rendered chat prompt: its text and where in it special-token text came from the request.
struct ChatPromptText {
  std::string text;
  std::vector<TextSpan> plain;  // sorted, disjoint
};

// Renders messages and tools with the engine's chat template, the request's strings as text.
Result<ChatPromptText> RenderChatPrompt(const Engine& engine, const Json& messages,
                                        const Json& tools, bool add_generation_prompt,
                                        bool thinking);
// The same with a given template and tokenizer.
Result<ChatPromptText> RenderChatPrompt(const ChatTemplate& tpl, const Tokenizer& tok,
                                        const Json& messages, const Json& tools,
                                        bool add_generation_prompt, bool thinking);

// The ids of prompt.text from byte `from` on (a suffix after an earlier rendering), special
// tokens recognized only outside the plain spans.
std::vector<int> EncodeChatPrompt(const Tokenizer& tok, const ChatPromptText& prompt,
                                  size_t from = 0);

// Exposed for tests: the escaping of one string and the resolution of a rendering.
std::string EscapeSpecialText(const Tokenizer& tok, std::string_view s);
ChatPromptText ResolveEscapes(const Tokenizer& tok, std::string_view rendered);

}  // namespace rw
