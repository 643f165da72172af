#include "tokenizer/tokenizer_json.h"

#include <fmt/format.h>

#include <cstring>

#include "tokenizer/utf8.h"

namespace rw {

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out += '"';
  return out;
}

bool JsonScanner::Fail(std::string_view what) {
  if (!error_.empty()) return false;
  size_t line = 1, col = 1;
  size_t end = pos_ < text_.size() ? pos_ : text_.size();
  for (size_t i = 0; i < end; ++i) {
    if (text_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  error_ = fmt::format("{}: line {}, column {}: {}", name_, line, col, what);
  return false;
}

void JsonScanner::SkipWs() {
  while (pos_ < text_.size()) {
    char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
    ++pos_;
  }
}

char JsonScanner::Peek() {
  SkipWs();
  return pos_ < text_.size() ? text_[pos_] : '\0';
}

bool JsonScanner::AtEnd() {
  SkipWs();
  return pos_ >= text_.size();
}

bool JsonScanner::Consume(char c, const char* what) {
  if (!ok()) return false;
  SkipWs();
  if (pos_ >= text_.size()) return Fail(fmt::format("unexpected end of input, expected {}", what));
  if (text_[pos_] != c) return Fail(fmt::format("expected {}", what));
  ++pos_;
  return true;
}

bool JsonScanner::BeginObject() {
  if (!Consume('{', "'{'")) return false;
  if (has_member_.size() >= kMaxDepth) return Fail("nesting too deep");
  has_member_.push_back(false);
  return true;
}

bool JsonScanner::NextKey(std::string* key) {
  if (!ok() || has_member_.empty()) return false;
  SkipWs();
  if (pos_ < text_.size() && text_[pos_] == '}') {
    ++pos_;
    has_member_.pop_back();
    return false;
  }
  if (has_member_.back() && !Consume(',', "',' or '}'")) return false;
  has_member_.back() = true;
  if (Peek() != '"') return Fail("expected a string key");
  if (!ReadString(key)) return false;
  return Consume(':', "':'");
}

bool JsonScanner::BeginArray() {
  if (!Consume('[', "'['")) return false;
  if (has_member_.size() >= kMaxDepth) return Fail("nesting too deep");
  has_member_.push_back(false);
  return true;
}

bool JsonScanner::NextElement() {
  if (!ok() || has_member_.empty()) return false;
  SkipWs();
  if (pos_ < text_.size() && text_[pos_] == ']') {
    ++pos_;
    has_member_.pop_back();
    return false;
  }
  if (has_member_.back() && !Consume(',', "',' or ']'")) return false;
  has_member_.back() = true;
  return true;
}

bool JsonScanner::ReadString(std::string* out) {
  if (!Consume('"', "a string")) return false;
  out->clear();
  // Fast path: no escapes; only the closing quote ends it. Raw bytes are checked for UTF-8.
  size_t start = pos_;
  const char* p = text_.data() + pos_;
  const char* end = text_.data() + text_.size();
  bool ascii = true;
  while (p < end) {
    unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\' || c < 0x20) break;
    ascii &= c < 0x80;
    ++p;
  }
  if (p < end && *p == '"') {
    std::string_view s(text_.data() + start, static_cast<size_t>(p - (text_.data() + start)));
    if (!ascii && !utf8::IsValid(s)) return Fail("string is not valid UTF-8");
    out->assign(s);
    pos_ = static_cast<size_t>(p - text_.data()) + 1;
    return true;
  }
  return ReadStringSlow(out);
}

bool JsonScanner::ReadHex4(uint32_t* v) {
  if (pos_ + 4 > text_.size()) return Fail("truncated \\u escape");
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    char c = text_[pos_ + i];
    r <<= 4;
    if (c >= '0' && c <= '9') {
      r |= static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      r |= static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      r |= static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return Fail("bad hex digit in \\u escape");
    }
  }
  pos_ += 4;
  *v = r;
  return true;
}

bool JsonScanner::ReadStringSlow(std::string* out) {
  size_t run_start = pos_;
  while (true) {
    if (pos_ >= text_.size()) return Fail("unterminated string");
    unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"' || c == '\\' || c < 0x20) {
      std::string_view run = text_.substr(run_start, pos_ - run_start);
      if (!utf8::IsValid(run)) return Fail("string is not valid UTF-8");
      out->append(run);
      if (c < 0x20) return Fail("control character in string");
      ++pos_;
      if (c == '"') return true;
      if (pos_ >= text_.size()) return Fail("unterminated string");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!ReadHex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (pos_ + 2 > text_.size() || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
              return Fail("lone surrogate in \\u escape");
            pos_ += 2;
            if (!ReadHex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return Fail("lone surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("lone surrogate in \\u escape");
          }
          utf8::AppendCodePoint(cp, out);
          break;
        }
        default:
          --pos_;
          return Fail("bad escape in string");
      }
      run_start = pos_;
    } else {
      ++pos_;
    }
  }
}

bool JsonScanner::ReadInt(int64_t* out) {
  if (!ok()) return false;
  SkipWs();
  size_t start = pos_;
  bool neg = false;
  if (pos_ < text_.size() && text_[pos_] == '-') {
    neg = true;
    ++pos_;
  }
  int64_t v = 0;
  size_t digits = 0;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    if (v > (INT64_MAX - 9) / 10) {
      pos_ = start;
      return Fail("integer out of range");
    }
    v = v * 10 + (text_[pos_] - '0');
    ++pos_;
    ++digits;
  }
  if (digits == 0 ||
      (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))) {
    pos_ = start;
    return Fail("expected an integer");
  }
  *out = neg ? -v : v;
  return true;
}

bool JsonScanner::SkipValue(std::string_view* raw) {
  if (!ok()) return false;
  char c = Peek();
  size_t start = pos_;
  std::string scratch;
  switch (c) {
    case '{': {
      if (!BeginObject()) return false;
      while (NextKey(&scratch)) {
        if (!SkipValue()) return false;
      }
      break;
    }
    case '[': {
      if (!BeginArray()) return false;
      while (NextElement()) {
        if (!SkipValue()) return false;
      }
      break;
    }
    case '"':
      if (!ReadString(&scratch)) return false;
      break;
    case '\0':
      return Fail("unexpected end of input, expected a value");
    default: {
      // Literals and numbers: consume the token and check its shape loosely.
      size_t end = pos_;
      while (end < text_.size() && std::strchr(",}] \t\r\n", text_[end]) == nullptr) ++end;
      std::string_view tok = text_.substr(pos_, end - pos_);
      bool number = !tok.empty() && (tok[0] == '-' || (tok[0] >= '0' && tok[0] <= '9'));
      if (number) {
        for (char d : tok) {
          if (std::strchr("0123456789+-.eE", d) == nullptr) return Fail("malformed number");
        }
      } else if (tok != "true" && tok != "false" && tok != "null") {
        return Fail("expected a value");
      }
      pos_ = end;
    }
  }
  if (!ok()) return false;
  if (raw != nullptr) *raw = text_.substr(start, pos_ - start);
  return true;
}

bool JsonScanner::ExpectEnd() {
  if (!ok()) return false;
  if (!AtEnd()) return Fail("trailing characters after the JSON value");
  return true;
}

}  // namespace rw
