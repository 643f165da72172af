// Gemma's tokenizer: a Hugging Face tokenizers `tokenizer.json` (BPE with byte fallback), encoding
// to the same ids as `tokenizers` and decoding back to text, plus a streaming decoder for
// generation.
//
// Encoding pipeline (as tokenizers): added tokens are cut out of the raw text first (leftmost,
// longest); every other stretch is normalized (Gemma: " " -> "▁"), pre-tokenized (Gemma: a no-op
// Split) and run through BPE. Invalid UTF-8 in the input never fails: each invalid byte is a
// character of its own, outside the vocabulary, so it becomes its <0xNN> byte token (or unk
// without byte fallback). Decoding such tokens yields U+FFFD for the invalid bytes (one per
// maximal invalid subpart). Decode(Encode(s)) == s for valid UTF-8 s, except that a literal "▁"
// (U+2581) in s is the same token as a space and decodes as one (as in tokenizers).
//
// A Tokenizer is immutable after loading and safe to use from several threads; copies share
// the loaded data.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rw {

struct TokenizerOptions {
  // Both are exact (tests compare with them off); they only trade memory for speed.
  bool enable_chunking = true;  // cut lines into word chunks where no merge can cross
  bool enable_cache = true;     // remember the ids of recent chunks
};

struct TokenizerImpl;

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0, end = 0;
};

class Tokenizer {
 public:
  static Result<Tokenizer> Load(const std::string& tokenizer_json_path,
                                const TokenizerOptions& options = {});
  // `source_name` is used in error messages in place of a path.
  static Result<Tokenizer> FromJsonText(std::string_view json_text,
                                        const std::string& source_name = "tokenizer.json",
                                        const TokenizerOptions& options = {});

  // add_bos prepends bos_id() (when the file has one). Gemma 4 instruction models expect the
  // chat template to write <bos> itself, so it is off by default.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos = false) const;
  void EncodeAppend(std::string_view text, std::vector<int32_t>* out) const;
  // As EncodeAppend, except that no special token is recognized where its text would overlap
  // one of `plain` (sorted, disjoint byte ranges of text): there it is ordinary text, as with
  // tokenizers' split_special_tokens (non-special added tokens still match). Untrusted text
  // (chat message content, completion prompts) goes in plain spans so that it cannot forge
  // control tokens such as <turn|>. A special token with normalized=true is not matched in any
  // normalized stretch that overlaps a plain span (Gemma has none).
  void EncodeAppend(std::string_view text, std::span<const TextSpan> plain,
                    std::vector<int32_t>* out) const;
  // All of `text` as plain text (special tokens never recognized).
  std::vector<int32_t> EncodePlain(std::string_view text, bool add_bos = false) const;

  // Ids outside the vocabulary are skipped (as tokenizers does); skip_special drops the added
  // tokens marked special.
  std::string Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t TokenToId(std::string_view token) const;  // -1 if absent
  // The token's text ("" for ids that name no token).
  const std::string& IdToToken(int32_t id) const;
  // One past the largest id (model vocabulary and added tokens together).
  int32_t vocab_size() const;
  bool IsSpecial(int32_t id) const;
  // The ids of the special tokens (ascending).
  const std::vector<int32_t>& special_ids() const;

  // -1 when the file does not name one. bos comes from the post-processor template or "<bos>",
  // eos from "<eos>", pad from "<pad>", unk from the model.
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TokenizerImpl> impl_;
};

// Turns generated ids into text as they arrive. Text is released only once its UTF-8 is
// complete: a token that ends inside a multi-byte character (e.g. the first <0xNN> of an emoji)
// yields "" until the character completes. The concatenation of all Push results and the final
// Flush equals Decode of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  std::string Push(int32_t id);
  // Releases what is held back (an incomplete character becomes U+FFFD) and starts over.
  std::string Flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes not yet released (streamable decoders)
  // Fallback for decoders that do not decode token by token: all ids, and the text already out.
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;
};

}  // namespace rw
