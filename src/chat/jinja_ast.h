// Syntax tree of a parsed Jinja template. One node struct per category (expression, statement)
// with a kind tag keeps the interpreter a plain switch.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace rw::jinja {

enum class Op {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFloorDiv,
  kMod,
  kPow,
  kConcat,  // ~
  kAnd,
  kOr,
  kNot,
  kNeg,
  kPos,
  kIn,
  kNotIn,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args: items
    kTuple,    // args: items
    kDict,     // args: key0, value0, key1, value1, ...
    kGetattr,  // object . name
    kGetitem,  // object [ args[0] ]
    kSlice,    // object [ args[0] : args[1] : args[2] ] (entries may be null)
    kCall,     // object ( args, kwargs )
    kFilter,   // object | name ( args, kwargs ); object is null inside {% filter %}
    kTest,     // object is [not] name ( args, kwargs )
    kUnary,    // op object
    kBinary,   // object op args[0]
    kCompare,  // object ops[i] args[i] ... (chained, as in Python)
    kCond,     // args[0] if object else args[1] (args[1] may be null)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  ExprPtr object;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  Op op = Op::kAdd;
  std::vector<Op> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches, else_body
    kFor,          // targets in expr [if cond] body [else else_body]
    kSet,          // targets (or target_ns.target_attr) = expr
    kSetBlock,     // {% set name %}body{% endset %}, optional filter expr
    kMacro,        // name(params) body
    kFilterBlock,  // {% filter expr %}body{% endfilter %}
    kBreak,
    kContinue,
    kScope,  // a block rendered in place ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string target_attr;  // set ns.attr = ...: targets[0] is the namespace variable
  bool uses_loop = false;   // the for body reads `loop`
  // Macros.
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct Program {
  Body body;
};

}  // namespace rw::jinja
