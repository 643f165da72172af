#include "chat/jinja_text.h"

#include "tokenizer/utf8.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace rw::jinja {

char32_t NextCodepoint(std::string_view s, size_t* pos) {
  size_t i = *pos;
  auto b0 = static_cast<unsigned char>(s[i]);
  int len = 0;
  char32_t cp = 0;
  if (b0 < 0x80) {
    *pos = i + 1;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    *pos = i + 1;
    return b0;
  }
  if (i + len > s.size()) {
    *pos = i + 1;
    return b0;
  }
  for (int k = 1; k < len; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      *pos = i + 1;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *pos = i + len;
  return cp;
}

std::vector<char32_t> DecodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(NextCodepoint(s, &pos));
  return out;
}

void AppendUtf8(std::string* out, char32_t cp) {
  utf8::AppendCodePoint(static_cast<uint32_t>(cp), out);
}

std::string EncodeUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) AppendUtf8(&out, cp);
  return out;
}

size_t StringLength(std::string_view s, Dialect dialect) {
  size_t n = 0, pos = 0;
  while (pos < s.size()) {
    char32_t cp = NextCodepoint(s, &pos);
    n += (dialect == Dialect::kHuggingFaceJs && cp >= 0x10000) ? 2 : 1;
  }
  return n;
}

bool IsSpace(char32_t cp, Dialect dialect) {
  switch (cp) {
    case ' ':
    case '\t':
    case '\n':
    case '\v':
    case '\f':
    case '\r':
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      break;
  }
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  if (dialect == Dialect::kPython) return (cp >= 0x1C && cp <= 0x1F) || cp == 0x85;
  return cp == 0xFEFF;
}

std::string StripSpace(std::string_view s, Dialect dialect, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t pos = begin;
      if (!IsSpace(NextCodepoint(s, &pos), dialect)) break;
      begin = pos;
    }
  }
  if (right) {
    while (end > begin) {
      // Step back to the start of the last code point.
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 &&
             end - start < 4) {
        --start;
      }
      size_t pos = start;
      char32_t cp = NextCodepoint(s, &pos);
      if (pos != end) {  // malformed tail: treat the last byte alone
        start = end - 1;
        pos = start;
        cp = NextCodepoint(s, &pos);
      }
      if (!IsSpace(cp, dialect)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::string StripChars(std::string_view s, std::string_view chars, bool left, bool right) {
  std::vector<char32_t> set = DecodeUtf8(chars);
  std::vector<char32_t> cps = DecodeUtf8(s);
  auto in_set = [&](char32_t c) {
    for (char32_t x : set) {
      if (x == c) return true;
    }
    return false;
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && in_set(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && in_set(cps[end - 1])) --end;
  }
  return EncodeUtf8(std::vector<char32_t>(cps.begin() + begin, cps.begin() + end));
}

namespace {

// Returns the other-case partner of cp (0 if none) and whether cp is the upper-case member.
struct CasePair {
  char32_t other;
  bool is_upper;
};

CasePair CaseOf(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return {cp + 32, true};
  if (cp >= 'a' && cp <= 'z') return {cp - 32, false};
  if (cp < 0xC0) return {0, false};
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return {cp + 32, true};
  if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return {cp - 32, false};
  if (cp == 0xFF) return {0x178, false};
  if (cp == 0x178) return {0xFF, true};
  if (cp >= 0x100 && cp <= 0x17F) {
    if (cp == 0x130 || cp == 0x131 || cp == 0x138 || cp == 0x149 || cp == 0x17F) return {0, false};
    bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    bool upper = odd_upper ? (cp & 1) : !(cp & 1);
    if (upper) return {cp + 1, true};
    return {cp - 1, false};
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return {cp + 32, true};
  if (cp >= 0x3B1 && cp <= 0x3C9) return {cp == 0x3C2 ? 0x3A3 : cp - 32, false};
  if (cp == 0x3C2) return {0x3A3, false};
  if (cp >= 0x410 && cp <= 0x42F) return {cp + 32, true};
  if (cp >= 0x430 && cp <= 0x44F) return {cp - 32, false};
  if (cp >= 0x400 && cp <= 0x40F) return {cp + 80, true};
  if (cp >= 0x450 && cp <= 0x45F) return {cp - 80, false};
  if (cp >= 0xFF21 && cp <= 0xFF3A) return {cp + 32, true};
  if (cp >= 0xFF41 && cp <= 0xFF5A) return {cp - 32, false};
  return {0, false};
}

void AppendUpper(std::string* out, char32_t cp) {
  if (cp == 0xDF) {  // ß upper-cases to "SS" in both Python and JavaScript
    out->append("SS");
    return;
  }
  CasePair c = CaseOf(cp);
  AppendUtf8(out, (c.other != 0 && !c.is_upper) ? c.other : cp);
}

void AppendLower(std::string* out, char32_t cp) {
  CasePair c = CaseOf(cp);
  AppendUtf8(out, (c.other != 0 && c.is_upper) ? c.other : cp);
}

}  // namespace

bool IsCased(char32_t cp) {
  return cp == 0xDF || CaseOf(cp).other != 0;
}
bool IsUpperCp(char32_t cp) {
  return CaseOf(cp).other != 0 && CaseOf(cp).is_upper;
}
bool IsLowerCp(char32_t cp) {
  return cp == 0xDF || (CaseOf(cp).other != 0 && !CaseOf(cp).is_upper);
}

std::string ToUpper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) AppendUpper(&out, NextCodepoint(s, &pos));
  return out;
}

std::string ToLower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) AppendLower(&out, NextCodepoint(s, &pos));
  return out;
}

