#include "chat/jinja_interp.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "chat/jinja_builtins.h"

namespace rw::jinja {

struct Interpreter::Frame {
  std::vector<std::pair<std::string, Value>> vars;
  FramePtr parent;

  Value* Find(std::string_view name) {
    for (auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    if (Value* slot = Find(name)) {
      *slot = std::move(v);
    } else {
      vars.emplace_back(name, std::move(v));
    }
  }
};

namespace {

Status UndefinedError(const Value& v) {
  if (!v.undefined_hint().empty()) {
    return Error(ErrorCode::kInvalidArgument, "{}", v.undefined_hint());
  }
  return Error(ErrorCode::kInvalidArgument, "value is undefined");
}

bool HasLinePrefix(const Status& s) {
  return s.message().rfind("line ", 0) == 0;
}

Status WithLine(const Status& s, int line) {
  if (s.ok() || HasLinePrefix(s)) return s;
  return s.Annotate(fmt::format("line {}", line));
}

Result<int64_t> CheckedInt(__int128 v) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min()) {
    return Error(ErrorCode::kOutOfRange, "integer overflow");
  }
  return static_cast<int64_t>(v);
}

bool IsIntLike(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t IntOf(const Value& v) {
  return v.is_bool() ? v.bool_value() : v.int_value();
}
bool IsNumberLike(const Value& v) {
  return v.is_number() || v.is_bool();
}

const char* OpSymbol(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kFloorDiv:
      return "//";
    case Op::kMod:
      return "%";
    case Op::kPow:
      return "**";
    default:
      return "?";
  }
}

Result<Value> Repeat(const Value& seq, int64_t n, Interpreter& interp) {
  if (n < 0) n = 0;
  // Reject before multiplying: size * n could overflow.
  if (n > 0 && (seq.is_string() ? !seq.str().empty() : !seq.list().empty()) &&
      static_cast<uint64_t>(n) > interp.options().max_output_bytes) {
    return Error(ErrorCode::kResourceExhausted, "template output exceeds {} bytes",
                 interp.options().max_output_bytes);
  }
  if (seq.is_string()) {
    RW_RETURN_IF_ERROR(interp.CheckStringSize(seq.str().size() * static_cast<uint64_t>(n)));
    RW_RETURN_IF_ERROR(interp.ChargeSteps(seq.str().size() * static_cast<uint64_t>(n) / 16));
    std::string out;
    out.reserve(seq.str().size() * n);
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  RW_RETURN_IF_ERROR(interp.ChargeSteps(seq.list().size() * static_cast<uint64_t>(n)));
  ValueList out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return seq.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                           : Value::List(std::move(out));
}

}  // namespace

Result<Value> BinaryOp(Op op, const Value& a, const Value& b, Interpreter& interp) {
  if (op == Op::kConcat) {
    std::string s = Str(a, interp.dialect()) + Str(b, interp.dialect());
    RW_RETURN_IF_ERROR(interp.CheckStringSize(s.size()));
    RW_RETURN_IF_ERROR(interp.ChargeSteps(s.size() / 16));  // copying is work too
    return Value::String(std::move(s));
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (IsNumberLike(a) && IsNumberLike(b)) {
    const bool ints = IsIntLike(a) && IsIntLike(b);
    if (ints) {
      __int128 x = IntOf(a), y = IntOf(b);
      switch (op) {
        case Op::kAdd: {
          RW_ASSIGN_OR_RETURN(int64_t r, CheckedInt(x + y));
          return Value::Int(r);
        }
        case Op::kSub: {
          RW_ASSIGN_OR_RETURN(int64_t r, CheckedInt(x - y));
          return Value::Int(r);
        }
        case Op::kMul: {
          RW_ASSIGN_OR_RETURN(int64_t r, CheckedInt(x * y));
          return Value::Int(r);
        }
        case Op::kDiv:
          if (y == 0) return Error(ErrorCode::kInvalidArgument, "division by zero");
          return Value::Float(static_cast<double>(x) / static_cast<double>(y));
        case Op::kFloorDiv: {
          if (y == 0)
            return Error(ErrorCode::kInvalidArgument, "integer division or modulo by zero");
          __int128 q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          RW_ASSIGN_OR_RETURN(int64_t r, CheckedInt(q));
          return Value::Int(r);
        }
        case Op::kMod: {
          if (y == 0)
            return Error(ErrorCode::kInvalidArgument, "integer division or modulo by zero");
          __int128 m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value::Int(static_cast<int64_t>(m));
        }
        case Op::kPow: {
          if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
          __int128 r = 1;
          for (__int128 i = 0; i < y; ++i) {
            r *= x;
            if (r > std::numeric_limits<int64_t>::max() ||
                r < std::numeric_limits<int64_t>::min()) {
              if (x == 0 || x == 1) break;
              if (x == -1) {
                r = (y % 2) ? -1 : 1;
                break;
              }
              return Error(ErrorCode::kOutOfRange, "integer overflow");
            }
            if (x == 0 || x == 1) break;
          }
          return Value::Int(static_cast<int64_t>(r));
        }
        default:
          break;
      }
    } else {
      double x = a.AsDouble(), y = b.AsDouble();
      switch (op) {
        case Op::kAdd:
          return Value::Float(x + y);
        case Op::kSub:
          return Value::Float(x - y);
        case Op::kMul:
          return Value::Float(x * y);
        case Op::kDiv:
          if (y == 0) return Error(ErrorCode::kInvalidArgument, "float division by zero");
          return Value::Float(x / y);
        case Op::kFloorDiv:
          if (y == 0) return Error(ErrorCode::kInvalidArgument, "float floor division by zero");
          return Value::Float(std::floor(x / y));
        case Op::kMod: {
          if (y == 0) return Error(ErrorCode::kInvalidArgument, "float modulo");
          double m = std::fmod(x, y);
          if (m != 0 && ((m < 0) != (y < 0))) m += y;
          return Value::Float(m);
        }
        case Op::kPow:
          return Value::Float(std::pow(x, y));
        default:
          break;
      }
    }
  }
  if (op == Op::kAdd) {
    if (a.is_string() && b.is_string()) {
      RW_RETURN_IF_ERROR(interp.CheckStringSize(a.str().size() + b.str().size()));
      RW_RETURN_IF_ERROR(interp.ChargeSteps((a.str().size() + b.str().size()) / 16));
      return Value::String(a.str() + b.str());
    }
    if (a.is_list_like() && a.kind() == b.kind()) {
      RW_RETURN_IF_ERROR(interp.ChargeSteps(a.list().size() + b.list().size()));
      ValueList out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return a.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                             : Value::List(std::move(out));
    }
  }
  if (op == Op::kMul) {
    if ((a.is_string() || a.is_list_like()) && IsIntLike(b)) return Repeat(a, IntOf(b), interp);
    if ((b.is_string() || b.is_list_like()) && IsIntLike(a)) return Repeat(b, IntOf(a), interp);
  }
  if (op == Op::kMod && a.is_string()) return PercentFormat(interp, a.str(), b);
  return Error(ErrorCode::kInvalidArgument, "unsupported operand type(s) for {}: '{}' and '{}'",
               OpSymbol(op), TypeName(a), TypeName(b));
}

Result<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        return Error(ErrorCode::kInvalidArgument,
                     "'in <string>' requires string as left operand, not {}", TypeName(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.list()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kMap:
      return item.is_string() && container.map().Find(item.str()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return Error(ErrorCode::kInvalidArgument, "argument of type '{}' is not iterable",
                   TypeName(container));
  }
}

// Each character becomes a Value; bound the memory a hostile template can make us allocate.
constexpr size_t kMaxIterableString = 4u << 20;

Result<ValueList> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.list();
    case Value::Kind::kMap: {
      ValueList keys;
      keys.reserve(v.map().size());
      for (const auto& [k, _] : v.map().entries()) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      if (v.str().size() > kMaxIterableString) {
        return Error(ErrorCode::kResourceExhausted, "string too long to iterate ({} bytes)",
                     v.str().size());
      }
      ValueList chars;
      size_t pos = 0;
      while (pos < v.str().size()) {
        size_t start = pos;
        NextCodepoint(v.str(), &pos);
        chars.push_back(Value::String(v.str().substr(start, pos - start)));
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return ValueList{};
    default:
      return Error(ErrorCode::kInvalidArgument, "'{}' object is not iterable", TypeName(v));
  }
}

Interpreter::Interpreter(RenderOptions options) : options_(options) {
  InstallGlobals(&globals_);
}

Interpreter::~Interpreter() {
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) ns->Clear();
  }
}

void Interpreter::TrackNamespace(const std::shared_ptr<ValueMap>& ns) {
  namespaces_.push_back(ns);
}

Status Interpreter::CheckStringSize(size_t n) const {
  if (n > options_.max_output_bytes) {
    return Error(ErrorCode::kResourceExhausted, "template output exceeds {} bytes",
                 options_.max_output_bytes);
  }
  return Status::Ok();
}

Status Interpreter::ChargeSteps(uint64_t n) {
  steps_ += std::min<uint64_t>(n, options_.max_steps + 1);
  if (steps_ > options_.max_steps) {
    return Error(ErrorCode::kResourceExhausted, "template evaluation exceeded {} steps",
                 options_.max_steps);
  }
  return Status::Ok();
}

Status Interpreter::Append(std::string* out, std::string_view text) const {
  RW_RETURN_IF_ERROR(CheckStringSize(out->size() + text.size()));
  out->append(text);
  return Status::Ok();
}

Result<std::string> Interpreter::Render(const Program& program, const ValueMap& context) {
  root_ = std::make_shared<Frame>();
  for (const auto& [k, v] : context.entries()) root_->Set(k, v);
  std::string out;
  RW_RETURN_IF_ERROR(ExecBody(program.body, root_, &out));
  root_->vars.clear();  // drop macro closures before the frames go
  return out;
}

Status Interpreter::ExecBody(const Body& body, const FramePtr& frame, std::string* out) {
  for (const StmtPtr& s : body) {
    RW_RETURN_IF_ERROR(WithLine(Exec(*s, frame, out), s->line));
    if (flow_ != Flow::kNormal) return Status::Ok();
  }
  return Status::Ok();
}

namespace {

struct NestingGuard {
  int* n;
  explicit NestingGuard(int* depth) : n(depth) { ++*n; }
  ~NestingGuard() { --*n; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

Status NestingError(int limit) {
  return Error(ErrorCode::kResourceExhausted, "template evaluation nested deeper than {}", limit);
}

}  // namespace

Status Interpreter::ExecOutput(const Stmt& s, const FramePtr& frame, std::string* out) {
  RW_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, frame));
  if (v.is_string()) return Append(out, v.str());
  return Append(out, Str(v, options_.dialect));
}

Status Interpreter::ExecIf(const Stmt& s, const FramePtr& frame, std::string* out) {
  for (const auto& [cond, body] : s.branches) {
    RW_ASSIGN_OR_RETURN(Value c, Eval(*cond, frame));
    if (Truthy(c)) return ExecBody(body, frame, out);
  }
  return ExecBody(s.else_body, frame, out);
}

Status Interpreter::ExecAssign(const Stmt& s, const FramePtr& frame, std::string* out) {
  RW_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, frame));
  return ExecSet(s, frame, std::move(v));
}

