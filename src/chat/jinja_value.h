// The Jinja interpreter's value model: a small dynamically typed value with Python semantics
// (None, bool, int, float, str, list/tuple, insertion-ordered dict, namespace, callable), plus
// conversion from JSON, truthiness, equality, ordering and the str()/repr()/tojson printers of
// both dialects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "chat/jinja_text.h"

namespace rw::jinja {

class Value;
class ValueMap;
class Interpreter;
using ValueList = std::vector<Value>;

// Arguments of a call: positional, then keyword in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Result<Value>(Interpreter&, CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kMap,
    kNamespace,  // namespace(): attribute-assignable, not a mapping
    kCallable,
  };

  Value() = default;  // undefined
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  // Containers a template nests arbitrarily deep ({% set ns.l = [ns.l] %} in a loop) are
  // released iteratively, not by recursive destructors.
  ~Value() {
    if ((list_ && list_.use_count() == 1) || (map_ && map_.use_count() == 1)) DeferRelease();
  }

  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(ValueList items);
  static Value Tuple(ValueList items);
  static Value Map(std::shared_ptr<ValueMap> map);
  static Value NewMap();
  static Value Namespace(std::shared_ptr<ValueMap> map);
  static Value Function(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list_like() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_map() const { return kind_ == Kind::kMap; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return i_; }
  double float_value() const { return f_; }
  // Numeric value of bool/int/float (Python treats bool as int).
  double AsDouble() const;
  const std::string& str() const { return *s_; }
  // For undefined values: what was looked up, for error messages.
  const std::string& undefined_hint() const { return *s_; }
  const ValueList& list() const { return *list_; }
  ValueMap& map() const { return *map_; }
  const std::shared_ptr<ValueMap>& map_ptr() const { return map_; }
  const Callable& callable() const { return *fn_; }
  const void* identity() const;  // for `is sameas` on containers

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_ = EmptyString();
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueMap> map_;
  std::shared_ptr<const Callable> fn_;

  static const std::shared_ptr<const std::string>& EmptyString();
  void DeferRelease();
};

// A dict that keeps insertion order, as Python dicts do. Small maps search linearly; large ones
// keep a hash index.
class ValueMap {
 public:
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
  // Appends without checking for an existing key (the caller knows keys are unique).
  void AppendUnique(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  void Clear();
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  static constexpr size_t kIndexThreshold = 16;
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// Python type name for messages: 'str', 'int', 'dict', 'NoneType', ...
std::string TypeName(const Value& v);

bool Truthy(const Value& v);
// Python ==.
bool Equals(const Value& a, const Value& b);
// Python <: -1/0/1, or an error for unorderable types. case_insensitive lowers strings first
// (the sort/dictsort filters' default).
Result<int> Compare(const Value& a, const Value& b, bool case_insensitive = false);

// str(v) as {{ v }} prints it.
std::string Str(const Value& v, Dialect dialect);
// repr(v) as it appears inside a printed container.
std::string Repr(const Value& v, Dialect dialect);

struct JsonDumpOptions {
  int indent = -1;  // < 0: single line
  bool has_separators = false;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// The tojson filter: transformers' json.dumps(ensure_ascii=False) in Python; JSON.stringify-like
// in the JS dialect.
Result<std::string> DumpJson(const Value& v, Dialect dialect, const JsonDumpOptions& options);

// JSON -> Value. In the JS dialect integral floats become ints, as JSON.parse cannot tell them
// apart. Fails beyond max_depth nesting.
Result<Value> FromJson(const Json& j, Dialect dialect, int max_depth = 256);

}  // namespace rw::jinja
