// Filters and tests, with jinja2's signatures and semantics (tojson as transformers overrides
// it: no HTML escaping, non-ASCII kept).
#include "chat/jinja_builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "chat/jinja_interp.h"

namespace rw::jinja {
namespace {

using FilterFn = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);

bool IsIntLike(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t IntOf(const Value& v) {
  return v.is_bool() ? v.bool_value() : v.int_value();
}

std::string S(Interpreter& interp, const Value& v) {
  return Str(v, interp.dialect());
}

Result<int64_t> Length(Interpreter& interp, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return static_cast<int64_t>(StringLength(v.str(), interp.dialect()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kMap:
    case Value::Kind::kNamespace:
      return static_cast<int64_t>(v.map().size());
    case Value::Kind::kUndefined:
      return 0;
    default:
      return Error(ErrorCode::kInvalidArgument, "object of type '{}' has no len()", TypeName(v));
  }
}

// jinja2's attribute getter for sort/map/selectattr: dotted path, integer parts index lists.
Result<Value> GetPath(Interpreter& interp, const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key = Value::String(part);
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::Int(std::stoll(part));
    }
    RW_ASSIGN_OR_RETURN(cur, interp.GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Result<Value> FDefault(Interpreter&, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a, BindArgs("default", args,
                       {{"default_value", Value::String("")}, {"boolean", Value::Bool(false)}}));
  if (v.is_undefined() || (Truthy(a[1]) && !Truthy(v))) return a[0];
  return v;
}

Result<Value> FLength(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_RETURN_IF_ERROR(BindArgs("length", args, {}).status());
  RW_ASSIGN_OR_RETURN(int64_t n, Length(interp, v));
  return Value::Int(n);
}

Result<Value> FTrim(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("trim", args, {{"chars", Value::None()}}));
  std::string s = S(interp, v);
  if (a[0].is_none() || a[0].is_undefined()) return Value::String(StripSpace(s, interp.dialect()));
  return Value::String(StripChars(s, S(interp, a[0]), true, true));
}

Result<Value> FUpper(Interpreter& interp, const Value& v, CallArgs&) {
  return Value::String(ToUpper(S(interp, v)));
}
Result<Value> FLower(Interpreter& interp, const Value& v, CallArgs&) {
  return Value::String(ToLower(S(interp, v)));
}
Result<Value> FTitle(Interpreter& interp, const Value& v, CallArgs&) {
  return Value::String(ToTitle(S(interp, v)));
}
Result<Value> FCapitalize(Interpreter& interp, const Value& v, CallArgs&) {
  return Value::String(Capitalize(S(interp, v)));
}
Result<Value> FString(Interpreter& interp, const Value& v, CallArgs&) {
  if (v.is_string()) return v;
  return Value::String(S(interp, v));
}
Result<Value> FSafe(Interpreter&, const Value& v, CallArgs&) {
  return v;
}

Result<Value> FEscape(Interpreter& interp, const Value& v, CallArgs&) {
  std::string s = S(interp, v), out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return Value::String(std::move(out));
}

Result<Value> FItems(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::List({});
  if (!v.is_map())
    return Error(ErrorCode::kInvalidArgument, "can only get item pairs from a mapping, not {}",
                 TypeName(v));
  ValueList out;
  for (const auto& [k, item] : v.map().entries())
    out.push_back(Value::Tuple({Value::String(k), item}));
  return Value::List(std::move(out));
}

Result<Value> FDictsort(Interpreter&, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("dictsort", args,
                                       {{"case_sensitive", Value::Bool(false)},
                                        {"by", Value::String("key")},
                                        {"reverse", Value::Bool(false)}}));
  if (!v.is_map())
    return Error(ErrorCode::kInvalidArgument, "dictsort expects a mapping, got '{}'", TypeName(v));
  int pos;
  if (a[1].is_string() && a[1].str() == "key") {
    pos = 0;
  } else if (a[1].is_string() && a[1].str() == "value") {
    pos = 1;
  } else {
    return Error(ErrorCode::kInvalidArgument, "You can only sort by either \"key\" or \"value\"");
  }
  ValueList items;
  for (const auto& [k, item] : v.map().entries())
    items.push_back(Value::Tuple({Value::String(k), item}));
  bool ci = !Truthy(a[0]), rev = Truthy(a[2]);
  Status err;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    auto c = Compare(x.list()[pos], y.list()[pos], ci);
    if (!c.ok()) {
      if (err.ok()) err = c.status();
      return false;
    }
    return rev ? *c > 0 : *c < 0;
  });
  RW_RETURN_IF_ERROR(err);
  return Value::List(std::move(items));
}

