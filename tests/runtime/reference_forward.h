// Test oracle: a naive Gemma 4 forward pass in double precision, written straight from
// reference/gemma4-model.md §2 with its own weight decoding (the format definition), and no
// cache: every call recomputes the whole sequence. Shares no code with src/runtime.
#pragma once

#include <string>
#include <vector>

namespace rw::test {

// Logits [n][vocab] of every position of ids, for the model directory at dir.
std::vector<std::vector<double>> ReferenceLogits(const std::string& dir,
                                                 const std::vector<int>& ids);

// Router math alone: softmax over logits, top-k by probability (ties to the lower index),
// renormalize, × per_expert_scale. Returns (expert, weight) pairs in descending probability.
std::vector<std::pair<int, double>> ReferenceRoute(const std::vector<double>& logits, int k,
                                                   const std::vector<double>& per_expert_scale);

// Inverse RoPE frequencies in double: default or proportional (head_dim as the denominator).
std::vector<double> ReferenceInvFreq(int head_dim, double theta, bool proportional, double partial);

}  // namespace rw::test
