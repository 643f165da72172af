// redwing bench: a fixed suite (prompts of ~128 and ~3,000 synthetic ids, then 128 sampled
// tokens) on one loaded model; a table on stdout, JSON for scripts, a profile and a trace on
// request.
#include <cstdio>

#include "base/file.h"
#include "base/json.h"
#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/diagnostics.h"
#include "cli/flags.h"
#include "cli/generation_flags.h"

namespace rw::cli {
namespace {

Result<std::vector<int64_t>> ParseLengths(const std::string& text) {
  RW_ASSIGN_OR_RETURN(std::vector<int> ids,
                      ParseIntList(text, "--prompt-tokens", "prompt length", "128,3000"));
  std::vector<int64_t> out;
  for (int v : ids) {
    if (v < 1)
      return Error(ErrorCode::kInvalidArgument, "--prompt-tokens: lengths must be >= 1, not {}", v);
    out.push_back(v);
  }
  if (out.empty())
    return Error(ErrorCode::kInvalidArgument, "--prompt-tokens needs at least one length");
  return out;
}

// --warmup: "auto" (-1) or a prompt length >= 0.
Result<int64_t> ParseWarmup(const std::string& text) {
  if (text == "auto") return int64_t{-1};
  RW_ASSIGN_OR_RETURN(std::vector<int> v,
                      ParseIntList(text, "--warmup", "warm-up length", "128, or auto"));
  if (v.size() != 1 || v[0] < 0)
    return Error(ErrorCode::kInvalidArgument,
                 "--warmup takes auto or one prompt length >= 0 (0: none), not '{}'", text);
  return int64_t{v[0]};
}

int Bench(const Args& args) {
  Flags flags("bench", "redwing bench --model <dir> [options]",
              "Loads the model once, runs an uncounted warm-up (--warmup), then a fixed suite: "
              "for each prompt length, a fresh session prefills that many synthetic (varied) "
              "token ids, then generates\n"
              "--decode-tokens tokens sampled at temperature 1 with a fixed seed (a varied "
              "stream: greedy decoding on random weights repeats one token and makes any expert "
              "cache look perfect).\n"
              "Reports prefill tok/s, time to first token, decode tok/s, private and file-backed "
              "memory, the memory cgroup's usage and limit, bytes read from storage per token, "
              "the expert-cache hit rate, I/O wait and compute per token, and per-part times.\n"
              "Run it under scripts/with-memory-limit.sh to measure a smaller machine.");
  AddEngineFlags(flags);
  flags.String("prompt-tokens", "128,3000", "comma-separated prompt lengths, one case each");
  flags.Int("decode-tokens", 128, "tokens generated per case");
  flags.Int("seed", 1, "seed of the synthetic prompts and of the sampler");
  flags.Bool("host-sampling",
             "cuda: copy each decode step's logits back and draw the token on the CPU instead of "
             "on the GPU (to measure what the GPU draw saves)");
  flags.Bool("no-disk-probe",
             "skip the disk probe (O_DIRECT reads of random expert blobs before the cases, the "
             "yardstick for the storage bound)");
  flags.Bool("no-memory-probe",
             "skip the memory probe (a 256 MB streaming read after load, the yardstick for the "
             "memory-bandwidth bound of CPU decode; not run with --cold)");
  flags.Bool("cold",
             "drop the model's files from the page cache (posix_fadvise DONTNEED) before "
             "loading");
  flags.String("warmup", "auto",
               "tokens of a warm-up prompt (then 4 decoded tokens) run before the cases and not "
               "counted: a process pays once for the first use of each expert (checksum, page "
               "mapping). auto: 128, or 0 with --cold");
  AddSpeculationFlags(flags);
  flags.Bool("verify-costs",
             "after the cases, measure the verify cost table: the wall time of one speculative "
             "verify call of k = 1..16 tokens (median of 3) and the routed experts its block "
             "reads per layer (on by default with --drafter)");
  flags.String("json", "", "also write the results as JSON to this file");
  flags.String("format", "table", "stdout: table (readable) or json");
  AddDiagnosticsFlags(flags);
  flags.Bool("quiet", "no progress lines on stderr");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("bench", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  const std::string format = flags.GetString("format");
  if (format != "table" && format != "json")
    return ReportError("bench", Error(ErrorCode::kInvalidArgument,
                                      "--format must be table or json, not '{}'", format));
  auto engine_opts = EngineOptionsFromFlags(flags);
  if (!engine_opts.ok()) return ReportError("bench", engine_opts.status());
  auto lengths = ParseLengths(flags.GetString("prompt-tokens"));
  if (!lengths.ok()) return ReportError("bench", lengths.status());
  const long long decode = flags.GetInt("decode-tokens");
  if (decode < 0)
    return ReportError("bench", Error(ErrorCode::kInvalidArgument,
                                      "--decode-tokens must be >= 0, not {}", decode));
  const long long seed = flags.GetInt("seed");
  if (seed < 0)
    return ReportError("bench",
                       Error(ErrorCode::kInvalidArgument, "--seed must be >= 0, not {}", seed));
  auto warmup = ParseWarmup(flags.GetString("warmup"));
  if (!warmup.ok()) return ReportError("bench", warmup.status());
  BenchOptions o;
  o.engine = *engine_opts;
  o.prompt_tokens = *lengths;
  o.decode_tokens = decode;
  o.seed = static_cast<uint64_t>(seed);
  o.cold = flags.GetBool("cold");
  o.warmup_tokens = *warmup;
  o.disk_probe = !flags.GetBool("no-disk-probe");
  o.memory_probe = !flags.GetBool("no-memory-probe");
  o.host_sampling = flags.GetBool("host-sampling");
  o.verify_costs = flags.GetBool("verify-costs");
  if (Status st = SpeculationFromFlags(flags, /*allow_oracle=*/true, &o.drafter, &o.draft_tokens);
      !st.ok())
    return ReportError("bench", st);
  if (!flags.GetBool("quiet"))
    o.progress = [](const std::string& line) {
      std::fprintf(stderr, "bench: %s\n", line.c_str());
      std::fflush(stderr);
    };

  Diagnostics diag(flags, "bench", args);
  diag.set_quiet(flags.GetBool("quiet"));
  auto report = RunBench(o);
  // Written even when the run failed: the trace shows how far it got.
  if (Status st = diag.Finish(); !st.ok()) return ReportError("bench", st);
  if (!report.ok()) return ReportError("bench", report.status());

  Json j = BenchReportToJson(*report);
  j["trace_file"] = diag.trace_path().empty() ? Json(nullptr) : Json(diag.trace_path());
  j["profile_file"] = diag.profile_path().empty() ? Json(nullptr) : Json(diag.profile_path());
  const std::string json_text = j.dump(2) + "\n";
  if (flags.IsSet("json") && !flags.GetString("json").empty())
    if (Status st = WriteFileAtomic(flags.GetString("json"), json_text); !st.ok())
      return ReportError("bench", st.Annotate("--json"));
  if (format == "json") {
    std::fputs(json_text.c_str(), stdout);
  } else {
    std::fputs(BenchReportTable(*report).c_str(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

REDWING_COMMAND("bench", "measure prefill, decode, memory and expert reads on a fixed suite",
                Bench);

}  // namespace
}  // namespace rw::cli