Result<Value> FList(Interpreter&, const Value& v, CallArgs&) {
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  return Value::List(std::move(items));
}

Result<Value> FFirst(Interpreter&, const Value& v, CallArgs&) {
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> FLast(Interpreter&, const Value& v, CallArgs&) {
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> FReverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    auto cps = DecodeUtf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::String(EncodeUtf8(cps));
  }
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

Result<Value> FJoin(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a, BindArgs("join", args, {{"d", Value::String("")}, {"attribute", Value::None()}}));
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::string sep = S(interp, a[0]), out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_none()) {
      RW_ASSIGN_OR_RETURN(item, GetPath(interp, item, S(interp, a[1])));
    }
    if (i) out += sep;
    out += S(interp, item);
    RW_RETURN_IF_ERROR(interp.CheckStringSize(out.size()));
  }
  return Value::String(std::move(out));
}

Result<Value> FReplace(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("replace", args, {{"old", Value()}, {"new", Value()}, {"count", Value::None()}}));
  CallArgs call;
  call.positional = {Value::String(S(interp, a[0])), Value::String(S(interp, a[1])),
                     a[2].is_none() ? Value::Int(-1) : a[2]};
  return interp.Call(GetMethod(Value::String(S(interp, v)), "replace"), call);
}

Result<Value> FIndent(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("indent", args,
                                       {{"width", Value::Int(4)},
                                        {"first", Value::Bool(false)},
                                        {"blank", Value::Bool(false)}}));
  std::string indention =
      a[0].is_string() ? a[0].str()
                       : std::string(IsIntLike(a[0]) ? std::max<int64_t>(0, IntOf(a[0])) : 4, ' ');
  std::string s = S(interp, v) + "\n";
  CallArgs none;
  RW_ASSIGN_OR_RETURN(Value lines_v, interp.Call(GetMethod(Value::String(s), "splitlines"), none));
  const ValueList& lines = lines_v.list();
  std::string rv;
  if (Truthy(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i].str();
    }
  } else if (!lines.empty()) {
    rv = lines[0].str();
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].str().empty()) rv += indention;
      rv += lines[i].str();
    }
  }
  if (Truthy(a[1])) rv = indention + rv;
  RW_RETURN_IF_ERROR(interp.CheckStringSize(rv.size()));
  return Value::String(std::move(rv));
}

Result<Value> FInt(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a, BindArgs("int", args, {{"default", Value::Int(0)}, {"base", Value::Int(10)}}));
  if (IsIntLike(v)) return Value::Int(IntOf(v));
  if (v.is_float()) {
    if (!std::isfinite(v.float_value()) || std::fabs(v.float_value()) >= 9.2e18) return a[0];
    return Value::Int(static_cast<int64_t>(std::trunc(v.float_value())));
  }
  if (v.is_string()) {
    std::string s = StripSpace(v.str(), Dialect::kPython);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits.push_back(c);
    }
    int base = IsIntLike(a[1]) ? static_cast<int>(IntOf(a[1])) : 10;
    if (!digits.empty() && base >= 2 && base <= 36) {
      char* end = nullptr;
      errno = 0;
      long long r = std::strtoll(digits.c_str(), &end, base);
      if (errno == 0 && end && *end == '\0') return Value::Int(r);
    }
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) {
      return Value::Int(static_cast<int64_t>(std::trunc(d)));
    }
  }
  (void)interp;
  return a[0];
}

Result<Value> FFloat(Interpreter&, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("float", args, {{"default", Value::Float(0.0)}}));
  if (v.is_number() || v.is_bool()) return Value::Float(v.AsDouble());
  if (v.is_string()) {
    std::string s = StripSpace(v.str(), Dialect::kPython);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::Float(d);
  }
  return a[0];
}

Result<Value> FAbs(Interpreter&, const Value& v, CallArgs&) {
  if (IsIntLike(v)) {
    int64_t i = IntOf(v);
    if (i == INT64_MIN) return Error(ErrorCode::kOutOfRange, "integer overflow");
    return Value::Int(i < 0 ? -i : i);
  }
  if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
  return Error(ErrorCode::kInvalidArgument, "bad operand type for abs(): '{}'", TypeName(v));
}

