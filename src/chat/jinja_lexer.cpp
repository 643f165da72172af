#include "chat/jinja_lexer.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "chat/jinja_text.h"

namespace rw::jinja {
namespace {

bool IsWs(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool IsNameChar(char c) {
  return IsNameStart(c) || IsDigit(c);
}

// Python's str.rstrip() over the whitespace jinja2's `-` modifier removes (regex \s).
void RStripWs(std::string* s) {
  std::string stripped = StripSpace(*s, Dialect::kPython, false, true);
  s->swap(stripped);
}

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes a string literal body the way jinja2 does (Python unicode-escape): known escapes are
// replaced, unknown ones are kept verbatim.
std::string DecodeEscapes(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case '\n':
        break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        int len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        char32_t cp = 0;
        bool ok = true;
        for (int k = 1; ok && k <= len; ++k) {
          if (i + k >= body.size() || HexVal(body[i + k]) < 0) {
            ok = false;
          } else {
            cp = cp * 16 + HexVal(body[i + k]);
          }
        }
        if (ok && cp <= 0x10FFFF) {
          AppendUtf8(&out, cp);
          i += len;
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0';
          int k = 1;
          while (k < 3 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7') {
            v = v * 8 + (body[++i] - '0');
            ++k;
          }
          AppendUtf8(&out, static_cast<char32_t>(v));
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, size_t max_tokens) : src_(std::move(src)), max_tokens_(max_tokens) {}

  Result<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t text_start = pos_;
      size_t tag = FindTag(pos_);
      size_t text_end = tag == std::string::npos ? src_.size() : tag;
      std::string text = src_.substr(text_start, text_end - text_start);
      int text_line = line_;
      AdvanceTo(text_end);
      if (tag == std::string::npos) {
        RW_RETURN_IF_ERROR(Push(TokKind::kText, std::move(text), text_line));
        break;
      }
      char type = src_[tag + 1];
      char mod = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (mod == '-') {
        RStripWs(&text);
      } else if (mod != '+' && type != '{') {
        // lstrip_blocks: drop spaces/tabs between the start of the line and a block or comment.
        size_t nl = text.rfind('\n');
        size_t line_pos = nl == std::string::npos ? 0 : nl + 1;
        bool line_starting = text_start == 0 || src_[text_start - 1] == '\n';
        if ((nl != std::string::npos || line_starting) &&
            text.find_first_not_of(" \t", line_pos) == std::string::npos) {
          text.resize(line_pos);
        }
      }
      if (!text.empty()) RW_RETURN_IF_ERROR(Push(TokKind::kText, std::move(text), text_line));
      size_t inner = tag + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (type == '#') {
        RW_RETURN_IF_ERROR(LexComment(inner));
      } else if (type == '%' && TryRaw(inner)) {
        RW_RETURN_IF_ERROR(LexRaw(inner));
      } else {
        RW_RETURN_IF_ERROR(LexTag(type, inner));
      }
    }
    RW_RETURN_IF_ERROR(Push(TokKind::kEof, "", line_));
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return std::string::npos;
  }

  void AdvanceTo(size_t p) {
    for (size_t i = pos_; i < p && i < src_.size(); ++i) line_ += src_[i] == '\n';
    pos_ = p;
  }

  Status Push(TokKind kind, std::string text, int line) {
    if (tokens_.size() >= max_tokens_) {
      return Error(ErrorCode::kResourceExhausted, "template too large (over {} tokens)",
                   max_tokens_);
    }
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line;
    tokens_.push_back(std::move(t));
    return Status::Ok();
  }

  // After a tag's closing delimiter: `-` strips all following whitespace, `+` keeps it, and
  // trim_blocks removes one newline after block and comment tags.
  void AfterTagEnd(char modifier, bool is_block_or_comment) {
    if (modifier == '-') {
      size_t p = pos_;
      while (p < src_.size() && IsWs(src_[p])) ++p;
      AdvanceTo(p);
    } else if (modifier != '+' && is_block_or_comment && pos_ < src_.size() && src_[pos_] == '\n') {
      AdvanceTo(pos_ + 1);
    }
  }

