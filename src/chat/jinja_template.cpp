#include "chat/jinja_template.h"

#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace rw::jinja {

Result<Template> Template::Parse(std::string_view source) {
  RW_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  RW_ASSIGN_OR_RETURN(std::unique_ptr<Program> program, jinja::Parse(std::move(tokens)));
  Template t;
  t.program_ = std::move(program);
  return t;
}

Result<std::string> Template::Render(const Json& context, const RenderOptions& options) const {
  if (!context.is_null() && !context.is_object()) {
    return Error(ErrorCode::kInvalidArgument, "template context must be a JSON object");
  }
  ValueMap vars;
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) {
      RW_ASSIGN_OR_RETURN(Value v, FromJson(it.value(), options.dialect));
      vars.Set(it.key(), std::move(v));
    }
  }
  return Render(vars, options);
}

Result<std::string> Template::Render(const ValueMap& context, const RenderOptions& options) const {
  Interpreter interp(options);
  return interp.Render(*program_, context);
}

}  // namespace rw::jinja
