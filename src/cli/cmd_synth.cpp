// redwing synth: a deterministic random-weight model (tests, benchmarks) in the model format or as
// an MLX / HF checkpoint.
#include <cmath>
#include <cstdio>

#include "base/timer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "install/synth.h"

namespace rw::cli {
namespace {

std::string Gib(double b) {
  return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
}

int Synth(const Args& args) {
  Flags flags("synth",
              "redwing synth --geometry <tiny|small|gemma4-26b-a4b> --seed N --out <dir> "
              "[--format model|hf|mlx] [--routing-skew s] [--tokenizer <dir>] [--force]",
              "Writes a random-weight Gemma 4 model; the same seed gives byte-identical files.");
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
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("synth", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  auto usage = [](const std::string& m) {
    return ReportError("synth", Status(ErrorCode::kInvalidArgument, m));
  };
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
