// Public entry point of the Jinja interpreter: parse a template once, render it many times.
// Templates come from model directories, so parsing and rendering treat them as untrusted:
// every failure (syntax, unknown filter, type error, raise_exception, resource limits) is a
// Status with the template line, never a crash.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/json.h"
#include "base/status.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_value.h"

namespace rw::jinja {

struct Program;

class Template {
 public:
  static Result<Template> Parse(std::string_view source);

  // context must be a JSON object (or null); its members become top-level variables.
  Result<std::string> Render(const Json& context, const RenderOptions& options = {}) const;
  Result<std::string> Render(const ValueMap& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace rw::jinja
