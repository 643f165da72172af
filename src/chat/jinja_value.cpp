#include "chat/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rw::jinja {

const std::shared_ptr<const std::string>& Value::EmptyString() {
  static const auto* kEmpty =
      new std::shared_ptr<const std::string>(std::make_shared<std::string>());
  return *kEmpty;
}

namespace {

// Containers whose last reference is going away, destroyed one at a time by the outermost
// release so that destroying a deeply nested value never recurses.
struct Graveyard {
  std::vector<std::shared_ptr<const ValueList>> lists;
  std::vector<std::shared_ptr<ValueMap>> maps;
  bool draining = false;
};
thread_local Graveyard tl_graveyard;

}  // namespace

void Value::DeferRelease() {
  Graveyard& g = tl_graveyard;
  if (list_ && list_.use_count() == 1) g.lists.push_back(std::move(list_));
  if (map_ && map_.use_count() == 1) g.maps.push_back(std::move(map_));
  if (g.draining) return;
  g.draining = true;
  while (!g.lists.empty() || !g.maps.empty()) {
    if (!g.lists.empty()) {
      std::shared_ptr<const ValueList> l = std::move(g.lists.back());
      g.lists.pop_back();
      l.reset();  // may queue more containers
    } else {
      std::shared_ptr<ValueMap> m = std::move(g.maps.back());
      g.maps.pop_back();
      m.reset();
    }
  }
  g.draining = false;
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}
Value Value::Tuple(ValueList items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::Map(std::shared_ptr<ValueMap> map) {
  Value v;
  v.kind_ = Kind::kMap;
  v.map_ = std::move(map);
  return v;
}
Value Value::NewMap() {
  return Map(std::make_shared<ValueMap>());
}
Value Value::Namespace(std::shared_ptr<ValueMap> map) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.map_ = std::move(map);
  return v;
}
Value Value::Function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::AsDouble() const {
  switch (kind_) {
    case Kind::kBool:
      return b_ ? 1 : 0;
    case Kind::kInt:
      return static_cast<double>(i_);
    case Kind::kFloat:
      return f_;
    default:
      return 0;
  }
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (map_) return map_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

const Value* ValueMap::Find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueMap::Set(std::string key, Value value) {
  if (!index_.empty()) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      entries_[it->second].second = std::move(value);
      return;
    }
  } else {
    for (auto& [k, v] : entries_) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
  }
  AppendUnique(std::move(key), std::move(value));
}

void ValueMap::AppendUnique(std::string key, Value value) {
  entries_.emplace_back(std::move(key), std::move(value));
  if (entries_.size() == kIndexThreshold) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  } else if (entries_.size() > kIndexThreshold) {
    index_.emplace(entries_.back().first, entries_.size() - 1);
  }
}

