#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_set>

namespace rw {

Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return Error(ErrorCode::kInvalidArgument, "temperature must be a number >= 0, got {}",
                 temperature);
  if (top_k < 0)
    return Error(ErrorCode::kInvalidArgument, "top_k must be >= 0 (0 = off), got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return Error(ErrorCode::kInvalidArgument, "top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return Error(ErrorCode::kInvalidArgument, "min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return Error(ErrorCode::kInvalidArgument, "repetition_penalty must be > 0, got {}",
                 repetition_penalty);
  return Status::Ok();
}

namespace {
// SplitMix64 finalizer: a strong 64-bit mix, cheap enough to run per candidate.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

double CounterUniform(uint64_t seed, int64_t position, int32_t token) {
  uint64_t h = Mix(seed ^ 0x5265647769676e21ull);
  h = Mix(h ^ static_cast<uint64_t>(position));
  h = Mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(token)) << 1));
  // 53 random bits, offset by half a step so the value is strictly inside (0, 1).
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double GumbelNoise(uint64_t seed, int64_t position, int32_t token) {
  return -std::log(-std::log(CounterUniform(seed, position, token)));
}

namespace {

// A candidate needing noise g >= d to beat the best score so far is out when its uniform u
// gives g(u) = −log(−log u) < d, i.e. u < exp(−exp(−d)). kReject[k] is that bound at d = k/8,
// lowered by a relative 1e-9: as g is increasing, u < kReject[floor(8d)] means g(u) falls short
// of d by far more than the rounding of the computed score, so the candidate scores strictly
// below the best and can neither win nor tie. Past d = 40 the bound is 1 − 1e-9.
constexpr int kRejectSteps = 8 * 40;

struct RejectTable {
  double bound[kRejectSteps];
  RejectTable() {
    for (int k = 0; k < kRejectSteps; ++k)
      bound[k] = std::exp(-std::exp(-static_cast<double>(k) / 8.0)) * (1.0 - 1e-9);
  }
};

}  // namespace

int32_t GumbelMaxDraw(std::span<const float> z, double t, uint64_t seed, int64_t position) {
  static const RejectTable table;
  const int32_t n = static_cast<int32_t>(z.size());
  int32_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity(), best_logit = best_score;
  for (int32_t i = 0; i < n; ++i) {
    if (std::isnan(z[i])) continue;
    const double logit = z[i] / t;
    const double u = CounterUniform(seed, position, i);
    const double need = best_score - logit;  // the noise it takes to reach the best
    if (need > 0.0) {
      const int k = need >= kRejectSteps / 8.0 ? kRejectSteps - 1 : static_cast<int>(need * 8.0);
      if (u < table.bound[k]) continue;
    }
    const double s = logit + -std::log(-std::log(u));
    if (s > best_score || (s == best_score && logit > best_logit)) {
      best_score = s;
      best_logit = logit;
      best = i;
    }
  }
  return best;
}

std::vector<Sampler::Candidate> Sampler::Candidates(std::span<const float> logits,
                                                    std::span<const int32_t> context) {
  const int32_t n = static_cast<int32_t>(logits.size());
  const float* z = logits.data();
  if (p_.repetition_penalty != 1.0f) {
    scratch_.assign(logits.begin(), logits.end());
    ApplyRepetitionPenalty(scratch_, context, p_.repetition_penalty);
    z = scratch_.data();
  }
  const double t = p_.greedy() ? 1.0 : p_.temperature;
  // With top-k, only the k largest logits and the ties of the k-th can survive (transformers'
  // TopK keeps every logit >= the k-th): find the k-th value in one pass with a k-entry min-heap
  // and keep what reaches it, instead of building and sorting 262,144 candidates. Dividing by
  // t > 0 in double keeps the float order and its ties, so this is the same set.
  float floor = -std::numeric_limits<float>::infinity();
  if (p_.top_k > 0) {
    const size_t k = static_cast<size_t>(p_.top_k);
    heap_.clear();
    for (int32_t i = 0; i < n; ++i) {
      const float v = z[i];
      if (std::isnan(v)) continue;
      if (heap_.size() < k) {
        heap_.push_back(v);
        std::push_heap(heap_.begin(), heap_.end(), std::greater<float>());
      } else if (v > heap_.front()) {
        std::pop_heap(heap_.begin(), heap_.end(), std::greater<float>());
        heap_.back() = v;
        std::push_heap(heap_.begin(), heap_.end(), std::greater<float>());
      }
    }
    if (heap_.size() == k) floor = heap_.front();
  }
  std::vector<Candidate> c;
  c.reserve(p_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(n), 2 * heap_.size())
                         : static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    if (std::isnan(z[i]) || z[i] < floor) continue;
    c.push_back({i, z[i] / t, 0.0});
  }
  Filter(c);
  return c;
}

