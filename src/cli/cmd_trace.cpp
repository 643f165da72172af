// redwing trace --model <dir> --out <trace.bin>: records which experts every layer chooses for
// every token of a generation (a varied stream: sampled at temperature 1 unless told otherwise),
// for `redwing fit-predictor`.
#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"
#include "engine/generate.h"
#include "experts/predictor.h"

namespace rw::cli {
namespace {

int Trace(const Args& args) {
  Flags flags("trace",
              "redwing trace --model <dir> --out <trace.bin> [--prompt <text> | --prompt-ids ids] "
              "[--max-new N] [--seed S]",
              "Runs a prompt and a generation and records the experts every layer chose for every "
              "token, for `redwing fit-predictor`. Sampling defaults to temperature 1 so the "
              "stream (and its routing) varies; on random weights greedy decoding repeats one "
              "token and would teach the predictor nothing.");
  AddEngineFlags(flags);
  flags.String("out", "", "the routing trace file to write (required)");
  flags.String("prompt", "Once upon a time", "raw text to start from (needs a tokenizer)");
  flags.String("prompt-ids", "", "comma-separated prompt token ids instead of --prompt");
  AddSamplingFlags(flags);
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("trace", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  if (flags.GetString("out").empty())
    return ReportError("trace", Status(ErrorCode::kInvalidArgument, "--out is required"));
  auto gen = GenerateOptionsFromFlags(flags);
  if (!gen.ok()) return ReportError("trace", gen.status());
  if (!flags.IsSet("temperature")) gen->sampling.temperature = 1.0f;
  if (!flags.IsSet("max-new")) gen->max_new_tokens = 256;
  auto opt = EngineOptionsFromFlags(flags);
  if (!opt.ok()) return ReportError("trace", opt.status());
  auto engine = Engine::Load(*opt);
  if (!engine.ok()) return ReportError("trace", engine.status());
  std::vector<int> prompt;
  if (flags.IsSet("prompt-ids")) {
    auto ids = ParseIdList(flags.GetString("prompt-ids"), "--prompt-ids");
    if (!ids.ok()) return ReportError("trace", ids.status());
    prompt = *ids;
  } else {
    const Tokenizer* tok = (*engine)->tokenizer();
    if (tok == nullptr) return ReportError("trace", (*engine)->text_status());
    for (int32_t id : tok->Encode(flags.GetString("prompt"), true)) prompt.push_back(id);
  }
  if (prompt.empty())
    return ReportError("trace", Status(ErrorCode::kInvalidArgument, "empty prompt"));
  RoutingTrace trace;
  auto session = (*engine)->NewSession();
  session->set_routing_trace(&trace);
  SessionTimeline timeline(*session);
  auto r = Generate(timeline, nullptr, prompt, *gen, {});
  if (!r.ok()) return ReportError("trace", r.status());
  if (trace.tokens() == 0)
    return ReportError(
        "trace", Status(ErrorCode::kInvalidArgument, "the model has no routed experts to trace"));
  if (Status st = trace.Write(flags.GetString("out")); !st.ok()) return ReportError("trace", st);
  std::fprintf(stderr, "recorded %lld tokens × %d layers × top-%d into %s\n",
               static_cast<long long>(trace.tokens()), trace.layers, trace.top_k,
               flags.GetString("out").c_str());
  return 0;
}

REDWING_COMMAND("trace", "record expert routing for fit-predictor", Trace);

}  // namespace
}  // namespace rw::cli
