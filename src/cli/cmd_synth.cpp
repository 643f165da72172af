// redwing synth: a deterministic random-weight model (tests, benchmarks) in the model format or as
// an MLX / HF checkpoint.
#include <cmath>
#include <cstdio>

#include "base/timer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "format/model_dir.h"
#include "install/synth.h"
#include "install/synth_drafter.h"

namespace rw::cli {
namespace {

std::string Gib(double b) {
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

// --drafter: a random DFlash drafter for a target model directory or a named geometry.
int SynthDrafter(const Flags& flags) {
  auto usage = [](const std::string& m) {
    return ReportError("synth", Status(ErrorCode::kInvalidArgument, m));
  };
  if (flags.GetString("out").empty()) return usage("--out is required");
  if (!flags.IsSet("seed") || flags.GetInt("seed") < 0)
    return usage("--seed is required (non-negative)");
  ModelConfig target;
  if (!flags.GetString("target").empty()) {
    auto dir = ModelDir::Open(flags.GetString("target"));
    if (!dir.ok()) return ReportError("synth", dir.status());
    target = dir->config();
  } else if (!flags.GetString("geometry").empty()) {
    auto g = SynthGeometry(flags.GetString("geometry"));
    if (!g.ok()) return ReportError("synth", g.status());
    target = *g;
  } else {
    return usage("--drafter needs --target <model dir> or --geometry");
  }
  DrafterSynthOptions o;
  o.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  o.out_dir = flags.GetString("out");
  o.format = flags.GetString("format") == "model" ? "drafter" : flags.GetString("format");
  o.quantize = flags.GetString("quantize");
  o.overwrite = flags.GetBool("force");
  o.real_shape = flags.GetBool("real-shape");
  o.sliding_window = flags.GetInt("sliding-window");
  if (o.sliding_window < 0) return usage("--sliding-window must be >= 0");
  Stopwatch sw;
  if (Status st = SynthesizeDrafter(target, o); !st.ok()) return ReportError("synth", st);
  if (!flags.GetBool("quiet"))
    std::fprintf(stderr, "synth: wrote drafter %s (%s, %s) in %.1f s\n", o.out_dir.c_str(),
                 o.format.c_str(), o.quantize.c_str(), sw.Seconds());
  return 0;
}

int Synth(const Args& args) {
  Flags flags(
      "synth",
      "redwing synth --geometry <tiny|small|gemma4-26b-a4b> --seed N --out <dir> "
      "[--format model|hf|mlx] [--routing-skew s] [--tokenizer <dir>] [--force]\n"
      "       redwing synth --drafter (--target <model> | --geometry G) --seed N --out <dir> "
      "[--format model|hf] [--quantize q4|q8|keep] [--real-shape]",
      "Writes a random-weight Gemma 4 model, or with --drafter a random DFlash drafter "
      "for a target; the same seed gives byte-identical files.");
  flags.String("geometry", "", "tiny, small or gemma4-26b-a4b (the exact full-size geometry)");
  flags.Int("seed", 0, "random seed (values depend only on the seed and tensor names)");
  flags.String("out", "", "output directory");
  flags.String("format", "model",
               "model (redwing model directory), mlx (4-bit MLX checkpoint), hf (bf16)");
  flags.Double("routing-skew", 0,
               "expert popularity skew: 0 even, 1 moderate, 2 strong (Zipf-like)");
  flags.String("tokenizer", "", "copy tokenizer.json and other side files from this directory");
  flags.Int("vocab", 0, "vocabulary size instead of the geometry's (0: the geometry's)");
  flags.String("max-shard-size", "5G", "hf/mlx: largest safetensors shard");
  flags.Int("threads", 0, "generation threads (0: REDWING_THREADS or all cores)");
  flags.Bool("force", "replace an existing output directory");
  flags.Bool("quiet", "print only errors");
  flags.Bool("drafter",
             "write a random DFlash drafter (the published structure scaled to the target)");
  flags.String("target", "", "--drafter: the target model directory (else --geometry's config)");
  flags.String("quantize", "q4", "--drafter: linear weights q4, q8 or keep (bf16)");
  flags.Bool("real-shape",
             "--drafter: the published drafter's heads and sizes (hidden: the target's)");
  flags.Int("sliding-window", 0, "--drafter: the sliding layers' window (0: the target's)");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("synth", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  auto usage = [](const std::string& m) {
    return ReportError("synth", Status(ErrorCode::kInvalidArgument, m));
  };
  if (flags.GetBool("drafter")) return SynthDrafter(flags);
  if (flags.GetString("geometry").empty())
    return usage("--geometry is required (tiny, small, gemma4-26b-a4b)");
  if (flags.GetString("out").empty()) return usage("--out is required");
  if (!flags.IsSet("seed")) return usage("--seed is required");
  if (flags.GetInt("seed") < 0) return usage("--seed must be non-negative");
  double skew = flags.GetDouble("routing-skew");
  if (!std::isfinite(skew) || skew < 0 || skew > 100)
    return usage("--routing-skew must be in [0, 100]");
  if (flags.GetInt("threads") < 0 || flags.GetInt("threads") > 1024)
    return usage("--threads must be in [0, 1024]");
  auto shard = ParseByteSize(flags.GetString("max-shard-size"), "--max-shard-size");
  if (!shard.ok()) return ReportError("synth", shard.status());
  if (*shard == 0) return usage("--max-shard-size must be positive");

  SynthOptions o;
  o.geometry = flags.GetString("geometry");
  o.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  o.out_dir = flags.GetString("out");
  o.format = flags.GetString("format");
  o.routing_skew = skew;
  o.overwrite = flags.GetBool("force");
  o.tokenizer_dir = flags.GetString("tokenizer");
  o.max_shard_bytes = *shard;
  o.vocab_size = flags.GetInt("vocab");
  o.threads = static_cast<int>(flags.GetInt("threads"));
  const bool quiet = flags.GetBool("quiet");

  Stopwatch sw;
  double last = -1;
  Status st = SynthesizeModel(o, [&](const std::string& stage, uint64_t done, uint64_t total) {
    if (quiet) return;
    double t = sw.Seconds();
    if (t - last < 0.5 && done < total) return;  // at most two lines a second
    last = t;
    std::fprintf(stderr, "[%6.1fs] %s / %s  %s\n", t, Gib(static_cast<double>(done)).c_str(),
                 Gib(static_cast<double>(total)).c_str(), stage.c_str());
  });
  if (!st.ok()) return ReportError("synth", st);
  if (!quiet)
    std::fprintf(stderr,
                 "synth: wrote %s (%s, geometry %s, seed %llu) in %.1f s, peak RSS %.0f MiB\n",
                 o.out_dir.c_str(), o.format.c_str(), o.geometry.c_str(),
                 static_cast<unsigned long long>(o.seed), sw.Seconds(),
                 static_cast<double>(PeakRssBytes()) / (1024.0 * 1024));
  return 0;
}

}  // namespace
REDWING_COMMAND("synth", "write a deterministic random-weight model (model, mlx or hf form)",
                Synth);
}  // namespace rw::cli