void Sampler::Filter(std::vector<Candidate>& c) const {
  // Descending logit; ties by ascending id so the order is fully determined.
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  std::sort(c.begin(), c.end(), by_logit);
  if (c.empty()) return;
  double max = c.front().logit, sum = 0;
  for (Candidate& x : c) sum += (x.prob = std::exp(x.logit - max));
  for (Candidate& x : c) x.prob /= sum;
  if (p_.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (always at least one token).
    double acc = 0;
    size_t keep = 0;
    while (keep < c.size()) {
      acc += c[keep].prob;
      ++keep;
      if (acc >= p_.top_p) break;
    }
    c.resize(keep);
  }
  if (p_.min_p > 0.0f) {
    double floor = c.front().prob * p_.min_p;
    size_t keep = 1;
    while (keep < c.size() && c[keep].prob >= floor) ++keep;
    c.resize(keep);
  }
  double total = 0;
  for (const Candidate& x : c) total += x.prob;
  for (Candidate& x : c) x.prob /= total;
}

// Nothing filtered: the same Gumbel-max draw without building and sorting the candidate list
// (sorting 262,144 logits costs tens of milliseconds per token). Ties in the score go to the
// larger logit, then the lower id: the order the general path visits candidates in.
int32_t Sampler::SampleUnfiltered(std::span<const float> logits, int64_t position,
                                  std::span<const int32_t> context) {
  std::span<const float> z = logits;
  if (p_.repetition_penalty != 1.0f) {
    scratch_.assign(logits.begin(), logits.end());
    ApplyRepetitionPenalty(scratch_, context, p_.repetition_penalty);
    z = scratch_;
  }
  return GumbelMaxDraw(z, p_.temperature, p_.seed, position);
}

int32_t Sampler::Sample(std::span<const float> logits, int64_t position,
                        std::span<const int32_t> context) {
  if (p_.greedy() && p_.repetition_penalty == 1.0f) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i)
      if (logits[i] > logits[best] || std::isnan(logits[best])) best = i;
    return best;
  }
  if (unfiltered()) return SampleUnfiltered(logits, position, context);
  return Draw(Candidates(logits, context), position);
}

int Sampler::CandidatesK() const {
  if (p_.greedy()) return 1;
  return p_.top_k;
}

std::vector<int32_t> Sampler::PenalizedIds(std::span<const int32_t> context, int64_t n) {
  std::vector<int32_t> ids;
  for (int32_t id : std::unordered_set<int32_t>(context.begin(), context.end()))
    if (id >= 0 && id < n) ids.push_back(id);
  return ids;
}

void Sampler::ApplyRepetitionPenalty(std::span<float> row, std::span<const int32_t> context,
                                     float penalty) {
  for (int32_t id : PenalizedIds(context, static_cast<int64_t>(row.size()))) {
    float& v = row[static_cast<size_t>(id)];
    v = v > 0 ? v / penalty : v * penalty;
  }
}

int32_t Sampler::SampleCandidates(std::span<const int32_t> ids, std::span<const float> values,
                                  int64_t position) {
  // The same set Candidates builds: every non-NaN logit at or above the k-th largest.
  const double t = p_.greedy() ? 1.0 : p_.temperature;
  std::vector<Candidate> c;
  c.reserve(ids.size());
  for (size_t i = 0; i < ids.size() && i < values.size(); ++i)
    if (!std::isnan(values[i])) c.push_back({ids[i], values[i] / t, 0.0});
  if (p_.greedy()) {  // the first largest logit, as Sample's argmax
    if (c.empty()) return 0;
    const Candidate* best = &c.front();
    for (const Candidate& x : c)
      if (x.logit > best->logit || (x.logit == best->logit && x.id < best->id)) best = &x;
    return best->id;
  }
  Filter(c);
  return Draw(std::move(c), position);
}

int32_t Sampler::Draw(std::vector<Candidate> c, int64_t position) const {
  if (c.empty()) return 0;
  if (p_.greedy()) return c.front().id;
  // Gumbel-max over the allowed set: argmax(logit/T + g) is a draw from softmax(logit/T)
  // restricted to the set, and its noise depends only on (seed, position, id).
  int32_t best = c.front().id;
  double best_score = -std::numeric_limits<double>::infinity();
  for (const Candidate& x : c) {
    double s = x.logit + GumbelNoise(p_.seed, position, x.id);
    if (s > best_score) {
      best_score = s;
      best = x.id;
    }
  }
  return best;
}

}  // namespace rw
