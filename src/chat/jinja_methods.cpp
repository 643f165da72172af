// Methods of str and dict values, global functions, printf-style formatting and argument
// binding for the Jinja builtins.
#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_interp.h"

namespace rw::jinja {

Result<std::vector<Value>> BindArgs(std::string_view fname, const CallArgs& args,
                                    const std::vector<ParamSpec>& params) {
  if (args.positional.size() > params.size()) {
    return Error(ErrorCode::kInvalidArgument, "{}() takes at most {} argument(s) ({} given)", fname,
                 params.size(), args.positional.size());
  }
  std::vector<Value> out(params.size());
  std::vector<bool> set(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    out[i] = args.positional[i];
    set[i] = true;
  }
  for (const auto& [k, v] : args.keyword) {
    size_t idx = params.size();
    for (size_t i = 0; i < params.size(); ++i) {
      if (k == params[i].name) idx = i;
    }
    if (idx == params.size()) {
      return Error(ErrorCode::kInvalidArgument, "{}() got an unexpected keyword argument '{}'",
                   fname, k);
    }
    if (set[idx]) {
      return Error(ErrorCode::kInvalidArgument, "{}() got multiple values for argument '{}'", fname,
                   k);
    }
    out[idx] = v;
    set[idx] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!set[i]) out[i] = params[i].default_value;
  }
  return out;
}

namespace {

bool IsIntLike(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t IntOf(const Value& v) {
  return v.is_bool() ? v.bool_value() : v.int_value();
}

Status NeedString(const Value& v, const char* method, const char* what = "argument") {
  if (!v.is_string()) {
    return Error(ErrorCode::kInvalidArgument, "{}() {} must be str, not {}", method, what,
                 TypeName(v));
  }
  return Status::Ok();
}

// Python str.split(sep=None, maxsplit=-1) (reverse=true for rsplit).
Result<Value> Split(Interpreter& interp, const std::string& s, const Value& sep_v,
                    const Value& max_v, bool reverse) {
  int64_t maxsplit =
      max_v.is_undefined() || max_v.is_none() ? -1 : (IsIntLike(max_v) ? IntOf(max_v) : -2);
  if (maxsplit == -2) return Error(ErrorCode::kInvalidArgument, "maxsplit must be an integer");
  ValueList parts;
  if (sep_v.is_undefined() || sep_v.is_none()) {
    std::vector<char32_t> cps = DecodeUtf8(s);
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) in code points
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsSpace(cps[i], interp.dialect())) ++i;
      if (i >= cps.size()) break;
      size_t b = i;
      while (i < cps.size() && !IsSpace(cps[i], interp.dialect())) ++i;
      words.emplace_back(b, i);
    }
    auto text = [&](size_t b, size_t e) {
      return EncodeUtf8(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) parts.push_back(Value::String(text(b, e)));
    } else if (!reverse) {
      for (int64_t k = 0; k < maxsplit; ++k)
        parts.push_back(Value::String(text(words[k].first, words[k].second)));
      // The remainder keeps its trailing whitespace, as in Python.
      std::string rest = text(words[maxsplit].first, cps.size());
      parts.push_back(Value::String(rest));
    } else {
      size_t first_kept = words.size() - maxsplit;
      std::string rest = text(0, words[first_kept - 1].second);
      parts.push_back(Value::String(StripSpace(rest, interp.dialect(), true, false)));
      for (size_t k = first_kept; k < words.size(); ++k)
        parts.push_back(Value::String(text(words[k].first, words[k].second)));
    }
    return Value::List(std::move(parts));
  }
  RW_RETURN_IF_ERROR(NeedString(sep_v, reverse ? "rsplit" : "split", "separator"));
  const std::string& sep = sep_v.str();
  if (sep.empty()) return Error(ErrorCode::kInvalidArgument, "empty separator");
  std::vector<std::string> pieces;
  size_t start = 0, pos;
  while ((pos = s.find(sep, start)) != std::string::npos) {
    pieces.push_back(s.substr(start, pos - start));
    start = pos + sep.size();
  }
  pieces.push_back(s.substr(start));
  if (maxsplit >= 0 && pieces.size() > static_cast<size_t>(maxsplit) + 1) {
    std::vector<std::string> merged;
    if (!reverse) {
      for (int64_t k = 0; k < maxsplit; ++k) merged.push_back(pieces[k]);
      std::string rest = pieces[maxsplit];
      for (size_t k = maxsplit + 1; k < pieces.size(); ++k) rest += sep + pieces[k];
      merged.push_back(rest);
    } else {
      size_t head = pieces.size() - maxsplit;
      std::string rest = pieces[0];
      for (size_t k = 1; k < head; ++k) rest += sep + pieces[k];
      merged.push_back(rest);
      for (size_t k = head; k < pieces.size(); ++k) merged.push_back(pieces[k]);
    }
    pieces = std::move(merged);
  }
  for (auto& p : pieces) parts.push_back(Value::String(std::move(p)));
  return Value::List(std::move(parts));
}

