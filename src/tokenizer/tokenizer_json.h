// A small pull scanner over JSON text. tokenizer.json is ~33 MB, almost all of it the vocab object
// and the merges array; building a DOM for those (nlohmann) costs ~0.8 s, streaming them costs a
// tenth of that. The small sections are handed to nlohmann as raw text (RawValue).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rw {

// `s` as a JSON string literal (quotes and escapes), for error messages that show token text.
std::string JsonQuote(std::string_view s);

class JsonScanner {
 public:
  JsonScanner(std::string_view text, std::string source_name)
      : text_(text), name_(std::move(source_name)) {}

  // All methods return false on failure and record the first error (see error()). A failed
  // scanner stays failed.
  bool ok() const { return error_.empty(); }
  // "<source>: line L, column C: <what>".
  const std::string& error() const { return error_; }
  bool Fail(std::string_view what);

  // Next significant character without consuming it ('\0' at the end of the input).
  char Peek();
  bool AtEnd();

  // Objects: BeginObject(); while (NextKey(&key)) { read the value }; then check ok().
  bool BeginObject();
  bool NextKey(std::string* key);
  // Arrays: BeginArray(); while (NextElement()) { read the value }; then check ok().
  bool BeginArray();
  bool NextElement();

  bool ReadString(std::string* out);
  bool ReadInt(int64_t* out);
  // Skips one value of any kind; `raw` (optional) receives its exact text.
  bool SkipValue(std::string_view* raw = nullptr);
  bool ExpectEnd();

  size_t offset() const { return pos_; }

 private:
  void SkipWs();
  bool Consume(char c, const char* what);
  bool ReadStringSlow(std::string* out);
  bool ReadHex4(uint32_t* v);

  // Bounds recursion in SkipValue on hostile input.
  static constexpr size_t kMaxDepth = 256;

  std::string_view text_;
  std::string name_;
  size_t pos_ = 0;
  std::string error_;
  // One entry per open object/array: whether a member has been read (so a comma is due).
  std::vector<bool> has_member_;
};

}  // namespace rw
