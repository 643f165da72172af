#include "engine/generate.h"

#include <algorithm>
#include <optional>

#include "base/timer.h"
#include "base/trace.h"
#include "sample/stop.h"

namespace rw {

Result<std::vector<float>> SessionTimeline::Append(std::span<const int> ids,
                                                   const std::atomic<bool>* cancel) {
  return s_.Prefill(ids, /*all_logits=*/false, cancel);
}

Status SessionTimeline::SetCapture(std::vector<int> layers) {
  if (s_.backend() == nullptr)
    return Error(ErrorCode::kUnsupported, "the session has no forward pass to capture from");
  return s_.backend()->SetCapture(std::move(layers));
}

namespace {
// Sampler::Sample on the logits after the last token, at the next position.
int SampleNext(Sampler& sampler, std::span<const float> logits, const std::vector<int>& ctx) {
  TraceScope t("sample", "sample");
  return sampler.Sample(logits, static_cast<int64_t>(ctx.size()), ctx);
}
}  // namespace

Result<int> TokenTimeline::DecodeAndSample(int id, Sampler& sampler) {
  RW_ASSIGN_OR_RETURN(std::vector<float> logits, Append(std::span<const int>(&id, 1)));
  return SampleNext(sampler, logits, tokens());
}

Result<std::vector<float>> TokenTimeline::Verify(std::span<const int> ids) {
  std::vector<float> rows;
  for (const int id : ids) {
    RW_ASSIGN_OR_RETURN(std::vector<float> row, Append(std::span<const int>(&id, 1)));
    rows.insert(rows.end(), row.begin(), row.end());
  }
  return rows;
}

Result<int> SessionTimeline::DecodeAndSample(int id, Sampler& sampler) {
  if (!s_.samples_on_device()) return TokenTimeline::DecodeAndSample(id, sampler);
  const SamplingParams& p = sampler.params();
  if (sampler.unfiltered())
    return s_.DecodeSampled(id, p.seed, p.temperature, p.repetition_penalty);
  const int k = sampler.CandidatesK();
  if (k < 1 || k > Session::kMaxDeviceTopK) return TokenTimeline::DecodeAndSample(id, sampler);
  Session::TopKStep step;
  RW_RETURN_IF_ERROR(s_.DecodeTopK(id, k, p.repetition_penalty, &step));
  if (step.ids.empty() && !step.logits.empty()) {
    // The whole row, already penalized: sample it without the penalty.
    SamplingParams plain = p;
    plain.repetition_penalty = 1.0f;
    Sampler row(plain);
    return SampleNext(row, step.logits, s_.tokens());
  }
  TraceScope t("sample", "sample", "candidates", static_cast<int64_t>(step.ids.size()));
  return sampler.SampleCandidates(step.ids, step.values, s_.position());
}

Result<bool> SessionTimeline::VerifyOnDevice(std::span<const int> ids, const Sampler& sampler,
                                             std::vector<RowPick>* picks) {
  const SamplingParams& p = sampler.params();
  if (!s_.samples_on_device() || p.repetition_penalty != 1.0f ||
      static_cast<int64_t>(ids.size()) > s_.max_verify_picks())
    return false;
  int top_k = 0;  // the unfiltered draw
  if (!sampler.unfiltered()) {
    top_k = sampler.CandidatesK();
    if (top_k < 1 || top_k > Session::kMaxDeviceTopK) return false;
  }
  RW_ASSIGN_OR_RETURN(*picks, s_.VerifyPicks(ids, p.seed, p.temperature, top_k));
  return true;
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

Result<int64_t> ReusePrefix(TokenTimeline& t, std::span<const int> prompt) {
  const std::vector<int>& have = t.tokens();
  const size_t limit = std::min(have.size(), prompt.size());
  size_t common = 0;
  while (common < limit && have[common] == prompt[common]) ++common;
  // The last prompt token always runs: its logits pick the first new token.
  const int64_t keep = static_cast<int64_t>(std::min(common, prompt.size() - 1));
  if (keep == static_cast<int64_t>(have.size())) return keep;
  if (keep > 0 && t.CanRewind(keep)) {
    RW_RETURN_IF_ERROR(t.Rewind(keep));
    return keep;
  }
  t.Reset();
  return 0;
}

namespace {

bool Cancelled(const GenerateCallbacks& cb) {
  return cb.cancel != nullptr && cb.cancel->load(std::memory_order_relaxed);
}

// Hands a drafter that reads hidden states the captured rows of the first `keep` tokens of the
// last call (m tokens from position pos0). When the timeline split the call, only its last part
// was captured: the drafter gets what there is (it restarts its context at a gap).
void FeedDrafter(const TokenTimeline& t, Drafter* d, int64_t pos0, int64_t m, int64_t keep) {
  if (d == nullptr || d->layers().empty()) return;
  const HiddenCapture* c = t.capture();
  if (c == nullptr || c->tokens <= 0 || c->tokens > m) return;
  const int64_t first = m - c->tokens;  // the call's token at capture row 0
  const int64_t n = keep - first;
  if (n <= 0) return;
  d->Context(pos0 + first, c->rows.data(), n);
}

// One speculative step after the last emitted token (r.ids.back(), not yet in the timeline):
// verify it and up to k drafts in one call, then put in `out` the tokens plain decoding would
// emit next, as far as the drafts let us see: the accepted drafts and the target's own token
// after them. `remaining` (>= 1) tokens may still be emitted. The timeline is cut back to the
// last emitted token's predecessor plus the accepted drafts, as plain decoding would hold it.
//
// Exactness: plain decoding emits at position p the token sampler.Sample(row_p, p, tokens[0..p))
// where row_p is the logits after tokens[0..p). Verify's row i is the row after base + block[0..i]
// (the same forward pass as a decode step, cut differently), and it is only read while every
// draft before it was accepted, i.e. while block[0..i] is exactly what plain decoding would have
// fed. So each emitted token is the plain one, the repetition penalty's context included.
// With a policy (--draft-tokens auto) it chooses k within those limits and learns from the
// step's wall time and acceptance.
Status SpeculateStep(TokenTimeline& t, Sampler& sampler, const GenerateOptions& o,
                     DraftPolicy* policy, int64_t remaining, GenerateResult& r,
                     const GenerateCallbacks& cb, std::vector<int>* out) {
  const int last = r.ids.back();
  Stopwatch step_time;
  // Drafts beyond what may still be emitted or one verify call holds would be thrown away.
  const int cap = policy != nullptr ? policy->options().max_draft : o.draft_tokens;
  int64_t k = std::min<int64_t>({cap, remaining - 1, t.max_verify() - 1});
  if (policy != nullptr) k = policy->Choose(static_cast<int>(k));
  std::vector<int> drafts;
  if (k > 0) {
    std::vector<int> ctx = t.tokens();
    ctx.push_back(last);
    drafts = o.drafter->Propose(ctx, static_cast<int>(k));
    if (static_cast<int64_t>(drafts.size()) > k) drafts.resize(static_cast<size_t>(k));
  }
  if (drafts.empty()) {  // nothing to verify: a plain step (on the GPU, its device draw)
    const int64_t at = static_cast<int64_t>(t.tokens().size());
    RW_ASSIGN_OR_RETURN(int next, t.DecodeAndSample(last, sampler));
    FeedDrafter(t, o.drafter.get(), at, 1, 1);
    out->push_back(next);
    ++r.decoded_tokens;
    if (policy != nullptr) policy->ObserveCost(0, step_time.Seconds());
    return Status::Ok();
  }
  const int64_t base = static_cast<int64_t>(t.tokens().size());
  std::vector<int> block = {last};
  block.insert(block.end(), drafts.begin(), drafts.end());
  std::vector<float> rows;     // the rows on the host, or
  std::vector<RowPick> picks;  // the picks made on the device
  bool on_device = false;
  {
    TraceScope ts("verify", "decode", "tokens", static_cast<int64_t>(block.size()));
    RW_ASSIGN_OR_RETURN(on_device, t.VerifyOnDevice(block, sampler, &picks));
    if (!on_device) {
      RW_ASSIGN_OR_RETURN(rows, t.Verify(block));
    }
  }
  const std::vector<int>& ctx = t.tokens();  // base + block
  const size_t V = rows.size() / block.size();
  int accepted = 0;
  for (size_t i = 0; i < block.size(); ++i) {
    const int64_t pos = base + static_cast<int64_t>(i) + 1;
    const std::span<const int> before(ctx.data(), static_cast<size_t>(pos));
    int tok = 0;
    {
      TraceScope ts("sample", "sample");
      if (!on_device) {
        tok = sampler.Sample(std::span<const float>(&rows[i * V], V), pos, before);
      } else if (const RowPick& p = picks[i]; !p.logits.empty()) {
        tok = sampler.Sample(p.logits, pos, before);  // a whole row (ties, or a failover)
      } else if (!p.ids.empty()) {
        tok = sampler.SampleCandidates(p.ids, p.values, pos);  // as DecodeAndSample's top-k
      } else {
        tok = p.token;  // the device's draw, as DecodeSampled's
      }
    }
    out->push_back(tok);
    if (i < drafts.size() && tok == drafts[i]) {
      ++accepted;
      continue;
    }
    break;  // the target's own token at the first mismatch, or after the last draft
  }
  const int64_t keep = base + 1 + accepted;
  FeedDrafter(t, o.drafter.get(), base, static_cast<int64_t>(block.size()), 1 + accepted);
  if (keep < static_cast<int64_t>(ctx.size())) {
    if (!t.CanRewind(keep))
      return Error(ErrorCode::kInternal,
                   "speculative decoding: cannot drop the {} rejected drafts at position {}",
                   static_cast<int64_t>(ctx.size()) - keep, keep);
    RW_RETURN_IF_ERROR(t.Rewind(keep));
  }
  const size_t d = drafts.size();
  r.drafted += static_cast<int64_t>(d);
  r.accepted += accepted;
  ++r.verify_calls;
  r.decoded_tokens += static_cast<int64_t>(out->size());
  if (r.drafted_at.size() < d) {
    r.drafted_at.resize(d);
    r.accepted_at.resize(d);
  }
  for (size_t i = 0; i < d; ++i) {
    ++r.drafted_at[i];
    if (static_cast<int>(i) < accepted) ++r.accepted_at[i];
  }
  o.drafter->Accepted(static_cast<int>(d), accepted);
  if (policy != nullptr) {
    policy->ObserveCost(static_cast<int>(d), step_time.Seconds());
    policy->ObserveAcceptance(static_cast<int>(d), accepted);
  }
  if (cb.on_speculation)
    cb.on_speculation(SpeculationStep{base + 1, std::move(drafts), accepted, static_cast<int>(k)});
  return Status::Ok();
}

}  // namespace

Result<GenerateResult> Generate(TokenTimeline& t, const Tokenizer* tokenizer,
                                std::span<const int> prompt, const GenerateOptions& o,
                                const GenerateCallbacks& cb) {
  RW_RETURN_IF_ERROR(o.sampling.Validate());
  if (prompt.empty()) return Error(ErrorCode::kInvalidArgument, "empty prompt");
  if (o.draft_tokens < kDraftTokensAuto)
    return Error(ErrorCode::kInvalidArgument, "draft tokens must be >= 0 or auto, not {}",
                 o.draft_tokens);
  if (o.max_new_tokens < 0)
    return Error(ErrorCode::kInvalidArgument, "max new tokens must be >= 0, not {}",
                 o.max_new_tokens);
  if (tokenizer == nullptr && !o.stop_strings.empty())
    return Error(ErrorCode::kUnsupported, "stop strings need a tokenizer");
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n >= t.max_context())
    return Error(ErrorCode::kOutOfRange,
                 "the prompt has {} tokens but the context holds {} (including at least one "
                 "generated token); shorten it or raise --max-context",
                 n, t.max_context());

  GenerateResult r;
  r.prompt_tokens = n;
  Stopwatch total;
  if (o.reuse_prefix) {
    RW_ASSIGN_OR_RETURN(r.reused_tokens, ReusePrefix(t, prompt));
  } else {
    t.Reset();
  }

  // A drafter that reads hidden states gets them for every position run from here on.
  Drafter* feed = o.drafter != nullptr && o.draft_tokens > 0 && !o.drafter->layers().empty()
                      ? o.drafter.get()
                      : nullptr;
  if (feed != nullptr) RW_RETURN_IF_ERROR(t.SetCapture(feed->layers()));
  // Capturing stops when this generation ends, however it ends.
  struct StopCapture {
    TokenTimeline* t;
    ~StopCapture() {
      if (t != nullptr) (void)t->SetCapture({});
    }
  } stop_capture{feed != nullptr ? &t : nullptr};

  // Prefill what the cache does not hold, a chunk (or layer-major span) at a time; the cancel
  // flag is also polled inside an append, so cancellation is prompt.
  std::vector<float> logits;
  const int64_t chunk = std::max<int64_t>(1, t.chunk());
  for (int64_t i = r.reused_tokens; i < n; i += chunk) {
    if (cb.on_prefill_progress) cb.on_prefill_progress(i - r.reused_tokens, n - r.reused_tokens);
    Result<std::vector<float>> appended =
        Cancelled(cb) ? Error(ErrorCode::kCancelled, "cancelled")
                      : t.Append(prompt.subspan(i, std::min(chunk, n - i)), cb.cancel);
    if (!appended.ok() && appended.status().code() == ErrorCode::kCancelled) {
      r.finish = FinishReason::kCancelled;
      r.prefill_seconds = total.Seconds();
      return r;
    }
    RW_ASSIGN_OR_RETURN(logits, std::move(appended));
    const int64_t m = std::min(chunk, n - i);
    FeedDrafter(t, feed, i, m, m);
  }
  r.prefill_seconds = total.Seconds();

  // The first token from the prompt's logits; each later one from its decode step.
  Sampler sampler(o.sampling);
  // Tokens chosen but not yet emitted: one when plain, a verified block when speculating.
  std::vector<int> pending = {SampleNext(sampler, logits, t.tokens())};
  size_t next_pending = 0;
  const bool speculate = o.drafter != nullptr && o.draft_tokens != 0;
  std::shared_ptr<DraftPolicy> policy;
  if (speculate && o.draft_tokens == kDraftTokensAuto)
    policy = o.draft_policy != nullptr ? o.draft_policy : std::make_shared<DraftPolicy>();
  if (speculate) o.drafter->Begin(prompt);

  std::optional<StreamDecoder> decoder;
  if (tokenizer != nullptr) decoder.emplace(*tokenizer);
  StopStringMatcher stops(o.stop_strings);
  bool keep_going = true;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    r.text += text;
    if (cb.on_text && !cb.on_text(text)) keep_going = false;
  };