Result<Value> FRound(Interpreter&, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("round", args, {{"precision", Value::Int(0)}, {"method", Value::String("common")}}));
  if (!v.is_number() && !v.is_bool())
    return Error(ErrorCode::kInvalidArgument, "round() needs a number, got '{}'", TypeName(v));
  double x = v.AsDouble();
  double scale = std::pow(10.0, static_cast<double>(IsIntLike(a[0]) ? IntOf(a[0]) : 0));
  std::string method = a[1].is_string() ? a[1].str() : "";
  double r;
  if (method == "common") {
    r = std::nearbyint(x * scale) / scale;  // round-half-even, like Python's round()
  } else if (method == "ceil") {
    r = std::ceil(x * scale) / scale;
  } else if (method == "floor") {
    r = std::floor(x * scale) / scale;
  } else {
    return Error(ErrorCode::kInvalidArgument, "method must be common, ceil or floor");
  }
  return Value::Float(r);
}

Result<Value> FToJson(Interpreter& interp, const Value& v, CallArgs& args) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False)
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("tojson", args,
                                       {{"ensure_ascii", Value::Bool(false)},
                                        {"indent", Value::None()},
                                        {"separators", Value::None()},
                                        {"sort_keys", Value::Bool(false)}}));
  JsonDumpOptions o;
  o.ensure_ascii = Truthy(a[0]);
  if (IsIntLike(a[1])) {
    o.indent = static_cast<int>(std::clamp<int64_t>(IntOf(a[1]), 0, 64));
  } else if (a[1].is_string()) {
    return Error(ErrorCode::kUnsupported, "tojson: string indent is not supported");
  }
  if (a[2].is_list_like()) {
    if (a[2].list().size() != 2 || !a[2].list()[0].is_string() || !a[2].list()[1].is_string()) {
      return Error(ErrorCode::kInvalidArgument, "tojson: separators must be two strings");
    }
    o.has_separators = true;
    o.item_separator = a[2].list()[0].str();
    o.key_separator = a[2].list()[1].str();
  }
  o.sort_keys = Truthy(a[3]);
  RW_ASSIGN_OR_RETURN(std::string s, DumpJson(v, interp.dialect(), o));
  RW_RETURN_IF_ERROR(interp.CheckStringSize(s.size()));
  return Value::String(std::move(s));
}

// sort/unique/min/max key: optional attribute path, then case folding for strings.
Result<Value> SortKey(Interpreter& interp, const Value& item, const Value& attribute,
                      bool case_sensitive) {
  Value k = item;
  if (!attribute.is_none() && !attribute.is_undefined()) {
    RW_ASSIGN_OR_RETURN(k, GetPath(interp, item, S(interp, attribute)));
  }
  if (!case_sensitive && k.is_string()) return Value::String(ToLower(k.str()));
  return k;
}

Result<Value> FSort(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("sort", args,
                                       {{"reverse", Value::Bool(false)},
                                        {"case_sensitive", Value::Bool(false)},
                                        {"attribute", Value::None()}}));
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    RW_ASSIGN_OR_RETURN(Value k, SortKey(interp, item, a[2], Truthy(a[1])));
    keyed.emplace_back(std::move(k), std::move(item));
  }
  bool rev = Truthy(a[0]);
  Status err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto c = Compare(x.first, y.first);
    if (!c.ok()) {
      if (err.ok()) err = c.status();
      return false;
    }
    return rev ? *c > 0 : *c < 0;
  });
  RW_RETURN_IF_ERROR(err);
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

Result<Value> FUnique(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a, BindArgs("unique", args,
                       {{"case_sensitive", Value::Bool(false)}, {"attribute", Value::None()}}));
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  ValueList out, seen;
  for (Value& item : items) {
    RW_ASSIGN_OR_RETURN(Value k, SortKey(interp, item, a[1], Truthy(a[0])));
    bool dup = std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, k); });
    if (!dup) {
      seen.push_back(std::move(k));
      out.push_back(std::move(item));
    }
  }
  return Value::List(std::move(out));
}