std::string ToTitle(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  bool prev_cased = false;
  while (pos < s.size()) {
    char32_t cp = NextCodepoint(s, &pos);
    bool cased = IsCased(cp);
    if (cased && !prev_cased) {
      AppendUpper(&out, cp);
    } else if (cased) {
      AppendLower(&out, cp);
    } else {
      AppendUtf8(&out, cp);
    }
    prev_cased = cased;
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  bool first = true;
  while (pos < s.size()) {
    char32_t cp = NextCodepoint(s, &pos);
    if (first) {
      AppendUpper(&out, cp);
    } else {
      AppendLower(&out, cp);
    }
    first = false;
  }
  return out;
}

namespace {

// Shortest round-trip decimal digits of |v| (finite, non-zero) and the exponent of the first
// digit: |v| = 0.d1d2... * 10^(point), i.e. point = number of digits before the decimal point.
void ShortestDigits(double v, std::string* digits, int* point) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(v), std::chars_format::scientific);
  std::string_view sci(buf, res.ptr - buf);  // d[.ddd]e[+-]XX
  size_t e = sci.find('e');
  digits->clear();
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits->push_back(sci[i]);
  }
  int exp = std::atoi(std::string(sci.substr(e + 1)).c_str());
  *point = exp + 1;
}

}  // namespace

std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string sign = std::signbit(v) ? "-" : "";
  if (v == 0) return sign + "0.0";
  std::string d;
  int point;
  ShortestDigits(v, &d, &point);
  int exp = point - 1;
  int n = static_cast<int>(d.size());
  if (exp >= -4 && exp < 16) {
    if (point <= 0) return sign + "0." + std::string(-point, '0') + d;
    if (point >= n) return sign + d + std::string(point - n, '0') + ".0";
    return sign + d.substr(0, point) + "." + d.substr(point);
  }
  std::string out = sign + d.substr(0, 1);
  if (n > 1) out += "." + d.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

std::string JsNumberToString(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";  // JavaScript prints -0 as "0"
  std::string sign = v < 0 ? "-" : "";
  std::string d;
  int point;
  ShortestDigits(v, &d, &point);
  int k = static_cast<int>(d.size());
  if (k <= point && point <= 21) return sign + d + std::string(point - k, '0');
  if (0 < point && point <= 21) return sign + d.substr(0, point) + "." + d.substr(point);
  if (-6 < point && point <= 0) return sign + "0." + std::string(-point, '0') + d;
  int exp = point - 1;
  std::string out = sign + d.substr(0, 1);
  if (k > 1) out += "." + d.substr(1);
  out += exp < 0 ? "e-" : "e+";
  out += std::to_string(std::abs(exp));
  return out;
}

}  // namespace rw::jinja
