// Tree-walking evaluator for parsed Jinja templates. Scoping follows Python jinja2: `if` shares
// its frame, every loop iteration and macro call gets a fresh frame, and macros resolve free
// names where they were defined. Every render is bounded in output size, call depth and steps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace rw::jinja {

struct RenderOptions {
  Dialect dialect = Dialect::kPython;
  size_t max_output_bytes = 32u << 20;  // also bounds every string a template builds
  int max_call_depth = 64;              // nested macro calls
  int max_nesting = 500;                // statements and expressions nested, across macro calls
  uint64_t max_steps = 100'000'000;     // evaluated nodes, against runaway loops
};

class Interpreter {
 public:
  explicit Interpreter(RenderOptions options);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders program with the given top-level variables. One Render per Interpreter.
  Result<std::string> Render(const Program& program, const ValueMap& context);

  // Used by builtins.
  Dialect dialect() const { return options_.dialect; }
  const RenderOptions& options() const { return options_; }
  Result<Value> Call(const Value& callee, CallArgs& args);
  Status CheckStringSize(size_t n) const;
  // Counts n units of work against max_steps (loop iterations, built list items).
  Status ChargeSteps(uint64_t n);
  // Namespaces may hold themselves; they are emptied after the render to break such cycles.
  void TrackNamespace(const std::shared_ptr<ValueMap>& ns);

  // jinja2's environment.getattr / getitem: missing members are undefined; members of an
  // undefined value are an error.
  Result<Value> GetAttr(const Value& object, std::string_view name);
  Result<Value> GetItem(const Value& object, const Value& key);

 private:
  struct Frame;
  using FramePtr = std::shared_ptr<Frame>;
  enum class Flow { kNormal, kBreak, kContinue };

  Status Step() { return ChargeSteps(1); }
  Status ExecBody(const Body& body, const FramePtr& frame, std::string* out);
  Status Exec(const Stmt& s, const FramePtr& frame, std::string* out);
  [[gnu::noinline]] Status ExecOutput(const Stmt& s, const FramePtr& frame, std::string* out);
  [[gnu::noinline]] Status ExecIf(const Stmt& s, const FramePtr& frame, std::string* out);
  [[gnu::noinline]] Status ExecAssign(const Stmt& s, const FramePtr& frame, std::string* out);
  [[gnu::noinline]] Status ExecSetBlock(const Stmt& s, const FramePtr& frame, std::string* out);
  [[gnu::noinline]] Status ExecMacro(const Stmt& s, const FramePtr& frame, std::string* out);
  [[gnu::noinline]] Status ExecFilterBlock(const Stmt& s, const FramePtr& frame, std::string* out);
  Status ExecFor(const Stmt& s, const FramePtr& frame, std::string* out);
  Status ExecSet(const Stmt& s, const FramePtr& frame, Value value);
  Status Append(std::string* out, std::string_view text) const;

  Result<Value> Eval(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalSequence(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalDict(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalGetattr(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalGetitem(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalSlice(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalCall(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalTest(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalUnary(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalBinary(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalCompare(const Expr& e, const FramePtr& frame);
  [[gnu::noinline]] Result<Value> EvalCond(const Expr& e, const FramePtr& frame);
  Result<Value> EvalFilter(const Expr& e, const FramePtr& frame, const Value* block_operand);
  Status EvalArgs(const Expr& e, const FramePtr& frame, CallArgs* args);
  Result<Value> Lookup(const std::string& name, const FramePtr& frame) const;
  Result<Value> CallMacro(const Stmt& macro, const FramePtr& closure, CallArgs& args);

  RenderOptions options_;
  ValueMap globals_;
  FramePtr root_;
  Flow flow_ = Flow::kNormal;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int nesting_ = 0;  // bounds the C++ stack: Exec and Eval recurse
  std::vector<std::weak_ptr<ValueMap>> namespaces_;
};

// Python-semantics operators, shared with the builtins.
Result<Value> BinaryOp(Op op, const Value& a, const Value& b, Interpreter& interp);
Result<bool> Contains(const Value& container, const Value& item);
// Items of a for loop / list(): list items, dict keys, string characters; undefined is empty.
Result<ValueList> Iterate(const Value& v);

}  // namespace rw::jinja