Status Interpreter::ExecSetBlock(const Stmt& s, const FramePtr& frame, std::string* out) {
  std::string text;
  RW_RETURN_IF_ERROR(ExecBody(s.body, frame, &text));
  Value v = Value::String(std::move(text));
  if (s.expr) {
    RW_ASSIGN_OR_RETURN(v, EvalFilter(*s.expr, frame, &v));
  }
  return ExecSet(s, frame, std::move(v));
}

Status Interpreter::ExecMacro(const Stmt& s, const FramePtr& frame, std::string* out) {
  std::weak_ptr<Frame> closure = frame;
  const Stmt* macro = &s;
  frame->Set(s.name, Value::Function(s.name, [macro, closure](Interpreter& interp, CallArgs& args) {
               FramePtr f = closure.lock();
               if (!f) {
                 return Result<Value>(Error(ErrorCode::kInvalidArgument,
                                            "macro '{}' called outside its scope", macro->name));
               }
               return interp.CallMacro(*macro, f, args);
             }));
  return Status::Ok();
}

Status Interpreter::ExecFilterBlock(const Stmt& s, const FramePtr& frame, std::string* out) {
  std::string text;
  RW_RETURN_IF_ERROR(ExecBody(s.body, frame, &text));
  Value operand = Value::String(std::move(text));
  RW_ASSIGN_OR_RETURN(Value v, EvalFilter(*s.expr, frame, &operand));
  return Append(out, Str(v, options_.dialect));
}

