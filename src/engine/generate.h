// Text generation over a token timeline: reuse of the cached prefix, prefill in cancellable
// chunks, sampling, stop ids and stop strings, and streamed UTF-8-complete text. The CLI's run
// and chat and the server share this loop; tests drive it with a scripted timeline.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/draft_policy.h"
#include "engine/drafter.h"
#include "engine/engine.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace rw {

// What the generation loop needs from a Session (an interface so tests can script logits).
class TokenTimeline {
 public:
  virtual ~TokenTimeline() = default;
  // Appends ids; returns the logits after the last one. `cancel` (may be null) may stop a long
  // append part way with a kCancelled error (see Session::Prefill for what is kept).
  virtual Result<std::vector<float>> Append(std::span<const int> ids,
                                            const std::atomic<bool>* cancel = nullptr) = 0;
  // A decode step: appends one token and returns the one `sampler` picks after it (at the new
  // position, with the timeline as context). By default Append, then Sampler::Sample on the
  // logits; a timeline that can pick on its device overrides it (same token, fewer bytes moved).
  virtual Result<int> DecodeAndSample(int id, Sampler& sampler);
  // Speculative decoding's verify: appends ids and returns the logits after each of them,
  // [ids.size()][vocab]. By default one Append per id (scripted timelines); a Session does it in
  // one forward call. At most max_verify() ids.
  virtual Result<std::vector<float>> Verify(std::span<const int> ids);
  virtual int64_t max_verify() const { return chunk(); }
  // A verify whose picks are made on the device where `sampler` allows it (no repetition
  // penalty; an unfiltered draw or at most Session::kMaxDeviceTopK candidates): appends ids,
  // fills picks (row r's, see RowPick) and returns true; false (nothing appended) when the
  // caller should use Verify instead.
  virtual Result<bool> VerifyOnDevice(std::span<const int> ids, const Sampler& sampler,
                                      std::vector<RowPick>* picks) {
    (void)ids, (void)sampler, (void)picks;
    return false;
  }
  virtual const std::vector<int>& tokens() const = 0;
  virtual bool CanRewind(int64_t pos) const = 0;
  virtual Status Rewind(int64_t pos) = 0;
  virtual void Reset() = 0;
  virtual int64_t max_context() const = 0;
  virtual int64_t chunk() const = 0;  // most tokens per Append during prefill
  // For drafters that read hidden states: record the residual after `layers` for every token of
  // each call from now on (empty: stop); capture() holds the last call's rows (null: a timeline
  // without a forward pass, which cannot capture).
  virtual Status SetCapture(std::vector<int> layers) {
    (void)layers;
    return Error(ErrorCode::kUnsupported, "this timeline cannot capture hidden states");
  }
  virtual const HiddenCapture* capture() const { return nullptr; }
};

// A Session seen as a TokenTimeline.
class SessionTimeline final : public TokenTimeline {
 public:
  explicit SessionTimeline(Session& s) : s_(s) {}
  Result<std::vector<float>> Append(std::span<const int> ids,
                                    const std::atomic<bool>* cancel = nullptr) override;
  // On the GPU: the unfiltered draw (Session::DecodeSampled) or the top-k candidates
  // (Session::DecodeTopK, then Sampler::SampleCandidates) when the sampler allows.
  Result<int> DecodeAndSample(int id, Sampler& sampler) override;
  // Session::Verify: one forward call, logits on the host (also on the GPU).
  Result<std::vector<float>> Verify(std::span<const int> ids) override { return s_.Verify(ids); }
  // Session::VerifyPicks on the GPU, as DecodeAndSample picks there.
  Result<bool> VerifyOnDevice(std::span<const int> ids, const Sampler& sampler,
                              std::vector<RowPick>* picks) override;
  int64_t max_verify() const override { return s_.engine().prefill_chunk(); }
  const std::vector<int>& tokens() const override { return s_.tokens(); }
  bool CanRewind(int64_t pos) const override { return s_.CanRewind(pos); }
  Status Rewind(int64_t pos) override { return s_.Rewind(pos); }
  void Reset() override { s_.Reset(); }
  int64_t max_context() const override { return s_.engine().max_context(); }
  // A layer-major span where the engine runs one (its experts are read once per span).
  int64_t chunk() const override {
    return std::max(s_.engine().prefill_chunk(), s_.engine().prefill_span());
  }
  Status SetCapture(std::vector<int> layers) override;
  const HiddenCapture* capture() const override {
    return s_.backend() != nullptr ? &s_.backend()->capture() : nullptr;
  }

