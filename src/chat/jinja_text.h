// Text helpers for the Jinja interpreter: UTF-8 walking, the whitespace sets and case mappings
// that Python's str methods (and JavaScript's, for the @huggingface/jinja dialect) use, and the
// float formatting of Python repr() and JavaScript Number#toString.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rw::jinja {

// Which implementation's observable behaviour to reproduce where Python jinja2 (as transformers
// runs it) and @huggingface/jinja differ: printing None/booleans/floats/containers, the whitespace
// set of trim/strip, string lengths. Control flow and scoping always follow Python jinja2.
enum class Dialect { kPython, kHuggingFaceJs };

// Decodes one code point at s[*pos] and advances *pos. Malformed bytes decode as themselves
// (one byte each) so that nothing is lost when re-encoded.
char32_t NextCodepoint(std::string_view s, size_t* pos);
std::vector<char32_t> DecodeUtf8(std::string_view s);
void AppendUtf8(std::string* out, char32_t cp);
std::string EncodeUtf8(const std::vector<char32_t>& cps);
// Python len(str) counts code points; JavaScript .length counts UTF-16 units.
size_t StringLength(std::string_view s, Dialect dialect);

bool IsSpace(char32_t cp, Dialect dialect);
// str.strip()/lstrip()/rstrip() without arguments (JS trim/trimStart/trimEnd for kHuggingFaceJs).
std::string StripSpace(std::string_view s, Dialect dialect, bool left = true, bool right = true);
// str.strip(chars).
std::string StripChars(std::string_view s, std::string_view chars, bool left, bool right);

// Simple case mapping: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth Latin
// (enough for schema type names and most prose; scripts without case are unaffected).
std::string ToUpper(std::string_view s);
std::string ToLower(std::string_view s);
std::string ToTitle(std::string_view s);     // Python str.title()
std::string Capitalize(std::string_view s);  // Python str.capitalize()
bool IsCased(char32_t cp);
bool IsUpperCp(char32_t cp);
bool IsLowerCp(char32_t cp);

// Python repr(float): "1.0", "0.1", "1e-05", "1e+20", "inf", "nan".
std::string PythonFloatRepr(double v);
// JavaScript String(number): "1", "0.1", "1e-7", "1e+21", "Infinity", "NaN".
std::string JsNumberToString(double v);

}  // namespace rw::jinja
