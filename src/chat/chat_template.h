// Renders a chat conversation into Gemma 4's prompt format. Two interchangeable backends:
// the built-in native renderer (Gemma4ChatFormat, byte-identical to the official 26B/31B
// template) and the Jinja interpreter for a chat_template.jinja shipped in a model directory.
//
// Input is an OpenAI-style request; NormalizeMessages maps it onto what the Gemma 4 templates
// read, identically for both backends:
//   role system|developer|user|assistant|tool  -> message.role ("assistant" prints as "model";
//                                                 only messages[0] may be system/developer to
//                                                 land in the system turn)
//   content: string | [{type:"text",text}, {type:"image"|"audio"|"video"}] | null
//                                              -> message.content as is, except that a list on a
//                                                 leading system/developer message becomes the
//                                                 concatenation of its trimmed text parts (the
//                                                 template would print the list's repr)
//   assistant tool_calls[{id, function:{name, arguments}}]
//                                              -> message.tool_calls; arguments given as a JSON
//                                                 object string are parsed into an object (as
//                                                 vLLM does) so they render as key:value pairs
//   assistant reasoning | reasoning_content    -> rendered as <|channel>thought..<channel|>
//                                                 before tool calls after the last user turn
//   tool {tool_call_id, name, content}         -> answered in the preceding assistant turn; the
//                                                 name comes from the tool call whose id matches
//                                                 tool_call_id, else from name
//   assistant tool_responses[{name, response}] -> legacy Gemma shape, passed through
// Template variables: messages, tools (None when absent), add_generation_prompt,
// enable_thinking, bos_token "<bos>", eos_token "<eos>", pad_token, unk_token, plus
// extra_context members (which override those).
#pragma once

#include <memory>
#include <string>

#include "base/json.h"
#include "base/status.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_text.h"

namespace rw {

namespace jinja {
class Template;
}

struct ChatTemplateOptions {
  // Python jinja2 (what transformers and vLLM run) or @huggingface/jinja, where they print
  // None/booleans/floats differently.
  jinja::Dialect dialect = jinja::Dialect::kPython;
  size_t max_output_bytes = 32u << 20;
};

class ChatTemplate {
 public:
  // A Jinja chat template (the text of chat_template.jinja).
  static Result<ChatTemplate> FromText(std::string text, ChatTemplateOptions options = {});
  // The native Gemma 4 renderer.
  static ChatTemplate Native(ChatTemplateOptions options = {});
  static const ChatTemplate& Gemma4Default();
  // <dir>/chat_template.jinja, else tokenizer_config.json's "chat_template", else the native
  // renderer.
  static Result<ChatTemplate> FromModelDirectory(const std::string& dir,
                                                 ChatTemplateOptions options = {});

  // messages: OpenAI-style array; tools: null or array of {type:"function", function:{...}};
  // extra_context: null or an object of additional template variables.
  Result<std::string> Render(const Json& messages, const Json& tools, bool add_generation_prompt,
                             bool enable_thinking, const Json& extra_context = {}) const;

  bool is_native() const { return jinja_ == nullptr; }

  static Result<Json> NormalizeMessages(const Json& messages);

 private:
  std::shared_ptr<const jinja::Template> jinja_;  // null: native renderer
  ChatTemplateOptions options_;
};

}  // namespace rw