void ValueMap::Clear() {
  entries_.clear();
  index_.clear();
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kMap:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.bool_value();
    case Value::Kind::kInt:
      return v.int_value() != 0;
    case Value::Kind::kFloat:
      return v.float_value() != 0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !v.list().empty();
    case Value::Kind::kMap:
      return !v.map().empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

bool IsNumeric(const Value& v) {
  return v.is_bool() || v.is_number();
}

bool EqualsDepth(const Value& a, const Value& b, int depth) {
  if (depth > 256) return false;
  if (IsNumeric(a) && IsNumeric(b)) {
    if (a.is_float() || b.is_float()) return a.AsDouble() == b.AsDouble();
    int64_t x = a.is_bool() ? a.bool_value() : a.int_value();
    int64_t y = b.is_bool() ? b.bool_value() : b.int_value();
    return x == y;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const ValueList& x = a.list();
      const ValueList& y = b.list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!EqualsDepth(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kMap: {
      if (a.map().size() != b.map().size()) return false;
      for (const auto& [k, v] : a.map().entries()) {
        const Value* other = b.map().Find(k);
        if (!other || !EqualsDepth(v, *other, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

}  // namespace

bool Equals(const Value& a, const Value& b) {
  return EqualsDepth(a, b, 0);
}

namespace {
Result<int> CompareDepth(const Value& a, const Value& b, bool case_insensitive, int depth);
}  // namespace

Result<int> Compare(const Value& a, const Value& b, bool case_insensitive) {
  return CompareDepth(a, b, case_insensitive, 0);
}

namespace {
Result<int> CompareDepth(const Value& a, const Value& b, bool case_insensitive, int depth) {
  if (depth > 256) return Error(ErrorCode::kInvalidArgument, "values nested too deeply to compare");
  if (IsNumeric(a) && IsNumeric(b)) {
    if (a.is_float() || b.is_float()) {
      double x = a.AsDouble(), y = b.AsDouble();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.is_bool() ? a.bool_value() : a.int_value();
    int64_t y = b.is_bool() ? b.bool_value() : b.int_value();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c =
        case_insensitive ? ToLower(a.str()).compare(ToLower(b.str())) : a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list_like() && a.kind() == b.kind()) {
    const ValueList& x = a.list();
    const ValueList& y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return CompareDepth(x[i], y[i], case_insensitive, depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return Error(ErrorCode::kInvalidArgument, "'<' not supported between instances of '{}' and '{}'",
               TypeName(a), TypeName(b));
}
}  // namespace

namespace {

constexpr int kMaxPrintDepth = 200;

std::string PythonStringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp = NextCodepoint(s, &pos);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp));
    } else if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
               (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
               (cp >= 0xD800 && cp <= 0xDFFF)) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
    } else {
      AppendUtf8(&out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

void AppendJsonString(std::string* out, const std::string& s, bool ensure_ascii, Dialect dialect) {
  out->push_back('"');
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t cp = NextCodepoint(s, &pos);
    switch (cp) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (cp < 0x20 ||
            (ensure_ascii && (cp > 0x7F || (cp == 0x7F && dialect == Dialect::kHuggingFaceJs)))) {
          if (cp >= 0x10000) {
            char32_t v = cp - 0x10000;
            *out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            *out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
          }
        } else {
          AppendUtf8(out, cp);
        }
    }
  }
  out->push_back('"');
}

std::string JsFloatStr(double f) {
  if (f == 0 && std::signbit(f)) return "-0.0";
  if (std::isfinite(f) && std::floor(f) == f && std::fabs(f) < 1e21)
    return JsNumberToString(f) + ".0";
  return JsNumberToString(f);
}

void AppendRepr(std::string* out, const Value& v, Dialect dialect, int depth);

void AppendContainerRepr(std::string* out, const Value& v, Dialect dialect, int depth) {
  if (depth > kMaxPrintDepth) {
    *out += v.is_list_like() ? "[...]" : "{...}";
    return;
  }
  const bool py = dialect == Dialect::kPython;
  if (v.is_list_like()) {
    bool tuple = py && v.kind() == Value::Kind::kTuple;
    out->push_back(tuple ? '(' : '[');
    const ValueList& items = v.list();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) *out += ", ";
      AppendRepr(out, items[i], dialect, depth + 1);
    }
    if (tuple && items.size() == 1) out->push_back(',');
    out->push_back(tuple ? ')' : ']');
    return;
  }
  if (py && v.is_namespace()) *out += "<Namespace ";
  out->push_back('{');
  bool first = true;
  for (const auto& [k, item] : v.map().entries()) {
    if (!first) *out += ", ";
    first = false;
    if (py) {
      *out += PythonStringRepr(k);
    } else {
      AppendJsonString(out, k, false, dialect);
    }
    *out += ": ";
    AppendRepr(out, item, dialect, depth + 1);
  }
  out->push_back('}');
  if (py && v.is_namespace()) out->push_back('>');
}

void AppendRepr(std::string* out, const Value& v, Dialect dialect, int depth) {
  const bool py = dialect == Dialect::kPython;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      *out += py ? "Undefined" : "undefined";
      return;
    case Value::Kind::kNone:
      *out += py ? "None" : "null";
      return;
    case Value::Kind::kBool:
      *out += py ? (v.bool_value() ? "True" : "False") : (v.bool_value() ? "true" : "false");
      return;
    case Value::Kind::kInt:
      *out += std::to_string(v.int_value());
      return;
    case Value::Kind::kFloat:
      *out += py ? PythonFloatRepr(v.float_value()) : JsNumberToString(v.float_value());
      return;
    case Value::Kind::kString:
      if (py) {
        *out += PythonStringRepr(v.str());
      } else {
        AppendJsonString(out, v.str(), false, dialect);
      }
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kMap:
    case Value::Kind::kNamespace:
      AppendContainerRepr(out, v, dialect, depth);
      return;
    case Value::Kind::kCallable:
      *out += fmt::format("<function {}>", v.callable().name);
      return;
  }
}

}  // namespace

std::string Repr(const Value& v, Dialect dialect) {
  std::string out;
  AppendRepr(&out, v, dialect, 0);
  return out;
}

std::string Str(const Value& v, Dialect dialect) {
  const bool py = dialect == Dialect::kPython;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return py ? "None" : "";
    case Value::Kind::kBool:
      return py ? (v.bool_value() ? "True" : "False") : (v.bool_value() ? "true" : "false");
    case Value::Kind::kInt:
      return std::to_string(v.int_value());
    case Value::Kind::kFloat:
      return py ? PythonFloatRepr(v.float_value()) : JsFloatStr(v.float_value());
    case Value::Kind::kString:
      return v.str();
    default:
      return Repr(v, dialect);
  }
}

namespace {

Status DumpJsonTo(std::string* out, const Value& v, Dialect dialect, const JsonDumpOptions& o,
                  int depth) {
  if (depth > kMaxPrintDepth) return Error(ErrorCode::kInvalidArgument, "tojson: nesting too deep");
  const bool py = dialect == Dialect::kPython;
  std::string item_sep = o.has_separators ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  std::string key_sep = o.has_separators ? o.key_separator : ": ";
  auto newline = [&](int d) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * d, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      if (py)
        return Error(ErrorCode::kInvalidArgument,
                     "Object of type Undefined is not JSON serializable");
      *out += "null";
      return Status::Ok();
    case Value::Kind::kNone:
      *out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      *out += std::to_string(v.int_value());
      return Status::Ok();
    case Value::Kind::kFloat: {
      double f = v.float_value();
      if (py) {
        *out += std::isnan(f)   ? "NaN"
                : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                                : PythonFloatRepr(f);
      } else {
        *out += std::isfinite(f) ? JsNumberToString(f) : "null";
      }
      return Status::Ok();
    }
    case Value::Kind::kString:
      AppendJsonString(out, v.str(), o.ensure_ascii, dialect);
      return Status::Ok();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const ValueList& items = v.list();
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        RW_RETURN_IF_ERROR(DumpJsonTo(out, items[i], dialect, o, depth + 1));
      }
      if (!items.empty()) newline(depth);
      out->push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kNamespace:
      if (py)
        return Error(ErrorCode::kInvalidArgument,
                     "Object of type Namespace is not JSON serializable");
      [[fallthrough]];
    case Value::Kind::kMap: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.map().entries()) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(out, entries[i]->first, o.ensure_ascii, dialect);
        *out += key_sep;
        RW_RETURN_IF_ERROR(DumpJsonTo(out, entries[i]->second, dialect, o, depth + 1));
      }
      if (!entries.empty()) newline(depth);
      out->push_back('}');
      return Status::Ok();
    }
    case Value::Kind::kCallable:
      return Error(ErrorCode::kInvalidArgument, "Object of type function is not JSON serializable");
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> DumpJson(const Value& v, Dialect dialect, const JsonDumpOptions& options) {
  std::string out;
  RW_RETURN_IF_ERROR(DumpJsonTo(&out, v, dialect, options, 0));
  return out;
}

