// Drafters for speculative decoding: cheap guesses at the next few tokens, which the target model
// checks in one verify call (see Generate and docs/SPECULATIVE.md). A drafter only proposes;
// what is emitted is always the target's own choice, so a bad drafter costs speed, never output.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace rw {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // "ngram", "oracle:0.8", ... (for logs and reports).
  virtual std::string name() const = 0;
  // A generation starts after `prompt` (a drafter that counts generated tokens starts here).
  virtual void Begin(std::span<const int> prompt) { (void)prompt; }
  // Up to n ids to follow `context`: the timeline's tokens through the last emitted token.
  // Fewer (or none) when the drafter has no good guess: an empty proposal means a plain step.
  virtual std::vector<int> Propose(std::span<const int> context, int n) = 0;
  // Of the last proposal of `drafted` ids, the first `accepted` matched the target.
  virtual void Accepted(int drafted, int accepted) {
    (void)drafted;
    (void)accepted;
  }
  // Target layers whose hidden states (the residual after each) the drafter reads; empty: none.
  // Generate captures them while it drafts and hands every kept position's rows to Context.
  virtual std::vector<int> layers() const { return {}; }
  // The captured rows of positions pos0..pos0+n−1, now part of the timeline: [n][layers][hidden]
  // (HiddenCapture's layout). Called after each prefill chunk, decode step and verify (for a
  // verify, the rows of the last token and the accepted drafts only).
  virtual void Context(int64_t pos0, const float* rows, int64_t n) {
    (void)pos0;
    (void)rows;
    (void)n;
  }
};

// Prompt lookup: the most recent earlier occurrence of the context's last m tokens, for m from
// max_ngram down to min_ngram, and the tokens that followed it. No weights, no state.
//
// Defaults 3 down to 2: a trigram or bigram match mostly means text being copied (code, quoted
// passages, names, lists), where the follow-on tokens are right for a while; a single-token match
// is right far less often, and every wrong draft is paid for in the verify call (on a MoE model a
// drafted token can pull in experts the accepted tokens did not need).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int max_ngram = 3, int min_ngram = 2);
  std::string name() const override { return "ngram"; }
  std::vector<int> Propose(std::span<const int> context, int n) override;

 private:
  int max_ngram_, min_ngram_;
};

// Simulated acceptance, for benchmarks and tests only: proposes the target's own continuation
// recorded in an earlier plain run (the generated ids, in order), each token replaced by a wrong
// one with probability 1 - p. Whether generated token g is replaced is a hash of (seed, g), so
// the result does not depend on how the continuation is cut into blocks.
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(std::vector<int> continuation, double p, uint64_t seed = 0);
  std::string name() const override;
  void Begin(std::span<const int> prompt) override { prompt_size_ = prompt.size(); }
  std::vector<int> Propose(std::span<const int> context, int n) override;
  double p() const { return p_; }

 private:
  std::vector<int> continuation_;
  double p_;
  uint64_t seed_;
  size_t prompt_size_ = 0;
};

// What --drafter names: "off" (null), "ngram", "oracle:P" with 0 <= P <= 1 (an oracle needs
// a recorded continuation: MakeDrafter takes it), or a DFlash drafter directory (a path; the
// engine's model loads it: MakeDFlashDrafter in engine/drafter_dflash.h).
struct DrafterSpec {
  enum class Kind { kOff, kNgram, kOracle, kDFlash } kind = Kind::kOff;
  double p = 0;        // oracle: the chance that each drafted token is the target's own
  std::string path{};  // dflash: the drafter directory
};
Result<DrafterSpec> ParseDrafterSpec(const std::string& text);

// The drafter a spec names (null for off, and for dflash, which needs the target: see
// MakeDFlashDrafter); an oracle proposes `continuation`.
std::shared_ptr<Drafter> MakeDrafter(const DrafterSpec& spec, std::vector<int> continuation = {},
                                     uint64_t seed = 0);

}  // namespace rw
