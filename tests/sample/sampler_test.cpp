#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "sample/sampler.h"

namespace rw {
namespace {

std::vector<float> Logits(std::initializer_list<float> v) {
  return std::vector<float>(v);
}

// Pearson chi-square of observed counts against expected probabilities.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    double e = probs[i] * n;
    if (e > 0) chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(SamplingParams{.temperature = 0});
  auto l = Logits({0.1f, 3.0f, -1.0f, 2.9f});
  EXPECT_EQ(s.Sample(l, 0, {}), 1);
}

TEST(Sampler, DistributionMatchesSoftmax) {
  // Draws at many positions: each position's noise is independent, so frequencies follow
  // softmax(logits / T).
  auto l = Logits({1.0f, 0.5f, 0.0f, -0.5f, 2.0f});
  SamplingParams p{.temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .seed = 42};
  Sampler s(p);
  const int n = 200000;
  std::vector<int> counts(l.size());
  for (int i = 0; i < n; ++i) counts[s.Sample(l, i, {})]++;
  std::vector<double> probs(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += probs[i] = std::exp(l[i] / 0.7);
  for (double& q : probs) q /= z;
  // 4 degrees of freedom: p = 0.001 critical value is 18.47.
  EXPECT_LT(ChiSquare(counts, probs, n), 18.47);
}

// With nothing filtered, Sample skips building a sorted candidate list: it must still be exactly
// the Gumbel-max draw over every token (penalty applied), and agree with the filtered path
// whenever a filter keeps every token.
TEST(Sampler, UnfilteredDrawIsTheGumbelMaxDefinition) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> l(1000);
  for (float& v : l) v = nd(rng);
  l[17] = std::nanf("");
  const std::vector<int32_t> context = {5, 9, 9, 400};
  for (float penalty : {1.0f, 1.3f}) {
    SamplingParams p{
        .temperature = 0.8f, .top_k = 0, .top_p = 1.0f, .repetition_penalty = penalty, .seed = 11};
    Sampler fast(p);
    SamplingParams q = p;
    q.top_k = 1000;  // keeps every token: the general path
    Sampler general(q);
    std::vector<float> z = l;
    for (int32_t id : {5, 9, 400}) z[id] = z[id] > 0 ? z[id] / penalty : z[id] * penalty;
    for (int64_t pos = 0; pos < 300; ++pos) {
      int32_t want = -1;
      double best = -1e300;
      for (int32_t i = 0; i < 1000; ++i) {
        if (std::isnan(z[i])) continue;
        const double sc = z[i] / 0.8 + GumbelNoise(11, pos, i);
        if (sc > best) best = sc, want = i;
      }
      ASSERT_EQ(fast.Sample(l, pos, context), want) << "position " << pos;
      ASSERT_EQ(general.Sample(l, pos, context), want) << "position " << pos;
    }
  }
}

// The draw rejects most candidates from their uniform alone; it must pick exactly what scoring
// every candidate picks: a full Gemma-sized vocabulary, narrow and wide logit spreads (wide:
// the best lead is large, nearly everything is rejected), infinities, NaN, exact ties, and a
// temperature.
TEST(Sampler, GumbelMaxDrawEqualsScoringEveryToken) {
  std::mt19937 rng(9);
  for (float spread : {0.01f, 1.0f, 8.0f, 60.0f}) {
    std::normal_distribution<float> nd(0.0f, spread);
    std::vector<float> z(262144);
    for (float& v : z) v = nd(rng);
    for (int64_t pos = 0; pos < 6; ++pos) {
      if (pos == 2) z[1000] = -std::numeric_limits<float>::infinity();
      if (pos == 3) z[77] = std::nanf("");
      if (pos == 4) std::fill(z.begin() + 500, z.begin() + 900, 3.0f * spread);  // ties
      if (pos == 5) z[4242] = std::numeric_limits<float>::infinity();
      for (double t : {1.0, 0.7}) {
        int32_t want = 0;
        double best = -std::numeric_limits<double>::infinity(), best_logit = best;
        for (int32_t i = 0; i < static_cast<int32_t>(z.size()); ++i) {
          if (std::isnan(z[i])) continue;
          const double logit = z[i] / t;
          const double sc = logit + GumbelNoise(5, pos, i);
          if (sc > best || (sc == best && logit > best_logit))
            best = sc, best_logit = logit, want = i;
        }
        ASSERT_EQ(GumbelMaxDraw(z, t, 5, pos), want) << "spread " << spread << " pos " << pos;
      }
    }
  }
}

TEST(Sampler, FiltersRestrictSupport) {
  auto l = Logits({5.0f, 4.0f, 3.0f, 2.0f, 1.0f, 0.0f});
  {
    Sampler s(SamplingParams{.temperature = 1.0f, .top_k = 2, .top_p = 1.0f});
    auto c = s.Candidates(l, {});
    ASSERT_EQ(c.size(), 2u);
    EXPECT_EQ(c[0].id, 0);
    EXPECT_EQ(c[1].id, 1);
    EXPECT_NEAR(c[0].prob, 1 / (1 + std::exp(-1.0)), 1e-9);
  }
  {
    // softmax of 5..0: p0 = 0.636, p0+p1 = 0.870 -> top_p 0.8 keeps two tokens.
    Sampler s(SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 0.8f});
    EXPECT_EQ(s.Candidates(l, {}).size(), 2u);
  }
  {
    // min_p 0.1 keeps tokens with p >= 0.1 p_max: exp(-d) >= 0.1 -> d <= 2.30 -> three tokens.
    Sampler s(SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.1f});
    EXPECT_EQ(s.Candidates(l, {}).size(), 3u);
  }
  {
    // Draws never leave the allowed set.
    Sampler s(SamplingParams{.temperature = 5.0f, .top_k = 3, .top_p = 1.0f, .seed = 1});
    for (int pos = 0; pos < 5000; ++pos) EXPECT_LT(s.Sample(l, pos, {}), 3);
  }
}

