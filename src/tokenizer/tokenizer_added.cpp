#include "tokenizer/tokenizer_added.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace rw {
namespace {

// The code point that ends s (or -1 if s is empty or ends in invalid bytes).
int64_t LastChar(std::string_view s) {
  if (s.empty()) return -1;
  size_t i = s.size() - 1;
  size_t limit = s.size() >= 4 ? s.size() - 4 : 0;
  while (i > limit && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  size_t n = utf8::ValidCharLen(s.substr(i));
  if (n == 0 || i + n != s.size()) return -1;
  return utf8::DecodeValid(s.substr(i), n);
}

int64_t FirstChar(std::string_view s) {
  size_t n = utf8::ValidCharLen(s);
  if (n == 0) return -1;
  return utf8::DecodeValid(s, n);
}

}  // namespace

bool IsUnicodeSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool IsWordChar(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  // Approximation of Unicode \w: everything but whitespace and the common punctuation/symbol
  // blocks. Only the single_word flag uses it, and Gemma's tokens do not set that flag.
  if (IsUnicodeSpace(cp)) return false;
  if ((cp >= 0xA1 && cp <= 0xBF) || cp == 0xD7 || cp == 0xF7) return false;
  if (cp >= 0x2010 && cp <= 0x2BFF) return false;    // punctuation, symbols, arrows, shapes
  if (cp >= 0x3000 && cp <= 0x303F) return false;    // CJK punctuation
  if (cp >= 0xFF01 && cp <= 0xFF0F) return false;    // fullwidth punctuation
  if (cp >= 0x1F000 && cp <= 0x1FAFF) return false;  // emoji and pictographs
  return true;
}

void AddedTokenMatcher::Build(const std::vector<AddedToken>& tokens,
                              const std::vector<std::string>& patterns) {
  tokens_.clear();
  node_token_.assign(1, -1);
  children_.clear();
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.empty()) continue;  // tokenizers ignores empty added tokens
    int32_t node = 0;
    for (char ch : p) {
      uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(ch);
      auto it = children_.find(key);
      if (it == children_.end()) {
        int32_t child = static_cast<int32_t>(node_token_.size());
        node_token_.push_back(-1);
        children_.emplace(key, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    // A repeated pattern keeps the first token that claimed it.
    if (node_token_[static_cast<size_t>(node)] < 0) {
      node_token_[static_cast<size_t>(node)] = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(tokens[i]);
    }
    first_byte_[static_cast<uint8_t>(p[0])] = true;
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  auto it = children_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == children_.end() ? -1 : it->second;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out,
                              std::span<const TextSpan> plain) const {
  if (tokens_.empty()) {
    if (!text.empty()) out->push_back({text, -1});
    return;
  }
  size_t emitted = 0;  // text before this offset has been handed out
  size_t i = 0;
  size_t next_plain = 0;  // the first plain span that ends after i
  while (i < text.size()) {
    while (next_plain < plain.size() && plain[next_plain].end <= i) ++next_plain;
    if (!first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    // Longest pattern starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = Child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      const int32_t t = node_token_[static_cast<size_t>(node)];
      // A special token whose text [i, j+1) overlaps plain text is ordinary text there.
      if (t >= 0 && tokens_[static_cast<size_t>(t)].special && next_plain < plain.size() &&
          plain[next_plain].begin <= j)
        continue;
      if (t >= 0) {
        best = t;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(best)];
    size_t start = i, stop = best_end;
    // Like the Aho-Corasick iteration in tokenizers, the search resumes after a match even when
    // the match is then discarded.
    i = best_end;
    if (tok.single_word) {
      int64_t before = LastChar(text.substr(0, start));
      int64_t after = FirstChar(text.substr(stop));
      bool start_ok = start == 0 || before < 0 || !IsWordChar(static_cast<uint32_t>(before));
      bool stop_ok = stop == text.size() || after < 0 || !IsWordChar(static_cast<uint32_t>(after));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > emitted) {
        int64_t c = LastChar(text.substr(0, s));
        if (c < 0 || !IsUnicodeSpace(static_cast<uint32_t>(c))) break;
        size_t len = 1;
        while (len < s && (static_cast<uint8_t>(text[s - len]) & 0xC0) == 0x80) ++len;
        s -= len;
      }
      start = std::max(s, emitted);
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        int64_t c = FirstChar(text.substr(stop));
        if (c < 0 || !IsUnicodeSpace(static_cast<uint32_t>(c))) break;
        stop += utf8::ValidCharLen(text.substr(stop));
      }
      i = stop;
    }
    if (start > emitted) out->push_back({text.substr(emitted, start - emitted), -1});
    out->push_back({text.substr(start, stop - start), tok.id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace rw
