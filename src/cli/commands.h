// Every `redwing <command>` lives in its own cmd_<name>.cpp and registers itself with
// REDWING_COMMAND; main() dispatches by name. A command takes its arguments (after the command
// name) and returns the process exit code; it prints user-facing errors itself.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace rw::cli {

using Args = std::vector<std::string>;
using CommandFn = int (*)(const Args& args);

struct Command {
  std::string name;
  std::string summary;
  CommandFn fn;
};

std::vector<Command>& CommandRegistry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* summary, CommandFn fn) {
    CommandRegistry().push_back(Command{name, summary, fn});
  }
};

#define REDWING_COMMAND(name, summary, fn) \
  static ::rw::cli::CommandRegistrar RW_CONCAT(_rw_cmd_, __LINE__)(name, summary, fn)

// Prints "redwing <command>: <message>" to stderr; returns 2 for usage errors, 1 otherwise.
int ReportError(const std::string& command, const Status& status);

}  // namespace rw::cli