Status Interpreter::Exec(const Stmt& s, const FramePtr& frame, std::string* out) {
  RW_RETURN_IF_ERROR(Step());
  NestingGuard nesting(&nesting_);
  if (nesting_ > options_.max_nesting) return NestingError(options_.max_nesting);
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Append(out, s.text);
    case Stmt::Kind::kOutput:
      return ExecOutput(s, frame, out);
    case Stmt::Kind::kIf:
      return ExecIf(s, frame, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, frame, out);
    case Stmt::Kind::kSet:
      return ExecAssign(s, frame, out);
    case Stmt::Kind::kSetBlock:
      return ExecSetBlock(s, frame, out);
    case Stmt::Kind::kMacro:
      return ExecMacro(s, frame, out);
    case Stmt::Kind::kFilterBlock:
      return ExecFilterBlock(s, frame, out);
    case Stmt::Kind::kBreak:
      flow_ = Flow::kBreak;
      return Status::Ok();
    case Stmt::Kind::kContinue:
      flow_ = Flow::kContinue;
      return Status::Ok();
    case Stmt::Kind::kScope:
      return ExecBody(s.body, frame, out);
  }
  return Status::Ok();
}

namespace {

Status BindTargets(const std::vector<std::string>& targets, const Value& item,
                   const std::function<void(const std::string&, Value)>& set) {
  if (targets.size() == 1) {
    set(targets[0], item);
    return Status::Ok();
  }
  if (!item.is_list_like()) {
    return Error(ErrorCode::kInvalidArgument, "cannot unpack non-sequence '{}'", TypeName(item));
  }
  if (item.list().size() != targets.size()) {
    return Error(ErrorCode::kInvalidArgument, "expected {} values to unpack, got {}",
                 targets.size(), item.list().size());
  }
  for (size_t i = 0; i < targets.size(); ++i) set(targets[i], item.list()[i]);
  return Status::Ok();
}

}  // namespace