Result<Value> MinMax(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  RW_ASSIGN_OR_RETURN(
      auto a, BindArgs(want_max ? "max" : "min", args,
                       {{"case_sensitive", Value::Bool(false)}, {"attribute", Value::None()}}));
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  if (items.empty())
    return Value::Undefined(fmt::format("No aggregated item, sequence was empty."));
  size_t best = 0;
  RW_ASSIGN_OR_RETURN(Value best_key, SortKey(interp, items[0], a[1], Truthy(a[0])));
  for (size_t i = 1; i < items.size(); ++i) {
    RW_ASSIGN_OR_RETURN(Value k, SortKey(interp, items[i], a[1], Truthy(a[0])));
    RW_ASSIGN_OR_RETURN(int c, Compare(k, best_key));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Result<Value> FMax(Interpreter& interp, const Value& v, CallArgs& args) {
  return MinMax(interp, v, args, true);
}
Result<Value> FMin(Interpreter& interp, const Value& v, CallArgs& args) {
  return MinMax(interp, v, args, false);
}

Result<Value> FSum(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(
      auto a, BindArgs("sum", args, {{"attribute", Value::None()}, {"start", Value::Int(0)}}));
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  Value total = a[1];
  for (const Value& item : items) {
    Value x = item;
    if (!a[0].is_none()) {
      RW_ASSIGN_OR_RETURN(x, GetPath(interp, item, S(interp, a[0])));
    }
    RW_ASSIGN_OR_RETURN(total, BinaryOp(Op::kAdd, total, x, interp));
  }
  return total;
}

Result<Value> FMap(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  ValueList out;
  if (args.positional.empty()) {
    Value attribute, def;
    bool has_default = false;
    for (const auto& [k, kv] : args.keyword) {
      if (k == "attribute") {
        attribute = kv;
      } else if (k == "default") {
        def = kv;
        has_default = true;
      } else {
        return Error(ErrorCode::kInvalidArgument, "map() got an unexpected keyword argument '{}'",
                     k);
      }
    }
    if (attribute.is_undefined())
      return Error(ErrorCode::kInvalidArgument, "map requires a filter name or attribute=");
    for (const Value& item : items) {
      RW_ASSIGN_OR_RETURN(Value x, GetPath(interp, item, S(interp, attribute)));
      out.push_back(x.is_undefined() && has_default ? def : x);
    }
    return Value::List(std::move(out));
  }
  std::string name = S(interp, args.positional[0]);
  if (!IsKnownFilter(name)) return Error(ErrorCode::kUnsupported, "no filter named '{}'", name);
  for (const Value& item : items) {
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    RW_ASSIGN_OR_RETURN(Value x, ApplyFilter(interp, name, item, rest));
    out.push_back(std::move(x));
  }
  return Value::List(std::move(out));
}

// select/reject/selectattr/rejectattr.
Result<Value> SelectOrReject(Interpreter& interp, const Value& v, CallArgs& args, bool select,
                             bool by_attr) {
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(v));
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty())
      return Error(ErrorCode::kInvalidArgument, "selectattr/rejectattr need an attribute");
    attr = S(interp, args.positional[next++]);
  }
  std::string test;
  if (next < args.positional.size()) test = S(interp, args.positional[next++]);
  if (!test.empty() && !IsKnownTest(test))
    return Error(ErrorCode::kUnsupported, "no test named '{}'", test);
  ValueList out;
  for (const Value& item : items) {
    Value x = item;
    if (by_attr) {
      RW_ASSIGN_OR_RETURN(x, GetPath(interp, item, attr));
    }
    bool r;
    if (test.empty()) {
      r = Truthy(x);
    } else {
      CallArgs rest;
      rest.positional.assign(args.positional.begin() + next, args.positional.end());
      rest.keyword = args.keyword;
      RW_ASSIGN_OR_RETURN(r, ApplyTest(interp, test, x, rest));
    }
    if (r == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}
Result<Value> FSelect(Interpreter& i, const Value& v, CallArgs& a) {
  return SelectOrReject(i, v, a, true, false);
}
Result<Value> FReject(Interpreter& i, const Value& v, CallArgs& a) {
  return SelectOrReject(i, v, a, false, false);
}
Result<Value> FSelectAttr(Interpreter& i, const Value& v, CallArgs& a) {
  return SelectOrReject(i, v, a, true, true);
}
Result<Value> FRejectAttr(Interpreter& i, const Value& v, CallArgs& a) {
  return SelectOrReject(i, v, a, false, true);
}

Result<Value> FAttr(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("attr", args, {{"name", Value()}}));
  // jinja2's attr() is getattr only: dict keys are not attributes.
  if (v.is_map()) return GetMethod(v, S(interp, a[0]));
  return interp.GetAttr(v, S(interp, a[0]));
}

Result<Value> FFormat(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!args.keyword.empty()) {
    auto map = std::make_shared<ValueMap>();
    for (auto& [k, kv] : args.keyword) map->Set(k, kv);
    return PercentFormat(interp, S(interp, v), Value::Map(std::move(map)));
  }
  return PercentFormat(interp, S(interp, v), Value::Tuple(args.positional));
}