TEST(Sampler, TopKKeepsTies) {
  auto l = Logits({1.0f, 2.0f, 2.0f, 2.0f, 0.0f});
  Sampler s(SamplingParams{.temperature = 1.0f, .top_k = 2, .top_p = 1.0f});
  EXPECT_EQ(s.Candidates(l, {}).size(), 3u);
}

// The top-k path selects the k-th value with a small heap instead of sorting the vocabulary; it
// must keep exactly the set a full sort keeps (k largest plus ties with the k-th), in the same
// order, with the same probabilities, whatever NaNs, infinities and ties the logits hold.
TEST(Sampler, TopKSelectionEqualsAFullSort) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 3000);
    std::vector<float> l(static_cast<size_t>(n));
    for (float& v : l) {
      const unsigned r = rng() % 100;
      // Few distinct values make ties common; some NaN and -inf logits (masked tokens).
      v = r < 3   ? std::nanf("")
          : r < 5 ? -std::numeric_limits<float>::infinity()
                  : static_cast<float>(static_cast<int>(rng() % 40) - 20) * 0.25f;
    }
    const int k = 1 + static_cast<int>(rng() % 80);
    const float temp = trial % 3 == 0 ? 0.0f : 0.3f + 0.1f * static_cast<float>(trial % 7);
    SamplingParams p{.temperature = temp,
                     .top_k = k,
                     .top_p = trial % 2 ? 1.0f : 0.9f,
                     .min_p = trial % 5 == 0 ? 0.05f : 0.0f,
                     .seed = static_cast<uint64_t>(trial)};
    Sampler s(p);
    auto got = s.Candidates(l, {});
    // Reference: every candidate, fully sorted; the first k and every tie of the k-th.
    const double t = temp <= 0 ? 1.0 : temp;
    std::vector<Sampler::Candidate> all;
    for (int i = 0; i < n; ++i)
      if (!std::isnan(l[i])) all.push_back({i, l[i] / t, 0.0});
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    });
    size_t keep = std::min(all.size(), static_cast<size_t>(k));
    while (keep > 0 && keep < all.size() && all[keep].logit == all[keep - 1].logit) ++keep;
    // Past the filters, Candidates trims further; its first entries must be the reference's.
    ASSERT_LE(got.size(), keep) << "trial " << trial;
    if (p.top_p >= 1.0f && p.min_p <= 0.0f) {
      ASSERT_EQ(got.size(), keep) << "trial " << trial;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].id, all[i].id) << "trial " << trial << " rank " << i;
      EXPECT_EQ(got[i].logit, all[i].logit) << "trial " << trial << " rank " << i;
    }
    // The probabilities: the same softmax over the same logits in the same order (normalized,
    // then renormalized over what the filters kept, as Candidates does).
    if (p.top_p >= 1.0f && p.min_p <= 0.0f && !got.empty()) {
      double max = got.front().logit, sum = 0, total = 0;
      std::vector<double> prob(keep);
      for (size_t i = 0; i < keep; ++i) sum += (prob[i] = std::exp(all[i].logit - max));
      for (double& q : prob) total += (q /= sum);
      for (size_t i = 0; i < keep; ++i)
        EXPECT_EQ(got[i].prob, prob[i] / total) << "trial " << trial << " rank " << i;
    }
  }
}

