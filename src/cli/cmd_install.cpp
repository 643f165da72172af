// redwing install [<repo-id>] --output <dir>: stream a Gemma 4 checkpoint from the Hugging Face
// Hub (or HF_ENDPOINT) into a verified redwing model directory (install/installer.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>

#include "base/file.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/test_hooks.h"
#include "install/drafter_install.h"
#include "install/installer.h"

namespace rw::cli {
namespace {

std::atomic<bool> g_interrupted{false};

void OnSignal(int sig) {
  g_interrupted = true;
  // A second Ctrl-C kills at once (the journal is consistent at every moment anyway).
  ::signal(sig, SIG_DFL);
}

std::string Bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.0f} kB", b / 1e3);
}

std::string Duration(double s) {
  if (s < 0 || s > 1e7) return "?";
  int t = static_cast<int>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// One updating line on a terminal (redrawn at most 4 times a second); a plain line every
// `interval` seconds otherwise (logs, CI).
class ProgressLine {
 public:
  ProgressLine(bool quiet, double interval)
      : quiet_(quiet), tty_(::isatty(2)), interval_(interval) {}
  void Update(uint64_t done, uint64_t total) {
    if (quiet_) return;
    const double now = clock_.Seconds();
    if (!started_) {
      started_ = true;
      base_done_ = done;  // bytes done by earlier runs do not count toward the rate
      base_t_ = now;
    }
    if (done == total && last_done_ == total) return;  // the final line once
    if (now - last_ < (tty_ ? 0.25 : interval_) && done != total) return;
    last_done_ = done;
    last_ = now;
    const double rate = now > base_t_ + 0.5 ? (done - base_done_) / (now - base_t_) : 0;
    const double pct = total ? 100.0 * done / total : 100.0;
    std::string line =
        fmt::format("install: {} / {} ({:.1f}%)  {}/s  ETA {}", Bytes(done), Bytes(total), pct,
                    Bytes(rate), rate > 0 ? Duration((total - done) / rate) : "?");
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
      shown_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
  void Log(const std::string& text) {
    if (quiet_) return;
    EndLine();
    std::fprintf(stderr, "[%6.1fs] %s\n", clock_.Seconds(), text.c_str());
  }
  void EndLine() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  bool quiet_, tty_;
  double interval_;
  bool started_ = false, shown_ = false;
  uint64_t base_done_ = 0, last_done_ = UINT64_MAX;
  double base_t_ = 0, last_ = -1e9;
  Stopwatch clock_;
};

// Runs an install (the model's or a drafter's) with Ctrl-C stopping it cleanly (through
// g_interrupted, the options' cancel flag) and a progress line. On success fills *report and
// returns no exit code; otherwise prints the error and returns the exit code (130: cancelled).
std::optional<int> RunInstall(
    bool quiet, double progress_interval,
    const std::function<Result<InstallReport>(const InstallCallbacks&)>& install,
    InstallReport* report) {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  ProgressLine progress(quiet, progress_interval);
  InstallCallbacks cb;
  cb.log = [&](const std::string& line) { progress.Log(line); };
  cb.progress = [&](uint64_t done, uint64_t total) { progress.Update(done, total); };
  auto r = install(cb);
  progress.EndLine();
  if (!r.ok()) {
    if (r.status().code() == ErrorCode::kCancelled) {
      std::fprintf(stderr, "redwing install: %s\n", r.status().message().c_str());
      return 130;
    }
    return ReportError("install", r.status());
  }
  *report = std::move(*r);
  return std::nullopt;
}

// A DFlash drafter repository: fetched, checked and converted into a drafter directory
// (install/drafter_install.h); <model>/drafter with --model, where `redwing run` finds it.
int InstallDrafter(const Flags& flags) {
  DrafterInstallOptions o;
  o.repo_id = flags.positional(0);
  o.out_dir = flags.GetString("output");
  if (o.out_dir.empty() && !flags.GetString("model").empty())
    o.out_dir = JoinPath(flags.GetString("model"), "drafter");
  if (o.out_dir.empty())
    return ReportError("install", Status(ErrorCode::kInvalidArgument,
                                         "a drafter needs --model <model dir> (it goes to "
                                         "<model>/drafter) or --output <dir>"));
  o.revision = flags.GetString("revision");
  o.quantize = flags.IsSet("quantize") ? flags.GetString("quantize") : "q4";
  o.stall_timeout_s = static_cast<int>(flags.GetInt("stall-timeout"));
  o.max_attempts = static_cast<int>(flags.GetInt("retries"));
  if (o.stall_timeout_s < 1 || o.max_attempts < 1)
    return ReportError("install", Status(ErrorCode::kInvalidArgument,
                                         "--stall-timeout and --retries must be at least 1"));
  auto seg = ParseByteSize(flags.GetString("segment-size"), "--segment-size");
  if (!seg.ok()) return ReportError("install", seg.status());
  o.segment_bytes = std::max<uint64_t>(*seg, 1);
  o.resume = flags.GetBool("resume");
  o.discard_partial = flags.GetBool("discard-partial");
  o.overwrite = flags.GetBool("force");
  o.cancel = &g_interrupted;
  InstallReport report;
  if (auto code = RunInstall(
          flags.GetBool("quiet"), flags.GetDouble("progress-interval"),
          [&](const InstallCallbacks& cb) { return InstallDrafterFromHub(o, cb); }, &report))
    return *code;
  const InstallReport* r = &report;
  if (!flags.GetBool("quiet"))
    std::fprintf(stderr, "done: drafter %s (%s) from %s@%s in %.1f s: fetched %s\n",
                 o.out_dir.c_str(), o.quantize.c_str(), o.repo_id.c_str(),
                 r->commit.substr(0, 12).c_str(), r->seconds, Bytes(r->fetched_bytes).c_str());
  return 0;
}

int Install(const Args& args) {
  Flags flags(
      "install",
      "redwing install [<repo-id>] --output <dir> [--revision REV] [--quantize keep|q4|q8] "
      "[--connections N] [--resume | --discard-partial] [--force]",
      "Streams a Gemma 4 checkpoint from the Hugging Face Hub into a verified redwing model\n"
      "directory: tensors are fetched by HTTP range requests straight into place (no copy of\n"
      "the checkpoint on disk, bounded memory), every shard is checked against its LFS SHA-256,\n"
      "and an interrupted install continues with --resume.\n"
      "Environment: HF_ENDPOINT (mirror or local hub; default https://huggingface.co), HF_TOKEN\n"
      "(sent as a bearer token, never to redirect hosts), http_proxy/https_proxy/no_proxy.");
  flags.Positional("repo-id",
                   fmt::format("Hub repository (default {} at commit {})", kDefaultInstallRepo,
                               kDefaultInstallRevision),
                   false);
  flags.String("output", "", "model directory to create (required)");
  flags.String(
      "revision", "",
      "commit, branch or tag (default: the pinned commit for the default repo, else main)");
  flags.String("quantize", "keep",
               "keep: as stored; q4 / q8: MLX affine g64 of a bf16/f32 checkpoint; bf16");
  flags.Int("connections", 4, "parallel HTTP connections");
  flags.Int("stall-timeout", 30, "seconds without a byte before a request is retried");
  flags.Int("retries", 8, "tries per request before giving up");
  flags.String("segment-size", "16M", "bytes per range request (memory: (connections+2) x this)");
  flags.Double("checkpoint-interval", 2.0, "seconds between journal checkpoints");
  flags.Double("progress-interval", 5.0,
               "seconds between progress lines when stderr is not a terminal");
  flags.Bool("resume", "continue an interrupted install of the same output");
  flags.Bool("discard-partial", "remove an interrupted install of the same output and start over");
  flags.Bool("force", "replace an existing model directory (only once the new one is complete)");
  flags.Bool("quiet", "print only errors");
  flags.Bool("drafter",
             "the repository is a DFlash drafter (implied by a repository name containing "
             "DFlash): converted into a drafter directory, quantized q4 unless --quantize says");
  flags.String("model", "", "drafter: the model directory; the drafter goes to <model>/drafter");
  if (Status st = flags.Parse(args); !st.ok()) return ReportError("install", st);
  if (flags.help_requested()) {
    std::fputs(flags.HelpText().c_str(), stdout);
    return 0;
  }
  if (flags.GetBool("drafter") ||
      (flags.positional_count() > 0 && LooksLikeDrafterRepo(flags.positional(0)))) {
    if (flags.positional_count() == 0)
      return ReportError("install", Status(ErrorCode::kInvalidArgument,
                                           "--drafter needs the drafter's repository id"));
    return InstallDrafter(flags);
  }
  InstallOptions o;
  if (flags.positional_count() > 0) o.repo_id = flags.positional(0);
  o.out_dir = flags.GetString("output");
  if (o.out_dir.empty())
    return ReportError("install", Status(ErrorCode::kInvalidArgument, "--output is required"));
  o.revision = flags.GetString("revision");
  o.quantize = flags.GetString("quantize");
  o.connections = static_cast<int>(flags.GetInt("connections"));
  o.stall_timeout_s = static_cast<int>(flags.GetInt("stall-timeout"));
  o.max_attempts = static_cast<int>(flags.GetInt("retries"));
  if (o.stall_timeout_s < 1 || o.max_attempts < 1)
    return ReportError("install", Status(ErrorCode::kInvalidArgument,
                                         "--stall-timeout and --retries must be at least 1"));
  auto seg = ParseByteSize(flags.GetString("segment-size"), "--segment-size");
  if (!seg.ok()) return ReportError("install", seg.status());
  o.segment_bytes = *seg;
  o.checkpoint_interval_s = flags.GetDouble("checkpoint-interval");
  if (o.checkpoint_interval_s <= 0)
    return ReportError(
        "install", Status(ErrorCode::kInvalidArgument, "--checkpoint-interval must be positive"));
  o.resume = flags.GetBool("resume");
  o.discard_partial = flags.GetBool("discard-partial");
  o.overwrite = flags.GetBool("force");
  o.cancel = &g_interrupted;
  const bool quiet = flags.GetBool("quiet");
  const double progress_interval = flags.GetDouble("progress-interval");
  if (progress_interval <= 0)
    return ReportError("install",
                       Status(ErrorCode::kInvalidArgument, "--progress-interval must be positive"));
  if (GetTestHooks().adjust_install) {
    if (Status st = GetTestHooks().adjust_install(&o); !st.ok()) return ReportError("install", st);
  }

  InstallReport report;
  if (auto code = RunInstall(
          quiet, progress_interval,
          [&](const InstallCallbacks& cb) { return InstallFromHub(o, cb); }, &report))
    return *code;
  const InstallReport* r = &report;
  if (!quiet)
    std::fprintf(stderr,
                 "done: %s from %s@%s in %.1f s: fetched %s (%s/s), %llu retries, peak RSS %.1f "
                 "MB\n",
                 o.out_dir.c_str(), o.repo_id.c_str(), r->commit.substr(0, 12).c_str(), r->seconds,
                 Bytes(r->fetched_bytes).c_str(),
                 Bytes(r->seconds > 0 ? r->fetched_bytes / r->seconds : 0).c_str(),
                 static_cast<unsigned long long>(r->retries), PeakRssBytes() / 1e6);
  return 0;
}

}  // namespace
REDWING_COMMAND("install", "stream a Gemma 4 checkpoint from the Hugging Face Hub", Install);
}  // namespace rw::cli
