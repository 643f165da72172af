#include "cli/diagnostics.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/json.h"
#include "base/trace.h"

namespace rw::cli {

namespace {
std::string FlagOrEnv(const Flags& flags, const char* flag, const char* env) {
  std::string v = flags.GetString(flag);
  if (v.empty() && !flags.IsSet(flag)) {
    const char* e = std::getenv(env);
    if (e != nullptr) v = e;
  }
  return v;
}
}  // namespace

void AddDiagnosticsFlags(Flags& flags) {
  flags.String("profile", "",
               "write a JSON timing profile to this file at exit: time per part and per layer "
               "(attention, dense MLP, router, experts, head, expert reads and waits, sampling, "
               "CUDA host syncs); fields in docs/PERFORMANCE.md (default: $REDWING_PROFILE)");
  flags.String("trace", "",
               "write a Chrome trace (open in ui.perfetto.dev) to this file at exit: CPU spans, "
               "I/O reads and waits and, on CUDA, every kernel and copy on one clock "
               "(default: $REDWING_TRACE); tools/trace_summary.py sums it up");
}

Diagnostics::Diagnostics(const Flags& flags, std::string command, const Args& args) {
  profile_ = FlagOrEnv(flags, "profile", "REDWING_PROFILE");
  trace_ = FlagOrEnv(flags, "trace", "REDWING_TRACE");
  command_line_ = "redwing " + command;
  for (const std::string& a : args) command_line_ += " " + a;
  if (!active()) return;
  trace::SetThreadName("main");
  trace::Start((profile_.empty() ? 0u : unsigned{trace::kProfile}) |
               (trace_.empty() ? 0u : unsigned{trace::kEvents}));
}

Diagnostics::~Diagnostics() {
  if (finished_ || !active()) return;
  if (Status st = Finish(); !st.ok()) std::fprintf(stderr, "redwing: %s\n", st.ToString().c_str());
}

std::string Diagnostics::Extra() const {
  Json j = {{"command", command_line_}, {"pid", static_cast<long>(::getpid())}};
  return j.dump();
}

Status Diagnostics::Finish() {
  if (finished_ || !active()) return Status::Ok();
  finished_ = true;
  trace::Stop();
  Status first;
  if (!profile_.empty()) {
    Status st = trace::WriteProfile(profile_, Extra());
    if (!st.ok())
      first = st.Annotate("--profile");
    else if (!quiet_)
      std::fprintf(stderr, "profile written to %s\n", profile_.c_str());
  }
  if (!trace_.empty()) {
    Status st = trace::WriteJson(trace_);
    if (!st.ok() && first.ok()) first = st.Annotate("--trace");
    if (st.ok() && !quiet_)
      std::fprintf(stderr, "trace of %llu events written to %s\n",
                   static_cast<unsigned long long>(trace::EventCount()), trace_.c_str());
  }
  return first;
}

Status Diagnostics::DumpProfile() {
  if (profile_.empty()) return Status::Ok();
  Status st = trace::WriteProfile(profile_, Extra());
  trace::ResetProfile();
  return st.ok() ? st : st.Annotate("--profile");
}

}  // namespace rw::cli