Result<Value> FWordcount(Interpreter& interp, const Value& v, CallArgs&) {
  CallArgs none;
  RW_ASSIGN_OR_RETURN(Value words,
                      interp.Call(GetMethod(Value::String(S(interp, v)), "split"), none));
  return Value::Int(static_cast<int64_t>(words.list().size()));
}

Result<Value> FCenter(Interpreter& interp, const Value& v, CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs("center", args, {{"width", Value::Int(80)}}));
  std::string s = S(interp, v);
  int64_t len = static_cast<int64_t>(StringLength(s, Dialect::kPython));
  int64_t width = IsIntLike(a[0]) ? IntOf(a[0]) : 80;
  if (width <= len) return Value::String(s);
  RW_RETURN_IF_ERROR(interp.CheckStringSize(static_cast<size_t>(width)));
  int64_t total = width - len;
  int64_t left = total / 2 + (total & width & 1);  // CPython's centering rule
  return Value::String(std::string(left, ' ') + s + std::string(total - left, ' '));
}

const std::unordered_map<std::string_view, FilterFn>& Filters() {
  static const auto* kFilters = new std::unordered_map<std::string_view, FilterFn>{
      {"abs", FAbs},
      {"attr", FAttr},
      {"capitalize", FCapitalize},
      {"center", FCenter},
      {"count", FLength},
      {"d", FDefault},
      {"default", FDefault},
      {"dictsort", FDictsort},
      {"e", FEscape},
      {"escape", FEscape},
      {"first", FFirst},
      {"float", FFloat},
      {"format", FFormat},
      {"indent", FIndent},
      {"int", FInt},
      {"items", FItems},
      {"join", FJoin},
      {"last", FLast},
      {"length", FLength},
      {"list", FList},
      {"lower", FLower},
      {"map", FMap},
      {"max", FMax},
      {"min", FMin},
      {"reject", FReject},
      {"rejectattr", FRejectAttr},
      {"replace", FReplace},
      {"reverse", FReverse},
      {"round", FRound},
      {"safe", FSafe},
      {"select", FSelect},
      {"selectattr", FSelectAttr},
      {"sort", FSort},
      {"string", FString},
      {"sum", FSum},
      {"title", FTitle},
      {"tojson", FToJson},
      {"trim", FTrim},
      {"unique", FUnique},
      {"upper", FUpper},
      {"wordcount", FWordcount},
  };
  return *kFilters;
}

// Tests.

Result<Value> OneArg(const char* name, const CallArgs& args) {
  RW_ASSIGN_OR_RETURN(auto a, BindArgs(name, args, {{"other", Value()}}));
  return a[0];
}

Result<bool> TCompare(Interpreter&, const Value& v, CallArgs& args, const char* name, int want) {
  RW_ASSIGN_OR_RETURN(Value other, OneArg(name, args));
  RW_ASSIGN_OR_RETURN(int c, Compare(v, other));
  switch (want) {
    case 0:
      return c < 0;
    case 1:
      return c <= 0;
    case 2:
      return c > 0;
    default:
      return c >= 0;
  }
}

Result<bool> TNumberMod(const Value& v, int64_t m, int64_t want) {
  if (IsIntLike(v)) {
    int64_t r = IntOf(v) % m;
    if (r < 0) r += m;
    return r == want;
  }
  if (v.is_float()) {
    double r = std::fmod(v.float_value(), static_cast<double>(m));
    if (r < 0) r += m;
    return r == static_cast<double>(want);
  }
  return Error(ErrorCode::kInvalidArgument, "unsupported operand type for %: '{}'", TypeName(v));
}