 private:
  Session& s_;
};

enum class FinishReason { kStop, kLength, kCancelled };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled"

struct GenerateOptions {
  SamplingParams sampling;
  int64_t max_new_tokens = 1024;          // also capped by the context left
  std::vector<int> stop_ids;              // a sampled stop id ends generation (not in the text)
  std::vector<std::string> stop_strings;  // matched on decoded text, across tokens
  bool reuse_prefix = true;  // keep the cached prefix the prompt shares with the timeline
  // Speculative decoding: each step verifies the last token and up to draft_tokens of the
  // drafter's guesses in one call (null or 0: plain decoding). The output is the same token for
  // token; only the speed changes. The drafter is used by one generation at a time.
  // kDraftTokensAuto: draft_policy chooses each step's count (0..15) from measured step costs
  // and recent acceptance; a policy kept across generations keeps what it learned (null: a fresh
  // one for this call).
  std::shared_ptr<Drafter> drafter;
  int draft_tokens = 0;
  std::shared_ptr<DraftPolicy> draft_policy;
};

// One verify step, for --speculation-log.
struct SpeculationStep {
  int64_t position = 0;  // the absolute position of the first drafted token
  std::vector<int> drafted;
  int accepted = 0;  // how many of drafted the target agreed with
  int chosen = 0;    // the drafts asked for (the policy's choice, or draft_tokens within limits)
};

struct GenerateCallbacks {
  // Text as it becomes final (complete UTF-8, cleared of stop-string candidates). Return false
  // to stop generation (finish reason kCancelled).
  std::function<bool(std::string_view text)> on_text;
  // Checked between prefill chunks and between tokens.
  const std::atomic<bool>* cancel = nullptr;
  // Called before each prefill chunk with (done, total) prompt tokens; servers send keep-alives.
  std::function<void(int64_t done, int64_t total)> on_prefill_progress;
  // After each speculative verify step (not after plain steps, the policy's included).
  std::function<void(const SpeculationStep& step)> on_speculation;
};

struct GenerateResult {
  std::vector<int> ids;  // generated ids, without a final stop id
  std::string text;      // the decoded text (up to a stop string)
  FinishReason finish = FinishReason::kLength;
  int stop_id = -1;  // the stop id sampled, if that ended generation
  std::string stop_string;
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;  // prompt tokens served from the cache
  double prefill_seconds = 0, decode_seconds = 0;
  double first_token_seconds = 0;  // from the call to the first sampled token
  // Tokens the decode phase produced (one per forward pass when plain; with speculation, the
  // accepted drafts plus the target's own token of each verify call).
  int64_t decoded_tokens = 0;
  // Speculation: drafted ids verified, how many were accepted, verify calls, and both counts by
  // draft position (index 0: the first drafted token of a step).
  int64_t drafted = 0, accepted = 0, verify_calls = 0;
  std::vector<int64_t> drafted_at, accepted_at;
  double mean_accepted() const {
    return verify_calls > 0 ? static_cast<double>(accepted) / static_cast<double>(verify_calls) : 0;
  }
};

// Cuts the timeline back to the longest prefix it shares with prompt that it can keep, leaving
// at least one prompt token to run (its logits start generation). Returns the tokens kept.
Result<int64_t> ReusePrefix(TokenTimeline& timeline, std::span<const int> prompt);

// Runs prompt (after reusing what the timeline already holds) and samples until a stop, the
// token limit, the context end or cancellation. On error the timeline holds what completed.
Result<GenerateResult> Generate(TokenTimeline& timeline, const Tokenizer* tokenizer,
                                std::span<const int> prompt, const GenerateOptions& options,
                                const GenerateCallbacks& callbacks = {});

}  // namespace rw