Status Interpreter::ExecFor(const Stmt& s, const FramePtr& frame, std::string* out) {
  RW_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, frame));
  RW_ASSIGN_OR_RETURN(ValueList items, Iterate(iterable));
  if (s.cond) {
    ValueList kept;
    for (Value& item : items) {
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      RW_RETURN_IF_ERROR(BindTargets(
          s.targets, item, [&](const std::string& n, Value v) { f->Set(n, std::move(v)); }));
      RW_ASSIGN_OR_RETURN(Value c, Eval(*s.cond, f));
      if (Truthy(c)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    RW_RETURN_IF_ERROR(Step());
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    RW_RETURN_IF_ERROR(BindTargets(s.targets, items[i], [&](const std::string& name, Value v) {
      f->Set(name, std::move(v));
    }));
    if (s.uses_loop) {
      auto loop = std::make_shared<ValueMap>();
      loop->AppendUnique("index", Value::Int(i + 1));
      loop->AppendUnique("index0", Value::Int(i));
      loop->AppendUnique("revindex", Value::Int(n - i));
      loop->AppendUnique("revindex0", Value::Int(n - i - 1));
      loop->AppendUnique("first", Value::Bool(i == 0));
      loop->AppendUnique("last", Value::Bool(i == n - 1));
      loop->AppendUnique("length", Value::Int(n));
      loop->AppendUnique("depth", Value::Int(1));
      loop->AppendUnique("depth0", Value::Int(0));
      loop->AppendUnique("previtem",
                         i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
      loop->AppendUnique("nextitem",
                         i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
      loop->AppendUnique(
          "cycle", Value::Function("cycle", [i](Interpreter&, CallArgs& args) -> Result<Value> {
            if (args.positional.empty()) {
              return Error(ErrorCode::kInvalidArgument, "no items for cycling given");
            }
            return args.positional[i % args.positional.size()];
          }));
      f->Set("loop", Value::Namespace(std::move(loop)));
    }
    RW_RETURN_IF_ERROR(ExecBody(s.body, f, out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  if (n == 0 && !s.else_body.empty()) {
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    RW_RETURN_IF_ERROR(ExecBody(s.else_body, f, out));
  }
  return Status::Ok();
}

Status Interpreter::ExecSet(const Stmt& s, const FramePtr& frame, Value value) {
  if (!s.target_attr.empty()) {
    RW_ASSIGN_OR_RETURN(Value ns, Lookup(s.targets[0], frame));
    if (!ns.is_namespace()) {
      return Error(ErrorCode::kInvalidArgument,
                   "cannot assign attribute on non-namespace object '{}'", s.targets[0]);
    }
    ns.map().Set(s.target_attr, std::move(value));
    return Status::Ok();
  }
  return BindTargets(s.targets, value,
                     [&](const std::string& n, Value v) { frame->Set(n, std::move(v)); });
}

Result<Value> Interpreter::Lookup(const std::string& name, const FramePtr& frame) const {
  for (Frame* f = frame.get(); f != nullptr; f = f->parent.get()) {
    if (Value* v = f->Find(name)) return *v;
  }
  if (const Value* g = globals_.Find(name)) return *g;
  return Value::Undefined(fmt::format("'{}' is undefined", name));
}

Result<Value> Interpreter::GetAttr(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(object);
    case Value::Kind::kMap: {
      Value method = GetMethod(object, name);
      if (!method.is_undefined()) return method;
      if (const Value* v = object.map().Find(name)) return *v;
      return Value::Undefined(fmt::format("'dict object' has no attribute '{}'", name));
    }
    case Value::Kind::kNamespace:
      if (const Value* v = object.map().Find(name)) return *v;
      return Value::Undefined(fmt::format("'{}' has no attribute '{}'", TypeName(object), name));
    default: {
      Value method = GetMethod(object, name);
      if (!method.is_undefined()) return method;
      return Value::Undefined(
          fmt::format("'{}' object has no attribute '{}'", TypeName(object), name));
    }
  }
}

Result<Value> Interpreter::GetItem(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(object);
    case Value::Kind::kMap:
    case Value::Kind::kNamespace:
      if (key.is_string()) {
        if (const Value* v = object.map().Find(key.str())) return *v;
        if (object.is_map()) {
          Value method = GetMethod(object, key.str());
          if (!method.is_undefined()) return method;
        }
      }
      return Value::Undefined(
          fmt::format("'dict object' has no attribute {}", Repr(key, Dialect::kPython)));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (IsIntLike(key)) {
        int64_t i = IntOf(key);
        int64_t n = static_cast<int64_t>(object.list().size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return object.list()[i];
        return Value::Undefined(fmt::format("list index {} out of range", IntOf(key)));
      }
      break;
    case Value::Kind::kString:
      if (IsIntLike(key)) {
        std::vector<char32_t> cps = DecodeUtf8(object.str());
        int64_t i = IntOf(key);
        int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string ch;
          AppendUtf8(&ch, cps[i]);
          return Value::String(std::move(ch));
        }
        return Value::Undefined(fmt::format("string index {} out of range", IntOf(key)));
      }
      if (key.is_string()) return GetAttr(object, key.str());
      break;
    default:
      break;
  }
  return Value::Undefined(
      fmt::format("'{}' object has no element {}", TypeName(object), Repr(key, Dialect::kPython)));
}

namespace {

// Python slice semantics over n items: fills the selected indices.
Status SliceIndices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v,
                    std::vector<int64_t>* out) {
  auto as_int = [](const Value& v, const char* what) -> Result<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!IsIntLike(v)) {
      return Error(ErrorCode::kInvalidArgument, "slice {} must be an integer or None", what);
    }
    return std::optional<int64_t>(IntOf(v));
  };
  RW_ASSIGN_OR_RETURN(auto step_o, as_int(step_v, "step"));
  int64_t step = step_o.value_or(1);
  if (step == 0) return Error(ErrorCode::kInvalidArgument, "slice step cannot be zero");
  RW_ASSIGN_OR_RETURN(auto start_o, as_int(start_v, "start"));
  RW_ASSIGN_OR_RETURN(auto stop_o, as_int(stop_v, "stop"));
  auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t v = *x;
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  int64_t start = clamp(start_o, step < 0 ? n - 1 : 0);
  int64_t stop = clamp(stop_o, step < 0 ? -1 : n);
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out->push_back(i);
  return Status::Ok();
}

}  // namespace

Status Interpreter::EvalArgs(const Expr& e, const FramePtr& frame, CallArgs* args) {
  for (const ExprPtr& a : e.args) {
    RW_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
    args->positional.push_back(std::move(v));
  }
  for (const auto& [k, a] : e.kwargs) {
    RW_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
    args->keyword.emplace_back(k, std::move(v));
  }
  return Status::Ok();
}

Result<Value> Interpreter::EvalFilter(const Expr& e, const FramePtr& frame,
                                      const Value* block_operand) {
  Value operand;
  if (e.object) {
    if (e.object->kind == Expr::Kind::kFilter) {
      RW_ASSIGN_OR_RETURN(operand, EvalFilter(*e.object, frame, block_operand));
    } else {
      RW_ASSIGN_OR_RETURN(operand, Eval(*e.object, frame));
    }
  } else if (block_operand != nullptr) {
    operand = *block_operand;
  }
  CallArgs args;
  RW_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
  return ApplyFilter(*this, e.name, operand, args);
}

Result<Value> Interpreter::Call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable()) {
    return Error(ErrorCode::kInvalidArgument, "'{}' object is not callable", TypeName(callee));
  }
  return callee.callable().fn(*this, args);
}

