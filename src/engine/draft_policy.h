// --draft-tokens auto: how many tokens to draft at each speculative step (0: a plain decode step),
// from what steps cost on this machine and backend and how often recent drafts were accepted by
// position. It picks k maximizing the expected tokens per second of the step,
//
//   E(k) / t(k),   E(k) = 1 + sum_{i=1..k} prod_{j=1..i} a_j,
//
// where a_j is the chance that draft j is accepted given drafts 1..j-1 were, and t(k) the wall
// time of a step with k drafts (drafting, the verify call of k + 1 tokens, the sampling of its
// rows; t(0): a plain step). Both are learned from the steps Generate actually runs, so nothing
// has to be measured up front and the bench is not needed.
//
// Falling back and probing: when no k beats a plain step (drafts are mostly rejected), the policy
// decodes plainly and only every probe_interval plain steps drafts one token to see whether
// acceptance came back; a probe that fails doubles the interval (up to probe_interval_max), so a
// drafter that never hits costs at most t(1) - t(0) every probe_interval_max steps. Where a probe
// is dear (a GPU, whose one-token step is a few milliseconds and a verify several), the interval
// is also long enough that probing costs at most probe_budget of plain decoding.
#pragma once

#include <cstdint>
#include <vector>

namespace rw {

// GenerateOptions::draft_tokens value for "auto": the policy chooses each step.
inline constexpr int kDraftTokensAuto = -1;

struct DraftPolicyOptions {
  int max_draft = 15;  // drafts per step at most (a verify of 16 tokens)
  // Acceptance by position: decayed counts of trials and successes; each observed verify step
  // multiplies the old counts by `decay` first (memory of ~1 / (1 - decay) steps).
  double decay = 0.9;
  // Before evidence, each position is accepted with prior_acceptance, worth prior_weight
  // observations (decayed as the counts are); a position never reached borrows the estimate of
  // the one before it.
  double prior_acceptance = 0.5;
  double prior_weight = 1.0;
  // Step costs: an exponential moving average per k (weight of the newest observation).
  double cost_alpha = 0.3;
  // Before a k is measured, t(k) is extrapolated from the measured ones; with only one measured
  // point, as t(m) * (1 + cost_slope * k) / (1 + cost_slope * m).
  double cost_slope = 0.25;
  // Draft only when the expected rate beats a plain step's by this fraction: noise in t(k) must
  // not make a hopeless drafter look worth it.
  double margin = 0.03;
  // Plain steps between probes once drafting stopped paying, and the cap of its doubling.
  int probe_interval = 16;
  int probe_interval_max = 256;
  // At least (t(1) - t(0)) / (probe_budget · t(0)) plain steps between probes (up to
  // probe_interval_max).
  double probe_budget = 0.01;
  // A plain step is measured first and then at least every refresh_plain steps, so t(0) follows
  // the machine (caches warming, other load).
  int refresh_plain = 64;
  // The first observations of each step size that are not counted: a size's first call pays for
  // one-time work (on a GPU, capturing its graph: a plain step measured then made drafting look
  // worth it for 64 steps, and a verify measured then was never tried again).
  int warmup_observations = 1;
};

class DraftPolicy {
 public:
  explicit DraftPolicy(DraftPolicyOptions o = {});

  // The number of drafts for the next step, 0..min(max_k, max_draft).
  int Choose(int max_k);
  // A step with `drafts` drafts (0: plain) took `seconds`.
  void ObserveCost(int drafts, double seconds);
  // Of `drafted` drafts, the first `accepted` matched the target.
  void ObserveAcceptance(int drafted, int accepted);
  // Fixed costs (seconds by number of drafts, costs[0] plain); frozen: ObserveCost is ignored
  // (tests, or a table measured elsewhere).
  void SetCosts(const std::vector<double>& costs, bool frozen);

  // The current estimates (for logs, tests and docs).
  double Acceptance(int position) const;               // a_j for position j >= 1
  double ExpectedTokens(int k) const;                  // E(k)
  std::vector<double> CostEstimates(int max_k) const;  // t(0..max_k), non-decreasing
  int probe_interval() const { return probe_interval_; }
  const DraftPolicyOptions& options() const { return o_; }

 private:
  double NextAcceptance(int i, double before) const;  // a at position i + 1 given a at i

  DraftPolicyOptions o_;
  std::vector<double> trials_, hits_;  // by position (index 0: the first draft)
  std::vector<double> cost_;           // EMA by drafts; < 0: not measured
  std::vector<int> seen_;              // observations by drafts, warm-up ones included
  double prior_weight_;                // decays with every observation
  bool frozen_ = false;
  int64_t steps_ = 0, last_plain_ = -1;  // last_plain_: the step of the last plain measure
  int plain_run_ = 0;                    // plain steps in a row chosen for lack of gain
  int probe_interval_;
  bool probing_ = false;  // the last step chosen was a probe
};

}  // namespace rw
