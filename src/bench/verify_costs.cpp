// The bench's verify cost table: what one speculative verify call of k tokens costs on this
// machine and backend, and how many routed experts its block pulls in per layer. The draft
// policy (engine/draft_policy.h) measures the same costs online; this table is for reading.
#include <algorithm>
#include <set>

#include "base/timer.h"
#include "base/trace.h"
#include "bench/bench.h"
#include "experts/predictor.h"

namespace rw {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Distinct experts over every token of the trace, per layer, averaged over layers.
double DistinctExpertsPerLayer(const RoutingTrace& t) {
  if (t.tokens() == 0 || t.layers == 0) return -1;
  double sum = 0;
  for (int l = 0; l < t.layers; ++l) {
    std::set<int> seen;
    for (int64_t i = 0; i < t.tokens(); ++i) seen.insert(t.token(i, l), t.token(i, l) + t.top_k);
    sum += static_cast<double>(seen.size());
  }
  return sum / t.layers;
}

}  // namespace

Result<VerifyCostTable> MeasureVerifyCosts(const Engine& engine, int64_t prompt_tokens, int reps,
                                           uint64_t seed, int max_k) {
  if (reps < 1) return Error(ErrorCode::kInvalidArgument, "verify costs: reps must be >= 1");
  const ModelConfig& cfg = engine.config();
  // A verify holds at most one prefill chunk, and the context what is left after the prompt;
  // the table stops there.
  max_k = static_cast<int>(
      std::min<int64_t>({max_k, engine.prefill_chunk(), engine.max_context() - prompt_tokens}));
  if (prompt_tokens < 1 || max_k < 1)
    return Error(ErrorCode::kOutOfRange,
                 "verify costs: a {}-token prompt leaves no room for a verify in the {}-token "
                 "context",
                 prompt_tokens, engine.max_context());
  TraceScope scope("verify costs", "bench", "prompt_tokens", prompt_tokens);
  VerifyCostTable table;
  table.prompt_tokens = prompt_tokens;
  table.reps = reps;
  const std::vector<int> prompt = SyntheticPrompt(prompt_tokens, cfg.vocab_size, cfg.bos_token_id,
                                                  seed * 0x9E3779B97F4A7C15ull + 17);
  auto session = engine.NewSession();
  const int64_t chunk = std::max<int64_t>({1, engine.prefill_chunk(), engine.prefill_span()});
  for (int64_t i = 0; i < prompt_tokens; i += chunk) {
    const int64_t m = std::min(chunk, prompt_tokens - i);
    RW_RETURN_IF_ERROR(session->Prefill(std::span<const int>(&prompt[i], m)).status());
  }
  const int64_t base = session->position();
  // Varied blocks (a different one per repetition): drafts are new tokens, each with its own
  // routing, and a repeated block would find its experts hot.
  auto block = [&](int k, int rep) {
    std::vector<int> ids = SyntheticPrompt(k + 1, cfg.vocab_size, cfg.bos_token_id,
                                           seed * 31 + static_cast<uint64_t>(k * 1000 + rep));
    ids.erase(ids.begin());  // the BOS id
    return ids;
  };
  // Warm-up: the first call of each size pays for scratch buffers and first uses.
  RW_RETURN_IF_ERROR(session->Verify(block(max_k, -1)).status());
  RW_RETURN_IF_ERROR(session->Rewind(base));
  RW_RETURN_IF_ERROR(session->Decode(block(1, -1)[0]).status());
  RW_RETURN_IF_ERROR(session->Rewind(base));

  std::vector<double> plain;
  for (int rep = 0; rep < reps; ++rep) {
    const int id = block(1, 1000 + rep)[0];
    Stopwatch sw;
    RW_RETURN_IF_ERROR(session->Decode(id).status());
    plain.push_back(1e3 * sw.Seconds());
    RW_RETURN_IF_ERROR(session->Rewind(base));
  }
  table.decode_ms = Median(plain);
  RoutingTrace routing;
  for (int k = 1; k <= max_k; ++k) {
    std::vector<double> ms, experts;
    for (int rep = 0; rep < reps; ++rep) {
      const std::vector<int> ids = block(k, rep);
      routing.ids.clear();
      session->set_routing_trace(&routing);
      Stopwatch sw;
      Result<std::vector<float>> rows = session->Verify(ids);
      const double t = 1e3 * sw.Seconds();
      session->set_routing_trace(nullptr);
      RW_RETURN_IF_ERROR(rows.status());
      ms.push_back(t);
      experts.push_back(DistinctExpertsPerLayer(routing));
      RW_RETURN_IF_ERROR(session->Rewind(base));
    }
    table.rows.push_back(VerifyCost{k, Median(ms), Median(experts)});
  }
  if (!table.rows.empty() && table.rows[0].experts_per_layer < 0)
    table.note = engine.backend() == BackendKind::kCuda
                     ? "routing is not recorded on the CUDA backend"
                     : "no routed experts in this model";
  return table;
}

}  // namespace rw