// Python str.splitlines().
ValueList SplitLines(const std::string& s, bool keepends) {
  ValueList out;
  std::vector<char32_t> cps = DecodeUtf8(s);
  size_t b = 0, i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t end = i;
    ++i;
    if (c == '\r' && i < cps.size() && cps[i] == '\n') ++i;
    out.push_back(Value::String(
        EncodeUtf8(std::vector<char32_t>(cps.begin() + b, cps.begin() + (keepends ? i : end)))));
    b = i;
  }
  if (b < cps.size())
    out.push_back(Value::String(EncodeUtf8(std::vector<char32_t>(cps.begin() + b, cps.end()))));
  return out;
}

std::string ReplaceAll(const std::string& s, const std::string& old_s, const std::string& new_s,
                       int64_t count) {
  if (count == 0) return s;
  std::string out;
  if (old_s.empty()) {
    // Python inserts the replacement between every character.
    size_t pos = 0;
    int64_t n = 0;
    while (true) {
      if (count < 0 || n < count) {
        out += new_s;
        ++n;
      }
      if (pos >= s.size()) break;
      size_t start = pos;
      NextCodepoint(s, &pos);
      out.append(s, start, pos - start);
    }
    return out;
  }
  size_t start = 0, pos;
  int64_t n = 0;
  while ((count < 0 || n < count) && (pos = s.find(old_s, start)) != std::string::npos) {
    out.append(s, start, pos - start);
    out += new_s;
    start = pos + old_s.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  return out;
}

// Code-point index of a byte offset.
int64_t CpIndex(const std::string& s, size_t byte) {
  int64_t n = 0;
  size_t pos = 0;
  while (pos < byte) {
    NextCodepoint(s, &pos);
    ++n;
  }
  return n;
}

Result<bool> AffixMatch(const std::string& s, const Value& affix, bool prefix, const char* method) {
  auto one = [&](const Value& a) -> Result<bool> {
    RW_RETURN_IF_ERROR(NeedString(a, method));
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list_like()) {
    for (const Value& a : affix.list()) {
      RW_ASSIGN_OR_RETURN(bool m, one(a));
      if (m) return true;
    }
    return false;
  }
  return one(affix);
}

bool AllCps(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size()) {
    if (!pred(NextCodepoint(s, &pos))) return false;
  }
  return true;
}

bool IsDigitCp(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 0xFF10 && c <= 0xFF19);
}
bool IsAlphaCp(char32_t c) {
  return IsCased(c) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF) ||
         (c >= 0xAC00 && c <= 0xD7AF) || (c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A);
}

// Python str.format with positional/named fields and !r/!s conversions (no format specs).
Result<Value> StrFormat(Interpreter& interp, const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos)
      return Error(ErrorCode::kInvalidArgument, "format: unmatched '{{'");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    char conv = 0;
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) {
      return Error(ErrorCode::kUnsupported, "format: format specifications are not supported");
    }
    Value v;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.positional.size())
        return Error(ErrorCode::kInvalidArgument, "format: index out of range");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, kv] : args.keyword) {
        if (k == field) {
          v = kv;
          found = true;
        }
      }
      if (!found) return Error(ErrorCode::kInvalidArgument, "format: missing key '{}'", field);
    }
    out += conv == 'r' ? Repr(v, interp.dialect()) : Str(v, interp.dialect());
  }
  RW_RETURN_IF_ERROR(interp.CheckStringSize(out.size()));
  return Value::String(std::move(out));
}

using Method = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);