// Every non-NaN logit at or above the k-th largest (all of them when fewer than k), as a device
// cuts a row for Sampler::SampleCandidates, in a scrambled order.
void CutToTopK(const std::vector<float>& l, int k, std::mt19937& rng, std::vector<int32_t>* ids,
               std::vector<float>* values) {
  std::vector<float> sorted;
  for (float v : l)
    if (!std::isnan(v)) sorted.push_back(v);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const float floor = static_cast<int>(sorted.size()) >= k
                          ? sorted[static_cast<size_t>(k - 1)]
                          : -std::numeric_limits<float>::infinity();
  std::vector<int32_t> pick;
  for (int i = 0; i < static_cast<int>(l.size()); ++i)
    if (!std::isnan(l[i]) && l[i] >= floor) pick.push_back(i);
  std::shuffle(pick.begin(), pick.end(), rng);
  ids->assign(pick.begin(), pick.end());
  values->clear();
  for (int32_t i : pick) values->push_back(l[static_cast<size_t>(i)]);
}

TEST(Sampler, CandidatesFromADeviceCutPickWhatTheWholeRowPicks) {
  std::mt19937 rng(11);
  const float inf = std::numeric_limits<float>::infinity();
  int compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = trial % 7 == 0 ? 40 : 3000;
    std::vector<float> l(static_cast<size_t>(n));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (float& v : l) v = nd(rng);
    if (trial % 3 == 0)  // coarse values: many ties, at the k-th too
      for (float& v : l) v = std::round(v * 2.0f) / 2.0f;
    l[static_cast<size_t>(trial % n)] = std::numeric_limits<float>::quiet_NaN();
    l[static_cast<size_t>((trial * 7 + 1) % n)] = -inf;
    SamplingParams p;
    p.temperature = std::array<float, 4>{0.0f, 0.2f, 1.0f, 1.7f}[trial % 4];
    p.top_k = std::array<int, 4>{1, 5, 64, 50}[(trial / 4) % 4];
    p.top_p = std::array<float, 3>{1.0f, 0.9f, 0.5f}[(trial / 16) % 3];
    p.min_p = trial % 5 == 0 ? 0.05f : 0.0f;
    p.seed = static_cast<uint64_t>(trial) * 977u;
    // Some trials with a repetition penalty over a context that hits the largest logits: the
    // device cuts the penalized row.
    std::vector<int32_t> context;
    std::vector<float> row = l;
    if (trial % 6 == 1) {
      p.repetition_penalty = 1.4f;
      for (int i = 0; i < n; i += 3) context.push_back(i);
      context.push_back(n + 5);  // outside the row: ignored
      Sampler::ApplyRepetitionPenalty(row, context, p.repetition_penalty);
    }
    Sampler s(p);
    const int k = s.CandidatesK();
    ASSERT_EQ(k, p.greedy() ? 1 : p.top_k);
    std::vector<int32_t> ids;
    std::vector<float> values;
    CutToTopK(row, k, rng, &ids, &values);
    for (int64_t position : {int64_t{3}, int64_t{1000}}) {
      const int32_t want = s.Sample(l, position, context);
      EXPECT_EQ(s.SampleCandidates(ids, values, position), want)
          << "trial " << trial << " position " << position << " k " << k;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 800);
  // No top-k needs the whole row; a repetition penalty does not change k.
  SamplingParams pen;
  pen.repetition_penalty = 1.3f;
  EXPECT_EQ(Sampler(pen).CandidatesK(), pen.top_k);
  SamplingParams nok;
  nok.top_k = 0;
  EXPECT_EQ(Sampler(nok).CandidatesK(), 0);
}

