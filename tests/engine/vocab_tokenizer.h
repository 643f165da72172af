// A tokenizer made from a vocabulary alone (no merges, no normalizer), for tests that need text
// from known ids: each id decodes to its vocabulary string.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/json.h"
#include "tokenizer/tokenizer.h"

namespace rw::test {

// vocab: {"string": id, ...}; added: tokenizer.json's added_tokens entries.
inline Tokenizer VocabTokenizer(const Json& vocab, const Json& added, const std::string& name) {
  Json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"post_processor", nullptr},
            {"decoder", {{"type", "Fuse"}}},
            {"model",
             {{"type", "BPE"},
              {"unk_token", nullptr},
              {"byte_fallback", false},
              {"vocab", vocab},
              {"merges", Json::array()}}}};
  auto t = Tokenizer::FromJsonText(j.dump(), name);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return *t;
}

}  // namespace rw::test