Result<Value> StrMethod(std::string_view name, Interpreter& interp, const Value& self,
                        CallArgs& args) {
  const std::string& s = self.str();
  const Dialect d = interp.dialect();
  auto bind = [&](std::vector<ParamSpec> params) { return BindArgs(name, args, params); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"chars", Value::None()}}));
    bool left = name != "rstrip", right = name != "lstrip";
    if (a[0].is_none()) return Value::String(StripSpace(s, d, left, right));
    RW_RETURN_IF_ERROR(NeedString(a[0], std::string(name).c_str()));
    return Value::String(StripChars(s, a[0].str(), left, right));
  }
  if (name == "split" || name == "rsplit") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"sep", Value::None()}, {"maxsplit", Value::Int(-1)}}));
    return Split(interp, s, a[0], a[1], name == "rsplit");
  }
  if (name == "splitlines") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"keepends", Value::Bool(false)}}));
    return Value::List(SplitLines(s, Truthy(a[0])));
  }
  if (name == "startswith" || name == "endswith") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"prefix", Value()}}));
    RW_ASSIGN_OR_RETURN(bool m,
                        AffixMatch(s, a[0], name == "startswith", std::string(name).c_str()));
    return Value::Bool(m);
  }
  if (name == "upper") return Value::String(ToUpper(s));
  if (name == "lower") return Value::String(ToLower(s));
  if (name == "title") return Value::String(ToTitle(s));
  if (name == "capitalize") return Value::String(Capitalize(s));
  if (name == "replace") {
    RW_ASSIGN_OR_RETURN(auto a,
                        bind({{"old", Value()}, {"new", Value()}, {"count", Value::Int(-1)}}));
    RW_RETURN_IF_ERROR(NeedString(a[0], "replace"));
    RW_RETURN_IF_ERROR(NeedString(a[1], "replace"));
    std::string r = ReplaceAll(s, a[0].str(), a[1].str(), IsIntLike(a[2]) ? IntOf(a[2]) : -1);
    RW_RETURN_IF_ERROR(interp.CheckStringSize(r.size()));
    return Value::String(std::move(r));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"sub", Value()}}));
    RW_RETURN_IF_ERROR(NeedString(a[0], std::string(name).c_str()));
    const std::string& sub = a[0].str();
    if (name == "count") {
      if (sub.empty()) return Value::Int(CpIndex(s, s.size()) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex")
        return Error(ErrorCode::kInvalidArgument, "substring not found");
      return Value::Int(-1);
    }
    return Value::Int(CpIndex(s, p));
  }
  if (name == "join") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"iterable", Value()}}));
    RW_ASSIGN_OR_RETURN(ValueList items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return Error(ErrorCode::kInvalidArgument,
                     "sequence item {}: expected str instance, {} found", i, TypeName(items[i]));
      }
      if (i) out += s;
      out += items[i].str();
      RW_RETURN_IF_ERROR(interp.CheckStringSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    RW_ASSIGN_OR_RETURN(auto a, bind({{"affix", Value()}}));
    RW_RETURN_IF_ERROR(NeedString(a[0], std::string(name).c_str()));
    const std::string& x = a[0].str();
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::String(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && x.size() <= s.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::String(s.substr(0, s.size() - x.size()));
    }
    return self;
  }
  if (name == "format") return StrFormat(interp, s, args);
  if (name == "isdigit") return Value::Bool(AllCps(s, IsDigitCp));
  if (name == "isalpha") return Value::Bool(AllCps(s, IsAlphaCp));
  if (name == "isalnum")
    return Value::Bool(AllCps(s, [](char32_t c) { return IsDigitCp(c) || IsAlphaCp(c); }));
  if (name == "isspace") {
    return Value::Bool(AllCps(s, [](char32_t c) { return IsSpace(c, Dialect::kPython); }));
  }
  if (name == "islower" || name == "isupper") {
    bool any_cased = false, ok = true;
    size_t pos = 0;
    while (pos < s.size()) {
      char32_t c = NextCodepoint(s, &pos);
      if (!IsCased(c)) continue;
      any_cased = true;
      if (name == "islower" ? IsUpperCp(c) : IsLowerCp(c)) ok = false;
    }
    return Value::Bool(any_cased && ok);
  }
  return Error(ErrorCode::kInternal, "unknown str method {}", name);
}

Result<Value> DictMethod(std::string_view name, Interpreter& interp, const Value& self,
                         CallArgs& args) {
  const ValueMap& m = self.map();
  if (name == "get") {
    RW_ASSIGN_OR_RETURN(auto a,
                        BindArgs("get", args, {{"key", Value()}, {"default", Value::None()}}));
    if (a[0].is_string()) {
      if (const Value* v = m.Find(a[0].str())) return *v;
    }
    return a[1];
  }
  RW_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  ValueList out;
  out.reserve(m.size());
  for (const auto& [k, v] : m.entries()) {
    if (name == "items") {
      out.push_back(Value::Tuple({Value::String(k), v}));
    } else if (name == "keys") {
      out.push_back(Value::String(k));
    } else {
      out.push_back(v);
    }
  }
  return Value::List(std::move(out));
}

constexpr std::string_view kStrMethods[] = {
    "strip",    "lstrip",  "rstrip",  "split",   "rsplit",     "splitlines",   "startswith",
    "endswith", "upper",   "lower",   "title",   "capitalize", "replace",      "find",
    "rfind",    "index",   "rindex",  "count",   "join",       "removeprefix", "removesuffix",
    "format",   "isdigit", "isalpha", "isalnum", "isspace",    "islower",      "isupper"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};

}  // namespace