  Stopwatch decode;
  r.finish = FinishReason::kLength;
  const int64_t room = t.max_context() - n;  // positions left for generated tokens
  const int64_t limit = std::min(o.max_new_tokens, room);
  while (static_cast<int64_t>(r.ids.size()) < limit) {
    const int id = pending[next_pending++];
    if (r.ids.empty()) r.first_token_seconds = total.Seconds();
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end()) {
      r.finish = FinishReason::kStop;
      r.stop_id = id;
      break;
    }
    r.ids.push_back(id);
    if (decoder) {
      emit(stops.Push(decoder->Push(id)));
      if (stops.stopped()) {
        r.finish = FinishReason::kStop;
        r.stop_string = stops.matched();
        break;
      }
    }
    if (!keep_going || Cancelled(cb)) {
      r.finish = FinishReason::kCancelled;
      break;
    }
    if (static_cast<int64_t>(r.ids.size()) >= limit) break;
    if (next_pending < pending.size()) continue;
    pending.clear();
    next_pending = 0;
    if (speculate) {
      RW_RETURN_IF_ERROR(SpeculateStep(t, sampler, o, policy.get(),
                                       limit - static_cast<int64_t>(r.ids.size()), r, cb,
                                       &pending));
    } else {
      RW_ASSIGN_OR_RETURN(int next, t.DecodeAndSample(r.ids.back(), sampler));
      pending.push_back(next);
      ++r.decoded_tokens;
    }
  }
  if (speculate) {
    // A block that ended in a stop or at the limit may have run tokens past it: hold what plain
    // decoding would (every emitted token but the last, and that one too before a stop id).
    const int64_t emitted = static_cast<int64_t>(r.ids.size());
    const int64_t plain = n + (r.stop_id >= 0 ? emitted : std::max<int64_t>(0, emitted - 1));
    if (static_cast<int64_t>(t.tokens().size()) > plain) {
      if (t.CanRewind(plain)) {
        RW_RETURN_IF_ERROR(t.Rewind(plain));
      } else {
        t.Reset();
      }
    }
  }
  if (decoder && !stops.stopped()) {
    std::string tail = stops.Push(decoder->Flush());
    if (stops.stopped()) {
      r.finish = FinishReason::kStop;
      r.stop_string = stops.matched();
    } else {
      tail += stops.Flush();
    }
    keep_going = true;  // the final text is delivered even after a cancel
    emit(tail);
  }
  r.decode_seconds = decode.Seconds();
  return r;
}

}  // namespace rw
