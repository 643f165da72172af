// The small stages of a tokenizer.json around the model: normalizer, pre-tokenizer and decoder.
// Only the kinds Gemma-family files use are supported; any other kind is an error at load time
// rather than a silently different tokenization.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace rw {

// Supported: null, Replace (String pattern), Prepend, Sequence of those.
class Normalizer {
 public:
  static Result<Normalizer> FromJson(const Json& j, const std::string& where);
  bool empty() const { return steps_.empty(); }
  std::string Apply(std::string_view text) const;

 private:
  struct Step {
    bool prepend;  // else replace
    std::string pattern, content;
  };
  std::vector<Step> steps_;
};

// Supported: null, Split (String pattern, any behavior, invert=false), Sequence of those.
class PreTokenizer {
 public:
  static Result<PreTokenizer> FromJson(const Json& j, const std::string& where);
  bool empty() const { return steps_.empty(); }
  // Replaces `pieces` (views into one string) with the pre-tokenized pieces; `tmp` is scratch.
  void Apply(std::vector<std::string_view>* pieces, std::vector<std::string_view>* tmp) const;

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    std::string pattern;
    Behavior behavior;
  };
  static void Split(std::string_view s, const Step& step, std::vector<std::string_view>* out);
  std::vector<Step> steps_;
};

// Supported: null (tokens joined by spaces), Replace (String pattern), ByteFallback, Fuse, Strip,
// Sequence of those. ByteFallback turns runs of <0xNN> tokens into text with invalid UTF-8 replaced
// by U+FFFD per maximal invalid subpart (WHATWG TextDecoder, as the JS tokenizers do).
class Decoder {
 public:
  static Result<Decoder> FromJson(const Json& j, const std::string& where);
  std::string Decode(std::vector<std::string> tokens) const;

  // True when decoding distributes over concatenation at the byte level: every step before an
  // optional ByteFallback acts on single tokens, and nothing but Fuse follows it. Then the text of
  // a token sequence is the lossy UTF-8 decoding of the concatenated TokenBytes.
  bool streamable() const { return streamable_; }
  // Raw bytes a token contributes in a streamable decoder.
  void TokenBytes(std::string_view token, std::string* out) const;

 private:
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip };
  struct Step {
    Kind kind;
    std::string pattern, content;  // Replace; Strip uses content
    int64_t start = 0, stop = 0;   // Strip
  };
  static Status Flatten(const Json& j, const std::string& where, std::vector<Step>* steps);
  static std::string ApplyPerToken(const Step& step, std::string_view token);

  bool none_ = true;  // no decoder section
  bool streamable_ = false;
  bool has_byte_fallback_ = false;
  std::vector<Step> steps_;
};

// "<0xNN>" -> NN, else -1.
int ParseByteToken(std::string_view token);

}  // namespace rw