const std::unordered_map<std::string_view, TestFn>& Tests() {
  static const auto* kTests = new std::unordered_map<std::string_view, TestFn>{
      {"defined", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return !v.is_undefined(); }},
      {"undefined", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_undefined(); }},
      {"none", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_none(); }},
      {"boolean", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_bool(); }},
      {"false", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_bool() && !v.bool_value(); }},
      {"true", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_bool() && v.bool_value(); }},
      {"integer", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_int(); }},
      {"float", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_float(); }},
      {"number", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_number() || v.is_bool(); }},
      {"string", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_string(); }},
      {"mapping", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_map(); }},
      // Python's Undefined iterates as empty and has len(); @huggingface/jinja says no, and
      // (unlike Python) calls mappings non-iterable.
      {"iterable",
       [](Interpreter& i, const Value& v, CallArgs&) -> Result<bool> {
         if (i.dialect() == Dialect::kHuggingFaceJs) return v.is_string() || v.is_list_like();
         return v.is_string() || v.is_list_like() || v.is_map() || v.is_undefined();
       }},
      {"sequence",
       [](Interpreter& i, const Value& v, CallArgs&) -> Result<bool> {
         bool undefined_ok = i.dialect() == Dialect::kPython && v.is_undefined();
         return v.is_string() || v.is_list_like() || v.is_map() || undefined_ok;
       }},
      {"callable", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return v.is_callable(); }},
      {"escaped", [](Interpreter&, const Value&, CallArgs&) -> Result<bool> { return false; }},
      {"lower",
       [](Interpreter& i, const Value& v, CallArgs&) -> Result<bool> {
         std::string s = Str(v, i.dialect());
         return ToLower(s) == s;
       }},
      {"upper",
       [](Interpreter& i, const Value& v, CallArgs&) -> Result<bool> {
         std::string s = Str(v, i.dialect());
         return ToUpper(s) == s;
       }},
      {"odd", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return TNumberMod(v, 2, 1); }},
      {"even", [](Interpreter&, const Value& v, CallArgs&) -> Result<bool> { return TNumberMod(v, 2, 0); }},
      {"divisibleby",
       [](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
         RW_ASSIGN_OR_RETURN(Value n, OneArg("divisibleby", args));
         if (!IsIntLike(n) || IntOf(n) == 0) return Error(ErrorCode::kInvalidArgument, "divisibleby needs a non-zero integer");
         return TNumberMod(v, IntOf(n) < 0 ? -IntOf(n) : IntOf(n), 0);
       }},
      {"sameas",
       [](Interpreter&, const Value& v, CallArgs& args) -> Result<bool> {
         RW_ASSIGN_OR_RETURN(Value o, OneArg("sameas", args));
         if (v.kind() != o.kind()) return false;
         if (v.identity() != nullptr) return v.identity() == o.identity();
         return Equals(v, o);
       }},
      {"eq", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> { RW_ASSIGN_OR_RETURN(Value o, OneArg("eq", a)); return Equals(v, o); }},
      {"equalto", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> { RW_ASSIGN_OR_RETURN(Value o, OneArg("equalto", a)); return Equals(v, o); }},
      {"==", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> { RW_ASSIGN_OR_RETURN(Value o, OneArg("==", a)); return Equals(v, o); }},
      {"ne", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> { RW_ASSIGN_OR_RETURN(Value o, OneArg("ne", a)); return !Equals(v, o); }},
      {"!=", [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> { RW_ASSIGN_OR_RETURN(Value o, OneArg("!=", a)); return !Equals(v, o); }},
      {"lt", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "lt", 0); }},
      {"lessthan", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "lessthan", 0); }},
      {"<", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "<", 0); }},
      {"le", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "le", 1); }},
      {"<=", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "<=", 1); }},
      {"gt", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "gt", 2); }},
      {"greaterthan", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "greaterthan", 2); }},
      {">", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, ">", 2); }},
      {"ge", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, "ge", 3); }},
      {">=", [](Interpreter& i, const Value& v, CallArgs& a) { return TCompare(i, v, a, ">=", 3); }},
      {"in",
       [](Interpreter&, const Value& v, CallArgs& a) -> Result<bool> {
         RW_ASSIGN_OR_RETURN(Value seq, OneArg("in", a));
         return Contains(seq, v);
       }},
      {"filter",
       [](Interpreter& i, const Value& v, CallArgs&) -> Result<bool> { return IsKnownFilter(Str(v, i.dialect())); }},
      {"test", [](Interpreter& i, const Value& v, CallArgs&) -> Result<bool> { return IsKnownTest(Str(v, i.dialect())); }},
  };
  return *kTests;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return Filters().count(name) > 0;
}
bool IsKnownTest(std::string_view name) {
  return Tests().count(name) > 0;
}

Result<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& operand,
                          CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) return Error(ErrorCode::kUnsupported, "no filter named '{}'", name);
  auto r = it->second(interp, operand, args);
  if (!r.ok()) return r.status().Annotate(fmt::format("filter '{}'", name));
  return r;
}

Result<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& operand,
                       CallArgs& args) {
  auto it = Tests().find(name);
  if (it == Tests().end()) return Error(ErrorCode::kUnsupported, "no test named '{}'", name);
  return it->second(interp, operand, args);
}

}  // namespace rw::jinja