Result<Value> Interpreter::CallMacro(const Stmt& m, const FramePtr& closure, CallArgs& args) {
  if (call_depth_ >= options_.max_call_depth) {
    return Error(ErrorCode::kResourceExhausted, "macro calls nested deeper than {}",
                 options_.max_call_depth);
  }
  auto f = std::make_shared<Frame>();
  f->parent = closure;
  const size_t np = m.params.size();
  std::vector<bool> bound(np, false);
  ValueList varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < np) {
      f->Set(m.params[i].first, args.positional[i]);
      bound[i] = true;
    } else if (m.uses_varargs) {
      varargs.push_back(args.positional[i]);
    } else {
      return Error(ErrorCode::kInvalidArgument, "macro '{}' takes not more than {} argument(s)",
                   m.name, np);
    }
  }
  auto kwargs = std::make_shared<ValueMap>();
  for (auto& [k, v] : args.keyword) {
    size_t idx = np;
    for (size_t i = 0; i < np; ++i) {
      if (m.params[i].first == k) idx = i;
    }
    if (idx < np) {
      if (bound[idx]) {
        return Error(ErrorCode::kInvalidArgument,
                     "macro '{}' got multiple values for argument '{}'", m.name, k);
      }
      f->Set(k, v);
      bound[idx] = true;
    } else if (m.uses_kwargs) {
      kwargs->Set(k, v);
    } else {
      return Error(ErrorCode::kInvalidArgument, "macro '{}' takes no keyword argument '{}'", m.name,
                   k);
    }
  }
  ++call_depth_;
  struct DepthRestore {
    int* d;
    ~DepthRestore() { --*d; }
  } restore{&call_depth_};
  for (size_t i = 0; i < np; ++i) {
    if (bound[i]) continue;
    if (m.params[i].second) {
      RW_ASSIGN_OR_RETURN(Value v, Eval(*m.params[i].second, f));
      f->Set(m.params[i].first, std::move(v));
    } else {
      f->Set(m.params[i].first,
             Value::Undefined(fmt::format("parameter '{}' was not provided", m.params[i].first)));
    }
  }
  if (m.uses_varargs) f->Set("varargs", Value::Tuple(std::move(varargs)));
  if (m.uses_kwargs) f->Set("kwargs", Value::Map(kwargs));
  std::string out;
  RW_RETURN_IF_ERROR(ExecBody(m.body, f, &out));
  flow_ = Flow::kNormal;
  return Value::String(std::move(out));
}