Result<Value> FromJson(const Json& j, Dialect dialect, int max_depth) {
  if (max_depth < 0) return Error(ErrorCode::kInvalidArgument, "JSON input nested too deeply");
  switch (j.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      return Value::None();
    case Json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::Int(static_cast<int64_t>(u));
      return Value::Float(static_cast<double>(u));
    }
    case Json::value_t::number_float: {
      double f = j.get<double>();
      if (dialect == Dialect::kHuggingFaceJs && std::isfinite(f) && std::floor(f) == f &&
          std::fabs(f) < 9.2e18) {
        return Value::Int(static_cast<int64_t>(f));
      }
      return Value::Float(f);
    }
    case Json::value_t::string:
      return Value::String(j.get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const Json& e : j) {
        RW_ASSIGN_OR_RETURN(Value v, FromJson(e, dialect, max_depth - 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      auto map = std::make_shared<ValueMap>();
      for (auto it = j.begin(); it != j.end(); ++it) {
        RW_ASSIGN_OR_RETURN(Value v, FromJson(it.value(), dialect, max_depth - 1));
        map->AppendUnique(it.key(), std::move(v));
      }
      return Value::Map(std::move(map));
    }
    case Json::value_t::binary:
      return Error(ErrorCode::kInvalidArgument, "binary JSON values are not supported");
  }
  return Value::None();
}

}  // namespace rw::jinja
