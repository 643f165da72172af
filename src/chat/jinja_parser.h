// Recursive-descent parser for the Jinja subset chat templates use, with jinja2's operator
// precedence. Unknown tags, filters and tests are rejected here, so a template that parses only
// fails at render time on data-dependent errors.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace rw::jinja {

// Maximum nesting of blocks and sub-expressions; deeper input is rejected, not overflowed.
inline constexpr int kMaxParseDepth = 128;

Result<std::unique_ptr<Program>> Parse(std::vector<Token> tokens);

}  // namespace rw::jinja
