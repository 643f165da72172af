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

}  // namespace

Result<GenerateResult> Generate(TokenTimeline& t, const Tokenizer* tokenizer,
                                std::span<const int> prompt, const GenerateOptions& o,
                                const GenerateCallbacks& cb) {
  RW_RETURN_IF_ERROR(o.sampling.Validate());
  if (prompt.empty()) return Error(ErrorCode::kInvalidArgument, "empty prompt");
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
  }
  r.prefill_seconds = total.Seconds();

  // The first token from the prompt's logits; each later one from its decode step.
  Sampler sampler(o.sampling);
  int next = SampleNext(sampler, logits, t.tokens());

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
    const int id = next;
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
    RW_ASSIGN_OR_RETURN(next, t.DecodeAndSample(r.ids.back(), sampler));
    ++r.decoded_tokens;
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
