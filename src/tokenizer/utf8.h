// UTF-8 helpers for the tokenizer: stepping over code points (tolerating invalid bytes) and lossy
// decoding that replaces invalid sequences the way the WHATWG TextDecoder does (one U+FFFD per
// maximal invalid subpart), which is what the tokenizers oracle uses for byte-fallback tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rw::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed code point starting at s[0], or 0 if the bytes there do not start one
// (invalid lead byte, bad continuation, overlong form, surrogate, or truncated at the end).
size_t ValidCharLen(std::string_view s);

// Length to step over at s[0]: the code point length if valid, else 1 (a single invalid byte).
inline size_t StepLen(std::string_view s) {
  size_t n = ValidCharLen(s);
  return n == 0 ? 1 : n;
}

bool IsValid(std::string_view s);

// Decodes the code point starting at s[0]; requires ValidCharLen(s) == len > 0.
uint32_t DecodeValid(std::string_view s, size_t len);

void AppendCodePoint(uint32_t cp, std::string* out);

// Appends `bytes` to `out` with invalid sequences replaced by U+FFFD. When `final` is false, an
// incomplete but so-far valid sequence at the end is left unconsumed; returns how many bytes of
// `bytes` were consumed (always all of them when `final`).
size_t AppendLossy(std::string_view bytes, bool final, std::string* out);

inline std::string Lossy(std::string_view bytes) {
  std::string out;
  AppendLossy(bytes, /*final=*/true, &out);
  return out;
}

}  // namespace rw::utf8
