// redwing fit-predictor --model <dir> --trace a.bin [--trace b.bin ...]: fits the early-read
// predictor (per-layer expert transitions) and stores it in the model directory, for
// --early-expert-read fitted.
#include <cstdio>

#include "base/file.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "experts/predictor.h"
#include "format/model_dir.h"

namespace rw::cli {
namespace {

int FitPredictor(const Args& args) {
  Flags flags("fit-predictor",
              "redwing fit-predictor --model <dir> --trace <a.bin> [--trace <b.bin> ...]",
              "Fits the early-read predictor from routing traces (redwing trace) and writes it "
              "into the model directory as expert_predictor.bin. With two or more traces the "
              "last one is held out and the accuracy on it is reported too.");
  flags.String("model", "", "model directory (required)");
  flags.StringList("trace", "a routing trace from redwing trace (repeatable)");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("fit-predictor", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  const std::string model = flags.GetString("model");
  if (model.empty())
    return ReportError("fit-predictor", Status(ErrorCode::kInvalidArgument, "--model is required"));
  if (flags.GetList("trace").empty())
    return ReportError("fit-predictor",
                       Status(ErrorCode::kInvalidArgument, "give at least one --trace"));
  auto dir = ModelDir::Open(model);
  if (!dir.ok()) return ReportError("fit-predictor", dir.status());
  std::vector<RoutingTrace> traces;
  for (const std::string& path : flags.GetList("trace")) {
    auto t = RoutingTrace::Read(path);
    if (!t.ok()) return ReportError("fit-predictor", t.status());
    if (t->layers != dir->config().num_layers || t->num_experts != dir->config().num_experts)
      return ReportError("fit-predictor",
                         Status(ErrorCode::kInvalidArgument,
                                fmt::format("{} was recorded on another model ({} layers × {} "
                                            "experts; this one has {} × {})",
                                            path, t->layers, t->num_experts,
                                            dir->config().num_layers, dir->config().num_experts)));
    traces.push_back(std::move(*t));
  }
  const bool hold_out = traces.size() >= 2;
  const std::span<const RoutingTrace> fit_on(traces.data(), traces.size() - (hold_out ? 1 : 0));
  auto p = ExpertPredictor::Fit(fit_on);
  if (!p.ok()) return ReportError("fit-predictor", p.status());
  const std::string out = JoinPath(model, kPredictorFileName);
  if (Status st = p->Write(out); !st.ok()) return ReportError("fit-predictor", st);
  double in_sample = 0;
  int64_t tokens = 0;
  for (const RoutingTrace& t : fit_on) {
    in_sample += p->Accuracy(t) * t.tokens();
    tokens += t.tokens();
  }
  std::printf("wrote %s (%lld tokens); predicted experts then chosen: %.1f%% on the fitted traces",
              out.c_str(), static_cast<long long>(tokens), 100.0 * in_sample / tokens);
  if (hold_out) std::printf(", %.1f%% on the held-out one", 100.0 * p->Accuracy(traces.back()));
  std::printf("\n");
  return 0;
}

REDWING_COMMAND("fit-predictor", "fit the early-read predictor from routing traces", FitPredictor);

}  // namespace
}  // namespace rw::cli
