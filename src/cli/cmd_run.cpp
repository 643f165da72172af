// redwing run --model <dir> --prompt-ids 2,17,99 --max-new N --temperature 0 --print-ids:
// greedy generation from token ids (text and sampling arrive with the tokenizer).
#include <cstdio>

#include "base/timer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "engine/engine.h"

namespace rw::cli {
namespace {

int Run(const Args& args) {
  Flags flags(
      "run",
      "redwing run --model <dir> --prompt-ids 2,17,99 --max-new N --temperature 0 --print-ids",
      "Generates tokens greedily from a prompt of token ids; stops at the model's eos ids.");
  flags.String("model", "", "model directory (required)");
  flags.String("prompt-ids", "", "comma-separated prompt token ids (required)");
  flags.Int("max-new", 64, "maximum number of tokens to generate");
  flags.Double("temperature", 0.0, "sampling temperature (only 0, greedy, for now)");
  flags.Bool("print-ids", "print the generated ids, space-separated on one line");
  flags.Bool("quiet", "no timing statistics on stderr");
  flags.Int("threads", 0, "worker threads (0: REDWING_THREADS or all cores)");
  flags.Int("max-context", 8192, "maximum context length");
  flags.Int("prefill-chunk", 128, "tokens per forward call during prefill");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("run", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  if (flags.GetDouble("temperature") != 0.0)
    return ReportError("run",
                       Status(ErrorCode::kInvalidArgument,
                              "sampling arrives with the tokenizer issue; use --temperature 0"));
  if (flags.GetString("model").empty())
    return ReportError("run", Status(ErrorCode::kInvalidArgument, "--model is required"));
  if (flags.GetString("prompt-ids").empty())
    return ReportError("run", Status(ErrorCode::kInvalidArgument,
                                     "empty prompt: --prompt-ids needs at least one token id"));
  auto ids = ParseIdList(flags.GetString("prompt-ids"), "--prompt-ids");
  if (!ids.ok()) return ReportError("run", ids.status());
  const long long max_new = flags.GetInt("max-new");
  if (max_new < 0 || max_new > (1 << 30))
    return ReportError("run", Status(ErrorCode::kInvalidArgument, "--max-new must be >= 0"));

  EngineOptions opt;
  opt.model_dir = flags.GetString("model");
  opt.threads = static_cast<int>(flags.GetInt("threads"));
  opt.max_context = flags.GetInt("max-context");
  opt.prefill_chunk = flags.GetInt("prefill-chunk");
  auto engine = Engine::Load(opt);
  if (!engine.ok()) return ReportError("run", engine.status());
  auto session = (*engine)->NewSession();
  const std::vector<int>& stop = (*engine)->config().eos_token_ids;
  auto out = GenerateGreedy(*session, *ids, static_cast<int>(max_new), stop);
  if (!out.ok()) return ReportError("run", out.status());

  // Until the tokenizer lands ids are the only output, so they print with or without --print-ids.
  std::string line;
  for (size_t i = 0; i < out->size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string((*out)[i]);
  }
  std::printf("%s\n", line.c_str());
  if (!flags.GetBool("quiet")) {
    const CallStats& p = session->prefill_total();
    const CallStats& d = session->decode_total();
    std::fprintf(stderr, "prefill: %lld tokens in %.3f s (%.2f tok/s)\n",
                 static_cast<long long>(p.tokens), p.seconds,
                 p.seconds > 0 ? p.tokens / p.seconds : 0.0);
    if (d.tokens > 0) {
      const ForwardStats& f = d.parts;
      const double n = static_cast<double>(d.tokens);
      std::fprintf(stderr,
                   "decode:  %lld tokens in %.3f s (%.2f tok/s); per token: attention %.1f ms, "
                   "dense %.1f ms, "
                   "router+experts %.1f ms, head %.1f ms\n",
                   static_cast<long long>(d.tokens), d.seconds, n / d.seconds,
                   1e3 * f.attention_s / n, 1e3 * f.dense_s / n, 1e3 * f.moe_s / n,
                   1e3 * f.head_s / n);
    }
    std::fprintf(stderr, "peak RSS: %.1f MiB\n", static_cast<double>(PeakRssBytes()) / (1 << 20));
  }
  return 0;
}

REDWING_COMMAND("run", "generate tokens greedily from prompt token ids", Run);

}  // namespace
}  // namespace rw::cli
