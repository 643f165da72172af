// Internal: the loaded state behind rw::Tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer_added.h"
#include "tokenizer/tokenizer_pipeline.h"

namespace rw {

struct TokenizerImpl {
  BpeModel model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized=true

  std::vector<std::string> id_to_token;  // added content overrides the model's text
  enum : uint8_t { kPresent = 1, kSpecial = 2 };
  std::vector<uint8_t> flags;  // per id
  std::unordered_map<std::string, int32_t> added_ids;
  std::vector<int32_t> special_ids;  // ascending

  int32_t bos_id = -1, eos_id = -1, pad_id = -1, unk_id = -1;
};

}  // namespace rw
