// DraftPolicy on synthetic inputs: given step costs and a stream of acceptances (drawn from a
// fixed hash, so every run is the same), it must pick the draft length that maximizes tokens per
// second, fall back to plain steps when drafts miss (losing at most 5% against plain decoding),
// probe now and then, and come back when acceptance does.
#include "engine/draft_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace rw {
namespace {

// A deterministic uniform in [0, 1) from a counter.
double Uniform(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / 9007199254740992.0;
}

// Costs of a step with k drafts: plain 1, a verify t0 * (1 + slope * k).
std::vector<double> LinearCosts(double slope, int max_k) {
  std::vector<double> t;
  for (int k = 0; k <= max_k; ++k) t.push_back(1.0 + (k == 0 ? 0 : slope * k));
  return t;
}

struct SimResult {
  double seconds = 0;
  int64_t tokens = 0, steps = 0, drafting_steps = 0, drafted = 0;
  double tok_s() const { return tokens / seconds; }
};

// Runs `steps` steps: each draft is accepted with probability p(step) independently (a drafter
// whose j-th guess is right with chance p given the ones before were), the policy's costs are the
// true ones (observed as measured), and the time and tokens are summed.
template <typename P>
SimResult Simulate(DraftPolicy& policy, const std::vector<double>& true_cost, int steps, P p,
                   uint64_t seed = 1) {
  SimResult r;
  uint64_t draw = seed * 1000003;
  const int max_k = static_cast<int>(true_cost.size()) - 1;
  for (int s = 0; s < steps; ++s) {
    const int k = policy.Choose(max_k);
    int accepted = 0;
    while (accepted < k && Uniform(draw++) < p(s)) ++accepted;
    policy.ObserveCost(k, true_cost[k]);
    if (k > 0) {
      policy.ObserveAcceptance(k, accepted);
      ++r.drafting_steps;
      r.drafted += k;
    }
    r.seconds += true_cost[k];
    r.tokens += accepted + 1;
    ++r.steps;
  }
  return r;
}

// The best fixed k's rate by brute force (expected tokens from p, the true costs).
double BestFixedRate(const std::vector<double>& cost, double p, int* best_k) {
  double best = 0;
  for (int k = 0; k < static_cast<int>(cost.size()); ++k) {
    double e = 1, q = 1;
    for (int i = 0; i < k; ++i) e += (q *= p);
    if (e / cost[k] > best) {
      best = e / cost[k];
      *best_k = k;
    }
  }
  return best;
}

TEST(DraftPolicy, ExpectedTokensFollowsTheAcceptanceByPosition) {
  DraftPolicyOptions o;
  o.prior_acceptance = 0.5;
  DraftPolicy p(o);
  EXPECT_DOUBLE_EQ(p.ExpectedTokens(0), 1.0);
  EXPECT_DOUBLE_EQ(p.ExpectedTokens(2), 1 + 0.5 + 0.25);
  // Many steps where the first draft is always accepted and the second never.
  for (int i = 0; i < 200; ++i) p.ObserveAcceptance(4, 1);
  EXPECT_GT(p.Acceptance(1), 0.95);
  EXPECT_LT(p.Acceptance(2), 0.1);  // ~10 decayed misses against the prior
  EXPECT_NEAR(p.ExpectedTokens(4),
              1 + p.Acceptance(1) + p.Acceptance(1) * p.Acceptance(2) +
                  p.Acceptance(1) * p.Acceptance(2) * p.Acceptance(3) +
                  p.Acceptance(1) * p.Acceptance(2) * p.Acceptance(3) * p.Acceptance(4),
              1e-12);
  // With cheap verifies, one draft is the best choice.
  p.SetCosts(LinearCosts(0.05, 15), /*frozen=*/true);
  EXPECT_EQ(p.Choose(15), 1);
}

TEST(DraftPolicy, AlwaysAcceptedDraftsAreDraftedAsLongAsAllowed) {
  DraftPolicy p;
  const std::vector<double> cost = LinearCosts(0.1, 15);
  Simulate(p, cost, 50, [](int) { return 1.0; });
  EXPECT_EQ(p.Choose(15), 15);
  EXPECT_EQ(p.Choose(6), 6);  // capped by what the caller allows
  EXPECT_EQ(p.Choose(0), 0);
}

TEST(DraftPolicy, CostsThatGrowAsFastAsDecodingMeanPlainSteps) {
  // A verify of k + 1 tokens costing k + 1 plain steps (a compute-bound CPU): even perfectly
  // accepted drafts only break even, and a 0.8 drafter loses. Plain steps it is.
  DraftPolicy p;
  const std::vector<double> cost = LinearCosts(1.0, 15);
  for (size_t k = 1; k < cost.size(); ++k) EXPECT_DOUBLE_EQ(cost[k], 1.0 + k);
  const SimResult r = Simulate(p, cost, 400, [](int) { return 0.8; });
  EXPECT_LT(r.drafting_steps, 400 / 10) << r.drafting_steps;
  EXPECT_GT(r.tok_s(), 0.95);
}

TEST(DraftPolicy, PicksNearTheBestFixedLengthAndMatchesItsRate) {
  for (const double slope : {0.05, 0.15, 0.4}) {
    for (const double acc : {0.5, 0.8, 0.95}) {
      const std::vector<double> cost = LinearCosts(slope, 15);
      int best_k = 0;
      const double best = BestFixedRate(cost, acc, &best_k);
      DraftPolicy p;
      const SimResult r = Simulate(p, cost, 2000, [&](int) { return acc; });
      // Learning costs a little at the start; the probes and plain refreshes a little after.
      EXPECT_GT(r.tok_s(), 0.9 * best)
          << "slope " << slope << " acceptance " << acc << " best k " << best_k << " mean drafted "
          << static_cast<double>(r.drafted) / r.drafting_steps;
    }
  }
}

// A GPU's costs (the H100, full-size model): one draft adds ~0.8 of a decode step (a verify's
// fixed cost), each further one ~0.4. Having measured one draft, the policy must still expect
// four to cost less than four times as much, or it never tries them: with drafts mostly
// accepted it picks 3 or more (the secant through t(0) and t(1) alone put t(4) at 4.2 and kept
// it at one draft).
TEST(DraftPolicy, ConcaveGpuCostsStillTryLongerDrafts) {
  DraftPolicy p;
  for (int i = 0; i < 2; ++i) {  // each size's first call is a warm-up
    p.ObserveCost(0, 1.0);
    p.ObserveCost(1, 1.8);
  }
  for (int i = 0; i < 6; ++i) p.ObserveAcceptance(1, 1);
  EXPECT_LT(p.CostEstimates(4)[4], 3.0);
  EXPECT_GE(p.Choose(15), 3);
}

TEST(DraftPolicy, RejectedDraftsFallBackToPlainWithinFivePercent) {
  // The target: a drafter that never hits (oracle:0) costs at most 5% against plain
  // decoding, on cheap (MoE, weight-bound) and on dear (compute-bound) verifies.
  for (const double slope : {0.05, 0.2, 1.0}) {
    DraftPolicy p;
    const std::vector<double> cost = LinearCosts(slope, 15);
    const SimResult r = Simulate(p, cost, 512, [](int) { return 0.0; });
    EXPECT_GT(r.tok_s(), 0.95) << "slope " << slope << ": " << r.drafting_steps
                               << " drafting steps";
    // It probes: some drafting steps in the second half.
    const SimResult later = Simulate(
        p, cost, 512, [](int) { return 0.0; }, 2);
    EXPECT_GT(later.drafting_steps, 0);
    EXPECT_LT(later.drafting_steps, 512 / 20);
    EXPECT_GT(later.tok_s(), 0.98);
  }
}

TEST(DraftPolicy, ComesBackWhenAcceptanceReturns) {
  DraftPolicy p;
  const std::vector<double> cost = LinearCosts(0.1, 15);
  Simulate(p, cost, 300, [](int) { return 0.0; });
  EXPECT_EQ(p.Choose(15), 0);
  // The drafter starts hitting (a passage being copied): the next probes find it, and within a
  // few probe intervals the policy drafts long blocks again.
  const SimResult r = Simulate(p, cost, 1200, [](int) { return 1.0; });
  EXPECT_GT(r.tok_s(), 2.0) << r.drafting_steps;
  EXPECT_EQ(p.Choose(15), 15);
}

TEST(DraftPolicy, ProbeIntervalDoublesAfterFailedProbes) {
  DraftPolicyOptions o;
  o.probe_interval = 4;
  o.probe_interval_max = 16;
  o.probe_budget = 0;  // the doubling alone
  DraftPolicy p(o);
  p.SetCosts(LinearCosts(0.1, 15), /*frozen=*/true);
  for (int i = 0; i < 50; ++i) p.ObserveAcceptance(2, 0);  // hopeless drafts
  std::vector<int> probes;
  for (int s = 0; s < 100; ++s) {
    const int k = p.Choose(15);
    if (k > 0) {
      probes.push_back(s);
      p.ObserveAcceptance(k, 0);
    }
  }
  ASSERT_GE(probes.size(), 4u);
  EXPECT_EQ(probes[0], 3);               // after 4 plain steps
  EXPECT_EQ(probes[1] - probes[0], 8);   // doubled
  EXPECT_EQ(probes[2] - probes[1], 16);  // the cap
  EXPECT_EQ(probes[3] - probes[2], 16);
}

TEST(DraftPolicy, DearProbesAreSpacedToTheirBudget) {
  // A GPU: a one-draft verify costs two plain steps. Probing a hopeless drafter may cost at most
  // probe_budget (1%) of plain decoding, so probes come at least 100 plain steps apart.
  DraftPolicy p;
  p.SetCosts(LinearCosts(1.0, 15), /*frozen=*/true);
  for (int i = 0; i < 50; ++i) p.ObserveAcceptance(2, 0);
  std::vector<int> probes;
  for (int s = 0; s < 1000; ++s) {
    const int k = p.Choose(15);
    if (k > 0) {
      probes.push_back(s);
      p.ObserveAcceptance(k, 0);
    }
  }
  ASSERT_GE(probes.size(), 2u);
  EXPECT_GE(probes[0], 99);
  for (size_t i = 1; i < probes.size(); ++i) EXPECT_GE(probes[i] - probes[i - 1], 100);
  // Cheap probes (a tenth of a step) keep the configured interval.
  DraftPolicy q;
  q.SetCosts(LinearCosts(0.1, 15), /*frozen=*/true);
  for (int i = 0; i < 50; ++i) q.ObserveAcceptance(2, 0);
  int first = -1;
  for (int s = 0; s < 100 && first < 0; ++s)
    if (q.Choose(15) > 0) first = s;
  EXPECT_EQ(first, 15);  // after probe_interval = 16 plain steps (10 would meet the budget)
}

TEST(DraftPolicy, CostEstimatesInterpolateExtrapolateAndNeverDecrease) {
  DraftPolicyOptions o;
  o.cost_slope = 0.25;
  o.warmup_observations = 0;  // every observation counts here
  DraftPolicy p(o);
  // Nothing measured: the prior shape.
  std::vector<double> t = p.CostEstimates(4);
  EXPECT_DOUBLE_EQ(t[0], 1.0);
  EXPECT_DOUBLE_EQ(t[4], 2.0);
  p.ObserveCost(0, 10e-3);
  p.ObserveCost(2, 14e-3);
  p.ObserveCost(6, 13e-3);  // noise: cheaper than k = 2
  t = p.CostEstimates(8);
  EXPECT_DOUBLE_EQ(t[0], 10e-3);
  EXPECT_DOUBLE_EQ(t[1], 12e-3);  // between 0 and 2
  EXPECT_DOUBLE_EQ(t[2], 14e-3);
  for (size_t k = 1; k < t.size(); ++k) EXPECT_GE(t[k], t[k - 1]);
  EXPECT_DOUBLE_EQ(t[6], 14e-3);  // lifted to k = 2's
  // Beyond k = 6: the secant from k = 0 through k = 6 (0.5 ms per draft).
  EXPECT_NEAR(t[8], 14e-3, 1e-12);  // 13 + 2 * 0.5 = 14, not below 14
  // An EMA per k; a first call much dearer than its repeats (scratch buffers) is replaced.
  DraftPolicy q(o);
  q.ObserveCost(3, 100e-3);
  q.ObserveCost(3, 20e-3);
  EXPECT_DOUBLE_EQ(q.CostEstimates(3)[3], 20e-3);
  q.ObserveCost(3, 30e-3);
  EXPECT_NEAR(q.CostEstimates(3)[3], 0.7 * 20e-3 + 0.3 * 30e-3, 1e-15);
}

// A step size's first call pays for one-time work (a GPU captures its graph then): it is not a
// measure. Counted, a slow first plain step made drafting look worth it until the next plain
// measure, and a slow first verify of a size kept the policy from ever drafting that many again.
TEST(DraftPolicy, TheFirstCallOfEachSizeIsAWarmUp) {
  DraftPolicy p;
  EXPECT_EQ(p.Choose(8), 0);
  p.ObserveCost(0, 50e-3);    // the decode graph's capture
  EXPECT_EQ(p.Choose(8), 0);  // t(0) still unknown: plain again
  p.ObserveCost(0, 3e-3);
  EXPECT_DOUBLE_EQ(p.CostEstimates(0)[0], 3e-3);
  // A verify of 4 drafts: its first call (capture) is left out, the estimate extrapolated
  // from t(0) until a second call is measured.
  p.ObserveCost(4, 200e-3);
  EXPECT_LT(p.CostEstimates(4)[4], 10e-3);
  p.ObserveCost(4, 7e-3);
  EXPECT_DOUBLE_EQ(p.CostEstimates(4)[4], 7e-3);
  // With drafts accepted at 80%, 4 drafts at 7 ms beat plain steps at 3 ms (3.36 / 7 > 1 / 3).
  for (int i = 0; i < 5; ++i) p.ObserveAcceptance(4, 3);
  EXPECT_GT(p.Choose(8), 0);
}

TEST(DraftPolicy, MeasuresAPlainStepFirstAndRefreshesIt) {
  DraftPolicyOptions o;
  o.refresh_plain = 10;
  DraftPolicy p(o);
  EXPECT_EQ(p.Choose(8), 0);  // t(0) first
  p.ObserveCost(0, 1.0);
  int plain = 0;
  for (int s = 0; s < 40; ++s) {
    const int k = p.Choose(8);
    p.ObserveCost(k, 1.0 + 0.05 * k);
    if (k > 0) {
      p.ObserveAcceptance(k, k);
    } else {
      ++plain;
    }
  }
  EXPECT_GE(plain, 3);  // one every ~11 steps
  EXPECT_LE(plain, 4);
}

}  // namespace
}  // namespace rw
