#include "engine/draft_policy.h"

#include <algorithm>

namespace rw {

DraftPolicy::DraftPolicy(DraftPolicyOptions o)
    : o_(o),
      trials_(static_cast<size_t>(std::max(0, o.max_draft)), 0.0),
      hits_(trials_.size(), 0.0),
      cost_(trials_.size() + 1, -1.0),
      seen_(cost_.size(), 0),
      prior_weight_(o.prior_weight),
      probe_interval_(std::max(1, o.probe_interval)) {}

// Each position's prior is the estimate of the one before it: a position rarely reached (a long
// draft) is assumed as good as the last one with evidence, not as the global prior. The prior's
// weight decays with the evidence, so a drafter that always misses is estimated at 0, not at a
// floor the prior would keep (which cheap verifies could find worth drafting for).
double DraftPolicy::NextAcceptance(int i, double before) const {
  if (i >= static_cast<int>(trials_.size())) return before;
  const double n = trials_[i] + prior_weight_;
  return n > 1e-12 ? (hits_[i] + prior_weight_ * before) / n : before;
}

double DraftPolicy::Acceptance(int position) const {
  double a = o_.prior_acceptance;
  for (int i = 0; i < position; ++i) a = NextAcceptance(i, a);
  return a;
}

double DraftPolicy::ExpectedTokens(int k) const {
  double e = 1, p = 1, a = o_.prior_acceptance;
  for (int i = 0; i < k; ++i) {
    a = NextAcceptance(i, a);
    p *= a;
    e += p;
  }
  return e;
}

std::vector<double> DraftPolicy::CostEstimates(int max_k) const {
  std::vector<double> est(static_cast<size_t>(std::max(0, max_k)) + 1, 0.0);
  std::vector<int> measured;
  for (int k = 0; k < static_cast<int>(cost_.size()); ++k)
    if (cost_[k] > 0) measured.push_back(k);
  const double s = o_.cost_slope;
  for (int k = 0; k <= max_k; ++k) {
    if (measured.empty()) {
      est[k] = 1 + s * k;  // no unit yet: only the ratios between k matter
      continue;
    }
    if (k < static_cast<int>(cost_.size()) && cost_[k] > 0) {
      est[k] = cost_[k];
      continue;
    }
    // The measured neighbours below and above k.
    int lo = -1, hi = -1;
    for (int m : measured) {
      if (m < k) lo = m;
      if (m > k && hi < 0) hi = m;
    }
    if (lo >= 0 && hi >= 0) {
      est[k] = cost_[lo] + (cost_[hi] - cost_[lo]) * (k - lo) / (hi - lo);
    } else if (hi >= 0) {
      est[k] = cost_[hi] * (1 + s * k) / (1 + s * hi);
    } else {
      // Beyond the longest measured step: the secant from the shortest one, or the prior slope
      // where that is less. A verify's cost grows more slowly for longer blocks (their tokens
      // share experts; on a GPU the first draft carries a fixed cost, ~2 decode steps on the
      // H100, and each further one ~0.4), so the secant alone would keep a policy that measured
      // one draft from ever trying four.
      const int first = measured.front();
      const double prior = cost_[lo] * s / (1 + s * lo);
      const double slope =
          lo > first ? std::min(prior, std::max(0.0, (cost_[lo] - cost_[first]) / (lo - first)))
                     : prior;
      est[k] = cost_[lo] + slope * (k - lo);
    }
  }
  // A longer step never costs less: noise must not make a long draft look free.
  for (size_t k = 1; k < est.size(); ++k) est[k] = std::max(est[k], est[k - 1]);
  return est;
}

int DraftPolicy::Choose(int max_k) {
  ++steps_;
  probing_ = false;
  const int K = std::min(max_k, o_.max_draft);
  if (K <= 0) return 0;
  // Measure a plain step first, and now and then again.
  if (!frozen_ && (cost_[0] <= 0 || steps_ - last_plain_ > o_.refresh_plain)) return 0;
  const std::vector<double> t = CostEstimates(K);
  int best = 0;
  double best_rate = 0;
  for (int k = 1; k <= K; ++k) {
    const double rate = ExpectedTokens(k) / t[k];
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  if (best_rate > (1 + o_.margin) / t[0]) {
    plain_run_ = 0;
    probe_interval_ = std::max(1, o_.probe_interval);
    return best;
  }
  // A probe costs t(1) - t(0) more than the plain step it replaces.
  int interval = probe_interval_;
  if (o_.probe_budget > 0 && t[0] > 0) {
    const double steps = (t[1] - t[0]) / (o_.probe_budget * t[0]);
    interval = std::max(interval, static_cast<int>(std::min<double>(steps, o_.probe_interval_max)));
  }
  if (++plain_run_ >= interval) {
    plain_run_ = 0;
    probing_ = true;
    return 1;
  }
  return 0;
}

void DraftPolicy::ObserveCost(int drafts, double seconds) {
  if (drafts == 0) last_plain_ = steps_;
  if (frozen_ || drafts < 0 || drafts >= static_cast<int>(cost_.size()) || !(seconds > 0)) return;
  if (seen_[drafts]++ < o_.warmup_observations) return;
  double& c = cost_[drafts];
  // The first call of a size can pay for scratch buffers; a much cheaper repeat replaces it.
  if (c <= 0 || seconds < 0.5 * c) {
    c = seconds;
  } else {
    c = (1 - o_.cost_alpha) * c + o_.cost_alpha * seconds;
  }
}

void DraftPolicy::ObserveAcceptance(int drafted, int accepted) {
  if (drafted <= 0) return;
  for (size_t i = 0; i < trials_.size(); ++i) {
    trials_[i] *= o_.decay;
    hits_[i] *= o_.decay;
  }
  prior_weight_ *= o_.decay;
  // Positions 1..accepted were accepted; position accepted + 1 (if drafted) was the miss; the
  // ones after it were never judged.
  const int judged = std::min({drafted, accepted + 1, static_cast<int>(trials_.size())});
  for (int i = 0; i < judged; ++i) {
    trials_[i] += 1;
    if (i < accepted) hits_[i] += 1;
  }
  if (probing_ && accepted == 0)
    probe_interval_ = std::min(2 * probe_interval_, o_.probe_interval_max);
  probing_ = false;
}

void DraftPolicy::SetCosts(const std::vector<double>& costs, bool frozen) {
  for (size_t k = 0; k < cost_.size(); ++k) cost_[k] = k < costs.size() ? costs[k] : -1.0;
  frozen_ = frozen;
}

}  // namespace rw
