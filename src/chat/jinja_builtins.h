// Built-in filters, tests, methods of str/dict values and global functions of the Jinja
// interpreter, following jinja2's and transformers' definitions.
#pragma once

#include <string_view>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace rw::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

Result<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& operand,
                          CallArgs& args);
Result<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& operand,
                       CallArgs& args);

// obj.name for methods of str and dict (split, strip, get, items, ...): a bound callable, or
// undefined when there is no such method.
Value GetMethod(const Value& object, std::string_view name);

// range, namespace, dict, raise_exception, strftime_now.
void InstallGlobals(ValueMap* globals);

// Python printf-style `str % args` (also the format filter): %s %r %d %i %f %F %e %g %x %X %o
// %c %% with flags, width, precision and %(name)s.
Result<Value> PercentFormat(Interpreter& interp, const std::string& format, const Value& args);

// Binds call arguments to named parameters (positional first, then by keyword), filling
// defaults; too many or unknown arguments are an error naming fname.
struct ParamSpec {
  const char* name;
  Value default_value;
};
Result<std::vector<Value>> BindArgs(std::string_view fname, const CallArgs& args,
                                    const std::vector<ParamSpec>& params);

}  // namespace rw::jinja
