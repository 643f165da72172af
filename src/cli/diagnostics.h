// --profile FILE and --trace FILE, shared by run, chat, serve and bench: a JSON timing profile
// (spans summed per part and per layer) and a Chrome/Perfetto trace (every span, I/O read and
// wait, and on CUDA every kernel and copy, on one clock), both from base/trace.h. The variables
// REDWING_PROFILE and REDWING_TRACE stand in for the flags when these are not given.
#pragma once

#include <string>

#include "base/status.h"
#include "cli/commands.h"
#include "cli/flags.h"

namespace rw::cli {

void AddDiagnosticsFlags(Flags& flags);

class Diagnostics {
 public:
  // Starts recording when either file is asked for: construct it before the engine loads.
  Diagnostics(const Flags& flags, std::string command, const Args& args);
  // Writes the files (Finish) unless that was done.
  ~Diagnostics();
  Diagnostics(const Diagnostics&) = delete;
  Diagnostics& operator=(const Diagnostics&) = delete;

  bool active() const { return !profile_.empty() || !trace_.empty(); }
  const std::string& profile_path() const { return profile_; }
  const std::string& trace_path() const { return trace_; }
  // No "written to" lines on stderr.
  void set_quiet(bool quiet) { quiet_ = quiet; }

  // Stops recording and writes the files; the first error, annotated with its flag.
  Status Finish();
  // Writes the profile of the window since the start (or the last dump) and starts a new window;
  // recording goes on (serve, on SIGUSR1).
  Status DumpProfile();

 private:
  std::string Extra() const;
  std::string command_line_;
  std::string profile_, trace_;
  bool quiet_ = false, finished_ = false;
};

}  // namespace rw::cli