TEST(Sampler, RepetitionPenaltyAsTransformers) {
  auto l = Logits({2.0f, -2.0f, 1.0f});
  Sampler s(
      SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .repetition_penalty = 2.0f});
  std::vector<int32_t> ctx = {0, 1, 1};
  auto c = s.Candidates(l, ctx);
  std::map<int, double> by_id;
  for (auto& x : c) by_id[x.id] = x.logit;
  EXPECT_DOUBLE_EQ(by_id[0], 1.0);   // positive: divided
  EXPECT_DOUBLE_EQ(by_id[1], -4.0);  // negative: multiplied
  EXPECT_DOUBLE_EQ(by_id[2], 1.0);   // unseen: unchanged
  // Greedy with a penalty picks the best penalized token (ties by lower id).
  Sampler g(SamplingParams{.temperature = 0, .repetition_penalty = 4.0f});
  EXPECT_EQ(g.Sample(l, 0, std::vector<int32_t>{0}), 2);
}

TEST(Sampler, NoiseDependsOnlyOnSeedPositionToken) {
  EXPECT_EQ(CounterUniform(1, 2, 3), CounterUniform(1, 2, 3));
  EXPECT_NE(CounterUniform(1, 2, 3), CounterUniform(1, 2, 4));
  EXPECT_NE(CounterUniform(1, 2, 3), CounterUniform(1, 3, 3));
  EXPECT_NE(CounterUniform(1, 2, 3), CounterUniform(2, 2, 3));
  // Same seed and position give the same draw regardless of how many draws came before.
  auto l = Logits({0.3f, 0.1f, 0.2f, 0.0f});
  SamplingParams p{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 9};
  Sampler a(p), b(p);
  std::vector<int32_t> seq_a, seq_b;
  for (int pos = 10; pos < 60; ++pos) seq_a.push_back(a.Sample(l, pos, {}));
  for (int pos = 59; pos >= 10; --pos) seq_b.insert(seq_b.begin(), b.Sample(l, pos, {}));
  EXPECT_EQ(seq_a, seq_b);
  // Uniformity of the counter hash.
  std::vector<int> bins(10);
  for (int i = 0; i < 100000; ++i) bins[static_cast<int>(CounterUniform(5, i, 7) * 10)]++;
  EXPECT_LT(ChiSquare(bins, std::vector<double>(10, 0.1), 100000), 27.88);  // 9 dof, p = 0.001
}

TEST(Sampler, ValidateNamesField) {
  EXPECT_NE(SamplingParams{.temperature = -1}.Validate().message().find("temperature"),
            std::string::npos);
  EXPECT_NE(SamplingParams{.top_p = 0}.Validate().message().find("top_p"), std::string::npos);
  EXPECT_NE(SamplingParams{.min_p = 2}.Validate().message().find("min_p"), std::string::npos);
  EXPECT_NE(SamplingParams{.repetition_penalty = 0}.Validate().message().find("repetition_penalty"),
            std::string::npos);
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
}

}  // namespace
}  // namespace rw