Value GetMethod(const Value& object, std::string_view name) {
  if (object.is_string()) {
    for (std::string_view m : kStrMethods) {
      if (m == name) {
        return Value::Function(std::string(m),
                               [self = object, m](Interpreter& interp, CallArgs& args) {
                                 return StrMethod(m, interp, self, args);
                               });
      }
    }
  } else if (object.is_map()) {
    for (std::string_view m : kDictMethods) {
      if (m == name) {
        return Value::Function(std::string(m),
                               [self = object, m](Interpreter& interp, CallArgs& args) {
                                 return DictMethod(m, interp, self, args);
                               });
      }
    }
  }
  return Value::Undefined();
}

namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox limit

Result<Value> Range(Interpreter& interp, CallArgs& args) {
  if (!args.keyword.empty())
    return Error(ErrorCode::kInvalidArgument, "range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    return Error(ErrorCode::kInvalidArgument, "range expected 1 to 3 arguments");
  for (const Value& v : p) {
    if (!IsIntLike(v)) {
      return Error(ErrorCode::kInvalidArgument, "'{}' object cannot be interpreted as an integer",
                   TypeName(v));
    }
  }
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = IntOf(p[0]);
  } else {
    start = IntOf(p[0]);
    stop = IntOf(p[1]);
    if (p.size() == 3) step = IntOf(p[2]);
  }
  if (step == 0) return Error(ErrorCode::kInvalidArgument, "range() arg 3 must not be zero");
  __int128 count = 0;
  if (step > 0 && stop > start) count = ((__int128)stop - start + step - 1) / step;
  if (step < 0 && stop < start) count = ((__int128)start - stop - step - 1) / -step;
  if (count > kMaxRange) {
    return Error(ErrorCode::kResourceExhausted, "range too big, maximum size for range is {}",
                 kMaxRange);
  }
  RW_RETURN_IF_ERROR(interp.ChargeSteps(static_cast<uint64_t>(count)));
  ValueList out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(Value::Int(start + i * step));
  return Value::List(std::move(out));
}

// dict(*args, **kwargs) as Python builds it: a mapping or pairs, then keywords.
Result<std::shared_ptr<ValueMap>> DictFromArgs(const char* fname, CallArgs& args) {
  auto map = std::make_shared<ValueMap>();
  if (args.positional.size() > 1) {
    return Error(ErrorCode::kInvalidArgument, "{} expected at most 1 argument, got {}", fname,
                 args.positional.size());
  }
  if (args.positional.size() == 1) {
    const Value& src = args.positional[0];
    if (src.is_map() || src.is_namespace()) {
      for (const auto& [k, v] : src.map().entries()) map->Set(k, v);
    } else if (src.is_list_like()) {
      for (const Value& pair : src.list()) {
        if (!pair.is_list_like() || pair.list().size() != 2 || !pair.list()[0].is_string()) {
          return Error(ErrorCode::kInvalidArgument, "{}: expected (str, value) pairs", fname);
        }
        map->Set(pair.list()[0].str(), pair.list()[1]);
      }
    } else {
      return Error(ErrorCode::kInvalidArgument, "'{}' object is not iterable", TypeName(src));
    }
  }
  for (auto& [k, v] : args.keyword) map->Set(k, v);
  return map;
}

}  // namespace

void InstallGlobals(ValueMap* globals) {
  globals->Set("range", Value::Function("range", Range));
  globals->Set(
      "namespace",
      Value::Function("namespace", [](Interpreter& interp, CallArgs& args) -> Result<Value> {
        RW_ASSIGN_OR_RETURN(auto map, DictFromArgs("namespace", args));
        interp.TrackNamespace(map);
        return Value::Namespace(std::move(map));
      }));
  globals->Set("dict", Value::Function("dict", [](Interpreter&, CallArgs& args) -> Result<Value> {
                 RW_ASSIGN_OR_RETURN(auto map, DictFromArgs("dict", args));
                 return Value::Map(std::move(map));
               }));
  globals->Set(
      "raise_exception",
      Value::Function("raise_exception", [](Interpreter& interp, CallArgs& args) -> Result<Value> {
        std::string msg = args.positional.empty() ? "" : Str(args.positional[0], interp.dialect());
        return Error(ErrorCode::kInvalidArgument, "template raised an exception: {}", msg);
      }));
  globals->Set("strftime_now",
               Value::Function("strftime_now", [](Interpreter&, CallArgs& args) -> Result<Value> {
                 if (args.positional.size() != 1 || !args.positional[0].is_string()) {
                   return Error(ErrorCode::kInvalidArgument,
                                "strftime_now() takes one format string");
                 }
                 std::time_t now = std::time(nullptr);
                 std::tm tm{};
                 localtime_r(&now, &tm);
                 char buf[256];
                 size_t n = std::strftime(buf, sizeof(buf), args.positional[0].str().c_str(), &tm);
                 return Value::String(std::string(buf, n));
               }));
}

