// Added tokens (special and plain): found in the text before the model sees it, as tokenizers'
// AddedVocabulary does: leftmost-longest matching, with the single_word / lstrip / rstrip flags.
// Tokens with normalized=false match the raw text; those with normalized=true match the
// normalized text (their own content normalized the same way).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace rw {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

class AddedTokenMatcher {
 public:
  struct Segment {
    std::string_view text;
    int32_t id;  // -1: ordinary text for the model
  };

  // patterns[i] is what to look for; it stands for tokens[i] (flags and id).
  void Build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }

  // Cuts `text` into ordinary segments and matched tokens, in order; appends to `out`. Whitespace
  // absorbed by lstrip/rstrip belongs to the token's segment and is not tokenized. A special
  // token is not matched where its text would overlap one of `plain` (sorted, disjoint).
  void Split(std::string_view text, std::vector<Segment>* out,
             std::span<const TextSpan> plain = {}) const;

 private:
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<AddedToken> tokens_;
  std::vector<int32_t> node_token_;                 // node -> index into tokens_, or -1
  std::unordered_map<uint64_t, int32_t> children_;  // node << 8 | byte -> node
  bool first_byte_[256] = {};
};

// Unicode predicates used by the flags (regex \s and an approximation of \w).
bool IsUnicodeSpace(uint32_t cp);
bool IsWordChar(uint32_t cp);

}  // namespace rw