Result<Value> Interpreter::EvalSequence(const Expr& e, const FramePtr& frame) {
  ValueList items;
  items.reserve(e.args.size());
  for (const ExprPtr& a : e.args) {
    RW_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
    items.push_back(std::move(v));
  }
  return e.kind == Expr::Kind::kList ? Value::List(std::move(items))
                                     : Value::Tuple(std::move(items));
}

Result<Value> Interpreter::EvalDict(const Expr& e, const FramePtr& frame) {
  auto map = std::make_shared<ValueMap>();
  for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
    RW_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], frame));
    if (!k.is_string()) {
      return Error(ErrorCode::kUnsupported, "line {}: dict keys must be strings, got '{}'", e.line,
                   TypeName(k));
    }
    RW_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], frame));
    map->Set(k.str(), std::move(v));
  }
  return Value::Map(std::move(map));
}

Result<Value> Interpreter::EvalGetattr(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value obj, Eval(*e.object, frame));
  return GetAttr(obj, e.name);
}

Result<Value> Interpreter::EvalGetitem(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value obj, Eval(*e.object, frame));
  RW_ASSIGN_OR_RETURN(Value key, Eval(*e.args[0], frame));
  return GetItem(obj, key);
}

Result<Value> Interpreter::EvalSlice(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value obj, Eval(*e.object, frame));
  if (obj.is_undefined()) return UndefinedError(obj);
  Value bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (e.args[i]) {
      RW_ASSIGN_OR_RETURN(bounds[i], Eval(*e.args[i], frame));
    }
  }
  std::vector<int64_t> idx;
  if (obj.is_string()) {
    std::vector<char32_t> cps = DecodeUtf8(obj.str());
    RW_RETURN_IF_ERROR(
        SliceIndices(static_cast<int64_t>(cps.size()), bounds[0], bounds[1], bounds[2], &idx));
    std::string out;
    for (int64_t i : idx) AppendUtf8(&out, cps[i]);
    return Value::String(std::move(out));
  }
  if (obj.is_list_like()) {
    RW_RETURN_IF_ERROR(SliceIndices(static_cast<int64_t>(obj.list().size()), bounds[0], bounds[1],
                                    bounds[2], &idx));
    ValueList out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(obj.list()[i]);
    return obj.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                             : Value::List(std::move(out));
  }
  return Error(ErrorCode::kInvalidArgument, "'{}' object is not subscriptable", TypeName(obj));
}

