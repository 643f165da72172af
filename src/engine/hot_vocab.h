// The hot-vocabulary list (data/hot_vocab_32k.txt, built by tools/hotvocab/build_hot_vocab.js):
// the token ids the Gemma tokenizer produces most often over real prose and code, most frequent
// first. A drafter's head that scores only these ids is far cheaper than the full head; its
// drafts stay guesses the target verifies, so the list affects speed only.
//
// Format ("redwing-hot-vocab/1"): '#' header lines, the first "# redwing-hot-vocab/1" and one
// "# ids: N"; then N lines of one decimal id each, distinct, in [0, vocab_size).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace rw {

// The ids of a hot-vocabulary file's text, in its order. Errors name the line and what is wrong
// (a bad header, an id that is not a number, out of range for vocab_size, repeated, or a count
// that differs from the header's).
Result<std::vector<int>> ParseHotVocab(std::string_view text, int vocab_size);
// ParseHotVocab on a file's contents; errors name the file.
Result<std::vector<int>> LoadHotVocab(const std::string& path, int vocab_size);

}  // namespace rw