  Status LexComment(size_t inner) {
    int start_line = line_;
    size_t end = src_.find("#}", inner);
    if (end == std::string::npos) {
      return Error(ErrorCode::kCorrupt, "line {}: unterminated comment", start_line);
    }
    char modifier =
        (end > inner && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : 0;
    AdvanceTo(end + 2);
    AfterTagEnd(modifier, true);
    return Status::Ok();
  }

  // Matches `raw` [ws] [-|+] `%}` at p (after optional whitespace); sets raw_body_start_.
  bool TryRaw(size_t p) {
    while (p < src_.size() && IsWs(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && IsNameChar(src_[p])) return false;
    while (p < src_.size() && IsWs(src_[p])) ++p;
    raw_mod_ = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) raw_mod_ = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    raw_body_start_ = p + 2;
    return true;
  }

  Status LexRaw(size_t) {
    int start_line = line_;
    size_t body = raw_body_start_;
    if (raw_mod_ == '-') {
      while (body < src_.size() && IsWs(src_[body])) ++body;
    }
    // Find {% [-+] endraw [-+] %}.
    size_t p = body;
    while ((p = src_.find("{%", p)) != std::string::npos) {
      size_t q = p + 2;
      char begin_mod = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) begin_mod = src_[q++];
      while (q < src_.size() && IsWs(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        p += 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && IsWs(src_[q])) ++q;
      char end_mod = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_mod = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        p += 2;
        continue;
      }
      std::string text = src_.substr(body, p - body);
      if (begin_mod == '-') RStripWs(&text);
      if (!text.empty()) RW_RETURN_IF_ERROR(Push(TokKind::kText, std::move(text), start_line));
      AdvanceTo(q + 2);
      AfterTagEnd(end_mod, true);
      return Status::Ok();
    }
    return Error(ErrorCode::kCorrupt, "line {}: unterminated raw block", start_line);
  }

  Status LexTag(char type, size_t inner) {
    const bool block = type == '%';
    const char* end = block ? "%}" : "}}";
    int start_line = line_;
    RW_RETURN_IF_ERROR(Push(block ? TokKind::kBlockBegin : TokKind::kVarBegin, "", start_line));
    AdvanceTo(inner);
    std::vector<char> brackets;
    while (true) {
      size_t p = pos_;
      while (p < src_.size() && IsWs(src_[p])) ++p;
      AdvanceTo(p);
      if (pos_ >= src_.size()) break;
      if (brackets.empty()) {
        char modifier = 0;
        bool is_end = false;
        if (src_.compare(pos_, 2, end) == 0) {
          is_end = true;
        } else if ((src_[pos_] == '-' || src_[pos_] == '+') &&
                   src_.compare(pos_ + 1, 2, end) == 0) {
          modifier = src_[pos_];
          is_end = true;
        }
        if (is_end) {
          RW_RETURN_IF_ERROR(Push(block ? TokKind::kBlockEnd : TokKind::kVarEnd, "", line_));
          AdvanceTo(pos_ + (modifier ? 3 : 2));
          AfterTagEnd(modifier, block);
          return Status::Ok();
        }
      }
      RW_RETURN_IF_ERROR(LexToken(&brackets));
    }
    return Error(ErrorCode::kCorrupt, "line {}: unterminated '{}' tag", start_line,
                 block ? "{%" : "{{");
  }