Result<Value> Interpreter::EvalCall(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value callee, Eval(*e.object, frame));
  CallArgs args;
  RW_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
  return Call(callee, args);
}

Result<Value> Interpreter::EvalTest(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value operand, Eval(*e.object, frame));
  CallArgs args;
  RW_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
  RW_ASSIGN_OR_RETURN(bool r, ApplyTest(*this, e.name, operand, args));
  return Value::Bool(r != e.negated);
}

Result<Value> Interpreter::EvalUnary(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value v, Eval(*e.object, frame));
  if (e.op == Op::kNot) return Value::Bool(!Truthy(v));
  if (v.is_undefined()) return UndefinedError(v);
  if (IsIntLike(v)) {
    int64_t i = IntOf(v);
    if (e.op == Op::kPos) return Value::Int(i);
    RW_ASSIGN_OR_RETURN(int64_t r, CheckedInt(-static_cast<__int128>(i)));
    return Value::Int(r);
  }
  if (v.is_float()) return Value::Float(e.op == Op::kNeg ? -v.float_value() : v.float_value());
  return Error(ErrorCode::kInvalidArgument, "bad operand type for unary {}: '{}'",
               e.op == Op::kNeg ? "-" : "+", TypeName(v));
}

Result<Value> Interpreter::EvalBinary(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value a, Eval(*e.object, frame));
  if (e.op == Op::kAnd) {
    if (!Truthy(a)) return a;
    return Eval(*e.args[0], frame);
  }
  if (e.op == Op::kOr) {
    if (Truthy(a)) return a;
    return Eval(*e.args[0], frame);
  }
  RW_ASSIGN_OR_RETURN(Value b, Eval(*e.args[0], frame));
  return BinaryOp(e.op, a, b, *this);
}

