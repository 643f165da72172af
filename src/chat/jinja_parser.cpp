#include "chat/jinja_parser.h"

#include <initializer_list>

#include "chat/jinja_builtins.h"

namespace rw::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<std::unique_ptr<Program>> Run() {
    auto program = std::make_unique<Program>();
    RW_ASSIGN_OR_RETURN(program->body, ParseBody({}));
    return program;
  }

 private:
  // Depth guard for recursion on nested input.
  class DepthGuard {
   public:
    explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
    ~DepthGuard() { --*depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    int* depth_;
  };

  // Left-associative chains (a + b + c, x | f | g, a.b.c) nest the tree without recursing;
  // each link counts as a level, restored when the chain ends.
  struct ChainDepth {
    int* depth;
    int saved;
    explicit ChainDepth(int* d) : depth(d), saved(*d) {}
    ~ChainDepth() { *depth = saved; }
    ChainDepth(const ChainDepth&) = delete;
    ChainDepth& operator=(const ChainDepth&) = delete;
  };

  Status CheckDepth() const {
    if (depth_ > kMaxParseDepth) {
      return Error(ErrorCode::kResourceExhausted, "line {}: template nested too deeply",
                   Cur().line);
    }
    return Status::Ok();
  }

  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t k) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void Next() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsOp(const char* op, size_t k = 0) const {
    return Peek(k).kind == TokKind::kOp && Peek(k).text == op;
  }
  bool IsName(const char* name, size_t k = 0) const {
    return Peek(k).kind == TokKind::kName && Peek(k).text == name;
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokKind::kText:
        return "template text";
      case TokKind::kBlockBegin:
        return "'{%'";
      case TokKind::kBlockEnd:
        return "end of statement '%}'";
      case TokKind::kVarBegin:
        return "'{{'";
      case TokKind::kVarEnd:
        return "end of print statement '}}'";
      case TokKind::kEof:
        return "end of template";
      case TokKind::kString:
        return "string literal";
      default:
        return "'" + t.text + "'";
    }
  }

  Status Fail(const std::string& what) const {
    return Error(ErrorCode::kCorrupt, "line {}: expected {}, got {}", Cur().line, what,
                 Describe(Cur()));
  }
  Status ExpectOp(const char* op) {
    if (!IsOp(op)) return Fail(std::string("'") + op + "'");
    Next();
    return Status::Ok();
  }
  Status ExpectKind(TokKind kind, const char* what) {
    if (Cur().kind != kind) return Fail(what);
    Next();
    return Status::Ok();
  }
  Result<std::string> ExpectName() {
    if (Cur().kind != TokKind::kName) return Fail("a name");
    std::string n = Cur().text;
    Next();
    return n;
  }
  Status ExpectBlockEnd() { return ExpectKind(TokKind::kBlockEnd, "'%}'"); }

  // Is the current position `{% name` with name in names?
  bool AtTag(std::initializer_list<const char*> names) const {
    if (Cur().kind != TokKind::kBlockBegin || Peek(1).kind != TokKind::kName) return false;
    for (const char* n : names) {
      if (Peek(1).text == n) return true;
    }
    return false;
  }

  // Consumes `{% name %}`.
  Status ExpectEndTag(const char* name) {
    if (!AtTag({name})) return Fail(std::string("'{% ") + name + " %}'");
    Next();
    Next();
    return ExpectBlockEnd();
  }

  // Parses statements until a `{% tag %}` with tag in end_tags (not consumed), or EOF when
  // end_tags is empty.
  Result<Body> ParseBody(std::initializer_list<const char*> end_tags) {
    DepthGuard guard(&depth_);
    RW_RETURN_IF_ERROR(CheckDepth());
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokKind::kEof) {
        if (end_tags.size() == 0) return body;
        std::string names;
        for (const char* n : end_tags)
          names += std::string(names.empty() ? "" : " or ") + "'" + n + "'";
        return Error(ErrorCode::kCorrupt, "line {}: unexpected end of template, expected {}",
                     t.line, names);
      }
      if (end_tags.size() > 0 && AtTag(end_tags)) return body;
      if (t.kind == TokKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        Next();
      } else if (t.kind == TokKind::kVarBegin) {
        Next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        RW_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
        RW_RETURN_IF_ERROR(ExpectKind(TokKind::kVarEnd, "'}}'"));
        body.push_back(std::move(s));
      } else if (t.kind == TokKind::kBlockBegin) {
        RW_ASSIGN_OR_RETURN(StmtPtr s, ParseStatement());
        if (s) body.push_back(std::move(s));
      } else {
        return Fail("template text or a tag");
      }
    }
  }

  Result<StmtPtr> ParseStatement() {
    int line = Cur().line;
    Next();  // {%
    if (Cur().kind != TokKind::kName) return Fail("a statement name");
    std::string tag = Cur().text;
    Next();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      while (true) {
        RW_ASSIGN_OR_RETURN(ExprPtr cond, ParseExpression(true));
        RW_RETURN_IF_ERROR(ExpectBlockEnd());
        RW_ASSIGN_OR_RETURN(Body body, ParseBody({"elif", "else", "endif"}));
        s->branches.emplace_back(std::move(cond), std::move(body));
        if (AtTag({"elif"})) {
          Next();
          Next();
          continue;
        }
        if (AtTag({"else"})) {
          Next();
          Next();
          RW_RETURN_IF_ERROR(ExpectBlockEnd());
          RW_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endif"}));
        }
        break;
      }
      RW_RETURN_IF_ERROR(ExpectEndTag("endif"));
      return s;
    }
    if (tag == "for") return ParseFor(std::move(s));
    if (tag == "set") return ParseSet(std::move(s));
    if (tag == "macro") return ParseMacro(std::move(s));
    if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      RW_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, true));
      RW_RETURN_IF_ERROR(ExpectBlockEnd());
      RW_ASSIGN_OR_RETURN(s->body, ParseBody({"endfilter"}));
      RW_RETURN_IF_ERROR(ExpectEndTag("endfilter"));
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) {
        return Error(ErrorCode::kCorrupt, "line {}: '{}' outside of a loop", line, tag);
      }
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      RW_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (tag == "generation") {
      // transformers' {% generation %} marks assistant text for masks; it renders in place.
      s->kind = Stmt::Kind::kScope;
      RW_RETURN_IF_ERROR(ExpectBlockEnd());
      RW_ASSIGN_OR_RETURN(s->body, ParseBody({"endgeneration"}));
      RW_RETURN_IF_ERROR(ExpectEndTag("endgeneration"));
      return s;
    }
    static const char* kKnownUnsupported[] = {"call",  "include", "import", "from",       "extends",
                                              "block", "with",    "do",     "autoescape", "trans"};
    for (const char* k : kKnownUnsupported) {
      if (tag == k) {
        return Error(ErrorCode::kUnsupported, "line {}: the '{}' tag is not supported", line, tag);
      }
    }
    return Error(ErrorCode::kCorrupt, "line {}: unknown tag '{}'", line, tag);
  }

  // Loop and assignment targets: `a`, `a, b`, `(a, b)`.
  Result<std::vector<std::string>> ParseNameTargets() {
    std::vector<std::string> names;
    bool paren = IsOp("(");
    if (paren) Next();
    while (true) {
      RW_ASSIGN_OR_RETURN(std::string n, ExpectName());
      names.push_back(std::move(n));
      if (!IsOp(",")) break;
      Next();
      if (Cur().kind != TokKind::kName) break;  // trailing comma
    }
    if (paren) RW_RETURN_IF_ERROR(ExpectOp(")"));
    return names;
  }

  Result<StmtPtr> ParseFor(StmtPtr s) {
    s->kind = Stmt::Kind::kFor;
    RW_ASSIGN_OR_RETURN(s->targets, ParseNameTargets());
    if (!IsName("in")) return Fail("'in'");
    Next();
    RW_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false));
    if (IsName("if")) {
      Next();
      RW_ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (IsName("recursive")) {
      return Error(ErrorCode::kUnsupported, "line {}: recursive loops are not supported", s->line);
    }
    RW_RETURN_IF_ERROR(ExpectBlockEnd());
    loop_stack_.push_back(s.get());
    ++loop_depth_;
    auto body = ParseBody({"else", "endfor"});
    --loop_depth_;
    loop_stack_.pop_back();
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    if (AtTag({"else"})) {
      Next();
      Next();
      RW_RETURN_IF_ERROR(ExpectBlockEnd());
      RW_ASSIGN_OR_RETURN(s->else_body, ParseBody({"endfor"}));
    }
    RW_RETURN_IF_ERROR(ExpectEndTag("endfor"));
    return s;
  }

  Result<StmtPtr> ParseSet(StmtPtr s) {
    if (Cur().kind == TokKind::kName && IsOp(".", 1)) {
      s->targets.push_back(Cur().text);
      Next();
      Next();
      RW_ASSIGN_OR_RETURN(s->target_attr, ExpectName());
    } else {
      RW_ASSIGN_OR_RETURN(s->targets, ParseNameTargets());
    }
    if (IsOp("=")) {
      Next();
      s->kind = Stmt::Kind::kSet;
      RW_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
      RW_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (!s->target_attr.empty() || s->targets.size() != 1) return Fail("'='");
    s->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) {
      RW_ASSIGN_OR_RETURN(s->expr, ParseFilter(nullptr, false));
    }
    RW_RETURN_IF_ERROR(ExpectBlockEnd());
    RW_ASSIGN_OR_RETURN(s->body, ParseBody({"endset"}));
    RW_RETURN_IF_ERROR(ExpectEndTag("endset"));
    return s;
  }

  Result<StmtPtr> ParseMacro(StmtPtr s) {
    s->kind = Stmt::Kind::kMacro;
    RW_ASSIGN_OR_RETURN(s->name, ExpectName());
    RW_RETURN_IF_ERROR(ExpectOp("("));
    bool saw_default = false;
    while (!IsOp(")")) {
      if (!s->params.empty()) RW_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      RW_ASSIGN_OR_RETURN(std::string pname, ExpectName());
      for (const auto& p : s->params) {
        if (p.first == pname) {
          return Error(ErrorCode::kCorrupt, "line {}: duplicate macro parameter '{}'", s->line,
                       pname);
        }
      }
      ExprPtr def;
      if (IsOp("=")) {
        Next();
        RW_ASSIGN_OR_RETURN(def, ParseExpression(true));
        saw_default = true;
      } else if (saw_default) {
        return Error(ErrorCode::kCorrupt, "line {}: non-default argument follows default argument",
                     s->line);
      }
      s->params.emplace_back(std::move(pname), std::move(def));
    }
    RW_RETURN_IF_ERROR(ExpectOp(")"));
    RW_RETURN_IF_ERROR(ExpectBlockEnd());
    // A macro body is its own world for `loop` and loop controls.
    loop_stack_.push_back(nullptr);
    macro_stack_.push_back(s.get());
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    auto body = ParseBody({"endmacro"});
    loop_depth_ = saved_loop_depth;
    macro_stack_.pop_back();
    loop_stack_.pop_back();
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    RW_RETURN_IF_ERROR(ExpectEndTag("endmacro"));
    return s;
  }

  ExprPtr NewExpr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // A comma-separated list becomes a tuple; a single expression stays itself.
  Result<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!IsOp(",")) break;
        Next();
      }
      if (Cur().kind == TokKind::kVarEnd || Cur().kind == TokKind::kBlockEnd || IsOp(")") ||
          (!items.empty() && IsName("in"))) {
        break;
      }
      RW_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
      items.push_back(std::move(e));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) return Fail("an expression");
    }
    ExprPtr t = NewExpr(Expr::Kind::kTuple, line);
    t->args = std::move(items);
    return t;
  }

  Result<ExprPtr> ParseExpression(bool with_condexpr) {
    DepthGuard guard(&depth_);
    RW_RETURN_IF_ERROR(CheckDepth());
    if (!with_condexpr) return ParseOr();
    RW_ASSIGN_OR_RETURN(ExprPtr e, ParseOr());
    ChainDepth chain(&depth_);
    while (IsName("if")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
      ExprPtr else_expr;
      if (IsName("else")) {
        Next();
        RW_ASSIGN_OR_RETURN(else_expr, ParseExpression(true));
      }
      ExprPtr c = NewExpr(Expr::Kind::kCond, line);
      c->object = std::move(test);
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(else_expr));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr MakeBinary(Op op, ExprPtr l, ExprPtr r, int line) {
    ExprPtr b = NewExpr(Expr::Kind::kBinary, line);
    b->op = op;
    b->object = std::move(l);
    b->args.push_back(std::move(r));
    return b;
  }

  Result<ExprPtr> ParseOr() {
    ChainDepth chain(&depth_);
    RW_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = MakeBinary(Op::kOr, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseAnd() {
    ChainDepth chain(&depth_);
    RW_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = MakeBinary(Op::kAnd, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(&depth_);
      RW_RETURN_IF_ERROR(CheckDepth());
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      ExprPtr u = NewExpr(Expr::Kind::kUnary, line);
      u->op = Op::kNot;
      u->object = std::move(operand);
      return u;
    }
    return ParseCompare();
  }

  Result<ExprPtr> ParseCompare() {
    int line = Cur().line;
    RW_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr cmp;
    while (true) {
      Op op;
      if (Cur().kind == TokKind::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        const std::string& t = Cur().text;
        op = t == "=="   ? Op::kEq
             : t == "!=" ? Op::kNe
             : t == "<"  ? Op::kLt
             : t == "<=" ? Op::kLe
             : t == ">"  ? Op::kGt
                         : Op::kGe;
        Next();
      } else if (IsName("in")) {
        op = Op::kIn;
        Next();
      } else if (IsName("not") && IsName("in", 1)) {
        op = Op::kNotIn;
        Next();
        Next();
      } else {
        break;
      }
      RW_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
      if (!cmp) {
        cmp = NewExpr(Expr::Kind::kCompare, line);
        cmp->object = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(rhs));
    }
    if (cmp) return cmp;
    return first;
  }

  Result<ExprPtr> ParseMath1() {
    ChainDepth chain(&depth_);
    RW_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      Op op = IsOp("+") ? Op::kAdd : Op::kSub;
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = MakeBinary(op, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseConcat() {
    ChainDepth chain(&depth_);
    RW_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = MakeBinary(Op::kConcat, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseMath2() {
    ChainDepth chain(&depth_);
    RW_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      Op op = IsOp("*") ? Op::kMul : IsOp("/") ? Op::kDiv : IsOp("//") ? Op::kFloorDiv : Op::kMod;
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = MakeBinary(op, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParsePow() {
    ChainDepth chain(&depth_);
    RW_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      int line = Cur().line;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = MakeBinary(Op::kPow, std::move(left), std::move(right), line);
    }
    return left;
  }

  Result<ExprPtr> ParseUnary(bool with_filter) {
    DepthGuard guard(&depth_);
    RW_RETURN_IF_ERROR(CheckDepth());
    int line = Cur().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      Op op = IsOp("-") ? Op::kNeg : Op::kPos;
      Next();
      RW_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = NewExpr(Expr::Kind::kUnary, line);
      node->op = op;
      node->object = std::move(operand);
    } else {
      RW_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    RW_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      RW_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  void NoteName(const std::string& name) {
    if (name == "loop" && !loop_stack_.empty() && loop_stack_.back() != nullptr) {
      loop_stack_.back()->uses_loop = true;
    }
    if (!macro_stack_.empty()) {
      if (name == "varargs") macro_stack_.back()->uses_varargs = true;
      if (name == "kwargs") macro_stack_.back()->uses_kwargs = true;
    }
  }

  Result<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    int line = t.line;
    switch (t.kind) {
      case TokKind::kName: {
        ExprPtr e;
        const std::string& n = t.text;
        if (n == "true" || n == "True" || n == "false" || n == "False") {
          e = NewExpr(Expr::Kind::kLiteral, line);
          e->literal = Value::Bool(n == "true" || n == "True");
        } else if (n == "none" || n == "None") {
          e = NewExpr(Expr::Kind::kLiteral, line);
          e->literal = Value::None();
        } else {
          e = NewExpr(Expr::Kind::kName, line);
          e->name = n;
          NoteName(n);
        }
        Next();
        return e;
      }
      case TokKind::kString: {
        std::string s;
        while (Cur().kind == TokKind::kString) {
          s += Cur().text;
          Next();
        }
        ExprPtr e = NewExpr(Expr::Kind::kLiteral, line);
        e->literal = Value::String(std::move(s));
        return e;
      }
      case TokKind::kInt: {
        ExprPtr e = NewExpr(Expr::Kind::kLiteral, line);
        e->literal = Value::Int(t.int_value);
        Next();
        return e;
      }
      case TokKind::kFloat: {
        ExprPtr e = NewExpr(Expr::Kind::kLiteral, line);
        e->literal = Value::Float(t.float_value);
        Next();
        return e;
      }
      case TokKind::kOp:
        if (t.text == "(") {
          Next();
          RW_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(true, true));
          RW_RETURN_IF_ERROR(ExpectOp(")"));
          return e;
        }
        if (t.text == "[") {
          Next();
          ExprPtr e = NewExpr(Expr::Kind::kList, line);
          while (!IsOp("]")) {
            if (!e->args.empty()) RW_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("]")) break;
            RW_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            e->args.push_back(std::move(item));
          }
          RW_RETURN_IF_ERROR(ExpectOp("]"));
          return e;
        }
        if (t.text == "{") {
          Next();
          ExprPtr e = NewExpr(Expr::Kind::kDict, line);
          while (!IsOp("}")) {
            if (!e->args.empty()) RW_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("}")) break;
            RW_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            RW_RETURN_IF_ERROR(ExpectOp(":"));
            RW_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            e->args.push_back(std::move(key));
            e->args.push_back(std::move(value));
          }
          RW_RETURN_IF_ERROR(ExpectOp("}"));
          return e;
        }
        break;
      default:
        break;
    }
    return Fail("an expression");
  }

  Result<ExprPtr> ParsePostfix(ExprPtr node) {
    ChainDepth chain(&depth_);
    while (true) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      if (IsOp(".") || IsOp("[")) {
        RW_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        RW_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseFilterExpr(ExprPtr node) {
    ChainDepth chain(&depth_);
    while (true) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      if (IsOp("|")) {
        RW_ASSIGN_OR_RETURN(node, ParseFilter(std::move(node), false));
      } else if (IsName("is")) {
        RW_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        RW_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> ParseSubscript(ExprPtr node) {
    int line = Cur().line;
    if (IsOp(".")) {
      Next();
      if (Cur().kind == TokKind::kName) {
        ExprPtr e = NewExpr(Expr::Kind::kGetattr, line);
        e->object = std::move(node);
        e->name = Cur().text;
        Next();
        return e;
      }
      if (Cur().kind == TokKind::kInt) {
        ExprPtr e = NewExpr(Expr::Kind::kGetitem, line);
        e->object = std::move(node);
        ExprPtr idx = NewExpr(Expr::Kind::kLiteral, line);
        idx->literal = Value::Int(Cur().int_value);
        e->args.push_back(std::move(idx));
        Next();
        return e;
      }
      return Fail("an attribute name");
    }
    Next();  // [
    std::vector<ExprPtr> items;
    ExprPtr slice;
    while (!IsOp("]")) {
      if (!items.empty() || slice) RW_RETURN_IF_ERROR(ExpectOp(","));
      ExprPtr start;
      if (!IsOp(":")) {
        RW_ASSIGN_OR_RETURN(start, ParseExpression(true));
        if (!IsOp(":")) {
          items.push_back(std::move(start));
          continue;
        }
      }
      // A slice: [start]:[stop][:[step]]
      if (slice || !items.empty()) {
        return Error(ErrorCode::kUnsupported,
                     "line {}: multi-dimensional subscripts are not supported", line);
      }
      Next();  // :
      slice = NewExpr(Expr::Kind::kSlice, line);
      slice->args.resize(3);
      slice->args[0] = std::move(start);
      if (!IsOp("]") && !IsOp(",") && !IsOp(":")) {
        RW_ASSIGN_OR_RETURN(slice->args[1], ParseExpression(true));
      }
      if (IsOp(":")) {
        Next();
        if (!IsOp("]") && !IsOp(",")) {
          RW_ASSIGN_OR_RETURN(slice->args[2], ParseExpression(true));
        }
      }
    }
    RW_RETURN_IF_ERROR(ExpectOp("]"));
    if (slice) {
      if (!items.empty())
        return Error(ErrorCode::kUnsupported, "line {}: unsupported subscript", line);
      slice->object = std::move(node);
      return slice;
    }
    if (items.empty()) return Error(ErrorCode::kCorrupt, "line {}: empty subscript", line);
    ExprPtr e = NewExpr(Expr::Kind::kGetitem, line);
    e->object = std::move(node);
    if (items.size() == 1) {
      e->args.push_back(std::move(items[0]));
    } else {
      ExprPtr t = NewExpr(Expr::Kind::kTuple, line);
      t->args = std::move(items);
      e->args.push_back(std::move(t));
    }
    return e;
  }

  // Parses `( args )` into e->args / e->kwargs.
  Status ParseCallArgs(Expr* e) {
    RW_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RW_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) {
        return Error(ErrorCode::kUnsupported, "line {}: argument unpacking is not supported",
                     Cur().line);
      }
      if (Cur().kind == TokKind::kName && IsOp("=", 1)) {
        std::string key = Cur().text;
        Next();
        Next();
        RW_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        e->kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e->kwargs.empty()) {
          return Error(ErrorCode::kCorrupt, "line {}: positional argument follows keyword argument",
                       Cur().line);
        }
        RW_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
        e->args.push_back(std::move(v));
      }
    }
    return ExpectOp(")");
  }

  Result<ExprPtr> ParseCall(ExprPtr node) {
    ExprPtr e = NewExpr(Expr::Kind::kCall, Cur().line);
    e->object = std::move(node);
    RW_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    return e;
  }

  Result<std::string> ParseDottedName() {
    RW_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      Next();
      RW_ASSIGN_OR_RETURN(std::string part, ExpectName());
      name += "." + part;
    }
    return name;
  }

  Result<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
    ChainDepth chain(&depth_);
    while (IsOp("|") || start_inline) {
      ++depth_;
      RW_RETURN_IF_ERROR(CheckDepth());
      if (!start_inline) Next();
      start_inline = false;
      int line = Cur().line;
      RW_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
      if (!IsKnownFilter(name)) {
        return Error(ErrorCode::kUnsupported, "line {}: no filter named '{}'", line, name);
      }
      ExprPtr f = NewExpr(Expr::Kind::kFilter, line);
      f->name = std::move(name);
      f->object = std::move(node);
      if (IsOp("(")) RW_RETURN_IF_ERROR(ParseCallArgs(f.get()));
      node = std::move(f);
    }
    return node;
  }

  Result<ExprPtr> ParseTest(ExprPtr node) {
    int line = Cur().line;
    Next();  // is
    bool negated = false;
    if (IsName("not")) {
      negated = true;
      Next();
    }
    RW_ASSIGN_OR_RETURN(std::string name, ParseDottedName());
    if (!IsKnownTest(name))
      return Error(ErrorCode::kUnsupported, "line {}: no test named '{}'", line, name);
    ExprPtr t = NewExpr(Expr::Kind::kTest, line);
    t->name = std::move(name);
    t->negated = negated;
    t->object = std::move(node);
    if (IsOp("(")) {
      RW_RETURN_IF_ERROR(ParseCallArgs(t.get()));
    } else {
      // `is divisibleby 3`, `is sameas none`: one primary argument without parentheses.
      const Token& c = Cur();
      bool starts_primary = c.kind == TokKind::kName || c.kind == TokKind::kString ||
                            c.kind == TokKind::kInt || c.kind == TokKind::kFloat || IsOp("[") ||
                            IsOp("{");
      if (starts_primary && !IsName("else") && !IsName("or") && !IsName("and")) {
        if (IsName("is"))
          return Error(ErrorCode::kCorrupt, "line {}: cannot chain tests with 'is'", line);
        RW_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
        RW_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
        t->args.push_back(std::move(arg));
      }
    }
    return t;
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> loop_stack_;
  std::vector<Stmt*> macro_stack_;
};

}  // namespace

Result<std::unique_ptr<Program>> Parse(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().kind != TokKind::kEof) {
    return Error(ErrorCode::kInternal, "token stream must end with EOF");
  }
  return Parser(std::move(tokens)).Run();
}

}  // namespace rw::jinja
