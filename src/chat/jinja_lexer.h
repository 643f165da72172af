// Jinja lexer with the environment transformers uses for chat templates: trim_blocks and
// lstrip_blocks on, keep_trailing_newline off, `-`/`+` whitespace control, comments and raw
// blocks. Produces a flat token list for the parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rw::jinja {

enum class TokKind {
  kText,        // template data between tags
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kVarBegin,    // {{
  kVarEnd,      // }}
  kName,
  kString,
  kInt,
  kFloat,
  kOp,  // operator or punctuation; text holds it
  kEof,
};

struct Token {
  TokKind kind;
  std::string text;  // data, name, decoded string literal, or operator
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

// Limits guard against hostile input; exceeding them is an error, not a crash.
Result<std::vector<Token>> Tokenize(std::string_view source, size_t max_tokens = 4'000'000);

}  // namespace rw::jinja