Result<Value> Interpreter::EvalCompare(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value left, Eval(*e.object, frame));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    RW_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i], frame));
    bool r = false;
    switch (e.ops[i]) {
      case Op::kEq:
        r = Equals(left, right);
        break;
      case Op::kNe:
        r = !Equals(left, right);
        break;
      case Op::kIn:
      case Op::kNotIn: {
        RW_ASSIGN_OR_RETURN(bool c, Contains(right, left));
        r = (e.ops[i] == Op::kIn) == c;
        break;
      }
      default: {
        if (left.is_undefined()) return UndefinedError(left);
        if (right.is_undefined()) return UndefinedError(right);
        RW_ASSIGN_OR_RETURN(int c, Compare(left, right));
        r = e.ops[i] == Op::kLt   ? c < 0
            : e.ops[i] == Op::kLe ? c <= 0
            : e.ops[i] == Op::kGt ? c > 0
                                  : c >= 0;
      }
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

Result<Value> Interpreter::EvalCond(const Expr& e, const FramePtr& frame) {
  RW_ASSIGN_OR_RETURN(Value test, Eval(*e.object, frame));
  if (Truthy(test)) return Eval(*e.args[0], frame);
  if (e.args[1]) return Eval(*e.args[1], frame);
  return Value::Undefined(
      "the inline if-expression evaluated to false and no else section was defined");
}

// Each compound expression has its own function so that the recursive path only carries the
// stack frame of the expressions actually being evaluated.
Result<Value> Interpreter::Eval(const Expr& e, const FramePtr& frame) {
  RW_RETURN_IF_ERROR(Step());
  NestingGuard nesting(&nesting_);
  if (nesting_ > options_.max_nesting) return NestingError(options_.max_nesting);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name, frame);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
      return EvalSequence(e, frame);
    case Expr::Kind::kDict:
      return EvalDict(e, frame);
    case Expr::Kind::kGetattr:
      return EvalGetattr(e, frame);
    case Expr::Kind::kGetitem:
      return EvalGetitem(e, frame);
    case Expr::Kind::kSlice:
      return EvalSlice(e, frame);
    case Expr::Kind::kCall:
      return EvalCall(e, frame);
    case Expr::Kind::kFilter:
      return EvalFilter(e, frame, nullptr);
    case Expr::Kind::kTest:
      return EvalTest(e, frame);
    case Expr::Kind::kUnary:
      return EvalUnary(e, frame);
    case Expr::Kind::kBinary:
      return EvalBinary(e, frame);
    case Expr::Kind::kCompare:
      return EvalCompare(e, frame);
    case Expr::Kind::kCond:
      return EvalCond(e, frame);
  }
  return Error(ErrorCode::kInternal, "unknown expression kind");
}

}  // namespace rw::jinja
