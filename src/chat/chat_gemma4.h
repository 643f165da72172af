// Native C++ rendering of Gemma 4's chat format: produces the same bytes as the official
// 26B/31B chat template (google-gemma-4-31B-it chat_template.jinja) without interpreting it,
// including its quirks (e.g. a parameters block without "type" is left unclosed). Inputs the
// template would reject (non-string roles, tool calls without a function name, ...) are
// errors here too.
#pragma once

#include <string>
#include <string_view>

#include "base/json.h"
#include "base/status.h"
#include "chat/jinja_text.h"

namespace rw {

class Gemma4ChatFormat {
 public:
  // dialect picks how None/booleans/floats print where the template prints raw values (tool
  // arguments and responses): Python jinja2 (transformers, vLLM) or @huggingface/jinja.
  explicit Gemma4ChatFormat(jinja::Dialect dialect = jinja::Dialect::kPython) : dialect_(dialect) {}

  // messages: array of message objects as the template reads them (see chat_template.h for the
  // mapping from OpenAI requests); tools: null or an array of {type, function} objects.
  Result<std::string> Render(const Json& messages, const Json& tools, bool add_generation_prompt,
                             bool enable_thinking, std::string_view bos_token = "<bos>") const;

  // The template's format_argument macro: the tool-call DSL encoding of one JSON value
  // (strings wrapped in <|"|>, object keys sorted case-insensitively, keys bare unless
  // escape_keys).
  Result<std::string> FormatArgument(const Json& value, bool escape_keys) const;

 private:
  jinja::Dialect dialect_;
};

}  // namespace rw
