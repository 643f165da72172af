// Token sampling: repetition penalty, temperature, top-k, top-p, min-p, and a Gumbel-max draw
// whose noise depends only on (seed, position, token id). The same seed therefore gives the same
// tokens however the sequence was chunked, batched or verified.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace rw {

struct SamplingParams {
  float temperature = 0.2f;         // 0 = greedy
  int top_k = 64;                   // 0 = off
  float top_p = 0.95f;              // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off; applied to every id seen in the context
  uint64_t seed = 0;

  // Rejects values no sampler can honour, naming the field.
  Status Validate() const;
  bool greedy() const { return temperature <= 0.0f; }
};

// Uniform in (0, 1) from a counter-based hash of (seed, position, token); never 0 or 1.
double CounterUniform(uint64_t seed, int64_t position, int32_t token);
// Standard Gumbel noise −log(−log(u)) for the same counter.
double GumbelNoise(uint64_t seed, int64_t position, int32_t token);
// The Gumbel-max draw over every logit: argmax of z[i]/t + GumbelNoise(seed, position, i),
// NaN logits skipped, ties to the larger z/t and then the lower id (the order the filtered path
// visits candidates in). Exactly that argmax, but most candidates are rejected from their
// uniform alone, without the two logarithms.
int32_t GumbelMaxDraw(std::span<const float> z, double t, uint64_t seed, int64_t position);

class Sampler {
 public:
  explicit Sampler(SamplingParams params) : p_(params) {}
  const SamplingParams& params() const { return p_; }
  // A draw from the whole row with nothing cut (temperature > 0, top-k, top-p and min-p off): the
  // Gumbel-max draw over every logit, the repetition penalty aside.
  bool unfiltered() const {
    return !p_.greedy() && p_.top_k == 0 && p_.top_p >= 1.0f && p_.min_p <= 0.0f;
  }

  // Picks the token at sequence position `position` (the index the new token will occupy).
  // `context` holds the ids before it (prompt and generated), used by the repetition penalty.
  // logits are not modified.
  int32_t Sample(std::span<const float> logits, int64_t position, std::span<const int32_t> context);

  // The allowed candidates and their probabilities after penalty, temperature and the
  // top-k/top-p/min-p filters (descending probability). Exposed for tests.
  struct Candidate {
    int32_t id;
    double logit;  // penalized, divided by temperature
    double prob;   // renormalized over the allowed set
  };
  std::vector<Candidate> Candidates(std::span<const float> logits,
                                    std::span<const int32_t> context);

  // Sampling from a row cut down to its top-k candidates (Session::DecodeTopK): the k this
  // sampler needs (top_k, or 1 when greedy), or 0 when it needs the whole row (no top-k).
  int CandidatesK() const;
  // The token Sample would pick from the whole row, given only its candidates: every non-NaN
  // logit at or above the CandidatesK()-th largest of the row after the repetition penalty
  // (ids and those penalized values, any order).
  int32_t SampleCandidates(std::span<const int32_t> ids, std::span<const float> values,
                           int64_t position);
  // The repetition penalty as Sample applies it (transformers' RepetitionPenaltyLogitsProcessor):
  // for each distinct id of the context inside the row, a positive logit divided by `penalty`,
  // a negative one multiplied.
  static void ApplyRepetitionPenalty(std::span<float> row, std::span<const int32_t> context,
                                     float penalty);
  // The distinct ids of a context that fall inside a row of n (what the penalty touches).
  static std::vector<int32_t> PenalizedIds(std::span<const int32_t> context, int64_t n);

 private:
  // Sorts the candidates (descending logit, then ascending id), turns logits into
  // probabilities, and applies top-p and min-p.
  void Filter(std::vector<Candidate>& c) const;
  // Greedy: the first candidate; else the Gumbel-max draw over them at `position`.
  int32_t Draw(std::vector<Candidate> c, int64_t position) const;
  int32_t SampleUnfiltered(std::span<const float> logits, int64_t position,
                           std::span<const int32_t> context);
  SamplingParams p_;
  std::vector<float> scratch_;
  std::vector<float> heap_;  // top-k: the k largest logits seen so far (a min-heap)
};

}  // namespace rw