  Status LexToken(std::vector<char>* brackets) {
    char c = src_[pos_];
    int line = line_;
    if (IsNameStart(c)) {
      size_t p = pos_;
      while (p < src_.size() && IsNameChar(src_[p])) ++p;
      RW_RETURN_IF_ERROR(Push(TokKind::kName, src_.substr(pos_, p - pos_), line));
      AdvanceTo(p);
      return Status::Ok();
    }
    if (IsDigit(c)) return LexNumber();
    if (c == '\'' || c == '"') {
      size_t p = pos_ + 1;
      while (p < src_.size() && src_[p] != c) p += (src_[p] == '\\') ? 2 : 1;
      if (p >= src_.size())
        return Error(ErrorCode::kCorrupt, "line {}: unterminated string literal", line);
      std::string body = src_.substr(pos_ + 1, p - pos_ - 1);
      RW_RETURN_IF_ERROR(Push(TokKind::kString, DecodeEscapes(body), line));
      AdvanceTo(p + 1);
      return Status::Ok();
    }
    static const char* kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kOps2) {
      if (src_.compare(pos_, 2, op) == 0) {
        RW_RETURN_IF_ERROR(Push(TokKind::kOp, op, line));
        AdvanceTo(pos_ + 2);
        return Status::Ok();
      }
    }
    if (std::strchr("+-/*%~[](){},.:|=<>;", c) != nullptr) {
      if (c == '(' || c == '[' || c == '{') {
        brackets->push_back(c);
      } else if (c == ')' || c == ']' || c == '}') {
        char open = c == ')' ? '(' : (c == ']' ? '[' : '{');
        if (brackets->empty() || brackets->back() != open) {
          return Error(ErrorCode::kCorrupt, "line {}: unexpected '{}'", line, c);
        }
        brackets->pop_back();
      }
      RW_RETURN_IF_ERROR(Push(TokKind::kOp, std::string(1, c), line));
      AdvanceTo(pos_ + 1);
      return Status::Ok();
    }
    return Error(ErrorCode::kCorrupt, "line {}: unexpected character '{}'", line, c);
  }

  Status LexNumber() {
    int line = line_;
    size_t p = pos_;
    auto digits = [&](auto pred) {
      std::string d;
      while (p < src_.size() &&
             (pred(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && pred(src_[p + 1])))) {
        if (src_[p] != '_') d.push_back(src_[p]);
        ++p;
      }
      return d;
    };
    // 0x / 0o / 0b integers.
    if (src_[p] == '0' && p + 1 < src_.size() && std::strchr("xXoObB", src_[p + 1]) != nullptr) {
      char base_char = static_cast<char>(src_[p + 1] | 0x20);
      int base = base_char == 'x' ? 16 : (base_char == 'o' ? 8 : 2);
      p += 2;
      std::string d = digits([&](char ch) {
        int v = HexVal(ch);
        return v >= 0 && v < base;
      });
      if (d.empty()) return Error(ErrorCode::kCorrupt, "line {}: malformed number literal", line);
      errno = 0;
      unsigned long long v = std::strtoull(d.c_str(), nullptr, base);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) {
        return Error(ErrorCode::kUnsupported, "line {}: integer literal too large", line);
      }
      RW_RETURN_IF_ERROR(Push(TokKind::kInt, src_.substr(pos_, p - pos_), line));
      tokens_.back().int_value = static_cast<int64_t>(v);
      AdvanceTo(p);
      return Status::Ok();
    }
    std::string text = digits(IsDigit);
    bool is_float = false;
    bool after_dot =
        !tokens_.empty() && tokens_.back().kind == TokKind::kOp && tokens_.back().text == ".";
    if (!after_dot) {
      if (p + 1 < src_.size() && src_[p] == '.' && IsDigit(src_[p + 1])) {
        ++p;
        text.push_back('.');
        text += digits(IsDigit);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && IsDigit(src_[q])) {
          std::string e(src_.substr(p, q - p));
          p = q;
          text += e;
          text += digits(IsDigit);
          is_float = true;
        }
      }
    }
    if (is_float) {
      RW_RETURN_IF_ERROR(Push(TokKind::kFloat, text, line));
      tokens_.back().float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
      if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) {
        return Error(ErrorCode::kUnsupported, "line {}: integer literal too large", line);
      }
      RW_RETURN_IF_ERROR(Push(TokKind::kInt, text, line));
      tokens_.back().int_value = static_cast<int64_t>(v);
    }
    AdvanceTo(p);
    return Status::Ok();
  }

  std::string src_;
  size_t max_tokens_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
  size_t raw_body_start_ = 0;
  char raw_mod_ = 0;
};

std::string NormalizeNewlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

Result<std::vector<Token>> Tokenize(std::string_view source, size_t max_tokens) {
  // jinja2 normalizes line endings in template data and drops one trailing newline
  // (keep_trailing_newline=False).
  std::string src = NormalizeNewlines(source);
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), max_tokens).Run();
}

}  // namespace rw::jinja