Result<Value> PercentFormat(Interpreter& interp, const std::string& f, const Value& args) {
  ValueList positional;
  const Value* mapping = nullptr;
  if (args.kind() == Value::Kind::kTuple) {
    positional = args.list();
  } else if (args.is_map()) {
    mapping = &args;
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) return Error(ErrorCode::kInvalidArgument, "incomplete format");
    if (f[i] == '%') {
      out.push_back('%');
      continue;
    }
    Value v;
    bool have_value = false;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string::npos || mapping == nullptr) {
        return Error(ErrorCode::kInvalidArgument, "format requires a mapping");
      }
      const Value* found = mapping->map().Find(f.substr(i + 1, close - i - 1));
      if (!found)
        return Error(ErrorCode::kInvalidArgument, "format: missing key '{}'",
                     f.substr(i + 1, close - i - 1));
      v = *found;
      have_value = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ 0#").find(f[i]) != std::string_view::npos)
      flags.push_back(f[i++]);
    int width = 0;
    while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])))
      width = width * 10 + (f[i++] - '0');
    int precision = -1;
    if (i < f.size() && f[i] == '.') {
      precision = 0;
      ++i;
      while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])))
        precision = precision * 10 + (f[i++] - '0');
    }
    if (i >= f.size()) return Error(ErrorCode::kInvalidArgument, "incomplete format");
    char conv = f[i];
    if (!have_value) {
      if (next >= positional.size())
        return Error(ErrorCode::kInvalidArgument, "not enough arguments for format string");
      v = positional[next++];
    }
    std::string piece;
    switch (conv) {
      case 's':
        piece = Str(v, interp.dialect());
        if (precision >= 0)
          piece = EncodeUtf8([&] {
            auto cps = DecodeUtf8(piece);
            if (cps.size() > static_cast<size_t>(precision)) cps.resize(precision);
            return cps;
          }());
        break;
      case 'r':
        piece = Repr(v, interp.dialect());
        break;
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!v.is_number() && !v.is_bool()) {
          return Error(ErrorCode::kInvalidArgument, "%{} format: a real number is required, not {}",
                       conv, TypeName(v));
        }
        int64_t n = v.is_float() ? static_cast<int64_t>(std::trunc(v.float_value())) : IntOf(v);
        std::string spec = std::string("{:") + (flags.find('+') != std::string::npos ? "+" : "") +
                           (conv == 'd' || conv == 'i' ? "d" : std::string(1, conv)) + "}";
        piece = fmt::format(fmt::runtime(spec), n);
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.is_number() && !v.is_bool()) {
          return Error(ErrorCode::kInvalidArgument, "must be real number, not {}", TypeName(v));
        }
        std::string spec = std::string("{:") + (flags.find('+') != std::string::npos ? "+" : "") +
                           "." + std::to_string(precision < 0 ? 6 : precision) + conv + "}";
        piece = fmt::format(fmt::runtime(spec), v.AsDouble());
        break;
      }
      case 'c':
        if (IsIntLike(v)) {
          AppendUtf8(&piece, static_cast<char32_t>(IntOf(v)));
        } else {
          piece = Str(v, interp.dialect());
        }
        break;
      default:
        return Error(ErrorCode::kUnsupported, "unsupported format character '{}'", conv);
    }
    int len = static_cast<int>(StringLength(piece, Dialect::kPython));
    if (width > len) {
      bool left = flags.find('-') != std::string::npos;
      bool zero = flags.find('0') != std::string::npos && conv != 's' && conv != 'r' && !left;
      std::string pad(width - len, zero ? '0' : ' ');
      if (left) {
        piece += pad;
      } else if (zero && !piece.empty() && (piece[0] == '-' || piece[0] == '+')) {
        piece = piece.substr(0, 1) + pad + piece.substr(1);
      } else {
        piece = pad + piece;
      }
    }
    out += piece;
    RW_RETURN_IF_ERROR(interp.CheckStringSize(out.size()));
  }
  if (mapping == nullptr && next < positional.size()) {
    return Error(ErrorCode::kInvalidArgument,
                 "not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

}  // namespace rw::jinja
