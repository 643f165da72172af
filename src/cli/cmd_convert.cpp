// redwing convert <source-dir> <model-dir>: a local Hugging Face or MLX Gemma 4 checkpoint
// becomes a redwing model directory (install/convert.h).
#include <cstdio>

#include "base/timer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "install/convert.h"

namespace rw::cli {
namespace {

int Convert(const Args& args) {
  Flags flags("convert",
              "redwing convert <source-dir> <model-dir> [--quantize keep|q4|q8|bf16] [--force] "
              "[--repo-id ID] [--revision REV] [--quiet]",
              "Converts a local Gemma 4 checkpoint (Hugging Face bf16/f32 safetensors, or MLX\n"
              "affine-quantized) into a redwing model directory. The output appears atomically:\n"
              "it is staged in <model-dir>.partial and renamed only when complete.");
  flags.Positional("source-dir",
                   "checkpoint directory: config.json and model.safetensors or shards");
  flags.Positional("model-dir", "the redwing model directory to create");
  flags.String("quantize", "keep",
               "keep: values exactly as stored; q4: 4-bit affine g64 (router 8-bit); q8: 8-bit "
               "affine g64; bf16: bf16 weights. q4/q8/bf16 need a float source");
  flags.Bool("force", "replace an existing model directory (only once the new one is complete)");
  flags.String("repo-id", "", "hub repository id to record in the manifest");
  flags.String("revision", "", "hub revision to record in the manifest");
  flags.Bool("quiet", "print only errors");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("convert", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  ConvertOptions opts;
  opts.source_dir = flags.positional(0);
  opts.out_dir = flags.positional(1);
  opts.quantize = flags.GetString("quantize");
  opts.overwrite = flags.GetBool("force");
  opts.repo_id = flags.GetString("repo-id");
  opts.revision = flags.GetString("revision");
  const bool quiet = flags.GetBool("quiet");

  Stopwatch timer;
  Status st = ConvertCheckpoint(opts, [&](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "[%6.1fs] %s\n", timer.Seconds(), line.c_str());
  });
  if (!st.ok()) return ReportError("convert", st);
  if (!quiet)
    std::fprintf(stderr, "done: %s in %.1f s, peak RSS %.1f MB\n", opts.out_dir.c_str(),
                 timer.Seconds(), PeakRssBytes() / 1e6);
  return 0;
}

}  // namespace
REDWING_COMMAND("convert", "convert a local Hugging Face or MLX Gemma 4 checkpoint", Convert);
}  // namespace rw::cli
