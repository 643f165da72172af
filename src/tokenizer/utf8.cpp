#include "tokenizer/utf8.h"

namespace rw::utf8 {
namespace {

// For a lead byte: total sequence length (0 if not a lead byte) and the allowed range of the
// second byte, which excludes overlong forms, surrogates and code points above U+10FFFF.
struct Lead {
  int len;
  uint8_t lo, hi;
};

inline Lead ClassifyLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes of the sequence starting at s[0] are well-formed so far (at most lead.len).
inline size_t ValidPrefix(std::string_view s, const Lead& lead) {
  size_t n = 1;
  while (n < static_cast<size_t>(lead.len) && n < s.size()) {
    uint8_t c = static_cast<uint8_t>(s[n]);
    uint8_t lo = n == 1 ? lead.lo : 0x80, hi = n == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t ValidCharLen(std::string_view s) {
  if (s.empty()) return 0;
  Lead lead = ClassifyLead(static_cast<uint8_t>(s[0]));
  if (lead.len <= 1) return static_cast<size_t>(lead.len);
  size_t n = ValidPrefix(s, lead);
  return n == static_cast<size_t>(lead.len) ? n : 0;
}

bool IsValid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t n = ValidCharLen(s.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

uint32_t DecodeValid(std::string_view s, size_t len) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t AppendLossy(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    // Copy ASCII runs in one go.
    size_t j = i;
    while (j < bytes.size() && static_cast<uint8_t>(bytes[j]) < 0x80) ++j;
    if (j > i) {
      out->append(bytes.data() + i, j - i);
      i = j;
      if (i == bytes.size()) break;
    }
    std::string_view rest = bytes.substr(i);
    Lead lead = ClassifyLead(static_cast<uint8_t>(rest[0]));
    if (lead.len == 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t n = ValidPrefix(rest, lead);
    if (n == static_cast<size_t>(lead.len)) {
      out->append(rest.data(), n);
      i += n;
    } else if (n == rest.size()) {
      // Truncated at the end of the input: wait for more bytes unless this is the end.
      if (!final) return i;
      out->append(kReplacement);
      i += n;
    } else {
      // A bad byte interrupts the sequence: replace what was read, then resume at the bad byte.
      out->append(kReplacement);
      i += n;
    }
  }
  return i;
}

}  // namespace rw::utf8
